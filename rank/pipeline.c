/* The pipeline stage after the CPU layers (see pipeline.h): local and remote implementations,
 * and the GPU rank's serving loop. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "gpu_stage.h"

/* ---- local: this process drives the GPU -------------------------------------------------- */

static enum nm_status local_eval(void *ctx, const float *hidden, int n, int64_t pos0, bool logits_all, float *logits,
                                 char *err, size_t errlen) {
    return gpu_stage_eval(ctx, hidden, n, pos0, logits_all, logits, err, errlen);
}
static enum nm_status local_topk(void *ctx, int k, const int32_t *tokens, int n_tokens, float penalty, int32_t *ids,
                                 float *vals, char *err, size_t errlen) {
    return gpu_stage_topk(ctx, k, tokens, n_tokens, penalty, ids, vals, err, errlen);
}
static void local_truncate(void *ctx, int64_t n_past) { gpu_stage_truncate(ctx, n_past); }
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
    .truncate = local_truncate,
    .close = local_close,
};

struct pipeline_stage pipeline_local(struct gpu_stage *g) {
    return (struct pipeline_stage){.ops = &k_local_ops, .ctx = g};
}

/* ---- remote: the GPU rank of the job ----------------------------------------------------- */

enum pipe_op { PIPE_OPEN = 1, PIPE_EVAL, PIPE_TOPK, PIPE_TRUNCATE, PIPE_CLOSE, PIPE_EXIT };
enum pipe_tag { PIPE_TAG_REQ = 40, PIPE_TAG_HIDDEN, PIPE_TAG_REPLY, PIPE_TAG_LOGITS, PIPE_TAG_TOKENS, PIPE_TAG_CANDS };
enum pipe_logits { PIPE_LOGITS_NONE = 0, PIPE_LOGITS_LAST = 1, PIPE_LOGITS_ALL = 2 };

struct pipe_req {
    int32_t op;     /* enum pipe_op */
    int32_t n;      /* tokens (EVAL); n_batch (OPEN) */
    int64_t pos0;   /* first position (EVAL), n_past (TRUNCATE), layer_first (OPEN) */
    int64_t n_ctx;  /* OPEN */
    int32_t logits; /* enum pipe_logits (EVAL); kv type (OPEN); k (TOPK) */
    int32_t device; /* OPEN; penalty tokens that follow (TOPK) */
    float penalty;  /* TOPK */
    int32_t pad;
};

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

static enum nm_status remote_eval(void *ctx, const float *hidden, int n, int64_t pos0, bool logits_all, float *logits,
                                  char *err, size_t errlen) {
    struct remote *r = ctx;
    const struct pipe_req q = {.op = PIPE_EVAL, .n = n, .pos0 = pos0,
                               .logits = !logits ? PIPE_LOGITS_NONE : logits_all ? PIPE_LOGITS_ALL : PIPE_LOGITS_LAST};
    coll_send(r->world, &q, sizeof q, r->peer, PIPE_TAG_REQ);
    coll_send(r->world, hidden, (size_t)n * (size_t)r->n_embd * sizeof(float), r->peer, PIPE_TAG_HIDDEN);
    enum nm_status st = recv_reply(r->world, r->peer, err, errlen);
    if (st) return st;
    if (logits) {
        const size_t rows = logits_all ? (size_t)n : 1;
        coll_recv(r->world, logits, rows * (size_t)r->n_vocab * sizeof(float), r->peer, PIPE_TAG_LOGITS);
    }
    return NM_OK;
}

/* k candidates: ids then logits, one message. */
static enum nm_status remote_topk(void *ctx, int k, const int32_t *tokens, int n_tokens, float penalty, int32_t *ids,
                                  float *vals, char *err, size_t errlen) {
    struct remote *r = ctx;
    const struct pipe_req q = {.op = PIPE_TOPK, .logits = k, .device = n_tokens, .penalty = penalty};
    coll_send(r->world, &q, sizeof q, r->peer, PIPE_TAG_REQ);
    coll_send(r->world, tokens, (size_t)n_tokens * sizeof *tokens, r->peer, PIPE_TAG_TOKENS);
    enum nm_status st = recv_reply(r->world, r->peer, err, errlen);
    if (st) return st;
    uint8_t *buf = malloc((size_t)k * 8);
    NM_ASSERT(buf);
    coll_recv(r->world, buf, (size_t)k * 8, r->peer, PIPE_TAG_CANDS);
    memcpy(ids, buf, (size_t)k * 4);
    memcpy(vals, buf + (size_t)k * 4, (size_t)k * 4);
    free(buf);
    return NM_OK;
}

static void remote_truncate(void *ctx, int64_t n_past) {
    struct remote *r = ctx;
    const struct pipe_req q = {.op = PIPE_TRUNCATE, .pos0 = n_past};
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
    .truncate = remote_truncate,
    .close = remote_close,
};

enum nm_status pipeline_remote_open(struct pipeline_stage *out, struct coll *world, int peer,
                                    const struct gpu_stage_params *p, const struct model_config *cfg, char *err,
                                    size_t errlen) {
    *out = (struct pipeline_stage){0};
    const struct pipe_req q = {.op = PIPE_OPEN, .n = p->n_batch, .pos0 = p->layer_first, .n_ctx = p->n_ctx,
                               .logits = (int32_t)p->kv_type, .device = p->device};
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
    float *hidden = NULL, *logits = NULL;
    int cap = 0;
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
                                               .n_batch = q.n, .kv_type = (enum dtype)q.logits};
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
            const int k = q.logits;
            int32_t *tokens = malloc((size_t)(q.device + 1) * sizeof *tokens);
            uint8_t *buf = malloc((size_t)k * 8);
            NM_ASSERT(tokens && buf);
            coll_recv(world, tokens, (size_t)q.device * sizeof *tokens, peer, PIPE_TAG_TOKENS);
            rep.status = (int32_t)gpu_stage_topk(g, k, tokens, q.device, q.penalty, (int32_t *)(void *)buf,
                                                 (float *)(void *)(buf + (size_t)k * 4), rep.msg, sizeof rep.msg);
            coll_send(world, &rep, sizeof rep, peer, PIPE_TAG_REPLY);
            if (rep.status == NM_OK) coll_send(world, buf, (size_t)k * 8, peer, PIPE_TAG_CANDS);
            free(tokens);
            free(buf);
            break;
        }
        case PIPE_TRUNCATE:
            NM_ASSERT(g);
            gpu_stage_truncate(g, q.pos0);
            break;
        case PIPE_EVAL: {
            NM_ASSERT(g && q.n > 0);
            if (q.n > cap) {
                nm_free(hidden);
                nm_free(logits);
                cap = q.n;
                hidden = nm_alloc((size_t)cap * (size_t)n_embd * sizeof(float), 64, "GPU rank hidden states");
                logits = nm_alloc((size_t)cap * (size_t)n_vocab * sizeof(float), 64, "GPU rank logits");
            }
            coll_recv(world, hidden, (size_t)q.n * (size_t)n_embd * sizeof(float), peer, PIPE_TAG_HIDDEN);
            const bool want = q.logits != PIPE_LOGITS_NONE, all = q.logits == PIPE_LOGITS_ALL;
            rep.status =
                (int32_t)gpu_stage_eval(g, hidden, q.n, q.pos0, all, want ? logits : NULL, rep.msg, sizeof rep.msg);
            coll_send(world, &rep, sizeof rep, peer, PIPE_TAG_REPLY);
            if (rep.status != NM_OK) nm_fatal("GPU rank: %s", rep.msg);
            if (want)
                coll_send(world, logits, (all ? (size_t)q.n : 1) * (size_t)n_vocab * sizeof(float), peer,
                          PIPE_TAG_LOGITS);
            break;
        }
        default: nm_fatal("GPU rank: unknown pipeline request %d from rank %d", (int)q.op, peer);
        }
    }
    gpu_stage_free(g);
    nm_free(hidden);
    nm_free(logits);
}
