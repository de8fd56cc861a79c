/* The forward pass of one rank: a batch of rows in, this rank's slice of their logits out, the
 * KV cache (this rank's KV heads only) appended. A batch's rows may belong to different
 * sequences, each at its own position (a server's decode tokens next to chunks of prompts):
 * every matmul sees all the rows at once, attention runs per sequence over that sequence's own
 * region of the KV cache. One sequence is the special case that run, perplexity and bench use
 * (engine_eval). Every rank evaluates the same batches; the residual stream is replicated and
 * bit-identical on every rank, kept so by the two allreduces per layer (after attn_output and
 * after ffn_down).
 *
 * Batch invariance: a row's logits depend only on its own sequence (its tokens and positions),
 * never on the other rows of the batch, on the rank count or on the thread count: the kernels
 * compute each output row with the same arithmetic for every number of rows (see
 * kern_matmul), attention keeps its per-query arithmetic whatever the block of queries, and
 * engine_init turns off the paths that would not (oneDNN, AMX-BF16) when it holds several
 * sequences. One caveat is part of the contract: a sequence's row that is alone in its batch
 * (decode) runs the one-query attention kernel, while rows that come with others of their
 * sequence (a prompt chunk) run the blocked prompt kernel; the two need not agree to the
 * bit. A scheduler that wants the same bits alone and in company cuts prompts into pieces
 * of 2 or more rows (unless the whole piece is 1 row) and decodes 1 row per step. */
#ifndef NM_FORWARD_H
#define NM_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_cache.h"
#include "model.h"
#include "pipeline.h"
#include "pool.h"

struct coll;

struct engine_params {
    int64_t n_ctx;       /* positions the KV cache holds in all, divided among n_seq sequences
                            (llama-server's -c); 0 = the model's training context */
    int n_seq;           /* sequences held at once, each with n_ctx / n_seq positions; 0 = 1 */
    int n_batch;         /* most tokens per forward chunk (matrix rows); > 0 */
    enum dtype kv_type;  /* DTYPE_F16 or DTYPE_F32 */
    /* With the head on the GPU rank (model->head_remote): rank 0's stage for the layers after
     * this model's n_layer_local, taken over (closed by engine_free); NULL on the other ranks. */
    struct pipeline_stage stage;
};

/* Called after each layer of a chunk with the residual stream x[n_tokens][n_embd]:
 * layer -1 after the embedding lookup, 0..n_layer-1 after each block, n_layer after the final
 * norm (result_norm); only for the layers this rank computes (not those of the GPU rank). pos0 is the position of the batch's first row. */
typedef void (*engine_layer_hook)(void *ctx, int layer, int64_t pos0, const float *x, int n_tokens, int64_t n_embd);

/* qwen3moe: called for every row of a batch in every MoE layer this rank computes, with the
 * experts the router chose for it (n_used of them, in the order chosen). For --dump-layers: the
 * reference takes the engine's side of a router near-tie only (tests/reference/model_ref.py). */
typedef void (*engine_route_hook)(void *ctx, int layer, int64_t pos, const int64_t *experts, int n_used);

struct engine;

/* Allocate the KV cache and scratch for the model's shard. The model, pool and collectives are
 * borrowed and must outlive the engine; coll's size must equal the shard's rank count. */
enum nm_status engine_init(struct engine **out, const struct model *m, struct pool *pool, struct coll *coll,
                           const struct engine_params *p, char *err, size_t errlen);
void engine_free(struct engine *e);

/* A batch of n rows: row i is token[i] at position pos[i] of sequence seq[i]. A sequence's rows
 * are adjacent in the batch and continue it: the first is at engine_seq_pos(seq), each next one
 * at the position after. logits[i] asks for row i's logits. */
struct engine_batch {
    int n;                 /* rows, 1 .. n_batch */
    const int32_t *token;  /* [n] token ids */
    const int64_t *pos;    /* [n] positions in their sequences */
    const int32_t *seq;    /* [n] sequence ids, 0 .. n_seq-1 */
    const bool *logits;    /* [n] rows whose logits are wanted */
};

/* Evaluate a batch; afterwards each of its sequences holds its positions up to its last row's.
 * logits receives this rank's vocabulary slice (model->shard.vocab) of every row that asked,
 * in row order: [rows asking][vocab_local]; it may be NULL when no row asks. Fails with
 * NM_ERR_ARGS and a message naming the row (no state change) when a token id, a sequence id or
 * a position is wrong, or a position lies beyond its sequence's n_ctx / n_seq. With the GPU stage
 * (-ngl) the rows go on through the stage's layers (which hold the same sequences) and the
 * logits come back from it. Collective: every rank passes the same batch. */
enum nm_status engine_eval_batch(struct engine *e, const struct engine_batch *b, float *logits, char *err,
                                 size_t errlen);

/* One sequence (0): evaluate n tokens at positions n_past .. n_past+n-1 in batches of n_batch
 * rows, then n_past += n. logits receives this rank's vocabulary slice: [n][vocab_local] when
 * logits_all, else [1][vocab_local] for the last token. Fails with NM_ERR_ARGS (no state
 * change) when the tokens do not fit in the context or an id is out of range. Collective. */
enum nm_status engine_eval(struct engine *e, const int32_t *tokens, int n, bool logits_all, float *logits,
                           char *err, size_t errlen);
/* A logits buffer of `rows` rows of this rank's vocabulary slice, for engine_eval(_batch): the
 * engine's own (never NULL; the caller does not free it), valid until engine_free or a call that
 * asks for more rows (which frees it: one holder per engine). With the GPU stage in this process
 * and up to 64 MiB it is page-locked, so the logits come straight from the device. */
float *engine_logits_buffer(struct engine *e, int rows);

/* Sampling the next token from the last evaluated position, collective: every rank returns it.
 * With the head on the GPU rank, one sequence and a sampler that needs only its top k (greedy,
 * or top-k set: engine_samples_on_stage), the GPU makes the candidates and only they come back;
 * engine_eval may then be given logits = NULL on every rank. Otherwise local is this rank's
 * logits slice from engine_eval. */
struct sampler;
bool engine_samples_on_stage(const struct engine *e, const struct sampler *smp);
int32_t engine_sample(struct engine *e, struct sampler *smp, const float *local);
/* Several rows' next tokens, collective: tokens[i] for row rows[i] of the last engine_eval_batch
 * (its index among the rows that asked), sampled with smp[i]. When engine_rows_on_stage holds for
 * them and that batch's n_asking rows, the GPU stage makes every row's candidates in one round
 * trip and engine_eval_batch may have been given logits = NULL; otherwise local is the logits it
 * filled, [rows asking][vocab_local]. engine_rows_on_stage: the head is on the GPU rank, every
 * sampler needs only its top k, and the stage keeps the rows (at most PIPELINE_KEPT_ROWS ask). */
bool engine_rows_on_stage(const struct engine *e, struct sampler *const *smp, int n, int n_asking);
void engine_sample_rows(struct engine *e, struct sampler *const *smp, const int *rows, int n, const float *local,
                        int32_t *tokens);

/* Sequences the engine holds, and the positions each may hold (n_ctx / n_seq). */
int engine_n_seq(const struct engine *e);
int64_t engine_n_ctx(const struct engine *e);
/* Positions sequence seq holds now: the position its next row takes. */
int64_t engine_seq_pos(const struct engine *e, int seq);
/* Keep the first n positions of sequence seq (n <= engine_seq_pos), forget the rest: a rewind,
 * or a prompt that shares its first n tokens with what the sequence holds (prefix reuse). */
void engine_seq_keep(struct engine *e, int seq, int64_t n);
/* engine_seq_keep(e, seq, 0): the slot is free for a new sequence. */
void engine_seq_clear(struct engine *e, int seq);
/* Sequence 0's engine_seq_pos and engine_seq_keep, for the one-sequence commands. */
int64_t engine_n_past(const struct engine *e);
void engine_truncate(struct engine *e, int64_t n_past);
const struct kv_cache *engine_kv(const struct engine *e);
void engine_set_layer_hook(struct engine *e, engine_layer_hook hook, void *ctx);
void engine_set_route_hook(struct engine *e, engine_route_hook hook, void *ctx);

/* Collective: assemble full logits rows [rows][n_vocab] on every rank from each rank's slices
 * [rows][vocab_local]. Only for --dump-logits and perplexity: sampling never needs it. */
void engine_gather_logits(struct engine *e, const float *local, float *full, int rows);

/* Seconds spent in allreduces since engine_init (for the allreduce share of a step). */
double engine_coll_seconds(const struct engine *e);

/* Where the forward pass spends its time: wall seconds per phase since engine_init, measured on
 * the calling thread around each phase (its pool jobs included). Rows of NM_PROFILE=1. */
enum engine_phase {
    ENGINE_PH_MATMUL,  /* the layers' matmuls (activation quantization included) */
    ENGINE_PH_ATTN,    /* attention over the KV cache */
    ENGINE_PH_ROWS,    /* norms, Q/K norms + RoPE + KV stores, SwiGLU, residual adds */
    ENGINE_PH_COLL,    /* allreduces of the row-parallel outputs */
    ENGINE_PH_HEAD,    /* output norm and head */
    ENGINE_PH_STAGE,   /* the GPU stage's layers (-ngl), waited for */
    ENGINE_PH_N
};
/* Phase times since engine_init. With NM_PROFILE, the pool's accounting too (pool_set_profile):
 * busy: the threads' seconds inside pool jobs during the phase, summed over threads; jobs: the
 * jobs' wall seconds times the pool's threads, so busy / jobs is how busy the threads were
 * while the phase ran parallel work (1 - it: waiting at the end of jobs, load imbalance). */
struct engine_times {
    double s[ENGINE_PH_N];
    double busy[ENGINE_PH_N], jobs[ENGINE_PH_N];
};
void engine_phase_seconds(const struct engine *e, struct engine_times *out);
/* acc += after - before, phase by phase. */
void engine_times_add_diff(struct engine_times *acc, const struct engine_times *before, const struct engine_times *after);
/* Whether the environment asks for the phase report (NM_PROFILE set, not empty, not 0). */
bool engine_profile_requested(void);
const char *engine_phase_name(enum engine_phase ph);
/* "matmul 61.2% (threads busy 93%), attention 20.3%, ..., other 1.0%": each phase's share of
 * total_s between two engine_phase_seconds snapshots (before may be NULL: since engine_init),
 * with the threads' busy share where the pool was profiled; other = total_s minus the phases. */
size_t engine_phase_report(const struct engine_times *before, const struct engine_times *after, double total_s,
                           char *buf, size_t len);

#endif
