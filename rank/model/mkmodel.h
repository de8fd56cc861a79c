/* Synthetic GGUF models: random weights with the shapes and full metadata of real models, in
 * any supported type, written with numallm's own quantizers. Tiny presets drive the tests;
 * presets with real shapes drive the benchmarks and give `numallm run` a default that needs no
 * download. Deterministic for a seed, whatever the thread count. */
#ifndef NM_MKMODEL_H
#define NM_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "pool.h"
#include "types.h"

struct mkmodel_preset {
    const char *name;
    const char *arch;     /* "llama", "qwen2", "qwen3", "qwen3moe" */
    const char *about;    /* one line for --help */
    int64_t n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv;
    int64_t head_dim;     /* 0: n_embd/n_head and no key_length key; else written as key_length */
    int64_t n_ctx_train;
    float rope_freq_base;
    float rms_eps;
    float rope_linear_factor; /* 0: no rope.scaling keys */
    bool tied;            /* no output.weight */
    bool qkv_bias;        /* qwen2 */
    bool qk_norm;         /* qwen3 */
    bool llama3_rope_freqs; /* write rope_freqs.weight (Llama 3.1 factors) */
    int64_t rope_freqs_orig_ctx; /* the factors' original_max_position_embeddings (8192 in Llama 3.1) */
    int64_t n_expert, n_expert_used, n_ff_exp; /* qwen3moe: experts replace the dense FFN */
};

/* NULL-terminated list of presets. */
const struct mkmodel_preset *mkmodel_presets(void);
const struct mkmodel_preset *mkmodel_find_preset(const char *name);

struct mkmodel_params {
    const struct mkmodel_preset *preset;
    enum dtype type;        /* matmul weights and token_embd */
    int output_type;        /* output.weight type; -1 = same as type */
    uint64_t seed;
    const char *vocab_from; /* optional GGUF whose tokenizer.* keys are copied (may be NULL) */
};

/* Write the model to path, generating tensors on the pool's threads; progress on stderr. */
enum nm_status mkmodel_write(const struct mkmodel_params *p, const char *path, struct pool *pool, char *err,
                             size_t errlen);

#endif
