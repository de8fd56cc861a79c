/* Machine facts and per-node read bandwidth for numallm bench (see bench_machine.h). */
#define _GNU_SOURCE
#include "bench_machine.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef NM_HAVE_NUMA
#include <numa.h>
#endif

#include "cli.h"
#include "cpu.h"
#include "gpu_stage.h"
#include "pool.h"
#include "topo.h"

/* ---- read bandwidth ------------------------------------------------------------------------ */

/* 64 bytes of integers: GCC lowers the vector to whatever the baseline ISA has (4 SSE2
 * registers on x86-64), which reads far faster than one core's share of DRAM bandwidth, so no
 * ISA-specific file is needed. Integer sums, so the compiler may not skip the loads. */
typedef uint64_t bw_vec __attribute__((vector_size(64)));

struct bw_job {
    bw_vec *a;
    long n;          /* vectors */
    bool touch;      /* write (first touch: the pages land on the writer's node) instead of sum */
    uint64_t sums[256][8]; /* one cache line per thread */
};

static void bw_run(void *ctx, int ith, int nth) {
    struct bw_job *j = ctx;
    long lo, hi;
    pool_split(j->n, 64, ith, nth, &lo, &hi);
    if (j->touch) {
        memset(j->a + lo, (int)(ith + 1), (size_t)(hi - lo) * sizeof(bw_vec));
        return;
    }
    bw_vec s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    const bw_vec *a = j->a;
    long i = lo;
    for (; i + 4 <= hi; i += 4) {
        s0 += a[i];
        s1 += a[i + 1];
        s2 += a[i + 2];
        s3 += a[i + 3];
    }
    for (; i < hi; i++) s0 += a[i];
    s0 += s1 + s2 + s3;
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s += s0[k];
    j->sums[ith & 255][0] += s;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Memory on `node` (libnuma when there is one; else ordinary pages, placed by first touch). */
static void *bw_alloc(int node, size_t bytes, bool *numa) {
    *numa = false;
#ifdef NM_HAVE_NUMA
    if (node >= 0 && numa_available() >= 0) {
        void *p = numa_alloc_onnode(bytes, node);
        if (p) {
            *numa = true;
            return p;
        }
    }
#else
    (void)node;
#endif
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void bw_free(void *p, size_t bytes, bool numa) {
#ifdef NM_HAVE_NUMA
    if (numa) {
        numa_free(p, bytes);
        return;
    }
#endif
    (void)numa;
    munmap(p, bytes);
}

static double bw_measure_on(int node, const int *cpus, int n, size_t bytes, int reps, double *min, double *max) {
    /* The pool binds the calling thread too: keep and restore its mask. */
    cpu_set_t saved;
    const bool have_saved = sched_getaffinity(0, sizeof saved, &saved) == 0;
    bytes = bytes / (64 * sizeof(bw_vec)) * (64 * sizeof(bw_vec));
    bool numa;
    struct bw_job *j = calloc(1, sizeof *j);
    NM_ASSERT(j);
    j->a = bw_alloc(node, bytes, &numa);
    if (!j->a || bytes == 0) {
        free(j);
        return 0;
    }
    j->n = (long)(bytes / sizeof(bw_vec));
    struct pool *pool = pool_init(n, cpus);
    j->touch = true;
    pool_run(pool, bw_run, j);
    j->touch = false;
    pool_run(pool, bw_run, j); /* warm-up, excluded */
    double *gbs = calloc((size_t)reps, sizeof *gbs);
    NM_ASSERT(gbs);
    for (int r = 0; r < reps; r++) {
        const uint64_t t0 = nm_time_ns();
        pool_run(pool, bw_run, j);
        gbs[r] = (double)bytes / (double)NM_MAX(nm_time_ns() - t0, 1);
    }
    pool_free(pool);
    if (have_saved) sched_setaffinity(0, sizeof saved, &saved);
    qsort(gbs, (size_t)reps, sizeof *gbs, cmp_double);
    const double med = reps % 2 ? gbs[reps / 2] : 0.5 * (gbs[reps / 2 - 1] + gbs[reps / 2]);
    if (min) *min = gbs[0];
    if (max) *max = gbs[reps - 1];
    free(gbs);
    bw_free(j->a, bytes, numa);
    free(j);
    return med;
}

/* ---- small helpers ------------------------------------------------------------------------- */

/* Copy src into dst[len], cut to fit. */
static void copy_str(char *dst, size_t len, const char *src) {
    size_t n = strlen(src);
    if (n >= len) n = len - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* The GPU's marketing name from the NVIDIA driver ("NVIDIA H100 80GB HBM3"), "" when unknown. */
static void gpu_model(const struct topo_gpu *g, char *out, size_t len) {
    *out = 0;
    char path[128];
    snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", g->pci);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Model:", 6) == 0) {
            const char *v = line + 6;
            while (*v == ' ' || *v == '\t') v++;
            copy_str(out, len, v);
            out[strcspn(out, "\r\n")] = 0;
            break;
        }
    fclose(f);
}

static void cpu_model_proc(char *out, size_t len) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ') v++;
            snprintf(out, len, "%s", v);
            out[strcspn(out, "\r\n")] = 0;
            break;
        }
    fclose(f);
}

/* ---- the machine --------------------------------------------------------------------------- */

enum nm_status bench_machine_read(struct bench_machine *m, size_t bw_bytes, const char *mpirun, char *err,
                                  size_t errlen) {
    memset(m, 0, sizeof *m);
    struct topo *t;
    const struct topo_source src = {.kind = TOPO_SOURCE_MACHINE};
    enum nm_status st = topo_load(&src, &t, err, errlen);
    if (st) return st;
    snprintf(m->cpu, sizeof m->cpu, "%s", t->cpu_model);
    if (!*m->cpu) cpu_model_proc(m->cpu, sizeof m->cpu);
    if (!*m->cpu) snprintf(m->cpu, sizeof m->cpu, "unknown CPU");
    /* The choice is printed with the facts; kern_isa_get's own log line would repeat it. */
    const int level = nm_log_level;
    nm_log_level = 0;
    m->isa = kern_isa_get()->name;
    nm_log_level = level;
    m->n_packages = t->n_packages;
    m->n_cores = t->n_cores;
    m->n_pus = t->n_pus;
    m->bw_bytes = bw_bytes;
    for (int i = 0; i < t->n_nodes && m->n_nodes < (int)NM_ARRAY_LEN(m->nodes); i++) {
        const struct topo_node *tn = &t->nodes[i];
        if (tn->n_cores == 0) continue;
        struct bench_node *bn = &m->nodes[m->n_nodes++];
        bn->os_index = tn->os_index;
        bn->n_cores = tn->n_cores;
        bn->n_pus = tn->n_pus;
        bn->memory = tn->memory;
        int *all = malloc((size_t)NM_MAX(t->n_pus, 1) * sizeof *all), *first = malloc((size_t)tn->n_cores * sizeof *first);
        NM_ASSERT(all && first);
        int n_all = 0;
        for (int c = tn->core_begin; c < tn->core_begin + tn->n_cores; c++) {
            const struct topo_core *core = &t->cores[c];
            first[c - tn->core_begin] = t->pus[core->pu_begin];
            for (int k = 0; k < core->n_pus; k++) all[n_all++] = t->pus[core->pu_begin + k];
        }
        topo_cpulist_format(all, n_all, bn->cpus, sizeof bn->cpus);
        if (bw_bytes > 0) {
            /* At most a quarter of the node's memory: the machine may be in use. */
            size_t bytes = bw_bytes;
            if (tn->memory > 0 && bytes > tn->memory / 4) bytes = (size_t)(tn->memory / 4);
            fprintf(stderr, "numallm bench: measuring the read bandwidth of NUMA node %d (%d threads, %zu MiB)...\n",
                    bn->os_index, tn->n_cores, bytes >> 20);
            bn->bw_gbs = bw_measure_on(bn->os_index, first, tn->n_cores, bytes, 10, &bn->bw_min, &bn->bw_max);
            bn->bw_threads = tn->n_cores;
        }
        free(all);
        free(first);
    }
    size_t used = 0;
    for (int i = 0; i < t->n_gpus && m->n_gpus < (int)NM_ARRAY_LEN(m->gpus); i++) {
        const struct topo_gpu *g = &t->gpus[i];
        char model[96];
        gpu_model(g, model, sizeof model);
        if (!*model)
            snprintf(model, sizeof model, "%s GPU", g->vendor_id == 0x10de ? "NVIDIA" : g->vendor_id == 0x1002 ? "AMD" : "PCI");
        char node[32] = "node unknown";
        if (g->node >= 0 && g->node < t->n_nodes) snprintf(node, sizeof node, "node %d", t->nodes[g->node].os_index);
        snprintf(m->gpus[m->n_gpus++], sizeof m->gpus[0], "%s (%04x:%04x) at %s, %s%s%s", model, g->vendor_id,
                 g->device_id, g->pci, node, *g->name ? ", " : "", g->name);
        used += (size_t)snprintf(m->gpu_names + used, used < sizeof m->gpu_names ? sizeof m->gpu_names - used : 0,
                                 "%s%s", used ? ", " : "", model);
        if (used >= sizeof m->gpu_names) used = sizeof m->gpu_names - 1;
    }
    topo_free(t);
    if (mpirun) {
        char *argv[] = {(char *)mpirun, "--version", NULL};
        cli_first_line(argv, m->mpi, sizeof m->mpi);
    }
    cli_build_info(m->build_commit, sizeof m->build_commit, &m->build_number);
    return NM_OK;
}

void bench_machine_print(const struct bench_machine *m, FILE *f, bool markdown) {
    const char *li = markdown ? "- " : "# ", *sub = markdown ? "  - " : "#   ";
    if (markdown) fprintf(f, "numallm bench: machine\n\n");
    else fprintf(f, "# numallm bench: machine\n");
    fprintf(f, "%sCPU: %s; %d package%s, %d cores, %d CPUs; kernels: %s\n", li, m->cpu, m->n_packages,
            m->n_packages == 1 ? "" : "s", m->n_cores, m->n_pus, m->isa);
    fprintf(f, "%sNUMA nodes with cores: %d", li, m->n_nodes);
    if (m->bw_bytes > 0)
        fprintf(f, "; read bandwidth measured here: every core of the node sums a %zu MiB array in the node's "
                   "memory, median of 10 passes after a warm-up (GB/s = 1e9 bytes/s)",
                m->bw_bytes >> 20);
    fprintf(f, "\n");
    for (int i = 0; i < m->n_nodes; i++) {
        const struct bench_node *n = &m->nodes[i];
        fprintf(f, "%snode %d: %d cores (CPUs %s), %.1f GiB", sub, n->os_index, n->n_cores, n->cpus,
                (double)n->memory / (1 << 30));
        if (n->bw_gbs > 0)
            fprintf(f, ", read %.2f GB/s (min %.2f, max %.2f, %d threads)", n->bw_gbs, n->bw_min, n->bw_max,
                    n->bw_threads);
        fprintf(f, "\n");
    }
    if (m->n_gpus == 0) fprintf(f, "%sGPUs: none\n", li);
    for (int i = 0; i < m->n_gpus; i++) fprintf(f, "%sGPU %d: %s\n", li, i, m->gpus[i]);
    char why[256];
    const int n_cuda = gpu_device_count(why, sizeof why);
    for (int i = 0; i < n_cuda; i++) {
        struct cuk_device_info g;
        if (gpu_device_info(i, &g, why, sizeof why) == NM_OK)
            fprintf(f, "%sCUDA device %d: %s, %.0f GiB, memory bandwidth %.0f GB/s (theoretical: %d-bit bus at %d MHz), "
                       "PCI %s: runs the layers of rows with ngl > 0\n",
                    li, i, g.name, (double)g.total_bytes / (1 << 30), g.bandwidth_gbs, g.bus_width_bits,
                    g.mem_clock_khz / 1000, g.pci_bus_id);
    }
    if (n_cuda == 0 && m->n_gpus > 0) fprintf(f, "%sno usable CUDA device (%s): rows with ngl > 0 are skipped\n", li, why);
    fprintf(f, "%sMPI: %s\n", li, *m->mpi ? m->mpi : "no mpirun found (only 1 rank can run)");
    fprintf(f, "%sbuild: %s (%d)\n", li, m->build_commit, m->build_number);
    if (markdown) fprintf(f, "\n");
    fflush(f);
}

double bench_machine_bw(const struct bench_machine *m, const char *nodes) {
    double sum = 0;
    const char *p = nodes;
    while (*p) {
        char *end;
        const long node = strtol(p, &end, 10);
        if (end == p) return 0;
        double bw = 0;
        for (int i = 0; i < m->n_nodes; i++)
            if (m->nodes[i].os_index == node) bw = m->nodes[i].bw_gbs;
        if (bw <= 0) return 0;
        sum += bw;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return sum;
}
