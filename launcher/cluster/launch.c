/* In-process or mpirun: the decision, the Open MPI command line and its execution (launch.h). */
#include "launch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gguf.h"
#include "gpu_stage.h"
#include "model.h"

void launch_request_init(struct launch_request *req, int argc, char **argv) {
    *req = (struct launch_request){.topo = {.kind = TOPO_SOURCE_MACHINE}, .argc = argc, .argv = argv, .gpu_node = -1};
}

int launch_parse_flag(int argc, char **argv, int *i, struct launch_request *req) {
    const char *a = argv[*i], *v;
    long long ll;
    if (strcmp(a, "--dry-run") == 0) {
        req->dry_run = true;
        return 1;
    }
    if (strcmp(a, "--ranks") == 0) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (strcmp(v, "auto") == 0) req->n_ranks = 0;
        else if (!cli_int(a, v, 1, 4096, &ll)) return -1;
        else req->n_ranks = (int)ll;
        return 1;
    }
    if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
        if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, 1, 4096, &ll)) return -1;
        req->n_threads = (int)ll;
        return 1;
    }
    if (strcmp(a, "-ngl") == 0 || strcmp(a, "--n-gpu-layers") == 0 || strcmp(a, "--gpu-layers") == 0) {
        if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, 0, 1 << 30, &ll)) return -1;
        req->n_gpu_layers = ll;
        return 1;
    }
    if (strcmp(a, "--role") == 0) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (strcmp(v, "cpu") == 0) req->role = RANK_ROLE_CPU_OF_PIPELINE;
        else if (strcmp(v, "gpu") == 0) req->role = RANK_ROLE_GPU;
        else {
            fprintf(stderr, "error: --role %s: allowed are cpu and gpu (set by the launcher)\n", v);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "--gpu-node") == 0) {
        if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, -1, 4095, &ll)) return -1;
        req->gpu_node = (int)ll;
        return 1;
    }
    if (strcmp(a, "--topology") == 0 || strcmp(a, "--topology-synthetic") == 0) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (req->topo.kind != TOPO_SOURCE_MACHINE) {
            fprintf(stderr, "error: %s: a topology was already given; use one of --topology and "
                            "--topology-synthetic\n", a);
            return -1;
        }
        req->topo.kind = a[10] == '-' ? TOPO_SOURCE_SYNTHETIC : TOPO_SOURCE_XML;
        req->topo.arg = v;
        return 1;
    }
    return 0;
}

const char *launch_flags_help(void) {
    return "  --ranks auto|N     CPU ranks (default auto: one per NUMA node, sub-NUMA clusters counted as nodes;\n"
           "                     1 runs in-process without mpirun; a multiple of the nodes splits each node's cores;\n"
           "                     the number of packages gives one rank per package)\n"
           "  -t, --threads N    threads per rank (default: the cores of the rank)\n"
           "  -ngl, --n-gpu-layers N  the last N layers, the output norm and the head on the CUDA device\n"
           "                     (N >= the layer count: the whole model; default 0). One CPU rank drives the\n"
           "                     GPU itself; with more, a GPU rank joins the job on the GPU's NUMA node.\n"
           "                     No CUDA device: a warning and every layer on the CPU (an error with --strict)\n"
           "  --dry-run          print the machine, the rank plan and the mpirun command line; run nothing\n"
           "  --topology FILE    plan for the machine recorded in an hwloc XML file (`lstopo FILE.xml` there);\n"
           "                     with --dry-run or in numallm topo only\n"
           "  --topology-synthetic DESC\n"
           "                     plan for an hwloc synthetic machine, e.g. \"pack:2 numa:4 core:14 pu:2\"\n";
}

/* ---- the command line ------------------------------------------------------------------ */

static char *xstrdup(const char *s) {
    char *d = strdup(s);
    NM_ASSERT(d);
    return d;
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return xstrdup(buf);
}

/* The ranks' command: exe, the subcommand's arguments less -t/--threads, --topology and
 * --topology-synthetic (with their values) and --dry-run, then -m MODEL when the arguments name
 * no model (model may be NULL), then -t T. Appends to argv at *n (room for argc + 5). */
static void child_args(char **argv, int *n, const char *exe, int argc, char *const *args, const char *model,
                       int n_threads) {
    argv[(*n)++] = xstrdup(exe);
    bool has_model = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(args[i], "-m") == 0 || strcmp(args[i], "--model") == 0) has_model = true;
        if (strcmp(args[i], "-t") == 0 || strcmp(args[i], "--threads") == 0 || strcmp(args[i], "--topology") == 0 ||
            strcmp(args[i], "--topology-synthetic") == 0) {
            i++;
            continue;
        }
        if (strcmp(args[i], "--dry-run") == 0) continue;
        argv[(*n)++] = xstrdup(args[i]);
    }
    if (model && !has_model) {
        argv[(*n)++] = xstrdup("-m");
        argv[(*n)++] = xstrdup(model);
    }
    argv[(*n)++] = xstrdup("-t");
    argv[(*n)++] = xprintf("%d", n_threads);
}

enum nm_status launch_argv_build(const struct plan *p, const struct topo *t, const struct launch_argv_params *ap,
                                 char ***out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_ranks < 2)
        return nm_errf(err, errlen, NM_ERR_ARGS, "one rank runs in-process: there is no mpirun command line");
    /* Open MPI counts every NUMA node, memory-only ones too, as a place for ppr:K:numa ranks.
     * With one DRAM node per package the package is the same place under another name. */
    bool per_package = p->layout == PLAN_LAYOUT_PACKAGE;
    if (p->memory_only_nodes && !per_package) {
        const int cpu_nodes = topo_cpu_nodes(t);
        bool one_per_pkg = t->n_packages == cpu_nodes;
        for (int k = 0; one_per_pkg && k < t->n_packages; k++) one_per_pkg = topo_cpu_nodes_in_package(t, k) == 1;
        if (!one_per_pkg)
            return nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                           "%s has memory-only NUMA nodes (HBM or CXL) next to sub-NUMA clusters: Open MPI's "
                           "--map-by ppr:N:numa would place ranks on them. Give each rank its CPUs in a rankfile "
                           "(mpirun --rankfile; the plan lists them), or use --ranks %d (one per package)",
                           t->source, t->n_packages);
        per_package = true;
    }
    const char *obj = per_package ? "socket" : "numa";
    char **argv = calloc((size_t)(2 * ap->argc + 32), sizeof *argv);
    NM_ASSERT(argv);
    int n = 0;
    argv[n++] = xstrdup(ap->mpirun);
    if (ap->as_root) argv[n++] = xstrdup("--allow-run-as-root");
    if (ap->gpu_rank) argv[n++] = xstrdup("--oversubscribe"); /* one process more than the plan's slots */
    argv[n++] = xstrdup("-np");
    argv[n++] = xprintf("%d", p->n_ranks);
    /* Open MPI applies the mapping to every app context: the GPU rank's process lands on CPU
     * ranks' cores, which its binding must be allowed to share (it then moves itself to its
     * GPU's node). */
    const char *overload = ap->gpu_rank ? ":overload-allowed" : "";
    argv[n++] = xstrdup("--map-by");
    if (p->layout == PLAN_LAYOUT_NODE_SPLIT) {
        argv[n++] = xprintf("ppr:%d:%s:pe=%d", p->ranks_per_node, obj, p->cores_per_rank);
        argv[n++] = xstrdup("--bind-to");
        argv[n++] = xprintf("core%s", overload);
    } else {
        argv[n++] = xprintf("ppr:1:%s", obj);
        argv[n++] = xstrdup("--bind-to");
        argv[n++] = xprintf("%s%s", obj, overload);
    }
    child_args(argv, &n, ap->exe, ap->argc, ap->argv, ap->model, p->n_threads);
    if (ap->gpu_rank) { /* the second app context: one process, one thread, on the GPU's node */
        argv[n++] = xstrdup("--role");
        argv[n++] = xstrdup("cpu");
        argv[n++] = xstrdup(":");
        argv[n++] = xstrdup("-np");
        argv[n++] = xstrdup("1");
        child_args(argv, &n, ap->exe, ap->argc, ap->argv, ap->model, 1);
        argv[n++] = xstrdup("--role");
        argv[n++] = xstrdup("gpu");
        argv[n++] = xstrdup("--gpu-node");
        argv[n++] = xprintf("%d", ap->gpu_node);
    }
    argv[n] = NULL;
    *out = argv;
    return NM_OK;
}

void launch_argv_free(char **argv) {
    if (!argv) return;
    for (char **a = argv; *a; a++) free(*a);
    free(argv);
}

static bool shell_safe(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,@%+-", *s)) return false;
    return true;
}

char *launch_argv_format(char *const *argv) {
    size_t len = 1;
    for (char *const *a = argv; *a; a++) len += 4 * strlen(*a) + 3;
    char *out = malloc(len), *o = out;
    NM_ASSERT(out);
    for (char *const *a = argv; *a; a++) {
        if (a != argv) *o++ = ' ';
        if (shell_safe(*a)) {
            o += sprintf(o, "%s", *a);
            continue;
        }
        *o++ = '\'';
        for (const char *s = *a; *s; s++) {
            if (*s == '\'') o += sprintf(o, "'\\''");
            else *o++ = *s;
        }
        *o++ = '\'';
    }
    *o = 0;
    return out;
}

/* ---- planning and deciding --------------------------------------------------------------- */

static const char *self_exe(const struct launch_request *req) {
    static char path[4096];
    if (req->exe) return req->exe;
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return "numallm";
    path[n] = 0;
    return path;
}

static const char *mpirun_name(const struct launch_request *req) {
    const char *e = getenv("NUMALLM_MPIRUN");
    return req->mpirun ? req->mpirun : e && *e ? e : "mpirun";
}

/* The subcommand arguments the ranks get: the caller's, or for `numallm topo` "run -m MODEL". */
static void request_args(const struct launch_request *req, int *argc, char **argv, int cap) {
    if (req->argc > 0) {
        *argc = NM_MIN(req->argc, cap);
        memcpy(argv, req->argv, (size_t)*argc * sizeof *argv);
        return;
    }
    int n = 0;
    argv[n++] = "run";
    if (req->model) {
        argv[n++] = "-m";
        argv[n++] = (char *)req->model;
    }
    *argc = n;
}

enum nm_status launch_plan(const struct launch_request *req, struct topo **t, struct plan **p, char *err,
                           size_t errlen) {
    *t = NULL;
    *p = NULL;
    enum nm_status st = topo_load(&req->topo, t, err, errlen);
    if (st) return st;
    struct plan_request pr = {.n_ranks = req->n_ranks, .n_threads = req->n_threads};
    if ((st = plan_make(*t, &pr, p, err, errlen))) goto fail;
    if (req->model) {
        struct gguf_file *f = NULL;
        struct model_config c;
        /* The defaults of optional keys are logged by the rank that loads the model, not here. */
        const int level = nm_log_level;
        nm_log_level = 0;
        if ((st = gguf_open(req->model, &f, err, errlen)) || (st = model_config_read(f, &c, err, errlen)) ||
            (st = plan_add_model(*p, req->model, f, &c, err, errlen))) {
            nm_log_level = level;
            gguf_close(f);
            goto fail;
        }
        nm_log_level = level;
        gguf_close(f);
    }
    return NM_OK;
fail:
    plan_free(*p);
    topo_free(*t);
    *p = NULL;
    *t = NULL;
    return st;
}

void launch_print_command(const struct launch_request *req, const struct plan *p, const struct topo *t, FILE *f) {
    char *args[256];
    int argc;
    request_args(req, &argc, args, (int)NM_ARRAY_LEN(args) - 4);
    if (p->n_ranks == 1) {
        char *argv[264];
        int n = 0;
        child_args(argv, &n, self_exe(req), argc, args, req->model, p->n_threads);
        argv[n] = NULL;
        char *line = launch_argv_format(argv);
        fprintf(f, "command: one rank runs in-process, without mpirun:\n  %s\n", line);
        free(line);
        for (int i = 0; i < n; i++) free(argv[i]);
        return;
    }
    struct launch_argv_params ap = {.mpirun = mpirun_name(req), .as_root = geteuid() == 0, .exe = self_exe(req),
                                    .model = req->model, .argc = argc, .argv = args};
    char **argv, err[512];
    if (launch_argv_build(p, t, &ap, &argv, err, sizeof err)) {
        fprintf(f, "command: none: %s\n", err);
        return;
    }
    char *line = launch_argv_format(argv);
    fprintf(f, "command:\n  %s\n", line);
    free(line);
    launch_argv_free(argv);
}

void launch_exec(char *const *argv) {
    execvp(argv[0], argv);
    const int e = errno;
    fprintf(stderr, "error: cannot run %s: %s (%s)\n", argv[0], strerror(e),
            e == ENOENT ? "install Open MPI (launcher/setup.sh) or name its mpirun in NUMALLM_MPIRUN; "
                          "--ranks 1 runs in-process without it"
                        : "check NUMALLM_MPIRUN");
}

/* -ngl without a usable CUDA device: said once, here; an error with --strict. */
static bool gpu_usable(const struct launch_request *req) {
    char why[256];
    if (gpu_device_count(why, sizeof why) > 0) return true;
    if (req->strict) {
        fprintf(stderr, "error: -ngl %lld needs a GPU: %s (--strict)\n", req->n_gpu_layers, why);
        return false;
    }
    fprintf(stderr, "[launcher] warning: -ngl %lld ignored: %s; every layer runs on the CPU ranks\n",
            req->n_gpu_layers, why);
    return false;
}

enum launch_mode launch_decide(const struct launch_request *req, struct launch_decision *d) {
    *d = (struct launch_decision){.rank = 0, .nranks = 1, .gpu_rank = -1, .gpu_node = -1,
                                  .n_gpu_layers = req->n_gpu_layers, .role = req->role};
    const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (size && rank) {
        d->under_mpirun = true;
        d->nranks = atoi(size);
        d->rank = atoi(rank);
        if (req->role != RANK_ROLE_CPU) { /* the GPU rank is the job's last */
            d->gpu_rank = d->nranks - 1;
            d->nranks -= 1;
            d->gpu_node = req->gpu_node;
        }
        d->n_threads = req->n_threads > 0 ? req->n_threads : topo_cores_in_affinity();
        return LAUNCH_MODE_IN_PROCESS;
    }
    if (req->role != RANK_ROLE_CPU) {
        fprintf(stderr, "error: --role is set by the launcher on the ranks of an mpirun job only\n");
        return LAUNCH_MODE_ERROR;
    }
    bool ngl_off = false;
    if (req->n_gpu_layers > 0 && !req->dry_run && !gpu_usable(req)) {
        if (req->strict) return LAUNCH_MODE_ERROR;
        d->n_gpu_layers = 0;
        ngl_off = true;
    }
    if (req->topo.kind != TOPO_SOURCE_MACHINE && !req->dry_run) {
        fprintf(stderr, "error: %s describes another machine: use it with --dry-run (or in numallm topo) to see "
                        "the plan and the command line; run on the machine itself without it\n",
                req->topo.kind == TOPO_SOURCE_XML ? "--topology" : "--topology-synthetic");
        return LAUNCH_MODE_ERROR;
    }
    struct topo *t;
    struct plan *p;
    char err[1024];
    if (launch_plan(req, &t, &p, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return LAUNCH_MODE_ERROR;
    }
    const bool fits = plan_check_memory(p, t, err, sizeof err) == NM_OK;
    enum launch_mode mode = LAUNCH_MODE_ERROR;
    if (req->dry_run) {
        topo_print(t, stdout);
        plan_print(p, t, stdout);
        if (fits) launch_print_command(req, p, t, stdout);
        fflush(stdout);
        if (!fits) fprintf(stderr, "error: %s\n", err);
        mode = fits ? LAUNCH_MODE_DONE : LAUNCH_MODE_ERROR;
        goto out;
    }
    if (!fits) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    if (p->n_ranks == 1) {
        d->n_threads = req->n_threads > 0 ? req->n_threads : topo_cores_in_affinity();
        if (d->n_threads <= 0) d->n_threads = p->n_threads;
        mode = LAUNCH_MODE_IN_PROCESS;
        goto out;
    }
    char *args[4096];
    int argc;
    request_args(req, &argc, args, (int)NM_ARRAY_LEN(args));
    if (ngl_off && argc + 2 <= (int)NM_ARRAY_LEN(args)) { /* the ranks must not try again */
        args[argc++] = "-ngl";
        args[argc++] = "0";
    }
    struct launch_argv_params ap = {.mpirun = mpirun_name(req), .as_root = geteuid() == 0, .exe = self_exe(req),
                                    .model = req->model, .argc = argc, .argv = args,
                                    .gpu_rank = d->n_gpu_layers > 0, .gpu_node = topo_cuda_gpu_node(t)};
    char **argv;
    if (launch_argv_build(p, t, &ap, &argv, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    plan_print(p, t, stderr);
    char *line = launch_argv_format(argv);
    if (ap.gpu_rank) fprintf(stderr, "[launcher] %d CPU ranks + the GPU rank (node %d): %s\n", p->n_ranks, ap.gpu_node, line);
    else fprintf(stderr, "[launcher] %d ranks: %s\n", p->n_ranks, line);
    fflush(stderr);
    fflush(stdout);
    free(line);
    launch_exec(argv);
    launch_argv_free(argv);
out:
    plan_free(p);
    topo_free(t);
    return mode;
}

void launch_checks_input(const struct launch_decision *d, uint64_t weight_bytes, bool strict,
                         struct checks_input *in) {
    memset(in, 0, sizeof *in);
    in->rank = d->rank;
    in->nranks = d->nranks;
    in->node = -1;
    in->weight_bytes = weight_bytes;
    in->strict = strict;
    if (!d->under_mpirun) return; /* in-process: nothing binds it; its memory is the machine's */
    struct topo *t;
    struct plan *p;
    char err[512];
    struct topo_source src = {.kind = TOPO_SOURCE_MACHINE};
    if (topo_load(&src, &t, err, sizeof err)) {
        snprintf(in->plan_note, sizeof in->plan_note, "%.200s", err);
        return;
    }
    struct plan_request pr = {.n_ranks = d->nranks};
    if (plan_make(t, &pr, &p, err, sizeof err) || d->rank < 0 || d->rank >= p->n_ranks) {
        snprintf(in->plan_note, sizeof in->plan_note, "no rank plan for %d ranks on this machine", d->nranks);
    } else {
        const struct plan_rank *r = &p->ranks[d->rank];
        snprintf(in->expected_cpus, sizeof in->expected_cpus, "%s", r->cpus);
        /* A rank spanning several nodes (one per package) has no single node to check. */
        in->node = p->nodes_per_rank == 1 ? r->node : -1;
        plan_free(p);
    }
    topo_free(t);
}
