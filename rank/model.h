/* A model as this rank sees it: the configuration read from GGUF metadata only (DESIGN lesson
 * 4: every size comes from the file or the user's flags), and every tensor bound and checked
 * against that configuration. Weights are used in place from the mapped file. */
#ifndef NM_MODEL_H
#define NM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "matmul.h"

enum arch {
    ARCH_LLAMA,
    ARCH_QWEN2,
    ARCH_QWEN3,
};
const char *arch_name(enum arch a);

enum rope_type {
    ROPE_TYPE_NORM, /* adjacent pairs (x[2i], x[2i+1]): llama */
    ROPE_TYPE_NEOX, /* halves (x[i], x[i + n_rot/2]): qwen2, qwen3 */
};

struct model_config {
    enum arch arch;
    int64_t n_vocab;
    int64_t n_ctx_train;  /* {arch}.context_length */
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_ff;
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

struct layer_weights {
    const float *attn_norm;        /* [n_embd] f32 */
    struct weight wq;              /* [n_embd -> n_head*head_dim] */
    struct weight wk;              /* [n_embd -> n_head_kv*head_dim] */
    struct weight wv;              /* [n_embd -> n_head_kv*head_dim_v] */
    struct weight wo;              /* [n_head*head_dim_v -> n_embd] */
    const float *bq, *bk, *bv, *bo; /* optional biases f32 (qwen2: bq, bk, bv required) */
    const float *q_norm, *k_norm;  /* [head_dim] f32, qwen3 only */
    const float *ffn_norm;         /* [n_embd] f32 */
    struct weight w_gate;          /* [n_embd -> n_ff] */
    struct weight w_up;            /* [n_embd -> n_ff] */
    struct weight w_down;          /* [n_ff -> n_embd] */
};

struct model {
    const char *path;
    struct gguf_file *file;
    struct model_config cfg;
    struct weight tok_embd;     /* [n_embd x n_vocab], rows looked up by token id */
    const float *output_norm;   /* [n_embd] f32 */
    struct weight output;       /* [n_embd -> n_vocab]; token_embd when tied */
    bool output_tied;
    const float *output_bias;   /* [n_vocab] f32, optional (qwen2) */
    const float *rope_freqs;    /* [n_rot/2] f32, optional (Llama 3.1 long-context factors) */
    struct layer_weights *layers;
    uint64_t weight_bytes;      /* bytes of all tensors used (token_embd counted once) */
    uint64_t n_params;
    void **owned;               /* f32 copies of small tensors stored in other float types */
    int n_owned;
};

/* Open a GGUF file, read its configuration and bind every tensor, checking type and shape.
 * Any problem returns a status with a message that names the key or tensor, the value found
 * and what was expected. */
enum nm_status model_load(const char *path, struct model **out, char *err, size_t errlen);
/* The same on an already-open file (taken over: closed by model_free). */
enum nm_status model_load_file(struct gguf_file *f, struct model **out, char *err, size_t errlen);
void model_free(struct model *m);

/* Read only the configuration (used by the launcher's planner and by tools). */
enum nm_status model_config_read(const struct gguf_file *f, struct model_config *cfg, char *err, size_t errlen);

/* One line describing the model, like llama.cpp's: "qwen2 494M Q4_0". */
void model_describe(const struct model *m, char *buf, size_t len);

/* Dequantize row `token` of the embedding table into out[n_embd]. */
void model_embed_row(const struct model *m, int32_t token, float *out);

#endif
