/* Rank start-up shared by run, chat and perplexity (see session.h). */
#include "session.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "coll.h"
#include "cpu.h"
#include "gpu_stage.h"
#include "layout.h"
#include "pipeline.h"

static void print_model(const struct session *s) {
    const struct model *m = s->m;
    const struct model_config *c = &m->cfg;
    const struct shard *sh = &m->shard;
    uint64_t pages;
    const double local = arena_local_fraction(m->arena, &pages);
    char where[80] = "the kernel cannot tell where its pages are";
    if (local >= 0)
        snprintf(where, sizeof where, "%.1f%% of %llu pages on node %d", 100 * local, (unsigned long long)pages,
                 arena_node(m->arena));
    char vocab[48] = "none (the head is on the GPU)";
    if (range_len(sh->vocab) > 0)
        snprintf(vocab, sizeof vocab, "%lld-%lld", (long long)sh->vocab.begin, (long long)sh->vocab.end - 1);
    nm_log_info("shard %d/%d: heads %lld-%lld, KV heads %lld-%lld, n_ff %lld-%lld, vocab %s; loaded %.1f MiB "
                "in %.2f s (%.2f GB/s), %s",
                sh->rank, sh->nranks, (long long)sh->q_heads.begin, (long long)sh->q_heads.end - 1,
                (long long)sh->kv_heads.begin, (long long)sh->kv_heads.end - 1, (long long)sh->ff.begin,
                (long long)sh->ff.end - 1, vocab,
                (double)m->loaded_bytes / (1 << 20), m->load_seconds,
                (double)m->loaded_bytes / 1e9 / NM_MAX(m->load_seconds, 1e-9), where);
    if (s->rank != 0) return;
    char desc[128];
    model_describe(m, desc, sizeof desc);
    nm_log_info("model: %s (%s), %.2f GiB, %.2fB params", desc, m->path, (double)m->weight_bytes / (1 << 30),
                (double)m->n_params / 1e9);
    nm_log_info("  n_vocab %lld, n_embd %lld, n_layer %lld, n_ff %lld, n_head %lld, n_head_kv %lld, head_dim %lld, "
                "n_rot %lld, rope %s base %g scale %g%s, rms_eps %g",
                (long long)c->n_vocab, (long long)c->n_embd, (long long)c->n_layer, (long long)c->n_ff,
                (long long)c->n_head, (long long)c->n_head_kv, (long long)c->head_dim, (long long)c->n_rot,
                c->rope_type == ROPE_TYPE_NEOX ? "neox" : "norm", c->rope_freq_base, c->rope_freq_scale,
                m->rope_freqs ? " with rope_freqs" : "", c->rms_eps);
    nm_log_info("  ranks %d (%s), threads %d per rank, kernels %s; layers 0-%lld on the CPU ranks%s", s->nranks,
                coll_transport_name(s->coll), pool_size(s->pool), kern_isa_get()->name,
                (long long)m->n_layer_local - 1, m->head_remote ? ", the rest and the head on the GPU" : "");
}

/* The layout of every tensor class this rank holds (layout.h), as the loader chose it; with
 * --strict a downgrade (a better layout this CPU cannot run) is an error. */
static enum nm_status check_layouts(const struct session *s, bool strict, char *err, size_t errlen) {
    const struct model *m = s->m;
    struct layout_tensor_class cls[16];
    int n = 0;
    cls[n++] = (struct layout_tensor_class){"token_embd", TENSOR_USE_ROWS, m->tok_embd.type};
    cls[n++] = (struct layout_tensor_class){"norms, biases", TENSOR_USE_VECTOR, DTYPE_F32};
    if (m->n_layer_local > 0) {
        const struct layer_weights *L = &m->layers[0];
        cls[n++] = (struct layout_tensor_class){"blk.*.attn_q", TENSOR_USE_MATMUL, L->wq.type};
        cls[n++] = (struct layout_tensor_class){"blk.*.attn_k", TENSOR_USE_MATMUL, L->wk.type};
        cls[n++] = (struct layout_tensor_class){"blk.*.attn_v", TENSOR_USE_MATMUL, L->wv.type};
        cls[n++] = (struct layout_tensor_class){"blk.*.attn_output", TENSOR_USE_MATMUL, L->wo.type};
        if (m->cfg.n_expert > 0) {
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_gate_inp", TENSOR_USE_MATMUL, L->router.type};
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_gate_exps", TENSOR_USE_MATMUL, L->gate_exps[0].type};
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_up_exps", TENSOR_USE_MATMUL, L->up_exps[0].type};
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_down_exps", TENSOR_USE_MATMUL, L->down_exps[0].type};
        } else {
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_gate", TENSOR_USE_MATMUL, L->w_gate.type};
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_up", TENSOR_USE_MATMUL, L->w_up.type};
            cls[n++] = (struct layout_tensor_class){"blk.*.ffn_down", TENSOR_USE_MATMUL, L->w_down.type};
        }
    }
    if (!m->head_remote) cls[n++] = (struct layout_tensor_class){"output", TENSOR_USE_MATMUL, m->output.type};
    const struct cpu_features *cpu = layout_cpu();
    const int level = nm_log_level;
    if (s->rank != 0) nm_log_level = 0; /* one table: every rank of a host plans the same */
    char why[512] = "";
    const int downgrades = layout_report(cls, n, cpu, why, sizeof why);
    nm_log_level = level;
    if (downgrades > 0 && strict)
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "--strict: a weight layout is downgraded: %s", why);
    return NM_OK;
}

int session_launch(struct launch_request *req, struct session_opts *so) {
    static char default_path[4200];
    if (!req->model) {
        struct pool *pool = cli_pool(0);
        const bool ok = cli_default_model(default_path, sizeof default_path, pool);
        pool_free(pool);
        if (!ok) return 1;
        req->model = default_path;
    }
    req->strict = so->strict;
    switch (launch_decide(req, &so->launch)) {
    case LAUNCH_MODE_DONE: return 0;
    case LAUNCH_MODE_ERROR: return 1;
    case LAUNCH_MODE_IN_PROCESS: break;
    }
    so->model = req->model;
    so->n_threads = so->launch.n_threads;
    if (so->launch.role == RANK_ROLE_GPU) return session_serve_gpu(so);
    return -1;
}

/* The start-up checks of this rank (binding, NUMA balancing, huge pages, AMX, node memory),
 * with the bytes of its shard computed from the file before anything is loaded. */
static void run_checks(const struct session *s, const struct session_opts *o) {
    uint64_t bytes = 0;
    struct gguf_file *f;
    struct model_config c;
    if (gguf_open(o->model, &f, NULL, 0) == NM_OK) {
        const int level = nm_log_level;
        nm_log_level = 0; /* the load below reports the configuration's defaults once */
        const enum nm_status st = model_config_read(f, &c, NULL, 0);
        nm_log_level = level;
        if (st == NM_OK &&
            shard_weight_bytes(f, &c, s->rank, s->nranks, &bytes, NULL, 0) != NM_OK)
            bytes = 0;
        gguf_close(f);
    }
    struct launch_decision d = o->launch;
    d.rank = s->rank;
    d.nranks = s->nranks;
    struct checks_input in;
    launch_checks_input(&d, bytes, o->strict, &in);
    checks_run_and_print(&in);
}

enum nm_status session_open(struct session *s, const struct session_opts *o, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    NM_ASSERT(o->model);
    struct coll_options co = {.strict = o->strict};
    if (o->launch.role == RANK_ROLE_CPU_OF_PIPELINE) {
        /* The whole job first (every rank, the GPU rank too, creates it), then the CPU ranks'. */
        struct coll_options wo = {.strict = o->strict, .quiet = true};
        s->world = coll_init(&wo);
        coll_set_timeout(s->world, 3600); /* the GPU rank may be loading or evaluating a long prompt */
        co.group = 1;
    }
    s->coll = coll_init(&co);
    s->rank = coll_rank(s->coll);
    s->nranks = coll_size(s->coll);
    if (o->on_rank) o->on_rank(o->on_rank_ctx, s->rank);
    run_checks(s, o);
    s->pool = cli_pool((int)o->n_threads);
    const double timeout = coll_timeout(s->coll);
    const char *path = o->model;
    /* Loading is unbalanced between ranks (page cache, node speed): wait longer meanwhile. */
    coll_set_timeout(s->coll, 600);
    const double t0 = nm_time_s();
    struct model_load_params lp = {.rank = s->rank, .nranks = s->nranks, .pool = s->pool, .coll = s->coll,
                                   .n_gpu_layers = o->launch.n_gpu_layers};
    enum nm_status st = model_load(path, &lp, &s->m, err, errlen);
    if (st) return st;
    s->t_load = nm_time_s() - t0;
    coll_barrier(s->coll);
    coll_set_timeout(s->coll, timeout);
    print_model(s);
    if ((st = check_layouts(s, o->strict, err, errlen))) return st;
    char terr[512];
    if (tok_init(&s->tok, s->m->file, terr, sizeof terr) != NM_OK) {
        s->tok = NULL;
        if (s->rank == 0) nm_log_warn("no tokenizer: %s (prompts must be given as ids with --tokens)", terr);
    }
    return NM_OK;
}

enum nm_status session_engine(struct session *s, const struct session_opts *o, int64_t n_ctx, char *err,
                              size_t errlen) {
    struct engine_params ep = {.n_ctx = n_ctx, .n_seq = o->n_seq, .n_batch = o->n_batch, .kv_type = o->kv_type};
    enum nm_status st = NM_OK;
    const double timeout = coll_timeout(s->coll);
    coll_set_timeout(s->coll, 600); /* the other ranks wait while rank 0's stage uploads its weights */
    if (s->m->head_remote && s->rank == 0) {
        const struct gpu_stage_params gp = {.device = 0, .layer_first = s->m->n_layer_local, .n_ctx = n_ctx,
                                            .n_batch = o->n_batch, .kv_type = o->kv_type, .n_seq = o->n_seq};
        if (s->world) {
            st = pipeline_remote_open(&ep.stage, s->world, o->launch.gpu_rank, &gp, &s->m->cfg, err, errlen);
        } else {
            struct gpu_stage *g;
            if (!(st = gpu_stage_open(&g, s->m->file, &s->m->cfg, &gp, err, errlen))) ep.stage = pipeline_local(g);
        }
    }
    /* Every CPU rank learns whether rank 0's stage opened, so that none waits alone. */
    int32_t ok = st == NM_OK;
    coll_bcast(s->coll, &ok, sizeof ok, 0);
    coll_set_timeout(s->coll, timeout);
    if (!ok) return st ? st : nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "rank 0 could not open the GPU stage (see its message)");
    if ((st = engine_init(&s->e, s->m, s->pool, s->coll, &ep, err, errlen))) pipeline_close(&ep.stage);
    return st;
}

void session_close(struct session *s) {
    engine_free(s->e); /* closes rank 0's GPU stage */
    tok_free(s->tok);
    model_free(s->m);
    pool_free(s->pool);
    coll_free(s->coll);
    if (s->world) {
        if (coll_rank(s->world) == 0) pipeline_remote_exit(s->world, coll_size(s->world) - 1);
        coll_free(s->world);
    }
    memset(s, 0, sizeof *s);
}

int session_serve_gpu(const struct session_opts *o) {
    struct coll_options wo = {.strict = o->strict, .quiet = true};
    struct coll *world = coll_init(&wo);
    struct coll_options go = {.strict = o->strict, .quiet = true, .group = 2};
    struct coll *alone = coll_init(&go); /* pairs with the CPU ranks' split into their own group */
    coll_set_timeout(world, 1e6);        /* requests come when a user types (chat) */
    /* The GPU rank stops when rank 0 says so (PIPE_EXIT): a SIGINT/SIGTERM that mpirun forwards to
     * every process is rank 0's to act on (a server finishes its requests first, then closes the
     * stage); had it ended this rank, mpirun would have killed the job under rank 0's feet. A job
     * whose CPU ranks die still ends: mpirun kills the rest. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    nm_log_set_origin("gpu");
    const int node = o->launch.gpu_node;
    if (node >= 0 && arena_bind_process_to_node(node))
        nm_log_info("GPU rank: world rank %d, bound to NUMA node %d, the GPU's (hwloc)", coll_rank(world), node);
    else
        nm_log_warn("GPU rank: world rank %d, not bound to the GPU's NUMA node (%s)", coll_rank(world),
                    node < 0 ? "hwloc did not place the GPU" : "libnuma refused");
    char err[1024];
    struct gguf_file *f = NULL;
    struct model_config cfg;
    enum nm_status st = gguf_open(o->model, &f, err, sizeof err);
    if (!st) st = model_config_read(f, &cfg, err, sizeof err);
    if (st) nm_fatal("GPU rank: %s", err); /* the CPU ranks read the same file: they stop too */
    pipeline_serve(world, 0, f, &cfg);
    gguf_close(f);
    coll_free(alone);
    coll_free(world);
    return 0;
}

enum nm_status session_tokenize(const struct session *s, const char *text, size_t len, bool add_special,
                                int32_t **ids, size_t *n, char *err, size_t errlen) {
    if (!s->tok)
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s has no usable tokenizer: give the prompt as ids with --tokens",
                       s->m->path);
    *ids = tok_encode_alloc(s->tok, text, len, add_special, true, n);
    return NM_OK;
}

void session_bcast_text(struct session *s, char **buf, size_t *len) {
    uint64_t n = s->rank == 0 ? *len : 0;
    coll_bcast(s->coll, &n, sizeof n, 0);
    if (s->rank != 0) {
        free(*buf);
        *buf = malloc(n + 1);
        NM_ASSERT(*buf);
        *len = n;
    }
    coll_bcast(s->coll, *buf, n, 0);
    (*buf)[n] = 0;
}

char *session_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    const bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf || bad) {
        free(buf);
        if (!bad) errno = ENOMEM;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
