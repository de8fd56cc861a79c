/* One rank of a numallm bench job (see bench_worker.h). */
#include "bench_worker.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "coll.h"
#include "cpu.h"
#include "session.h"

enum { WORKER_MAX_TESTS = BENCH_WORKER_MAX_TESTS, WORKER_MAX_REPS = 64 };

struct worker_test {
    int n_prompt, n_gen, n_depth;
};

struct worker_opts {
    struct session_opts so;
    int n_batch, n_ubatch; /* llama-bench's -b (tokens per engine_eval call) and -ub */
    int reps;
    bool warmup;
    bool verbose;
    int n_tests;
    struct worker_test tests[WORKER_MAX_TESTS];
    struct launch_request launch; /* -ngl, and --role/--gpu-node when the job has a GPU rank */
};

static int parse_worker(int argc, char **argv, struct worker_opts *o) {
    *o = (struct worker_opts){.so = {.kv_type = DTYPE_F16}, .n_batch = 2048, .n_ubatch = 512, .reps = 5,
                              .warmup = true};
    launch_request_init(&o->launch, argc, argv);
    long long ll;
    const char *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--worker")) continue;
        if (!strcmp(a, "-ngl") || !strcmp(a, "--role") || !strcmp(a, "--gpu-node")) {
            if (launch_parse_flag(argc, argv, &i, &o->launch) < 0) return 1;
            continue;
        }
        if (!strcmp(a, "--no-warmup")) { o->warmup = false; continue; }
        if (!strcmp(a, "-v")) { o->verbose = true; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (!strcmp(a, "-m")) o->so.model = v;
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 1, 4096, &o->so.n_threads)) return 1; }
        else if (!strcmp(a, "-r")) { if (!cli_int(a, v, 1, WORKER_MAX_REPS, &ll)) return 1; o->reps = (int)ll; }
        else if (!strcmp(a, "-b")) { if (!cli_int(a, v, 1, 1 << 20, &ll)) return 1; o->n_batch = (int)ll; }
        else if (!strcmp(a, "-ub")) { if (!cli_int(a, v, 1, 1 << 20, &ll)) return 1; o->n_ubatch = (int)ll; }
        else if (!strcmp(a, "-ctk")) {
            if (!strcmp(v, "f16")) o->so.kv_type = DTYPE_F16;
            else if (!strcmp(v, "f32")) o->so.kv_type = DTYPE_F32;
            else { fprintf(stderr, "error: invalid value '%s' for -ctk: expected f16 or f32\n", v); return 1; }
        } else if (!strcmp(a, "--test")) {
            struct worker_test t;
            if (o->n_tests == WORKER_MAX_TESTS || sscanf(v, "%d,%d,%d", &t.n_prompt, &t.n_gen, &t.n_depth) != 3 ||
                t.n_prompt < 0 || t.n_gen < 0 || t.n_depth < 0 || t.n_prompt + t.n_gen == 0) {
                fprintf(stderr, "error: invalid value '%s' for --test: expected N_PROMPT,N_GEN,N_DEPTH\n", v);
                return 1;
            }
            o->tests[o->n_tests++] = t;
        } else {
            fprintf(stderr, "error: unknown option '%s' for the bench worker\n", a);
            return 1;
        }
    }
    if (!o->so.model || o->n_tests == 0) {
        fprintf(stderr, "error: the bench worker needs -m and at least one --test (numallm bench starts it)\n");
        return 1;
    }
    o->so.n_batch = NM_MIN(o->n_batch, o->n_ubatch);
    return -1;
}

/* Token ids: the same pseudo-random sequence on every rank (xorshift64). */
struct ids {
    uint64_t state;
    int64_t n_vocab;
};

static int32_t ids_next(struct ids *g) {
    g->state ^= g->state << 13;
    g->state ^= g->state >> 7;
    g->state ^= g->state << 17;
    return (int32_t)((g->state >> 11) % (uint64_t)g->n_vocab);
}

struct worker {
    struct session *s;
    const struct worker_opts *o;
    struct ids ids;
    int32_t *tokens; /* [n_batch] */
    float *logits;   /* [vocab_local]: the last token's slice, unused */
    /* Progress within a repetition, reported by rank 0 at most once a second (long runs). */
    int ti, rep, done, total;
    uint64_t last_ns;
    bool profile; /* NM_PROFILE=1: each test's time by forward-pass phase on stderr */
    char err[1024];
};

static void report(const struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void tick(struct worker *w, int tokens) {
    w->done += tokens;
    if (w->s->rank != 0) return;
    const uint64_t now = nm_time_ns();
    if (now - w->last_ns < 1000000000ull) return;
    w->last_ns = now;
    report(w->s, "progress\t%d\t%d\t%d\t%d", w->ti, w->rep, w->done, w->total);
}

/* Start counting the tokens of one repetition (rep 0: the warm-up). */
static void tick_start(struct worker *w, int ti, int rep, int total) {
    w->ti = ti;
    w->rep = rep;
    w->done = 0;
    w->total = total;
    w->last_ns = nm_time_ns();
    report(w->s, "progress\t%d\t%d", ti, rep);
}

/* n tokens, as llama-bench's test_prompt: calls of at most n_batch tokens, which the engine
 * runs in matrices of min(n_batch, n_ubatch) rows; it is called here with one such matrix at a
 * time (the same work, in the same order), so that progress can be reported between them. */
static enum nm_status eval_prompt(struct worker *w, int n) {
    const int n_batch = w->o->n_batch, chunk = w->o->so.n_batch;
    for (int done = 0; done < n;) {
        const int in_call = done % n_batch; /* tokens of the current n_batch call already done */
        const int len = NM_MIN(NM_MIN(n - done, n_batch - in_call), chunk);
        for (int i = 0; i < len; i++) w->tokens[i] = ids_next(&w->ids);
        enum nm_status st = engine_eval(w->s->e, w->tokens, len, false, w->logits, w->err, sizeof w->err);
        if (st) return st;
        done += len;
        tick(w, len);
    }
    return NM_OK;
}

/* n single-token steps, as llama-bench's test_gen (the next id is not sampled). */
static enum nm_status eval_gen(struct worker *w, int n) {
    for (int i = 0; i < n; i++) {
        int32_t tok = ids_next(&w->ids);
        enum nm_status st = engine_eval(w->s->e, &tok, 1, false, w->logits, w->err, sizeof w->err);
        if (st) return st;
        tick(w, 1);
    }
    return NM_OK;
}

static void report(const struct session *s, const char *fmt, ...) {
    if (s->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    fputs(BENCH_WORKER_TAG "\t", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* Model facts and where the weights are: every rank's bytes read per token (all it holds for a
 * dense model; MoE: the chosen experts' share) and node, summed/listed. */
static void report_info(struct session *s) {
    uint64_t mine[2] = {s->m->token_bytes, (uint64_t)arena_node(s->m->arena)};
    uint64_t *all = malloc((size_t)s->nranks * sizeof mine);
    NM_ASSERT(all);
    coll_allgather(s->coll, mine, sizeof mine, all);
    uint64_t loaded = 0;
    char nodes[64] = "";
    size_t used = 0;
    for (int r = 0; r < s->nranks; r++) {
        loaded += all[2 * r];
        bool seen = false;
        for (int q = 0; q < r; q++) seen |= all[2 * q + 1] == all[2 * r + 1];
        if (!seen && used < sizeof nodes)
            used += (size_t)snprintf(nodes + used, sizeof nodes - used, "%s%llu", used ? "," : "",
                                     (unsigned long long)all[2 * r + 1]);
    }
    free(all);
    char desc[128];
    model_describe(s->m, desc, sizeof desc);
    report(s, "info\t%s\t%llu\t%llu\t%llu\t%s\t%d\t%s", desc, (unsigned long long)s->m->weight_bytes,
           (unsigned long long)s->m->n_params, (unsigned long long)loaded, nodes, s->nranks, kern_isa_get()->name);
}

static enum nm_status run_tests(struct worker *w) {
    struct session *s = w->s;
    const struct worker_opts *o = w->o;
    enum nm_status st;
    int cached_depth = -1; /* depth whose tokens are in the KV cache (positions 0..depth-1) */
    for (int ti = 0; ti < o->n_tests; ti++) {
        const struct worker_test *t = &o->tests[ti];
        if (t->n_depth != cached_depth) {
            tick_start(w, ti, -1, t->n_depth);
            engine_truncate(s->e, 0);
            if ((st = eval_prompt(w, t->n_depth))) return st;
            cached_depth = t->n_depth;
        }
        if (o->warmup) {
            tick_start(w, ti, 0, t->n_prompt + (t->n_gen > 0));
            engine_truncate(s->e, t->n_depth);
            if (t->n_prompt > 0 && (st = eval_prompt(w, t->n_prompt))) return st;
            if (t->n_gen > 0 && (st = eval_gen(w, 1))) return st;
        }
        uint64_t ns[WORKER_MAX_REPS], ns_all = 0;
        struct engine_times ph0, ph1;
        engine_phase_seconds(s->e, &ph0);
        for (int r = 0; r < o->reps; r++) {
            tick_start(w, ti, r + 1, t->n_prompt + t->n_gen);
            engine_truncate(s->e, t->n_depth);
            coll_barrier(s->coll);
            const uint64_t t0 = nm_time_ns();
            if (t->n_prompt > 0 && (st = eval_prompt(w, t->n_prompt))) return st;
            if (t->n_gen > 0 && (st = eval_gen(w, t->n_gen))) return st;
            /* The output head is split by vocabulary with no collective after it: wait for the
             * slowest rank so that rank 0's clock covers the whole job. */
            coll_barrier(s->coll);
            ns[r] = nm_time_ns() - t0;
            ns_all += ns[r];
        }
        if (s->rank == 0 && w->profile) { /* NM_PROFILE=1: where the timed repetitions went */
            char line[512];
            engine_phase_seconds(s->e, &ph1);
            engine_phase_report(&ph0, &ph1, (double)ns_all * 1e-9, line, sizeof line);
            fprintf(stderr, "profile: test %d (pp %d, tg %d, depth %d), rank 0: %s\n", ti, t->n_prompt, t->n_gen,
                    t->n_depth, line);
        }
        if (s->rank == 0) {
            char line[64 * 24] = "";
            size_t used = 0;
            for (int r = 0; r < o->reps; r++)
                used += (size_t)snprintf(line + used, sizeof line - used, "%s%llu", r ? "," : "",
                                         (unsigned long long)ns[r]);
            report(s, "result\t%d\t%s", ti, line);
        }
    }
    return NM_OK;
}

int bench_worker_main(int argc, char **argv) {
    struct worker_opts o;
    const int rc = parse_worker(argc, argv, &o);
    if (rc >= 0) return rc;
    /* Loading and start-up lines only with -v: the orchestrator prints the facts that matter. */
    nm_log_level = o.verbose ? 1 : 0;
    /* One rank in-process, or this process's place in the mpirun job that started it. */
    struct launch_request req = o.launch;
    req.model = o.so.model;
    req.n_ranks = 1;
    req.n_threads = (int)o.so.n_threads;
    const int lrc = session_launch(&req, &o.so);
    if (lrc >= 0) return lrc;
    struct session s;
    struct worker w = {.s = &s, .o = &o, .ids = {.state = 0x9E3779B97F4A7C15ull}, .profile = engine_profile_requested()};
    enum nm_status st = session_open(&s, &o.so, w.err, sizeof w.err);
    if (!st) {
        int64_t n_ctx = 1;
        for (int i = 0; i < o.n_tests; i++)
            n_ctx = NM_MAX(n_ctx, (int64_t)o.tests[i].n_depth + o.tests[i].n_prompt + o.tests[i].n_gen);
        st = session_engine(&s, &o.so, n_ctx, w.err, sizeof w.err);
    }
    if (!st) {
        w.ids.n_vocab = s.m->cfg.n_vocab;
        w.tokens = malloc((size_t)o.n_batch * sizeof *w.tokens);
        NM_ASSERT(w.tokens);
        w.logits = engine_logits_buffer(s.e, 1);
        report_info(&s);
        st = run_tests(&w);
    }
    /* Every rank meets the same error (same file, same flags); rank 0 reports it. */
    if (st && s.rank == 0) fprintf(stderr, "error: %s\n", w.err);
    free(w.tokens);
    session_close(&s);
    return st ? 1 : 0;
}

/* ---- collectives ----------------------------------------------------------------------------- */

#ifdef NM_HAVE_MPI
int bench_coll_main(int argc, char **argv); /* tests/bench/bench_coll.c, via bench_coll_main.c */
#endif

int bench_coll_worker_main(int argc, char **argv) {
    const char *op = "all", *max = NULL, *scale = NULL, *transports = NULL, *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--coll-worker")) continue;
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (!strcmp(a, "--op")) op = v;
        else if (!strcmp(a, "--max-size")) max = v;
        else if (!strcmp(a, "--iter-scale")) scale = v;
        else if (!strcmp(a, "--transports")) transports = v;
        else if (!strcmp(a, "-t")) continue; /* threads per rank, from the launcher: unused */
        else {
            fprintf(stderr, "error: unknown option '%s' for the collectives worker\n", a);
            return 1;
        }
    }
#ifdef NM_HAVE_MPI
    char *args[16];
    int n = 0;
    args[n++] = "bench_coll";
    args[n++] = "-o";
    args[n++] = (char *)op;
    if (max) { args[n++] = "-m"; args[n++] = (char *)max; }
    if (scale) { args[n++] = "-i"; args[n++] = (char *)scale; }
    if (transports) { args[n++] = "-t"; args[n++] = (char *)transports; }
    args[n] = NULL;
    return bench_coll_main(n, args);
#else
    (void)op; (void)max; (void)scale; (void)transports;
    fprintf(stderr, "error: numallm was built without MPI: no collectives to benchmark (launcher/setup.sh installs "
                    "Open MPI)\n");
    return 1;
#endif
}
