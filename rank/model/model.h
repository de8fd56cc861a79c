/* A model as this rank sees it: the configuration read from GGUF metadata only (DESIGN lesson
 * 4: every size comes from the file or the user's flags), every tensor checked against that
 * configuration, and this rank's slice of every matmul weight (shard.h) copied from the mapped
 * file into memory on the rank's NUMA node (arena.h), where it stays (DESIGN lesson 1). The
 * single-rank case is the shard 0 of 1: the same path. */
#ifndef NM_MODEL_H
#define NM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "gguf.h"
#include "matmul.h"
#include "shard.h"

struct coll;

enum arch {
    ARCH_LLAMA,
    ARCH_QWEN2,
    ARCH_QWEN3,
    ARCH_QWEN3MOE, /* qwen3 attention, mixture-of-experts FFN */
};
const char *arch_name(enum arch a);

enum rope_type {
    ROPE_TYPE_NORM, /* adjacent pairs (x[2i], x[2i+1]): llama */
    ROPE_TYPE_NEOX, /* halves (x[i], x[i + n_rot/2]): qwen2, qwen3, qwen3moe */
};

struct model_config {
    enum arch arch;
    int64_t n_vocab;
    int64_t n_ctx_train;  /* {arch}.context_length */
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_ff;         /* dense FFN width; 0 for qwen3moe (its key, if present, is not used) */
    int64_t n_expert;     /* qwen3moe: experts per layer (expert_count); 0 for dense models */
    int64_t n_expert_used; /* experts chosen per token (expert_used_count) */
    int64_t n_ff_exp;     /* one expert's FFN width (expert_feed_forward_length) */
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;     /* per-head size of Q and K: attention.key_length or n_embd/n_head */
    int64_t head_dim_v;   /* per-head size of V: attention.value_length or head_dim */
    int64_t n_rot;        /* rope.dimension_count, default head_dim */
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale; /* 1/rope.scaling.factor for linear scaling, else 1 */
    enum rope_type rope_type;
    enum dtype weight_type; /* most common matmul weight type, for display */
};

/* Shapes are this rank's: q_local = n_head_local * head_dim, kv_local = n_head_kv_local *
 * head_dim, ff_local = its n_ff columns, wo_k = its attn_output columns (block-widened). */
struct layer_weights {
    const float *attn_norm;        /* [n_embd] f32, replicated */
    struct weight wq;              /* [n_embd -> q_local] column-parallel */
    struct weight wk;              /* [n_embd -> kv_local] column-parallel */
    struct weight wv;              /* [n_embd -> n_head_kv_local * head_dim_v] column-parallel */
    struct weight wo;              /* [wo_k -> n_embd] row-parallel: partial sums, allreduced */
    const float *bq, *bk, *bv;     /* [q_local], [kv_local], [v_local] f32 slices; qwen2 requires them */
    const float *bo;               /* [n_embd] f32, replicated, added after the allreduce */
    const float *q_norm, *k_norm;  /* [head_dim] f32, replicated, qwen3 only */
    const float *ffn_norm;         /* [n_embd] f32, replicated */
    struct weight w_gate;          /* [n_embd -> ff_local] column-parallel (dense) */
    struct weight w_up;            /* [n_embd -> ff_local] column-parallel (dense) */
    struct weight w_down;          /* [ff_local -> n_embd] row-parallel (dense) */
    /* qwen3moe: ff_local is this rank's slice of every expert's n_ff_exp (shard.ff). */
    struct weight router;          /* [n_embd -> n_expert] ffn_gate_inp, replicated */
    struct weight *gate_exps;      /* [n_expert] of [n_embd -> ff_local] column-parallel */
    struct weight *up_exps;        /* [n_expert] of [n_embd -> ff_local] column-parallel */
    struct weight *down_exps;      /* [n_expert] of [ff_local -> n_embd] row-parallel */
};

struct model {
    const char *path;
    struct gguf_file *file;
    struct model_config cfg;
    struct shard shard;         /* this rank's slices */
    struct arena *arena;        /* node-local memory holding them */
    struct weight tok_embd;     /* [n_embd x n_vocab] in the mapped file: rows looked up by id */
    const float *output_norm;   /* [n_embd] f32 */
    struct weight output;       /* [n_embd -> vocab_local] rows shard.vocab of output (or of
                                   token_embd when tied) */
    bool output_tied;
    const float *output_bias;   /* [vocab_local] f32, optional (qwen2) */
    const float *rope_freqs;    /* [n_rot/2] f32, optional (Llama 3.1 long-context factors) */
    struct layer_weights *layers;  /* [n_layer]; only [0, n_layer_local) are loaded */
    int64_t n_layer_local;      /* layers this rank computes: n_layer minus those on the GPU rank */
    bool head_remote;           /* output norm and head run on the GPU rank (-ngl >= 1): shard.vocab
                                   is then the whole vocabulary on rank 0 and empty elsewhere, so
                                   rank 0 receives the logits and sampling is unchanged */
    uint64_t weight_bytes;      /* bytes of all tensors of the whole model (token_embd once) */
    uint64_t n_params;          /* parameters of the whole model */
    uint64_t loaded_bytes;      /* bytes this rank copied into its arena */
    uint64_t token_bytes;       /* of those, the bytes one token reads: all but the experts the
                                   router does not choose (MoE: n_expert_used of n_expert) */
    double load_seconds;
};

struct model_load_params {
    int rank, nranks;           /* the shard to load; 0 of 1 for a single rank */
    struct pool *pool;          /* threads (bound to the rank's cores) that copy the slices */
    struct coll *coll;          /* optional: aggregates load progress on rank 0 */
    int64_t n_gpu_layers;       /* -ngl: the last this many layers and the output head belong to the
                                   GPU rank and are checked but not loaded here; 0: none */
};

/* Open a GGUF file, read its configuration, check every tensor's type and shape, and load this
 * rank's slices. Any problem returns a status with a message that names the key or tensor, the
 * value found and what was expected; nothing is copied before every tensor has been checked. */
enum nm_status model_load(const char *path, const struct model_load_params *p, struct model **out, char *err,
                          size_t errlen);
/* The same on an already-open file (taken over: closed by model_free, also on failure). */
enum nm_status model_load_file(struct gguf_file *f, const struct model_load_params *p, struct model **out, char *err,
                               size_t errlen);
void model_free(struct model *m);

/* Read only the configuration (used by the launcher's planner and by tools). */
enum nm_status model_config_read(const struct gguf_file *f, struct model_config *cfg, char *err, size_t errlen);

/* One line describing the model, like llama.cpp's: "qwen2 494M Q4_0". */
void model_describe(const struct model *m, char *buf, size_t len);

/* Dequantize row `token` of the embedding table into out[n_embd]. */
void model_embed_row(const struct model *m, int32_t token, float *out);

#endif
