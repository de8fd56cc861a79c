/* The pipeline stage after the CPU layers (see pipeline.h): local and remote implementations,
 * and the GPU rank's serving loop. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "gpu_stage.h"

/* ---- local: this process drives the GPU -------------------------------------------------- */

static enum nm_status local_eval(void *ctx, const struct stage_batch *b, float *logits, char *err, size_t errlen) {
    return gpu_stage_eval_batch(ctx, b, logits, err, errlen);
}
static enum nm_status local_topk(void *ctx, int n, const struct stage_topk *q, int32_t *ids, float *vals, char *err,
                                 size_t errlen) {
    return gpu_stage_topk(ctx, n, q, ids, vals, err, errlen);
}
static void local_keep(void *ctx, int seq, int64_t n) { gpu_stage_seq_keep(ctx, seq, n); }
/* The counter DESIGN lesson 1 asks for, said when a stage closes (tests look for it). */
static void log_weight_traffic(const struct gpu_stage *g) {
    nm_log_info("GPU: %.1f MiB of weights uploaded at load; weight bytes moved after load: %llu",
                (double)gpu_stage_weight_bytes_uploaded(g) / (1 << 20),
                (unsigned long long)gpu_stage_weight_bytes_after_load(g));
}

static void local_close(void *ctx) {
    log_weight_traffic(ctx);
    gpu_stage_free(ctx);
}

static const struct pipeline_stage_ops k_local_ops = {
    .eval = local_eval,
    .topk = local_topk,
    .keep = local_keep,
    .close = local_close,
    .pinned_logits = true,
};

float *pipeline_logits_get(struct pipeline_logits *b, size_t bytes, bool pinned) {
    if (bytes && bytes <= b->bytes) return b->p;
    if (b->pinned) cuk_host_free(b->p);
    else nm_free(b->p);
    *b = (struct pipeline_logits){.bytes = bytes, .pinned = pinned && bytes <= PIPELINE_PINNED_LOGITS_MAX};
    if (bytes) b->p = b->pinned ? cuk_host_alloc(bytes, "logits") : nm_alloc(bytes, 64, "logits");
    return b->p;
}

struct pipeline_stage pipeline_local(struct gpu_stage *g) {
    return (struct pipeline_stage){.ops = &k_local_ops, .ctx = g};
}

/* ---- remote: the GPU rank of the job ----------------------------------------------------- */

enum pipe_op { PIPE_OPEN = 1, PIPE_EVAL, PIPE_TOPK, PIPE_KEEP, PIPE_CLOSE, PIPE_EXIT };
enum pipe_tag {
    PIPE_TAG_REQ = 40, PIPE_TAG_HIDDEN, PIPE_TAG_REPLY, PIPE_TAG_LOGITS, PIPE_TAG_TOKENS, PIPE_TAG_CANDS, PIPE_TAG_ROWS
};

struct pipe_req {
    int32_t op;     /* enum pipe_op */
    int32_t n;      /* rows (EVAL); n_batch (OPEN); sequence (KEEP) */
    int64_t pos0;   /* positions kept (KEEP), layer_first (OPEN) */
    int64_t n_ctx;  /* OPEN */
    int32_t logits; /* rows asking for logits (EVAL); kv type (OPEN); rows (TOPK) */
    int32_t device; /* OPEN; penalty tokens that follow, all rows' (TOPK) */
    int32_t n_seq;  /* OPEN */
};

/* An EVAL's rows after its hidden states, in one message: seq [n] int32, pos [n] int64, then
 * logits [n] as bytes. */
static size_t rows_bytes(int n) { return (size_t)n * (sizeof(int32_t) + sizeof(int64_t) + 1); }

struct pipe_reply {
    int32_t status; /* enum nm_status */
    char msg[508];
};

/* The GPU rank's answer to a request: its status, and its message when it failed. */
static enum nm_status recv_reply(struct coll *world, int peer, char *err, size_t errlen) {
    struct pipe_reply rep;
    coll_recv(world, &rep, sizeof rep, peer, PIPE_TAG_REPLY);
    if (rep.status == NM_OK) return NM_OK;
    return nm_errf(err, errlen, (enum nm_status)rep.status, "GPU rank: %.*s", (int)sizeof rep.msg, rep.msg);
}

struct remote {
    struct coll *world;
    int peer;
    int64_t n_embd, n_vocab;
};

static enum nm_status remote_eval(void *ctx, const struct stage_batch *b, float *logits, char *err, size_t errlen) {
    struct remote *r = ctx;
    const int n = b->n;
    int asking = 0;
    uint8_t *rows = malloc(rows_bytes(n));
    NM_ASSERT(rows);
    memcpy(rows, b->seq, (size_t)n * sizeof(int32_t));
    memcpy(rows + (size_t)n * sizeof(int32_t), b->pos, (size_t)n * sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        rows[(size_t)n * 12 + (size_t)i] = b->logits[i];
        asking += b->logits[i];
    }
    /* the GPU rank sends back the rows asking only when this side takes them */
    const struct pipe_req q = {.op = PIPE_EVAL, .n = n, .logits = logits ? asking : 0};
    coll_send(r->world, &q, sizeof q, r->peer, PIPE_TAG_REQ);
    coll_send(r->world, b->hidden, (size_t)n * (size_t)r->n_embd * sizeof(float), r->peer, PIPE_TAG_HIDDEN);
    coll_send(r->world, rows, rows_bytes(n), r->peer, PIPE_TAG_ROWS);
    free(rows);
    enum nm_status st = recv_reply(r->world, r->peer, err, errlen);
    if (st) return st;
    if (logits && asking > 0)
        coll_recv(r->world, logits, (size_t)asking * (size_t)r->n_vocab * sizeof(float), r->peer, PIPE_TAG_LOGITS);
    return NM_OK;
}

/* A TOPK's rows on the wire: per row its row, k, token count and penalty; then every row's
 * tokens, one after the other (PIPE_TAG_TOKENS). The answer: all the candidates' ids, then their
 * logits, one message (PIPE_TAG_CANDS). */
struct pipe_topk {
    int32_t row, k, n_tokens;
    float penalty;
};

static enum nm_status remote_topk(void *ctx, int n, const struct stage_topk *q, int32_t *ids, float *vals, char *err,
                                  size_t errlen) {
    struct remote *r = ctx;
    if (n < 1) return NM_OK;
    struct pipe_topk *w = malloc((size_t)n * sizeof *w);
    NM_ASSERT(w);
    int64_t n_tok = 0, n_cand = 0;
    for (int i = 0; i < n; i++) {
        w[i] = (struct pipe_topk){.row = q[i].row, .k = q[i].k, .n_tokens = q[i].n_tokens, .penalty = q[i].penalty};
        n_tok += q[i].n_tokens;
        n_cand += q[i].k;
    }
    int32_t *tokens = malloc((size_t)NM_MAX(n_tok, 1) * sizeof *tokens);
    NM_ASSERT(tokens && n_tok < INT32_MAX);
    for (int i = 0, at = 0; i < n; at += q[i].n_tokens, i++)
        if (q[i].n_tokens) memcpy(tokens + at, q[i].tokens, (size_t)q[i].n_tokens * sizeof *tokens);
    const struct pipe_req req = {.op = PIPE_TOPK, .logits = n, .device = (int32_t)n_tok};
    coll_send(r->world, &req, sizeof req, r->peer, PIPE_TAG_REQ);
    coll_send(r->world, w, (size_t)n * sizeof *w, r->peer, PIPE_TAG_ROWS);
    coll_send(r->world, tokens, (size_t)n_tok * sizeof *tokens, r->peer, PIPE_TAG_TOKENS);
    free(w);
    free(tokens);
    enum nm_status st = recv_reply(r->world, r->peer, err, errlen);
    if (st) return st;
    uint8_t *buf = malloc((size_t)n_cand * 8);
    NM_ASSERT(buf);
    coll_recv(r->world, buf, (size_t)n_cand * 8, r->peer, PIPE_TAG_CANDS);
    memcpy(ids, buf, (size_t)n_cand * 4);
    memcpy(vals, buf + (size_t)n_cand * 4, (size_t)n_cand * 4);
    free(buf);
    return NM_OK;
}

static void remote_keep(void *ctx, int seq, int64_t n) {
    struct remote *r = ctx;
    const struct pipe_req q = {.op = PIPE_KEEP, .n = seq, .pos0 = n};
    coll_send(r->world, &q, sizeof q, r->peer, PIPE_TAG_REQ);
}

static void remote_close(void *ctx) {
    struct remote *r = ctx;
    const struct pipe_req q = {.op = PIPE_CLOSE};
    coll_send(r->world, &q, sizeof q, r->peer, PIPE_TAG_REQ);
    free(r);
}

static const struct pipeline_stage_ops k_remote_ops = {
    .eval = remote_eval,
    .topk = remote_topk,
    .keep = remote_keep,
    .close = remote_close,
};

enum nm_status pipeline_remote_open(struct pipeline_stage *out, struct coll *world, int peer,
                                    const struct gpu_stage_params *p, const struct model_config *cfg, char *err,
                                    size_t errlen) {
    *out = (struct pipeline_stage){0};
    const struct pipe_req q = {.op = PIPE_OPEN, .n = p->n_batch, .pos0 = p->layer_first, .n_ctx = p->n_ctx,
                               .logits = (int32_t)p->kv_type, .device = p->device, .n_seq = p->n_seq};
    coll_send(world, &q, sizeof q, peer, PIPE_TAG_REQ);
    enum nm_status st = recv_reply(world, peer, err, errlen);
    if (st) return st;
    struct remote *r = calloc(1, sizeof *r);
    NM_ASSERT(r);
    *r = (struct remote){.world = world, .peer = peer, .n_embd = cfg->n_embd, .n_vocab = cfg->n_vocab};
    *out = (struct pipeline_stage){.ops = &k_remote_ops, .ctx = r};
    return NM_OK;
}

void pipeline_remote_exit(struct coll *world, int peer) {
    const struct pipe_req q = {.op = PIPE_EXIT};
    coll_send(world, &q, sizeof q, peer, PIPE_TAG_REQ);
}

void pipeline_serve(struct coll *world, int peer, const struct gguf_file *f, const struct model_config *cfg) {
    const int64_t n_embd = cfg->n_embd, n_vocab = cfg->n_vocab;
    struct gpu_stage *g = NULL;
    float *hidden = NULL;
    uint8_t *rows = NULL;
    int cap = 0;
    struct pipeline_logits lb = {0};
    for (;;) {
        struct pipe_req q;
        coll_recv(world, &q, sizeof q, peer, PIPE_TAG_REQ);
        if (q.op == PIPE_EXIT) break;
        struct pipe_reply rep = {0};
        switch (q.op) {
        case PIPE_OPEN: {
            if (g) log_weight_traffic(g);
            gpu_stage_free(g);
            g = NULL;
            const struct gpu_stage_params p = {.device = q.device, .layer_first = q.pos0, .n_ctx = q.n_ctx,
                                               .n_batch = q.n, .kv_type = (enum dtype)q.logits, .n_seq = q.n_seq};
            rep.status = (int32_t)gpu_stage_open(&g, f, cfg, &p, rep.msg, sizeof rep.msg);
            coll_send(world, &rep, sizeof rep, peer, PIPE_TAG_REPLY);
            break;
        }
        case PIPE_CLOSE:
            if (g) log_weight_traffic(g);
            gpu_stage_free(g);
            g = NULL;
            break;
        case PIPE_TOPK: {
            NM_ASSERT(g && q.logits > 0 && q.device >= 0);
            const int n = q.logits;
            struct pipe_topk *w = malloc((size_t)n * sizeof *w);
            struct stage_topk *sq = malloc((size_t)n * sizeof *sq);
            int32_t *tokens = malloc((size_t)(q.device + 1) * sizeof *tokens);
            NM_ASSERT(w && sq && tokens);
            coll_recv(world, w, (size_t)n * sizeof *w, peer, PIPE_TAG_ROWS);
            coll_recv(world, tokens, (size_t)q.device * sizeof *tokens, peer, PIPE_TAG_TOKENS);
            int64_t n_cand = 0, at = 0;
            for (int i = 0; i < n; i++) {
                NM_ASSERT(w[i].k > 0 && w[i].n_tokens >= 0 && at + w[i].n_tokens <= q.device);
                sq[i] = (struct stage_topk){.row = w[i].row, .k = w[i].k, .n_tokens = w[i].n_tokens,
                                            .tokens = tokens + at, .penalty = w[i].penalty};
                at += w[i].n_tokens;
                n_cand += w[i].k;
            }
            uint8_t *buf = malloc((size_t)n_cand * 8);
            NM_ASSERT(buf);
            rep.status = (int32_t)gpu_stage_topk(g, n, sq, (int32_t *)(void *)buf,
                                                 (float *)(void *)(buf + (size_t)n_cand * 4), rep.msg, sizeof rep.msg);
            coll_send(world, &rep, sizeof rep, peer, PIPE_TAG_REPLY);
            if (rep.status == NM_OK) coll_send(world, buf, (size_t)n_cand * 8, peer, PIPE_TAG_CANDS);
            free(w);
            free(sq);
            free(tokens);
            free(buf);
            break;
        }
        case PIPE_KEEP:
            NM_ASSERT(g);
            gpu_stage_seq_keep(g, q.n, q.pos0);
            break;
        case PIPE_EVAL: {
            NM_ASSERT(g && q.n > 0 && q.logits >= 0 && q.logits <= q.n);
            if (q.n > cap) {
                nm_free(hidden);
                free(rows);
                cap = q.n;
                hidden = nm_alloc((size_t)cap * (size_t)n_embd * sizeof(float), 64, "GPU rank hidden states");
                rows = malloc(rows_bytes(cap));
                NM_ASSERT(rows);
            }
            coll_recv(world, hidden, (size_t)q.n * (size_t)n_embd * sizeof(float), peer, PIPE_TAG_HIDDEN);
            coll_recv(world, rows, rows_bytes(q.n), peer, PIPE_TAG_ROWS);
            int32_t *seq = malloc((size_t)q.n * sizeof *seq);
            int64_t *pos = malloc((size_t)q.n * sizeof *pos);
            bool *ask = malloc((size_t)q.n);
            NM_ASSERT(seq && pos && ask);
            memcpy(seq, rows, (size_t)q.n * sizeof *seq);
            memcpy(pos, rows + (size_t)q.n * sizeof *seq, (size_t)q.n * sizeof *pos);
            for (int i = 0; i < q.n; i++) ask[i] = rows[(size_t)q.n * 12 + (size_t)i] != 0;
            const struct stage_batch b = {.n = q.n, .hidden = hidden, .seq = seq, .pos = pos, .logits = ask};
            float *logits = q.logits ? pipeline_logits_get(&lb, (size_t)q.logits * (size_t)n_vocab * sizeof(float), true) : NULL;
            rep.status = (int32_t)gpu_stage_eval_batch(g, &b, logits, rep.msg, sizeof rep.msg);
            free(seq);
            free(pos);
            free(ask);
            coll_send(world, &rep, sizeof rep, peer, PIPE_TAG_REPLY);
            if (rep.status != NM_OK) nm_fatal("GPU rank: %s", rep.msg);
            if (q.logits > 0)
                coll_send(world, logits, (size_t)q.logits * (size_t)n_vocab * sizeof(float), peer, PIPE_TAG_LOGITS);
            break;
        }
        default: nm_fatal("GPU rank: unknown pipeline request %d from rank %d", (int)q.op, peer);
        }
    }
    pipeline_logits_get(&lb, 0, false);
    gpu_stage_free(g);
    nm_free(hidden);
    free(rows);
}
