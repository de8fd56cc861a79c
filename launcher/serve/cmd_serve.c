/* numallm serve: an OpenAI-compatible HTTP server with continuous batching (DESIGN.md,
 * "Serving"). Every rank of the job runs this command: rank 0 listens (http.c) and schedules
 * (sched.c), every rank runs the engine loop. SIGINT or SIGTERM stops it cleanly: running
 * requests end, the other ranks are told, the listener closes. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cli.h"
#include "coll.h"
#include "http.h"
#include "scheduler.h"
#include "session.h"

struct serve_opts {
    struct session_opts so;
    struct launch_request launch;
    struct serve_http_params hp;
    const char *chat_template;
    const char *alias;
    long long n_ctx;
    int n_slots;
    int max_queue;
};

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: numallm serve [-m MODEL.gguf] [--host ADDR] [--port N] [-np SLOTS] [-c CTX] [-b BATCH]\n"
            "                     [-t THREADS] [--ranks auto|N] [-ngl N] [-ctk f16|f32] [--chat-template NAME]\n"
            "                     [--api-key KEY] [--alias NAME] [--max-queue N] [-to SECONDS] [--strict]\n"
            "\n"
            "  an OpenAI-compatible server: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize;\n"
            "  GET /v1/models, /health (503 while loading), /metrics (Prometheus)\n"
            "\n"
            "  -m, --model        GGUF model (default: the synthetic model of numallm run)\n"
            "  --host ADDR        address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
            "  --port N           TCP port (default 8080)\n"
            "  -np, --parallel N  slots: requests generated at once, batched together (default 4)\n"
            "  -c, --ctx-size N   KV cache positions in all, divided among the slots (default 4096 per slot,\n"
            "                     at most the model's context)\n"
            "  -b, --batch-size N rows per forward pass: one per generating slot, the rest prompt pieces\n"
            "                     (default 512)\n"
            "  -ctk, --cache-type KV cache type, f16 (default) or f32\n"
            "  --chat-template    auto (from the file), chatml, llama3 or llama2\n"
            "  --api-key KEY      require \"Authorization: Bearer KEY\" (every route but /health)\n"
            "  --alias NAME       the model's name in responses (default: the file name)\n"
            "  --max-queue N      requests waiting for a slot before 503 (default 256)\n"
            "  -to, --timeout N   close a connection idle N seconds: no request bytes coming, or a short\n"
            "                     response not being read; not one that runs a completion (default 600;\n"
            "                     0: never)\n"
            "  --strict           a failed start-up check or any downgrade is an error\n"
            "%s",
            launch_flags_help());
}

static int parse_serve(int argc, char **argv, struct serve_opts *o) {
    *o = (struct serve_opts){.so = {.n_batch = 512, .kv_type = DTYPE_F16},
                             .hp = {.host = "127.0.0.1", .port = 8080, .timeout_s = 600},
                             .chat_template = "auto", .n_slots = 4, .max_queue = 256};
    launch_request_init(&o->launch, argc, argv);
    long long ll;
    const char *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int lr = launch_parse_flag(argc, argv, &i, &o->launch); /* --ranks, -t, -ngl, ... */
        if (lr < 0) return 1;
        if (lr > 0) continue;
#define IS(x) (strcmp(a, x) == 0)
        if (IS("-h") || IS("--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (IS("--strict")) { o->so.strict = true; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (IS("-m") || IS("--model")) o->launch.model = v;
        else if (IS("--host")) o->hp.host = v;
        else if (IS("--port")) { if (!cli_int(a, v, 1, 65535, &ll)) return 1; o->hp.port = (int)ll; }
        else if (IS("-np") || IS("--parallel")) { if (!cli_int(a, v, 1, 256, &ll)) return 1; o->n_slots = (int)ll; }
        else if (IS("-c") || IS("--ctx-size")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_ctx)) return 1; }
        else if (IS("-b") || IS("--batch-size") || IS("-ub") || IS("--ubatch-size")) {
            if (!cli_int(a, v, 1, 1 << 16, &ll)) return 1;
            o->so.n_batch = (int)ll;
        } else if (IS("-ctk") || IS("-ctv") || IS("--cache-type") || IS("--cache-type-k") || IS("--cache-type-v")) {
            if (strcmp(v, "f16") == 0) o->so.kv_type = DTYPE_F16;
            else if (strcmp(v, "f32") == 0) o->so.kv_type = DTYPE_F32;
            else {
                fprintf(stderr, "error: invalid value '%s' for %s: expected f16 or f32\n", v, a);
                return 1;
            }
        } else if (IS("--chat-template")) o->chat_template = v;
        else if (IS("--api-key")) o->hp.api_key = v;
        else if (IS("--alias") || IS("-a")) o->alias = v;
        else if (IS("--max-queue")) { if (!cli_int(a, v, 0, 1 << 20, &ll)) return 1; o->max_queue = (int)ll; }
        else if (IS("--timeout") || IS("-to")) { if (!cli_int(a, v, 0, 1 << 30, &ll)) return 1; o->hp.timeout_s = (unsigned)ll; }
        else {
            fprintf(stderr, "error: unknown option '%s' for serve (numallm serve --help lists them)\n", a);
            return 1;
        }
#undef IS
    }
    o->so.n_seq = o->n_slots;
    return -1;
}

/* ---- start-up and signals ----------------------------------------------------------------- */

static struct serve_sched *volatile g_sched; /* set once the loop may start */
static volatile sig_atomic_t g_stop;          /* a signal came before the scheduler existed */

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
    if (g_sched) serve_sched_stop(g_sched);
}

struct listen_ctx {
    const struct serve_opts *o;
    struct serve_http *http;
    enum nm_status st;
    char err[512];
};

/* session_open's hook: rank 0 listens before the model loads (GET /health answers 503). */
static void listen_on_rank0(void *ctx, int rank) {
    struct listen_ctx *l = ctx;
    if (rank != 0) return;
    l->st = serve_http_start(&l->http, &l->o->hp, l->err, sizeof l->err);
    if (!l->st) nm_log_info("serve: listening on http://%s:%d%s", l->o->hp.host, l->o->hp.port,
                            l->o->hp.api_key ? " (API key required)" : "");
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static enum nm_status serve(struct session *s, const struct serve_opts *o, struct listen_ctx *l, char *err,
                            size_t errlen) {
    const struct model_config *c = &s->m->cfg;
    /* Every rank learns whether rank 0 listens, so that none waits alone. */
    int32_t ok = l->st == NM_OK;
    coll_bcast(s->coll, &ok, sizeof ok, 0);
    if (!ok) return s->rank == 0 ? nm_errf(err, errlen, l->st, "%s", l->err)
                                 : nm_errf(err, errlen, NM_ERR_IO, "rank 0 cannot listen");
    const int64_t n_ctx = o->n_ctx > 0 ? o->n_ctx : NM_MIN(c->n_ctx_train, 4096) * o->n_slots;
    enum nm_status st = session_engine(s, &o->so, n_ctx, err, errlen);
    if (st) return st;
    struct api_model am = {.tok = s->tok, .n_vocab = c->n_vocab, .name = o->alias ? o->alias : base_name(s->m->path)};
    if (s->rank == 0) {
        char terr[512];
        if (!s->tok) nm_log_warn("serve: the model has no tokenizer: only /v1/completions with token ids works");
        else if (chat_template_resolve(o->chat_template, s->m->file, &am.tmpl, terr, sizeof terr) == NM_OK)
            am.have_tmpl = true;
        else
            nm_log_warn("serve: no chat template (%s): /v1/chat/completions answers 400", terr);
        if (am.have_tmpl) nm_log_info("serve: chat template %s", chat_template_name(am.tmpl));
    }
    const struct serve_sched_params sp = {.n_slots = o->n_slots, .n_batch = o->so.n_batch, .max_queue = o->max_queue};
    struct serve_sched *sc = serve_sched_init(s, &sp);
    if (s->rank == 0) {
        nm_log_info("serve: %d slots of %lld positions, batches of up to %d rows; ready", o->n_slots,
                    (long long)engine_n_ctx(s->e), NM_MAX(o->so.n_batch, o->n_slots));
        serve_http_ready(l->http, sc, &am);
    }
    g_sched = sc;
    if (g_stop) serve_sched_stop(sc);
    serve_sched_run(sc); /* until SIGINT/SIGTERM on rank 0 */
    g_sched = NULL;
    if (s->rank == 0) {
        serve_http_stop(l->http); /* every request has finished: the connection threads end */
        l->http = NULL;
    }
    nm_log_info("serve: stopped");
    serve_sched_free(sc);
    return NM_OK;
}

int cmd_serve(int argc, char **argv) {
    struct serve_opts o;
    int rc = parse_serve(argc, argv, &o);
    if (rc >= 0) return rc;
    if ((rc = session_launch(&o.launch, &o.so)) >= 0) return rc;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone: its writes fail, the process stays */
    struct listen_ctx l = {.o = &o};
    o.so.on_rank = listen_on_rank0;
    o.so.on_rank_ctx = &l;
    struct session s;
    char err[1024];
    enum nm_status st = session_open(&s, &o.so, err, sizeof err);
    if (!st) st = serve(&s, &o, &l, err, sizeof err);
    if (st && s.rank == 0) fprintf(stderr, "error: %s\n", err);
    serve_http_stop(l.http);
    session_close(&s);
    return st ? 1 : 0;
}
