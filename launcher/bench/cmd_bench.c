/* numallm bench: llama-bench's tests and report (FORMATS.md) over rank counts, with the machine's
 * facts first, achieved weight bandwidth next to the measured bandwidth of the NUMA nodes used,
 * scaling efficiency against one rank, progress on stderr and an SVG plot.
 *
 * This process is an orchestrator that never loads a model: for every combination of model,
 * rank count, -ngl, batch sizes, KV type and threads it starts one job, `numallm bench --worker`
 * (bench_worker.h), as a child process for one rank and through mpirun for several (the
 * command line is the launcher's, launch.h, as `numallm run` uses), which loads the model once
 * and runs every test (-p, -n, -pg, each at each -d) of that combination. Rank 0 of the job
 * reports on a pipe; rows are printed as they arrive. Rank counts run in ascending order, so
 * that every row can be compared with its 1-rank row.
 *
 * `numallm bench collectives` runs the OSU-style collectives benchmark (tests/bench/bench_coll.c)
 * through the same launcher, for each rank count. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_plot.h"
#include "bench_report.h"
#include "bench_worker.h"
#include "cli.h"
#include "gpu_stage.h"
#include "launch.h"

enum { LIST_MAX = 64 };

struct ilist {
    int n;
    int v[LIST_MAX];
    bool given;
};

/* Storage for the strings of list options (the options live as long as the command). */
struct strpool {
    char buf[16384];
    size_t used;
};

struct bench_opts {
    const char *models[LIST_MAX];
    int n_models;
    struct ilist n_prompt, n_gen, n_depth, n_batch, n_ubatch, n_threads, ngl, ranks;
    int n_pg;
    int pg[LIST_MAX][2];
    const char *type_k[4];
    int n_type_k;
    bool type_given;
    int reps;
    bool warmup, verbose, progress;
    enum bench_format out, out_err;
    const char *svg;
    long long bw_mib;
    long long delay;
    struct strpool strings;
};

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: numallm bench [options]              (llama-bench's tests and report, over rank counts)\n"
            "       numallm bench collectives [options]  (the collectives benchmark through the same launcher)\n"
            "\n"
            "Every list option takes comma lists (1,2,4), ranges (1-8: 1,2,...,8; 1-8*2: 1,2,4,8; 0-512+128)\n"
            "or repeated flags; every combination is run. One job per model x ranks x ngl x b x ub x ctk x\n"
            "threads loads the model once and runs every test.\n"
            "\n"
            "  -m, --model FILE       GGUF model(s) (default: the synthetic qwen2.5-0.5b-shaped Q4_0 model, made\n"
            "                         once into the cache directory, $NUMALLM_CACHE or ~/.cache/numallm)\n"
            "  -p, --n-prompt N       prompt-processing test of N tokens (default 512; 0: none)\n"
            "  -n, --n-gen N          text-generation test of N single-token steps (default 128; 0: none)\n"
            "  -pg PP,TG              a test of PP prompt tokens then TG generated ones (repeatable)\n"
            "  -d, --n-depth N        tokens already in the KV cache (evaluated first, untimed; default 0)\n"
            "  -b, --batch-size N     tokens per evaluation call (default 2048)\n"
            "  -ub, --ubatch-size N   rows of one forward pass (default 512); the engine runs min(b, ub)\n"
            "  -ctk, -ctv TYPE        KV cache type, f16 (default) or f32 (one type for K and V)\n"
            "  -t, --threads N        threads per rank (default: the cores of one rank of the largest rank\n"
            "                         count, so that every rank count runs at equal threads per rank)\n"
            "  --ranks LIST           CPU ranks (default: 1 and, with several NUMA nodes, one per node);\n"
            "                         auto = one per NUMA node; as numallm run's --ranks (1 runs in-process)\n"
            "  -ngl, --n-gpu-layers N the last N layers and the head on the GPU (default 0): driven by the rank\n"
            "                         itself with 1 rank, by a GPU rank joining the job with more. Without a\n"
            "                         CUDA device those rows are skipped with a message, never faked\n"
            "  -r, --repetitions N    timed repetitions of each test (default 5), after one warm-up\n"
            "  --no-warmup            skip the warm-up\n"
            "  -o, --output FORMAT    md (default), csv, json, jsonl or sql, on stdout\n"
            "  -oe, --output-err FMT  a second format on stderr (default none)\n"
            "  --svg FILE             plot t/s and scaling efficiency against ranks (per test) into FILE\n"
            "  --bw-size MiB          array size of the per-node read bandwidth measurement (default 1024;\n"
            "                         0: do not measure, and leave the bw GB/s column empty)\n"
            "  --delay S              seconds to wait before each job (cool-down)\n"
            "  --progress             a line per repetition on stderr even when it is not a terminal\n"
            "  -v, --verbose          the ranks' start-up and loading messages, and the mpirun lines\n"
            "\n"
            "Output: the machine first (CPU, kernels, NUMA nodes with their read bandwidth measured here,\n"
            "GPUs, MPI, build), then llama-bench's table with columns ranks, GB/s (weight bytes read per\n"
            "second by all ranks), bw GB/s (measured read bandwidth of the NUMA nodes holding the weights) and\n"
            "eff (t/s / (ranks x t/s of 1 rank), at equal threads per rank). json/jsonl/csv/sql carry\n"
            "llama-bench's fields plus n_ranks, isa, numa_nodes, token_bytes, avg_gbs, stddev_gbs, bw_gbs and\n"
            "scaling_eff; with a format other than md the machine facts go to stderr as '# ' lines.\n"
            "\n"
            "collectives options: --ranks LIST (default: the NUMA nodes, at least 2), --op allreduce|allgather|all,\n"
            "  --max-size BYTES (default 64 MiB), --iter-scale X (default 1), --transports shm,mpi\n"
            "  (shm:ONESHOT_KB[:SLOT_KB] tunes shm), -v\n"
            "\n"
            "mpirun is found through PATH; NUMALLM_MPIRUN=/path/to/mpirun names another one.\n");
}

/* ---- lists ------------------------------------------------------------------------------------- */

/* Append "a,b,c" where each item is N, FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*MULT (llama-bench's
 * ranges). with_auto: "auto" is accepted and stored as 0. */
static bool ilist_parse(const char *flag, const char *value, long long min, long long max, bool with_auto,
                        struct ilist *l) {
    if (!l->given) l->n = 0; /* the first use replaces the default */
    l->given = true;
    const char *p = value;
    if (!*p) goto bad;
    while (*p) {
        long long first, last, step = 1;
        char op = '+', *end;
        if (with_auto && strncmp(p, "auto", 4) == 0 && (p[4] == ',' || !p[4])) {
            first = last = 0;
            end = (char *)p + 4;
        } else {
            errno = 0;
            first = strtoll(p, &end, 10);
            if (errno || end == p || first < min || first > max) goto bad;
            last = first;
            if (*end == '-') {
                p = end + 1;
                last = strtoll(p, &end, 10);
                if (errno || end == p || last < first || last > max) goto bad;
                if (*end == '+' || *end == '*') {
                    op = *end;
                    p = end + 1;
                    step = strtoll(p, &end, 10);
                    if (errno || end == p || step < (op == '*' ? 2 : 1)) goto bad;
                }
            }
        }
        if (*end && *end != ',') goto bad;
        for (long long x = first; x <= last;) {
            if (l->n == LIST_MAX) {
                fprintf(stderr, "error: %s '%s': more than %d values\n", flag, value, LIST_MAX);
                return false;
            }
            l->v[l->n++] = (int)x;
            if (first == last) break;
            const long long next = op == '+' ? x + step : x * step;
            if (next <= x) break;
            x = next;
        }
        p = *end ? end + 1 : end;
    }
    return true;
bad:
    fprintf(stderr,
            "error: invalid value '%s' for %s: expected a comma list of integers in %lld..%lld or ranges "
            "(FIRST-LAST, FIRST-LAST+STEP, FIRST-LAST*MULT)%s\n",
            value, flag, min, max, with_auto ? ", or auto" : "");
    return false;
}

static void ilist_default(struct ilist *l, int v) {
    l->n = 1;
    l->v[0] = v;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Sort ascending and drop repeats. */
static void ilist_sort_unique(struct ilist *l) {
    qsort(l->v, (size_t)l->n, sizeof l->v[0], cmp_int);
    int k = 0;
    for (int i = 0; i < l->n; i++)
        if (k == 0 || l->v[k - 1] != l->v[i]) l->v[k++] = l->v[i];
    l->n = k;
}

/* Append comma-separated strings, copied into the pool. */
static bool slist_parse(const char *flag, const char *value, struct strpool *sp, const char **out, int *n, int cap) {
    for (const char *p = value; *p;) {
        const size_t len = strcspn(p, ",");
        if (len > 0) {
            if (*n == cap || sp->used + len + 1 > sizeof sp->buf) {
                fprintf(stderr, "error: %s '%s': too many values\n", flag, value);
                return false;
            }
            memcpy(sp->buf + sp->used, p, len);
            sp->buf[sp->used + len] = 0;
            out[(*n)++] = sp->buf + sp->used;
            sp->used += len + 1;
        }
        p += len + (p[len] == ',');
    }
    return true;
}

static int parse_bench(int argc, char **argv, struct bench_opts *o) {
    memset(o, 0, sizeof *o);
    ilist_default(&o->n_prompt, 512);
    ilist_default(&o->n_gen, 128);
    ilist_default(&o->n_depth, 0);
    ilist_default(&o->n_batch, 2048);
    ilist_default(&o->n_ubatch, 512);
    ilist_default(&o->ngl, 0);
    o->reps = 5;
    o->warmup = true;
    o->out = BENCH_FORMAT_MD;
    o->out_err = BENCH_FORMAT_NONE;
    o->bw_mib = 1024;
    const char *v;
    long long ll;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(x) (strcmp(a, x) == 0)
        if (IS("-h") || IS("--help")) {
            bench_usage(stdout);
            return 0;
        }
        if (IS("--no-warmup")) { o->warmup = false; continue; }
        if (IS("-v") || IS("--verbose")) { o->verbose = true; continue; }
        if (IS("--progress")) { o->progress = true; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (IS("-m") || IS("--model")) {
            if (!slist_parse(a, v, &o->strings, o->models, &o->n_models, LIST_MAX)) return 1;
        } else if (IS("-p") || IS("--n-prompt")) { if (!ilist_parse(a, v, 0, 1 << 20, false, &o->n_prompt)) return 1; }
        else if (IS("-n") || IS("--n-gen")) { if (!ilist_parse(a, v, 0, 1 << 20, false, &o->n_gen)) return 1; }
        else if (IS("-d") || IS("--n-depth")) { if (!ilist_parse(a, v, 0, 1 << 22, false, &o->n_depth)) return 1; }
        else if (IS("-b") || IS("--batch-size")) { if (!ilist_parse(a, v, 1, 1 << 20, false, &o->n_batch)) return 1; }
        else if (IS("-ub") || IS("--ubatch-size")) { if (!ilist_parse(a, v, 1, 1 << 20, false, &o->n_ubatch)) return 1; }
        else if (IS("-t") || IS("--threads")) { if (!ilist_parse(a, v, 1, 4096, false, &o->n_threads)) return 1; }
        else if (IS("-ngl") || IS("--n-gpu-layers")) { if (!ilist_parse(a, v, 0, 100000, false, &o->ngl)) return 1; }
        else if (IS("--ranks")) { if (!ilist_parse(a, v, 1, 4096, true, &o->ranks)) return 1; }
        else if (IS("-pg")) {
            int pp, tg;
            char tail;
            if (sscanf(v, "%d,%d%c", &pp, &tg, &tail) != 2 || pp < 0 || tg < 0 || pp > (1 << 20) || tg > (1 << 20)) {
                fprintf(stderr, "error: invalid value '%s' for -pg: expected PP,TG (two token counts)\n", v);
                return 1;
            }
            if (o->n_pg == LIST_MAX) { fprintf(stderr, "error: more than %d -pg tests\n", LIST_MAX); return 1; }
            o->pg[o->n_pg][0] = pp;
            o->pg[o->n_pg++][1] = tg;
        } else if (IS("-ctk") || IS("-ctv") || IS("--cache-type-k") || IS("--cache-type-v")) {
            const char *types[8];
            int nt = 0;
            if (!slist_parse(a, v, &o->strings, types, &nt, 8)) return 1;
            for (int k = 0; k < nt; k++) {
                const char *t = !strcmp(types[k], "f16") ? "f16" : !strcmp(types[k], "f32") ? "f32" : NULL;
                if (!t) {
                    fprintf(stderr, "error: invalid value '%s' for %s: expected f16 or f32 (one KV cache type for K "
                                    "and V)\n", types[k], a);
                    return 1;
                }
                bool dup = false;
                for (int j = 0; j < o->n_type_k; j++) dup |= !strcmp(o->type_k[j], t);
                if (!dup && o->n_type_k < 4) o->type_k[o->n_type_k++] = t;
            }
            o->type_given = true;
        } else if (IS("-r") || IS("--repetitions")) {
            if (!cli_int(a, v, 1, 64, &ll)) return 1;
            o->reps = (int)ll;
        } else if (IS("-o") || IS("--output") || IS("-oe") || IS("--output-err")) {
            enum bench_format fmt;
            if (!bench_format_parse(v, &fmt)) {
                fprintf(stderr, "error: invalid value '%s' for %s: expected md, csv, json, jsonl, sql or none\n", v, a);
                return 1;
            }
            if (IS("-o") || IS("--output")) o->out = fmt;
            else o->out_err = fmt;
        } else if (IS("--svg")) o->svg = v;
        else if (IS("--bw-size")) { if (!cli_int(a, v, 0, 1 << 20, &o->bw_mib)) return 1; }
        else if (IS("--delay")) { if (!cli_int(a, v, 0, 3600, &o->delay)) return 1; }
        else {
            fprintf(stderr, "error: unknown option '%s' for bench (numallm bench --help lists them)\n", a);
            return 1;
        }
#undef IS
    }
    if (o->n_type_k == 0) o->type_k[o->n_type_k++] = "f16";
    return -1;
}

/* ---- processes ------------------------------------------------------------------------------- */

static const char *self_exe(void) {
    static char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return "numallm";
    path[n] = 0;
    return path;
}

static const char *mpirun_name(void) {
    const char *e = getenv("NUMALLM_MPIRUN");
    return e && *e ? e : "mpirun";
}

/* Start argv with stdin from /dev/null, the CPU mask `mask` and stdout into a pipe (*out_fd)
 * or inherited (out_fd NULL). An exec failure is reported by the child (status 127). */
static pid_t spawn(char *const argv[], const cpu_set_t *mask, int *out_fd) {
    int fd[2] = {-1, -1};
    if (out_fd && pipe(fd) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        if (out_fd) {
            close(fd[0]);
            close(fd[1]);
        }
        return -1;
    }
    if (pid == 0) {
        const int dn = open("/dev/null", O_RDONLY);
        if (dn >= 0) dup2(dn, 0);
        if (out_fd) {
            dup2(fd[1], 1);
            close(fd[0]);
            close(fd[1]);
        }
        if (mask) sched_setaffinity(0, sizeof *mask, mask);
        launch_exec(argv);
        _exit(127);
    }
    if (out_fd) {
        close(fd[1]);
        *out_fd = fd[0];
    }
    return pid;
}

static int wait_status(pid_t pid, char *why, size_t len) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, len, "waitpid failed: %s", strerror(errno));
            return -1;
        }
    if (WIFEXITED(status)) {
        snprintf(why, len, "exit status %d", WEXITSTATUS(status));
        return WEXITSTATUS(status);
    }
    snprintf(why, len, "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
}

/* The ranks' command line for n_ranks ranks: mpirun's (launch.h) for several, the executable
 * itself for one. args: the subcommand's arguments ("bench", flags...), without -t. NULL after
 * printing why not (the plan refuses the rank count, the model does not fit). */
static char **job_argv(int n_ranks, int n_threads, int ngl, const char *model, int argc, char **args, char *why,
                       size_t len) {
    if (n_ranks == 1) {
        char **argv = calloc((size_t)argc + 4, sizeof *argv);
        NM_ASSERT(argv);
        int n = 0;
        argv[n++] = strdup(self_exe());
        for (int i = 0; i < argc; i++) argv[n++] = strdup(args[i]);
        argv[n++] = strdup("-t");
        char t[16];
        snprintf(t, sizeof t, "%d", n_threads);
        argv[n++] = strdup(t);
        argv[n] = NULL;
        return argv;
    }
    struct launch_request req;
    launch_request_init(&req, argc, args);
    req.n_ranks = n_ranks;
    req.n_threads = n_threads;
    req.model = model;
    struct topo *t;
    struct plan *p;
    char err[1024];
    char **argv = NULL;
    if (launch_plan(&req, &t, &p, err, sizeof err) || plan_check_memory(p, t, err, sizeof err)) {
        snprintf(why, len, "%s", err);
        if (p) {
            plan_free(p);
            topo_free(t);
        }
        return NULL;
    }
    struct launch_argv_params ap = {.mpirun = mpirun_name(), .as_root = geteuid() == 0, .exe = self_exe(),
                                    .model = model, .argc = argc, .argv = args, .gpu_rank = ngl > 0,
                                    .gpu_node = topo_cuda_gpu_node(t)};
    if (launch_argv_build(p, t, &ap, &argv, err, sizeof err)) snprintf(why, len, "%s", err);
    plan_free(p);
    topo_free(t);
    return argv;
}

static void argv_free(char **argv) {
    if (!argv) return;
    for (char **a = argv; *a; a++) free(*a);
    free(argv);
}

/* ---- the run --------------------------------------------------------------------------------- */

struct test_spec {
    int n_prompt, n_gen, n_depth;
};

struct job {
    const char *model;
    int n_ranks, ngl, n_batch, n_ubatch, n_threads;
    const char *type_k;
    int n_tests;
    struct test_spec tests[BENCH_WORKER_MAX_TESTS];
};

struct run {
    const struct bench_opts *o;
    struct bench_machine mach;
    struct bench_env env;
    struct bench_printer out, err;
    cpu_set_t orig_mask; /* this process's mask at start: the pools of mkmodel and the
                            bandwidth measurement bind the calling thread */
    bool have_mask;
    struct bench_row *rows;
    int n_rows, cap_rows;
    int row_no, rows_total;
    int failures;
    char notes[4096];
    bool tty;
};

/* Progress on stderr: on a terminal one line rewritten in place; otherwise a line per event
 * that is final (a row's result), or per repetition with --progress. */
static void progress(struct run *r, bool final, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void progress(struct run *r, bool final, const char *fmt, ...) {
    if (!r->tty && !final && !r->o->progress) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (r->tty) fprintf(stderr, "\r\033[K");
    fprintf(stderr, "numallm bench: %s%s", line, r->tty && !final ? "" : "\n");
    fflush(stderr);
}

static void progress_clear(struct run *r) {
    if (r->tty) fprintf(stderr, "\r\033[K");
}

static void note(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct run *r, const char *fmt, ...) {
    const size_t used = strlen(r->notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes + used, sizeof r->notes - used, fmt, ap);
    va_end(ap);
    progress_clear(r);
    fprintf(stderr, "numallm bench: %s\n", r->notes + used);
    if (strlen(r->notes) + 1 < sizeof r->notes) strcat(r->notes, "\n");
}

static bool same_config(const struct bench_row *a, const struct bench_row *b) {
    return !strcmp(a->model_filename, b->model_filename) && a->n_threads == b->n_threads &&
           a->n_gpu_layers == b->n_gpu_layers && a->n_batch == b->n_batch && a->n_ubatch == b->n_ubatch &&
           !strcmp(a->type_k, b->type_k) && a->n_prompt == b->n_prompt && a->n_gen == b->n_gen &&
           a->n_depth == b->n_depth;
}

static int passes_of(const struct job *j, const struct test_spec *t) {
    const int chunk = NM_MIN(j->n_batch, j->n_ubatch);
    int passes = t->n_gen;
    for (int done = 0; done < t->n_prompt; done += j->n_batch) {
        const int len = NM_MIN(j->n_batch, t->n_prompt - done);
        passes += (len + chunk - 1) / chunk;
    }
    return passes;
}

static void add_row(struct run *r, struct bench_row *row) {
    /* Scaling efficiency against the 1-rank row of the same test and configuration. */
    row->scaling_eff = -1;
    if (row->n_ranks == 1) row->scaling_eff = 1;
    for (int i = 0; i < r->n_rows && row->n_ranks > 1; i++)
        if (r->rows[i].n_ranks == 1 && same_config(&r->rows[i], row)) {
            const double base = bench_row_avg_ts(&r->rows[i]);
            if (base > 0) row->scaling_eff = bench_row_avg_ts(row) / (row->n_ranks * base);
        }
    row->bw_gbs = bench_machine_bw(&r->mach, row->numa_nodes);
    if (r->n_rows == r->cap_rows) {
        r->cap_rows = r->cap_rows ? 2 * r->cap_rows : 16;
        r->rows = realloc(r->rows, (size_t)r->cap_rows * sizeof *r->rows);
        NM_ASSERT(r->rows);
    }
    r->rows[r->n_rows++] = *row;
    progress_clear(r);
    bench_printer_row(&r->out, row);
    bench_printer_row(&r->err, row);
}

/* Split a protocol line in place at tabs; returns the field count. */
static int split_tabs(char *line, char **f, int max) {
    int n = 0;
    line[strcspn(line, "\r\n")] = 0;
    for (char *p = line; n < max;) {
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t) break;
        *t = 0;
        p = t + 1;
    }
    return n;
}

static void run_job(struct run *r, const struct job *j) {
    const struct bench_opts *o = r->o;
    char *args[BENCH_WORKER_MAX_TESTS * 2 + 32];
    char bufs[BENCH_WORKER_MAX_TESTS + 8][48];
    int n = 0, nb = 0;
#define ARG(s) (args[n++] = (char *)(s))
#define ARGF(...) (snprintf(bufs[nb], sizeof bufs[0], __VA_ARGS__), args[n++] = bufs[nb++])
    ARG("bench");
    ARG("--worker");
    ARG("-m");
    ARG(j->model);
    ARG("-r");
    ARGF("%d", o->reps);
    ARG("-b");
    ARGF("%d", j->n_batch);
    ARG("-ub");
    ARGF("%d", j->n_ubatch);
    ARG("-ctk");
    ARG(j->type_k);
    if (!o->warmup) ARG("--no-warmup");
    if (o->verbose) ARG("-v");
    if (j->ngl > 0) {
        ARG("-ngl");
        ARGF("%d", j->ngl);
    }
    for (int i = 0; i < j->n_tests; i++) {
        ARG("--test");
        ARGF("%d,%d,%d", j->tests[i].n_prompt, j->tests[i].n_gen, j->tests[i].n_depth);
    }
#undef ARG
#undef ARGF
    args[n] = NULL;
    char why[1024] = "", label[160];
    snprintf(label, sizeof label, "ranks %d, %d thread%s per rank", j->n_ranks, j->n_threads,
             j->n_threads == 1 ? "" : "s");
    const int first_row = r->row_no;
    char **argv = job_argv(j->n_ranks, j->n_threads, j->ngl, j->model, n, args, why, sizeof why);
    if (!argv) {
        r->failures++;
        r->row_no += j->n_tests;
        note(r, "%s: skipped: %s", label, why);
        return;
    }
    /* One rank on a machine with several NUMA nodes runs on the first node's CPUs when its
     * threads fit there: the baseline is one node's cores and memory, like rank 0 of a job. */
    cpu_set_t mask = r->orig_mask;
    bool use_mask = r->have_mask;
    if (j->n_ranks == 1 && r->mach.n_nodes > 1 && j->n_threads <= r->mach.nodes[0].n_cores) {
        int *cpus, nc = topo_cpulist_parse(r->mach.nodes[0].cpus, &cpus);
        if (nc > 0) {
            CPU_ZERO(&mask);
            for (int i = 0; i < nc; i++) CPU_SET(cpus[i], &mask);
            use_mask = true;
        }
        if (nc >= 0) free(cpus);
    }
    if (o->delay > 0) sleep((unsigned)o->delay);
    if (o->verbose) {
        char *line = launch_argv_format(argv);
        fprintf(stderr, "numallm bench: %s: %s\n", label, line);
        free(line);
    }
    /* A whole line (the ranks' start-up messages follow it), not one rewritten in place. */
    char rows[48];
    if (j->n_tests == 1) snprintf(rows, sizeof rows, "row %d/%d", first_row + 1, r->rows_total);
    else snprintf(rows, sizeof rows, "rows %d-%d/%d", first_row + 1, first_row + j->n_tests, r->rows_total);
    progress(r, true, "%s: %s: starting a job (it loads the model once for its %d test%s)", rows, label, j->n_tests,
             j->n_tests == 1 ? "" : "s");
    int fd;
    const pid_t pid = spawn(argv, use_mask ? &mask : NULL, &fd);
    argv_free(argv);
    if (pid < 0) {
        r->failures++;
        r->row_no += j->n_tests;
        note(r, "%s: skipped: cannot start a process: %s", label, strerror(errno));
        return;
    }
    FILE *f = fdopen(fd, "r");
    NM_ASSERT(f);
    struct bench_row base;
    memset(&base, 0, sizeof base);
    snprintf(base.model_filename, sizeof base.model_filename, "%s", j->model);
    base.n_batch = j->n_batch;
    base.n_ubatch = j->n_ubatch;
    base.n_threads = j->n_threads;
    base.n_gpu_layers = j->ngl;
    base.n_ranks = j->n_ranks;
    base.type_k = j->type_k;
    bool have_info = false;
    int done = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (strncmp(line, BENCH_WORKER_TAG "\t", sizeof BENCH_WORKER_TAG) != 0) {
            progress_clear(r);
            fputs(line, stderr); /* not ours (mpirun's notices): keep it visible */
            continue;
        }
        char *fl[12];
        const int nf = split_tabs(line + sizeof BENCH_WORKER_TAG, fl, 12);
        if (!strcmp(fl[0], "info") && nf >= 8) {
            snprintf(base.model_type, sizeof base.model_type, "%s", fl[1]);
            base.model_size = strtoull(fl[2], NULL, 10);
            base.model_n_params = strtoull(fl[3], NULL, 10);
            base.token_bytes = strtoull(fl[4], NULL, 10);
            snprintf(base.numa_nodes, sizeof base.numa_nodes, "%s", fl[5]);
            if (atoi(fl[6]) != j->n_ranks)
                nm_log_warn("bench: the job reports %s ranks, %d were asked for", fl[6], j->n_ranks);
            have_info = true;
            continue;
        }
        const int ti = nf >= 3 ? atoi(fl[1]) : -1;
        if (ti < 0 || ti >= j->n_tests || !have_info) continue;
        const struct test_spec *t = &j->tests[ti];
        struct bench_row row = base;
        row.n_prompt = t->n_prompt;
        row.n_gen = t->n_gen;
        row.n_depth = t->n_depth;
        char name[48];
        bench_row_test_name(&row, name, sizeof name);
        if (!strcmp(fl[0], "progress")) {
            const int rep = atoi(fl[2]);
            char step[48], tokens[48] = "";
            if (rep < 0) snprintf(step, sizeof step, "filling the KV cache to depth %d", t->n_depth);
            else if (rep == 0) snprintf(step, sizeof step, "warm-up");
            else snprintf(step, sizeof step, "repetition %d/%d", rep, o->reps);
            if (nf >= 5) snprintf(tokens, sizeof tokens, " (%d/%d tokens)", atoi(fl[3]), atoi(fl[4]));
            progress(r, false, "row %d/%d: %s, %s: %s%s", first_row + ti + 1, r->rows_total, label, name, step, tokens);
        } else if (!strcmp(fl[0], "result")) {
            const time_t now = time(NULL);
            struct tm tm;
            gmtime_r(&now, &tm);
            strftime(row.test_time, sizeof row.test_time, "%Y-%m-%dT%H:%M:%SZ", &tm);
            for (char *p = fl[2]; *p && row.n_samples < (int)NM_ARRAY_LEN(row.samples_ns);) {
                char *end;
                row.samples_ns[row.n_samples++] = strtoull(p, &end, 10);
                p = *end == ',' ? end + 1 : end;
                if (end == p && *p) break;
            }
            row.n_passes = passes_of(j, t);
            bench_row_finish(&row);
            add_row(r, &row);
            done++;
            progress(r, true, "row %d/%d: %s, %s: %.2f ± %.2f t/s", first_row + ti + 1, r->rows_total, label, name,
                     bench_row_avg_ts(&row), bench_row_sd_ts(&row));
        }
    }
    free(line);
    fclose(f);
    char st[64];
    const int rc = wait_status(pid, st, sizeof st);
    r->row_no += j->n_tests;
    if (rc != 0 || done < j->n_tests) {
        r->failures++;
        note(r, "%s: the job failed (%s) after %d of its %d rows; the messages above say why%s", label, st, done,
             j->n_tests, o->verbose ? "" : " (-v shows the ranks' start-up)");
    }
}

/* Threads per rank when -t is not given: the cores of one rank of the largest rank count. */
static int default_threads(const struct run *r, int max_ranks) {
    struct launch_request req;
    launch_request_init(&req, 0, NULL);
    req.n_ranks = max_ranks;
    struct topo *t;
    struct plan *p;
    char err[1024];
    if (launch_plan(&req, &t, &p, err, sizeof err) == NM_OK) {
        const int n = p->n_threads;
        plan_free(p);
        topo_free(t);
        if (n > 0) return n;
    }
    return NM_MAX(1, r->mach.n_cores / NM_MAX(max_ranks, 1));
}

static int bench_main(const struct bench_opts *o_in) {
    struct bench_opts o = *o_in;
    struct run *r = calloc(1, sizeof *r);
    NM_ASSERT(r);
    r->o = &o;
    r->tty = isatty(2);
    r->have_mask = sched_getaffinity(0, sizeof r->orig_mask, &r->orig_mask) == 0;
    int rc = 1;

    /* The default model, made once (mkmodel binds its pool's caller thread: restore the mask). */
    static char default_model[4200];
    if (o.n_models == 0) {
        struct pool *pool = cli_pool(0);
        const bool ok = cli_default_model(default_model, sizeof default_model, pool);
        pool_free(pool);
        if (r->have_mask) sched_setaffinity(0, sizeof r->orig_mask, &r->orig_mask);
        if (!ok) goto out;
        o.models[o.n_models++] = default_model;
    }
    for (int i = 0; i < o.n_models; i++) {
        struct stat sb;
        if (stat(o.models[i], &sb) != 0) {
            fprintf(stderr, "error: %s: %s\n", o.models[i], strerror(errno));
            goto out;
        }
    }

    char err[1024];
    if (bench_machine_read(&r->mach, (size_t)o.bw_mib << 20, mpirun_name(), err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    if (!o.ranks.given) {
        ilist_default(&o.ranks, 1);
        if (r->mach.n_nodes > 1) o.ranks.v[o.ranks.n++] = r->mach.n_nodes;
    }
    for (int i = 0; i < o.ranks.n; i++)
        if (o.ranks.v[i] == 0) o.ranks.v[i] = NM_MAX(r->mach.n_nodes, 1);
    ilist_sort_unique(&o.ranks);
    if (!o.n_threads.given) ilist_default(&o.n_threads, default_threads(r, o.ranks.v[o.ranks.n - 1]));

    r->env = (struct bench_env){.build_number = r->mach.build_number, .backends = "CPU", .isa = r->mach.isa};
    snprintf(r->env.build_commit, sizeof r->env.build_commit, "%s", r->mach.build_commit);
    snprintf(r->env.cpu_info, sizeof r->env.cpu_info, "%s", r->mach.cpu);
    snprintf(r->env.gpu_info, sizeof r->env.gpu_info, "%s", r->mach.gpu_names);
    const struct bench_columns cols = {
        .ngl = o.ngl.given,
        .n_batch = o.n_batch.given,
        .n_ubatch = o.n_ubatch.given,
        .type_k = o.type_given && (o.n_type_k > 1 || strcmp(o.type_k[0], "f16") != 0),
        .type_v = o.type_given && (o.n_type_k > 1 || strcmp(o.type_k[0], "f16") != 0),
    };
    r->out = (struct bench_printer){.format = o.out, .f = stdout, .env = &r->env, .cols = cols};
    r->err = (struct bench_printer){.format = o.out_err, .f = stderr, .env = &r->env, .cols = cols};

    /* Machine facts first: on stdout with the markdown table, else on stderr (stdout stays
     * parseable). */
    bench_machine_print(&r->mach, o.out == BENCH_FORMAT_MD ? stdout : stderr, o.out == BENCH_FORMAT_MD);

    /* Tests, in llama-bench's order: for each depth, the -p, -n and -pg tests. */
    struct job *j = calloc(1, sizeof *j);
    NM_ASSERT(j);
    int n_tests = 0;
    for (int d = 0; d < o.n_depth.n; d++) {
        for (int i = 0; i < o.n_prompt.n; i++) n_tests += o.n_prompt.v[i] > 0;
        for (int i = 0; i < o.n_gen.n; i++) n_tests += o.n_gen.v[i] > 0;
        for (int i = 0; i < o.n_pg; i++) n_tests += o.pg[i][0] + o.pg[i][1] > 0;
    }
    if (n_tests > BENCH_WORKER_MAX_TESTS) {
        fprintf(stderr, "error: %d tests per configuration (-p, -n and -pg values times -d values); at most %d\n",
                n_tests, BENCH_WORKER_MAX_TESTS);
        free(j);
        goto out;
    }
    for (int d = 0; d < o.n_depth.n; d++) {
        for (int i = 0; i < o.n_prompt.n; i++)
            if (o.n_prompt.v[i] > 0) j->tests[j->n_tests++] = (struct test_spec){o.n_prompt.v[i], 0, o.n_depth.v[d]};
        for (int i = 0; i < o.n_gen.n; i++)
            if (o.n_gen.v[i] > 0) j->tests[j->n_tests++] = (struct test_spec){0, o.n_gen.v[i], o.n_depth.v[d]};
        for (int i = 0; i < o.n_pg; i++)
            if (o.pg[i][0] + o.pg[i][1] > 0)
                j->tests[j->n_tests++] = (struct test_spec){o.pg[i][0], o.pg[i][1], o.n_depth.v[d]};
    }
    if (j->n_tests == 0) {
        fprintf(stderr, "error: no tests: -p, -n and -pg are all 0\n");
        free(j);
        goto out;
    }
    int ngl_run = 0;
    char no_gpu[256] = "";
    const bool have_gpu = gpu_device_count(no_gpu, sizeof no_gpu) > 0;
    for (int g = 0; g < o.ngl.n; g++) {
        if (o.ngl.v[g] > 0 && have_gpu) r->env.backends = "CPU,CUDA";
        if (o.ngl.v[g] == 0 || have_gpu) ngl_run++;
        else
            note(r, "-ngl %d: skipped: %s; those rows are not run", o.ngl.v[g], no_gpu);
    }
    const int n_jobs = o.n_models * o.ranks.n * ngl_run * o.n_batch.n * o.n_ubatch.n * o.n_type_k * o.n_threads.n;
    r->rows_total = n_jobs * j->n_tests;

    bench_printer_header(&r->out);
    bench_printer_header(&r->err);
    for (int mi = 0; mi < o.n_models; mi++)
        for (int ri = 0; ri < o.ranks.n; ri++)
            for (int g = 0; g < o.ngl.n; g++) {
                if (o.ngl.v[g] > 0 && !have_gpu) continue;
                for (int bi = 0; bi < o.n_batch.n; bi++)
                    for (int ui = 0; ui < o.n_ubatch.n; ui++)
                        for (int ki = 0; ki < o.n_type_k; ki++)
                            for (int ti = 0; ti < o.n_threads.n; ti++) {
                                j->model = o.models[mi];
                                j->n_ranks = o.ranks.v[ri];
                                j->ngl = o.ngl.v[g];
                                j->n_batch = o.n_batch.v[bi];
                                j->n_ubatch = o.n_ubatch.v[ui];
                                j->type_k = o.type_k[ki];
                                j->n_threads = o.n_threads.v[ti];
                                run_job(r, j);
                            }
            }
    free(j);
    progress_clear(r);
    bench_printer_footer(&r->out, r->notes);
    bench_printer_footer(&r->err, r->notes);
    if (o.svg) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s, %d NUMA node%s, kernels %s; build %s (%d)", r->mach.cpu, r->mach.n_nodes,
                 r->mach.n_nodes == 1 ? "" : "s", r->mach.isa, r->mach.build_commit, r->mach.build_number);
        if (bench_plot_write(o.svg, r->rows, r->n_rows, sub, r->notes, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            r->failures++;
        } else {
            fprintf(stderr, "numallm bench: plot written to %s\n", o.svg);
        }
    }
    rc = r->failures ? 1 : 0;
out:
    free(r->rows);
    free(r);
    return rc;
}

/* ---- collectives ----------------------------------------------------------------------------- */

static int bench_collectives(int argc, char **argv) {
    struct ilist ranks = {0};
    const char *v;
    bool verbose = false;
    char *wargs[16];
    int wn = 0;
    wargs[wn++] = "bench";
    wargs[wn++] = "--coll-worker";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { verbose = true; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (!strcmp(a, "--ranks")) {
            if (!ilist_parse(a, v, 1, 4096, true, &ranks)) return 1;
        } else if (!strcmp(a, "--op") || !strcmp(a, "--max-size") || !strcmp(a, "--iter-scale") ||
                   !strcmp(a, "--transports")) {
            if (!strcmp(a, "--op") && strcmp(v, "allreduce") && strcmp(v, "allgather") && strcmp(v, "all")) {
                fprintf(stderr, "error: invalid value '%s' for --op: expected allreduce, allgather or all\n", v);
                return 1;
            }
            if (wn + 2 >= (int)NM_ARRAY_LEN(wargs)) return 1;
            wargs[wn++] = (char *)a;
            wargs[wn++] = (char *)v;
        } else {
            fprintf(stderr, "error: unknown option '%s' for bench collectives (numallm bench --help lists them)\n", a);
            return 1;
        }
    }
    wargs[wn] = NULL;
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        fprintf(stderr, "error: numallm bench collectives starts its own mpirun jobs: run it without mpirun\n");
        return 1;
    }
    struct topo *t;
    const struct topo_source src = {.kind = TOPO_SOURCE_MACHINE};
    char err[1024];
    int nodes = 1;
    if (topo_load(&src, &t, err, sizeof err) == NM_OK) {
        nodes = topo_cpu_nodes(t);
        topo_free(t);
    }
    if (!ranks.given) ilist_default(&ranks, NM_MAX(nodes, 2));
    for (int i = 0; i < ranks.n; i++)
        if (ranks.v[i] == 0) ranks.v[i] = NM_MAX(nodes, 2);
    ilist_sort_unique(&ranks);
    int failures = 0;
    for (int i = 0; i < ranks.n; i++) {
        const int n = ranks.v[i];
        if (n < 2) {
            fprintf(stderr, "numallm bench collectives: --ranks %d: skipped: a collective needs 2 ranks or more\n", n);
            continue;
        }
        char why[1024] = "";
        char **cmd = job_argv(n, 0, 0, NULL, wn, wargs, why, sizeof why);
        if (!cmd) {
            fprintf(stderr, "numallm bench collectives: %d ranks: skipped: %s\n", n, why);
            failures++;
            continue;
        }
        char *line = launch_argv_format(cmd);
        fprintf(stderr, "numallm bench collectives: %d ranks%s%s\n", n, verbose ? ": " : "", verbose ? line : "");
        free(line);
        const pid_t pid = spawn(cmd, NULL, NULL);
        argv_free(cmd);
        char st[64];
        if (pid < 0 || wait_status(pid, st, sizeof st) != 0) {
            fprintf(stderr, "numallm bench collectives: %d ranks: the job failed (%s)\n", n, pid < 0 ? "fork" : st);
            failures++;
        }
    }
    return failures ? 1 : 0;
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--worker")) return bench_worker_main(argc, argv);
        if (!strcmp(argv[i], "--coll-worker")) return bench_coll_worker_main(argc, argv);
    }
    if (argc >= 2 && !strcmp(argv[1], "collectives")) return bench_collectives(argc - 1, argv + 1);
    struct bench_opts o;
    const int rc = parse_bench(argc, argv, &o);
    if (rc >= 0) return rc;
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        fprintf(stderr, "error: numallm bench starts its own jobs (through mpirun for several ranks): run it "
                        "without mpirun and choose rank counts with --ranks\n");
        return 1;
    }
    return bench_main(&o);
}
