/* The pipeline stage after the CPU ranks' layers: with -ngl K the last K layers, the output norm
 * and the output head run on a CUDA device (rank/engine/gpu_stage.h). Only CPU rank 0 talks to the
 * stage: the residual stream after the CPU layers goes in, logits come back to rank 0, which
 * holds the whole vocabulary's slice (model.h, head_remote), so sampling is unchanged. Nothing
 * else crosses: the stage keeps its own KV cache for its layers.
 *
 * One interface, two places for the device:
 *   local   this process drives the GPU (the single-rank fallback, no mpirun);
 *   remote  the GPU rank of an mpirun job (the launcher's second app context): messages over
 *           coll_send/coll_recv of the job's world, served by pipeline_serve on that rank.
 */
#ifndef NM_PIPELINE_H
#define NM_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"

struct coll;
struct gguf_file;
struct gpu_stage;
struct gpu_stage_params;
struct model_config;

/* Rows for the stage, as the engine's batch (forward.h) gives them: row i is hidden[i] (the
 * residual stream after the last CPU layer, n_embd values) at position pos[i] of sequence
 * seq[i]; a sequence's rows are adjacent and continue it. logits[i] asks for row i's logits. */
struct stage_batch {
    int n;
    const float *hidden;
    const int32_t *seq;
    const int64_t *pos;
    const bool *logits;
};

/* Rows of logits the stage keeps on the device after an evaluation, for top-k: the rows that
 * asked in the batch's last chunk (n_batch rows) when at most this many did, and the chunk's last
 * row (more: only the last of the head's groups of PIPELINE_KEPT_ROWS + 1 rows). 64: a decode
 * step of -np 64 slots. */
#define PIPELINE_KEPT_ROWS 64

/* One row's candidates from the stage (gpu_stage_topk): the k best (id, logit) of row `row` of
 * the last evaluation (its index among the rows that asked, as in eval's logits; -1: the last
 * row, asking or not), after llama.cpp's repetition penalty over tokens[n_tokens]. */
struct stage_topk {
    int row, k, n_tokens;
    const int32_t *tokens;
    float penalty;
};

/* Logits buffers the stage fills are page-locked up to this size (a decode step's rows: 128
 * rows of a 128k vocabulary), so the logits come straight from the device; larger ones
 * (perplexity's batches, --dump-logits of a long prompt) are plain memory, filled through the
 * stage's staging buffer, as page-locked memory is scarce. */
#define PIPELINE_PINNED_LOGITS_MAX ((size_t)64 << 20)

struct pipeline_stage_ops {
    /* Evaluate the rows; logits: NULL, or [rows asking][n_vocab] in row order. Any length: the
     * stage chunks. */
    enum nm_status (*eval)(void *ctx, const struct stage_batch *b, float *logits, char *err, size_t errlen);
    /* The candidates of n rows (gpu_stage_topk): only they come back, not the vocabulary. */
    enum nm_status (*topk)(void *ctx, int n, const struct stage_topk *q, int32_t *ids, float *vals, char *err,
                           size_t errlen);
    /* Sequence seq keeps its first n positions and forgets the rest. */
    void (*keep)(void *ctx, int seq, int64_t n);
    /* Release the stage (remote: tell the GPU rank to stop serving). */
    void (*close)(void *ctx);
    /* eval copies logits straight into page-locked memory (pipeline_logits_get's): local */
    bool pinned_logits;
};

/* A logits buffer that grows to the bytes asked: page-locked (cuk_host_alloc) when `pinned` and
 * up to PIPELINE_PINNED_LOGITS_MAX, plain memory otherwise. bytes 0 frees it. */
struct pipeline_logits {
    float *p;
    size_t bytes;
    bool pinned;
};
float *pipeline_logits_get(struct pipeline_logits *b, size_t bytes, bool pinned);

struct pipeline_stage {
    const struct pipeline_stage_ops *ops;
    void *ctx;
};

/* This process's own GPU stage (taken over: closed with the pipeline). */
struct pipeline_stage pipeline_local(struct gpu_stage *g);

/* Ask the GPU rank `peer` of the job whose world collectives are `world` (send/recv only) to
 * open a stage with p; its status comes back (a failure names what the GPU rank found). */
enum nm_status pipeline_remote_open(struct pipeline_stage *out, struct coll *world, int peer,
                                    const struct gpu_stage_params *p, const struct model_config *cfg, char *err,
                                    size_t errlen);
/* Tell the GPU rank that the job is over (after its stages are closed). */
void pipeline_remote_exit(struct coll *world, int peer);

/* On the GPU rank: serve CPU rank `peer` (open, evaluate, truncate, close, as often as asked)
 * until it says the job is over. f and cfg are the model the CPU ranks run. A failing
 * evaluation stops the job (nm_fatal names it): the CPU ranks cannot go on without logits. */
void pipeline_serve(struct coll *world, int peer, const struct gguf_file *f, const struct model_config *cfg);

static inline void pipeline_close(struct pipeline_stage *p) {
    if (p->ops && p->ops->close) p->ops->close(p->ctx);
    p->ops = NULL;
    p->ctx = NULL;
}

#endif
