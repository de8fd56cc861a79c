/* The forward pass of one rank: a chunk of tokens in, this rank's slice of the logits out, the
 * KV cache (this rank's KV heads only) appended. Prompts run as matrices in chunks of n_batch
 * tokens; decode is the same path with one token. Every rank calls engine_eval with the same
 * tokens; the residual stream is replicated and bit-identical on every rank, kept so by the two
 * allreduces per layer (after attn_output and after ffn_down). */
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
    int64_t n_ctx;       /* tokens the KV cache holds; 0 = the model's training context */
    int n_batch;         /* most tokens per forward chunk (matrix rows); > 0 */
    enum dtype kv_type;  /* DTYPE_F16 or DTYPE_F32 */
    /* With the head on the GPU rank (model->head_remote): rank 0's stage for the layers after
     * this model's n_layer_local, taken over (closed by engine_free); NULL on the other ranks. */
    struct pipeline_stage stage;
};

/* Called after each layer of a chunk with the residual stream x[n_tokens][n_embd]:
 * layer -1 after the embedding lookup, 0..n_layer-1 after each block, n_layer after the final
 * norm (result_norm); only for the layers this rank computes (not those of the GPU rank). pos0 is the position of the chunk's first token. */
typedef void (*engine_layer_hook)(void *ctx, int layer, int64_t pos0, const float *x, int n_tokens, int64_t n_embd);

struct engine;

/* Allocate the KV cache and scratch for the model's shard. The model, pool and collectives are
 * borrowed and must outlive the engine; coll's size must equal the shard's rank count. */
enum nm_status engine_init(struct engine **out, const struct model *m, struct pool *pool, struct coll *coll,
                           const struct engine_params *p, char *err, size_t errlen);
void engine_free(struct engine *e);

/* Evaluate n tokens at positions n_past .. n_past+n-1, then n_past += n. logits receives this
 * rank's vocabulary slice (model->shard.vocab): [n][vocab_local] when logits_all, else
 * [1][vocab_local] for the last token. Fails with NM_ERR_ARGS (no state change) when the tokens
 * do not fit in the context or an id is out of range. Collective. */
enum nm_status engine_eval(struct engine *e, const int32_t *tokens, int n, bool logits_all, float *logits,
                           char *err, size_t errlen);

/* Sampling the next token from the last evaluated position, collective: every rank returns it.
 * With the head on the GPU rank and a sampler that needs only its top k (greedy, or top-k set:
 * engine_samples_on_stage), the GPU makes the candidates and only they come back; engine_eval
 * may then be given logits = NULL on every rank. Otherwise local is this rank's logits slice
 * from engine_eval. */
struct sampler;
bool engine_samples_on_stage(const struct engine *e, const struct sampler *smp);
int32_t engine_sample(struct engine *e, struct sampler *smp, const float *local);

int64_t engine_n_past(const struct engine *e);
int64_t engine_n_ctx(const struct engine *e);
const struct kv_cache *engine_kv(const struct engine *e);
/* Forget positions >= n_past (n_past <= current): used to rewind, or 0 to reset. */
void engine_truncate(struct engine *e, int64_t n_past);
void engine_set_layer_hook(struct engine *e, engine_layer_hook hook, void *ctx);

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
void engine_phase_seconds(const struct engine *e, double out[ENGINE_PH_N]);
/* Whether the environment asks for the phase report (NM_PROFILE set, not empty, not 0). */
bool engine_profile_requested(void);
const char *engine_phase_name(enum engine_phase ph);
/* "matmul 61.2%, attention 20.3%, ..., other 1.0%": each phase's share of total_s between two
 * engine_phase_seconds snapshots; other = total_s minus the phases. */
size_t engine_phase_report(const double before[ENGINE_PH_N], const double after[ENGINE_PH_N], double total_s,
                           char *buf, size_t len);

#endif
