/* The rank planner and the Open MPI command line on synthetic topologies with 1, 2, 4 and 8
 * NUMA nodes, with and without sub-NUMA clustering and GPUs, each checked for the exact command
 * line, the CPUs of every rank and the placement of the GPUs; then rank counts that do not fit,
 * memory-only nodes, the memory check's messages, the weights of a real (tiny) model file, and
 * the CPU list helpers.
 *
 * GPUs cannot be described synthetically: a case with GPUs exports its synthetic topology to
 * XML with hwloc and inserts a PCI GPU next to the NUMA node it hangs off.
 *
 * Usage: test_plan [CASE]   (runs one case by name; a failure prints the line to rerun it) */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "launch.h"
#include "mkmodel.h"
#include "model.h"
#include "plan.h"
#include "topo.h"

static int g_fail;
static const char *g_self;

#define CHECK(cond, ...)                                                                            \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                           \
            fprintf(stderr, "\n");                                                                  \
            g_fail++;                                                                               \
        }                                                                                           \
    } while (0)

/* ---- topologies ------------------------------------------------------------------------- */

static const char *gpu_xml_fmt =
    "<object type=\"Bridge\" gp_index=\"%d\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[%02x-%02x]\">\n"
    " <object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:%02x:00.0\" pci_type=\"0302 [10de:2331] [10de:1626] a1\""
    " pci_link_speed=\"31.507692\">\n"
    "  <object type=\"OSDev\" gp_index=\"%d\" name=\"cuda%d\" subtype=\"CUDA\" osdev_type=\"5\"/>\n"
    "  <object type=\"OSDev\" gp_index=\"%d\" name=\"nvml%d\" osdev_type=\"1\"/>\n"
    " </object>\n"
    "</object>\n";

/* Synthetic topology `desc` with a GPU next to each NUMA node (OS index) in gpu_nodes, written
 * to an XML file; returns its path (static buffer). */
static const char *xml_with_gpus(const char *desc, const int *gpu_nodes, int n_gpus) {
    static char path[256];
    hwloc_topology_t h;
    NM_ASSERT(hwloc_topology_init(&h) == 0);
    NM_ASSERT(hwloc_topology_set_synthetic(h, desc) == 0);
    NM_ASSERT(hwloc_topology_load(h) == 0);
    char *xml;
    int len;
    NM_ASSERT(hwloc_topology_export_xmlbuffer(h, &xml, &len, 0) == 0);
    size_t cap = (size_t)len + (size_t)n_gpus * 1024 + 1;
    char *out = malloc(cap);
    NM_ASSERT(out);
    snprintf(out, cap, "%s", xml);
    for (int g = 0; g < n_gpus; g++) {
        char needle[64], snippet[1024];
        snprintf(needle, sizeof needle, "<object type=\"NUMANode\" os_index=\"%d\"", gpu_nodes[g]);
        const int bus = 0x17 + 0x20 * g;
        snprintf(snippet, sizeof snippet, gpu_xml_fmt, 9000 + 10 * g, bus, bus, 9001 + 10 * g, bus, 9002 + 10 * g, g,
                 9003 + 10 * g, g);
        char *at = strstr(out, needle);
        NM_ASSERT(at);
        const size_t off = (size_t)(at - out), sl = strlen(snippet);
        memmove(out + off + sl, out + off, strlen(out) - off + 1);
        memcpy(out + off, snippet, sl);
    }
    snprintf(path, sizeof path, "/tmp/nm_test_plan_%d.xml", (int)getpid());
    FILE *f = fopen(path, "w");
    NM_ASSERT(f);
    fputs(out, f);
    fclose(f);
    free(out);
    hwloc_free_xmlbuffer(h, xml);
    hwloc_topology_destroy(h);
    return path;
}

static struct topo *load(const char *desc, const int *gpu_nodes, int n_gpus) {
    struct topo_source src = {.kind = TOPO_SOURCE_SYNTHETIC, .arg = desc};
    if (n_gpus > 0) src = (struct topo_source){.kind = TOPO_SOURCE_XML, .arg = xml_with_gpus(desc, gpu_nodes, n_gpus)};
    struct topo *t;
    char err[512];
    enum nm_status st = topo_load(&src, &t, err, sizeof err);
    if (n_gpus > 0) unlink(src.arg);
    if (st) {
        fprintf(stderr, "topo_load(%s): %s\n", desc, err);
        exit(1);
    }
    return t;
}

/* ---- the table -------------------------------------------------------------------------- */

struct plan_case {
    const char *name;
    const char *desc;       /* hwloc synthetic description */
    int gpu_nodes[2];       /* OS index of the node each GPU hangs off */
    int n_gpus;
    int ranks, threads;     /* --ranks (0 auto), -t (0 default) */
    bool as_root;
    const char *cmd;        /* exact mpirun line; NULL: one rank, in-process */
    const char *cpus;       /* the CPUs of every rank, space-separated */
    const char *gpus;       /* "node:rank" per GPU, space-separated; "" without GPUs */
};

/* What the user typed after `numallm`: -t and --dry-run must not reach the ranks. */
static char *const k_args[] = {"run", "-m", "model.gguf", "-n", "16", "-t", "99", "--dry-run", NULL};
#define CMD_TAIL " numallm run -m model.gguf -n 16"

static const struct plan_case k_cases[] = {
    /* 1 NUMA node: one rank, in-process, with or without a GPU. */
    {"n1", "pack:1 [numa(memory=64GiB)] core:8 pu:2(indexes=2*8:1*2)", {0}, 0, 0, 0, false, NULL, "0-15", ""},
    {"n1_gpu", "pack:1 [numa(memory=64GiB)] core:8 pu:2(indexes=2*8:1*2)", {0}, 1, 0, 0, false, NULL, "0-15", "0:0"},
    /* 2 nodes: two sockets, or one socket with SNC2. */
    {"n2", "pack:2 [numa(memory=128GiB)] core:8 pu:2(indexes=2*16:1*2)", {0}, 0, 0, 0, false,
     "mpirun -np 2 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 8", "0-7,16-23 8-15,24-31", ""},
    {"n2_gpu_root", "pack:2 [numa(memory=128GiB)] core:8 pu:2(indexes=2*16:1*2)", {1}, 1, 0, 0, true,
     "mpirun --allow-run-as-root -np 2 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 8", "0-7,16-23 8-15,24-31",
     "1:1"},
    {"n2_snc", "pack:1 numa:2(memory=32GiB) core:4 pu:2(indexes=2*8:1*2)", {0}, 0, 0, 0, false,
     "mpirun -np 2 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 4", "0-3,8-11 4-7,12-15", ""},
    {"n2_threads", "pack:2 [numa(memory=128GiB)] core:8 pu:2(indexes=2*16:1*2)", {0}, 0, 0, 5, false,
     "mpirun -np 2 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 5", "0-7,16-23 8-15,24-31", ""},
    /* 4 nodes: four sockets, or two sockets with SNC2 and a GPU on each socket. */
    {"n4", "pack:4 [numa(memory=256GiB)] core:6 pu:1", {0}, 0, 0, 0, false,
     "mpirun -np 4 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 6", "0-5 6-11 12-17 18-23", ""},
    {"n4_snc_gpu", "pack:2 numa:2(memory=64GiB) core:6 pu:2(indexes=2*24:1*2)", {0, 3}, 2, 0, 0, false,
     "mpirun -np 4 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 6",
     "0-5,24-29 6-11,30-35 12-17,36-41 18-23,42-47", "0:0 3:3"},
    /* 8 nodes: two sockets with SNC4 (and other rank counts on it), or eight sockets. */
    {"n8_snc", "pack:2 numa:4(memory=64GiB) core:4 pu:2(indexes=2*32:1*2)", {0}, 0, 0, 0, false,
     "mpirun -np 8 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 4",
     "0-3,32-35 4-7,36-39 8-11,40-43 12-15,44-47 16-19,48-51 20-23,52-55 24-27,56-59 28-31,60-63", ""},
    {"n8_gpu", "pack:8 [numa(memory=128GiB)] core:4 pu:1", {5}, 1, 0, 0, false,
     "mpirun -np 8 --map-by ppr:1:numa --bind-to numa" CMD_TAIL " -t 4",
     "0-3 4-7 8-11 12-15 16-19 20-23 24-27 28-31", "5:5"},
    {"n8_snc_per_package", "pack:2 numa:4(memory=64GiB) core:4 pu:2(indexes=2*32:1*2)", {2}, 1, 2, 0, false,
     "mpirun -np 2 --map-by ppr:1:socket --bind-to socket" CMD_TAIL " -t 16", "0-15,32-47 16-31,48-63", "2:0"},
    {"n8_snc_split", "pack:2 numa:4(memory=64GiB) core:4 pu:2(indexes=2*32:1*2)", {0}, 0, 16, 0, false,
     "mpirun -np 16 --map-by ppr:2:numa:pe=2 --bind-to core" CMD_TAIL " -t 2",
     "0-1,32-33 2-3,34-35 4-5,36-37 6-7,38-39 8-9,40-41 10-11,42-43 12-13,44-45 14-15,46-47 "
     "16-17,48-49 18-19,50-51 20-21,52-53 22-23,54-55 24-25,56-57 26-27,58-59 28-29,60-61 30-31,62-63", ""},
    {"n8_one_rank", "pack:2 numa:4(memory=64GiB) core:4 pu:2(indexes=2*32:1*2)", {6}, 1, 1, 0, false, NULL, "0-63",
     "6:0"},
    /* Uneven split: 3 ranks on 8-core nodes use 2 cores each and leave 2 idle. */
    {"n2_split3", "pack:2 [numa(memory=128GiB)] core:8 pu:1", {0}, 0, 6, 0, false,
     "mpirun -np 6 --map-by ppr:3:numa:pe=2 --bind-to core" CMD_TAIL " -t 2", "0-1 2-3 4-5 8-9 10-11 12-13", ""},
    /* HBM next to each socket's DRAM: Open MPI would count the HBM nodes, so packages name the
     * places. */
    {"hbm", "pack:2 [numa(memory=64GiB)] [numa(memory=16GiB)] core:4 pu:1", {0}, 0, 0, 0, false,
     "mpirun -np 2 --map-by ppr:1:socket --bind-to socket" CMD_TAIL " -t 4", "0-3 4-7", ""},
    {"hbm_split", "pack:2 [numa(memory=64GiB)] [numa(memory=16GiB)] core:4 pu:1", {0}, 0, 4, 0, false,
     "mpirun -np 4 --map-by ppr:2:socket:pe=2 --bind-to core" CMD_TAIL " -t 2", "0-1 2-3 4-5 6-7", ""},
};

static void run_case(const struct plan_case *c) {
    struct topo *t = load(c->desc, c->gpu_nodes, c->n_gpus);
    struct plan_request req = {.n_ranks = c->ranks, .n_threads = c->threads};
    struct plan *p;
    char err[1024];
    if (plan_make(t, &req, &p, err, sizeof err)) {
        CHECK(0, "case %s: plan_make: %s", c->name, err);
        topo_free(t);
        return;
    }
    const int fail0 = g_fail;
    /* CPUs per rank. */
    char cpus[4096] = "";
    for (int r = 0; r < p->n_ranks; r++) {
        strcat(cpus, r ? " " : "");
        strcat(cpus, p->ranks[r].cpus);
        CHECK(p->ranks[r].n_threads == p->n_threads, "case %s: rank %d threads", c->name, r);
    }
    CHECK(strcmp(cpus, c->cpus) == 0, "case %s: cpus\n  got      %s\n  expected %s", c->name, cpus, c->cpus);
    /* GPUs. */
    char gpus[256] = "";
    CHECK(p->n_gpus == c->n_gpus, "case %s: %d GPUs, expected %d", c->name, p->n_gpus, c->n_gpus);
    for (int g = 0; g < p->n_gpus; g++)
        snprintf(gpus + strlen(gpus), sizeof gpus - strlen(gpus), "%s%d:%d", g ? " " : "", p->gpus[g].node,
                 p->gpus[g].near_rank);
    CHECK(strcmp(gpus, c->gpus) == 0, "case %s: gpus got '%s' expected '%s'", c->name, gpus, c->gpus);
    for (int g = 0; g < t->n_gpus; g++)
        CHECK(t->gpus[g].cuda && strncmp(t->gpus[g].name, "cuda", 4) == 0, "case %s: GPU %d named '%s'", c->name, g,
              t->gpus[g].name);
    /* The command line. */
    struct launch_argv_params ap = {.mpirun = "mpirun", .as_root = c->as_root, .exe = "numallm",
                                    .argc = (int)NM_ARRAY_LEN(k_args) - 1, .argv = k_args};
    char **argv;
    enum nm_status st = launch_argv_build(p, t, &ap, &argv, err, sizeof err);
    if (!c->cmd) {
        CHECK(p->n_ranks == 1 && p->layout == PLAN_LAYOUT_MACHINE, "case %s: expected one in-process rank", c->name);
        CHECK(st == NM_ERR_ARGS, "case %s: one rank has no mpirun line (got %s)", c->name, nm_status_str(st));
    } else if (st) {
        CHECK(0, "case %s: launch_argv_build: %s", c->name, err);
    } else {
        char *line = launch_argv_format(argv);
        CHECK(strcmp(line, c->cmd) == 0, "case %s: command\n  got      %s\n  expected %s", c->name, line, c->cmd);
        free(line);
        launch_argv_free(argv);
    }
    if (g_fail != fail0) {
        plan_print(p, t, stderr);
        fprintf(stderr, "  rerun: %s %s\n", g_self, c->name);
    }
    plan_free(p);
    topo_free(t);
}

/* ---- errors and messages ---------------------------------------------------------------- */

static void expect_plan_error(const char *desc, int ranks, const char *needle) {
    struct topo *t = load(desc, NULL, 0);
    struct plan_request req = {.n_ranks = ranks};
    struct plan *p = NULL;
    char err[1024] = "";
    enum nm_status st = plan_make(t, &req, &p, err, sizeof err);
    CHECK(st == NM_ERR_ARGS, "--ranks %d on %s: expected NM_ERR_ARGS, got %s", ranks, desc, nm_status_str(st));
    CHECK(strstr(err, needle), "--ranks %d on %s: message\n  %s\n  lacks '%s'", ranks, desc, err, needle);
    plan_free(p);
    topo_free(t);
}

static void test_bad_counts(void) {
    const char *snc4 = "pack:2 numa:4(memory=64GiB) core:4 pu:2";
    expect_plan_error(snc4, 3, "--ranks 3 does not fit");
    expect_plan_error(snc4, 3, "counts that work: 1 (in-process, the whole machine), 2 (one per package), "
                               "8 (one per NUMA node), 16, 24 ... 32 (several per node, a multiple of 8)");
    expect_plan_error(snc4, 40, "--ranks 40 does not fit"); /* 5 per node > 4 cores */
    expect_plan_error("pack:4 [numa] core:2 pu:1", 2,
                      "1 (in-process, the whole machine), 4 (one per NUMA node), 8 (2 per node)");
}

static void test_hbm_with_snc(void) {
    /* Sub-NUMA clusters, each with an HBM node: no Open MPI mapping names the DRAM nodes only. */
    struct topo *t = load("pack:2 group:2 [numa(memory=32GiB)] [numa(memory=8GiB)] core:2 pu:1", NULL, 0);
    CHECK(t->n_nodes == 8 && topo_cpu_nodes(t) == 4, "HBM+SNC: %d nodes, %d with cores", t->n_nodes, topo_cpu_nodes(t));
    struct plan_request req = {0};
    struct plan *p;
    char err[1024];
    NM_ASSERT(plan_make(t, &req, &p, err, sizeof err) == NM_OK);
    CHECK(p->n_ranks == 4 && strcmp(p->ranks[1].cpus, "2-3") == 0, "HBM+SNC plan: %d ranks, rank 1 on %s", p->n_ranks,
          p->ranks[1].cpus);
    char **argv;
    struct launch_argv_params ap = {.mpirun = "mpirun", .exe = "numallm", .argc = 1, .argv = k_args};
    enum nm_status st = launch_argv_build(p, t, &ap, &argv, err, sizeof err);
    CHECK(st == NM_ERR_UNSUPPORTED && strstr(err, "rankfile"), "HBM+SNC: %s: %s", nm_status_str(st), err);
    plan_free(p);
    topo_free(t);
}

static void expect_memory_error(const char *desc, int ranks, int bad_rank, uint64_t bytes, const char *needle) {
    struct topo *t = load(desc, NULL, 0);
    struct plan_request req = {.n_ranks = ranks};
    struct plan *p;
    char err[1024] = "";
    NM_ASSERT(plan_make(t, &req, &p, err, sizeof err) == NM_OK);
    CHECK(plan_check_memory(p, t, err, sizeof err) == NM_OK, "no weights known: nothing to refuse");
    for (int r = 0; r < p->n_ranks; r++) plan_set_weight_bytes(p, r, 1ull << 30);
    CHECK(plan_check_memory(p, t, err, sizeof err) == NM_OK, "1 GiB per rank fits %s", desc);
    plan_set_weight_bytes(p, bad_rank, bytes);
    enum nm_status st = plan_check_memory(p, t, err, sizeof err);
    CHECK(st == NM_ERR_NOMEM, "%s: %llu bytes on rank %d: expected NM_ERR_NOMEM", desc, (unsigned long long)bytes,
          bad_rank);
    CHECK(strstr(err, needle), "%s: message\n  %s\n  lacks '%s'", desc, err, needle);
    CHECK(strstr(err, "smaller quantization"), "%s: message says what to do: %s", desc, err);
    plan_free(p);
    topo_free(t);
}

static void test_memory(void) {
    const char *snc4 = "pack:2 numa:4(memory=64GiB) core:4 pu:2";
    expect_memory_error(snc4, 0, 3, 70ull << 30,
                        "rank 3 does not fit: its weights need 70.0 GiB but NUMA node 3 has 64.0 GiB");
    expect_memory_error(snc4, 2, 1, 300ull << 30, "need 300.0 GiB but package 1 (NUMA nodes 4-7) has 256.0 GiB");
    expect_memory_error(snc4, 16, 0, 40ull << 30, "its share of NUMA node 0 (2 ranks share it) is 32.0 GiB");
    expect_memory_error(snc4, 1, 0, 600ull << 30, "the machine has 512.0 GiB in all");
    expect_memory_error(snc4, 1, 0, 600ull << 30, "--ranks auto, 8 ranks");
}

/* The weights of a tiny model file, through shard_weight_bytes, and launch_plan's reading of it. */
static void test_model(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/nm_test_plan_%d.gguf", (int)getpid());
    struct pool *pool = pool_init(1, NULL);
    struct mkmodel_params mp = {.preset = mkmodel_find_preset("tiny-llama"), .type = DTYPE_Q8_0, .output_type = -1,
                                .seed = 1};
    char err[1024];
    const int saved = nm_log_level;
    nm_log_level = 0;
    NM_ASSERT(mkmodel_write(&mp, path, pool, err, sizeof err) == NM_OK);
    nm_log_level = saved;
    pool_free(pool);

    struct launch_request req;
    launch_request_init(&req, 0, NULL);
    req.model = path;
    req.topo = (struct topo_source){.kind = TOPO_SOURCE_SYNTHETIC, .arg = "pack:2 [numa(memory=1GiB)] core:2 pu:1"};
    struct topo *t;
    struct plan *p;
    nm_log_level = 0; /* model_config_read reports the defaults of optional keys */
    NM_ASSERT(launch_plan(&req, &t, &p, err, sizeof err) == NM_OK);
    CHECK(p->n_ranks == 2 && p->has_weights, "tiny model: 2 ranks with weights");
    struct gguf_file *f;
    NM_ASSERT(gguf_open(path, &f, err, sizeof err) == NM_OK);
    uint64_t whole = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) whole += f->tensors[i].size;
    gguf_close(f);
    const uint64_t b0 = p->ranks[0].weight_bytes, b1 = p->ranks[1].weight_bytes;
    CHECK(b0 > 0 && b1 > 0 && b0 < whole && b1 < whole, "each rank holds part of the %llu bytes: %llu, %llu",
          (unsigned long long)whole, (unsigned long long)b0, (unsigned long long)b1);
    CHECK(b0 + b1 >= whole, "replicated tensors: %llu + %llu >= %llu", (unsigned long long)b0, (unsigned long long)b1,
          (unsigned long long)whole);
    CHECK(plan_check_memory(p, t, err, sizeof err) == NM_OK, "tiny model fits 1 GiB nodes: %s", err);
    plan_free(p);
    topo_free(t);

    /* A node too small for its shard is refused before loading, naming the model. */
    req.topo.arg = "pack:2 [numa(memory=64KiB)] core:2 pu:1";
    NM_ASSERT(launch_plan(&req, &t, &p, err, sizeof err) == NM_OK);
    CHECK(plan_check_memory(p, t, err, sizeof err) == NM_ERR_NOMEM && strstr(err, path) && strstr(err, "NUMA node 0"),
          "64 KiB nodes: %s", err);
    plan_free(p);
    topo_free(t);
    nm_log_level = saved;
    unlink(path);
}

static void test_sources(void) {
    struct topo *t;
    char err[512];
    struct topo_source bad_xml = {.kind = TOPO_SOURCE_XML, .arg = "/nonexistent/machine.xml"};
    CHECK(topo_load(&bad_xml, &t, err, sizeof err) == NM_ERR_ARGS && strstr(err, "/nonexistent/machine.xml") &&
              strstr(err, "lstopo"),
          "missing XML: %s", err);
    struct topo_source bad_syn = {.kind = TOPO_SOURCE_SYNTHETIC, .arg = "pack:two core:8"};
    CHECK(topo_load(&bad_syn, &t, err, sizeof err) == NM_ERR_ARGS && strstr(err, "pack:two core:8"),
          "bad synthetic: %s", err);
    struct topo_source here = {.kind = TOPO_SOURCE_MACHINE};
    CHECK(topo_load(&here, &t, err, sizeof err) == NM_OK, "this machine: %s", err);
    if (t) {
        CHECK(t->n_nodes >= 1 && t->n_cores >= 1 && t->memory > 0, "this machine: %d nodes %d cores", t->n_nodes,
              t->n_cores);
        topo_free(t);
    }
}

static void test_cpulist(void) {
    const int ids[] = {8, 5, 1, 2, 3, 7, 0, 3};
    char buf[64];
    size_t need = topo_cpulist_format(ids, 8, buf, sizeof buf);
    CHECK(strcmp(buf, "0-3,5,7-8") == 0 && need == 9, "format: '%s' (%zu)", buf, need);
    char small[5];
    need = topo_cpulist_format(ids, 8, small, sizeof small);
    CHECK(need == 9 && strlen(small) < sizeof small, "truncated format: '%s' needs %zu", small, need);
    int *v;
    int n = topo_cpulist_parse("0-3,5,7-8,2", &v);
    CHECK(n == 7 && v[0] == 0 && v[3] == 3 && v[4] == 5 && v[6] == 8, "parse: %d ids", n);
    free(v);
    CHECK(topo_cpulist_parse("3-1", &v) == -1, "parse of a reversed range fails");
    CHECK(topo_cpulist_parse("1,x", &v) == -1, "parse of a word fails");
    CHECK(topo_cpulist_parse("", &v) == 0, "an empty list is empty");
    free(v);
}

/* Arguments that need quoting, and -t/--threads/--dry-run anywhere, in the ranks' command. */
static void test_quoting(void) {
    struct topo *t = load("pack:2 [numa] core:2 pu:1", NULL, 0);
    struct plan_request req = {0};
    struct plan *p;
    char err[512];
    NM_ASSERT(plan_make(t, &req, &p, err, sizeof err) == NM_OK);
    char *const args[] = {"run", "--threads", "7", "-p", "it's a \"test\"", "--dry-run", "-m", "/models/My Model.gguf",
                          NULL};
    struct launch_argv_params ap = {.mpirun = "/opt/ompi/bin/mpirun", .exe = "/usr/local/bin/numallm", .argc = 8,
                                    .argv = args};
    char **argv;
    NM_ASSERT(launch_argv_build(p, t, &ap, &argv, err, sizeof err) == NM_OK);
    char *line = launch_argv_format(argv);
    const char *want = "/opt/ompi/bin/mpirun -np 2 --map-by ppr:1:numa --bind-to numa /usr/local/bin/numallm run "
                       "-p 'it'\\''s a \"test\"' -m '/models/My Model.gguf' -t 2";
    CHECK(strcmp(line, want) == 0, "quoting\n  got      %s\n  expected %s", line, want);
    CHECK(strcmp(argv[10], "it's a \"test\"") == 0, "argv keeps the argument as is: %s", argv[10]);
    free(line);
    launch_argv_free(argv);
    plan_free(p);
    topo_free(t);
}

/* With -ngl and 2+ CPU ranks the GPU rank is a second app context: one process with one
 * thread, --role gpu and its GPU's node; the CPU ranks get --role cpu; the shared mapping lets
 * the extra process share cores (it moves to its node itself). */
static void test_gpu_rank(void) {
    struct topo *t = load("pack:2 [numa] core:4 pu:1", NULL, 0);
    struct plan_request req = {0};
    struct plan *p;
    char err[512];
    NM_ASSERT(plan_make(t, &req, &p, err, sizeof err) == NM_OK);
    char *const args[] = {"run", "-m", "m.gguf", "-ngl", "20", NULL};
    struct launch_argv_params ap = {.mpirun = "mpirun", .exe = "numallm", .argc = 5, .argv = args, .gpu_rank = true,
                                    .gpu_node = 1};
    char **argv;
    NM_ASSERT(launch_argv_build(p, t, &ap, &argv, err, sizeof err) == NM_OK);
    char *line = launch_argv_format(argv);
    const char *want = "mpirun --oversubscribe -np 2 --map-by ppr:1:numa --bind-to numa:overload-allowed numallm run "
                       "-m m.gguf -ngl 20 -t 4 --role cpu : -np 1 numallm run -m m.gguf -ngl 20 -t 1 --role gpu "
                       "--gpu-node 1";
    CHECK(strcmp(line, want) == 0, "GPU rank\n  got      %s\n  expected %s", line, want);
    free(line);
    launch_argv_free(argv);
    plan_free(p);
    topo_free(t);
}

/* The default model the parent resolved reaches the ranks as -m, unless the user named one. */
static void test_default_model(void) {
    struct topo *t = load("pack:2 [numa] core:2 pu:1", NULL, 0);
    struct plan_request req = {0};
    struct plan *p;
    char err[512];
    NM_ASSERT(plan_make(t, &req, &p, err, sizeof err) == NM_OK);
    char *const plain[] = {"run", "-n", "4", NULL}, *const named[] = {"run", "--model", "a.gguf", NULL};
    struct launch_argv_params ap = {.mpirun = "mpirun", .exe = "numallm", .model = "/cache/q.gguf", .argc = 3,
                                    .argv = plain};
    const char *want[] = {"mpirun -np 2 --map-by ppr:1:numa --bind-to numa numallm run -n 4 -m /cache/q.gguf -t 2",
                          "mpirun -np 2 --map-by ppr:1:numa --bind-to numa numallm run --model a.gguf -t 2"};
    for (int k = 0; k < 2; k++) {
        if (k) ap.argv = named;
        char **argv;
        NM_ASSERT(launch_argv_build(p, t, &ap, &argv, err, sizeof err) == NM_OK);
        char *line = launch_argv_format(argv);
        CHECK(strcmp(line, want[k]) == 0, "default model\n  got      %s\n  expected %s", line, want[k]);
        free(line);
        launch_argv_free(argv);
    }
    plan_free(p);
    topo_free(t);
}

int main(int argc, char **argv) {
    g_self = argv[0];
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    for (size_t i = 0; i < NM_ARRAY_LEN(k_cases); i++) {
        if (only && strcmp(only, k_cases[i].name) != 0) continue;
        run_case(&k_cases[i]);
        ran++;
    }
    if (!only) {
        test_bad_counts();
        test_hbm_with_snc();
        test_memory();
        test_model();
        test_sources();
        test_cpulist();
        test_quoting();
        test_gpu_rank();
        test_default_model();
    } else if (!ran) {
        fprintf(stderr, "no case named %s\n", only);
        return 2;
    }
    if (g_fail) {
        fprintf(stderr, "test_plan: %d check%s failed (rerun: %s)\n", g_fail, g_fail == 1 ? "" : "s", g_self);
        return 1;
    }
    printf("test_plan: %d cases and the error, memory, model, source, list and quoting tests passed\n", ran);
    return 0;
}
