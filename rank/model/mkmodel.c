/* Synthetic model writer (see mkmodel.h). */
#include "mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"

static const struct mkmodel_preset k_presets[] = {
    {.name = "tiny-llama", .arch = "llama", .about = "2 layers, n_embd 256, GQA 4/2 (tests)",
     .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_ff = 1024, .n_head = 4, .n_head_kv = 2, .n_ctx_train = 2048,
     .rope_freq_base = 10000.0f, .rms_eps = 1e-5f},
    {.name = "tiny-llama31", .arch = "llama", .about = "Llama 3.1 style: rope_freqs tensor, GQA 4/1 (tests)",
     .n_vocab = 640, .n_embd = 256, .n_layer = 2, .n_ff = 1280, .n_head = 4, .n_head_kv = 1, .n_ctx_train = 4096,
     .rope_freq_base = 500000.0f, .rms_eps = 1e-5f, .llama3_rope_freqs = true,
     /* A short original context makes the factors reach most dimensions within a test prompt. */
     .rope_freqs_orig_ctx = 32},
    {.name = "tiny-qwen2", .arch = "qwen2", .about = "Q/K/V biases, tied output, linear RoPE x2 (tests)",
     .n_vocab = 576, .n_embd = 256, .n_layer = 2, .n_ff = 1280, .n_head = 4, .n_head_kv = 2, .n_ctx_train = 2048,
     .rope_freq_base = 1000000.0f, .rms_eps = 1e-6f, .rope_linear_factor = 2.0f, .tied = true, .qkv_bias = true},
    {.name = "tiny-qwen3", .arch = "qwen3", .about = "head_dim 128 != n_embd/n_head, Q/K norms (tests)",
     .n_vocab = 512, .n_embd = 256, .n_layer = 3, .n_ff = 1024, .n_head = 4, .n_head_kv = 2, .head_dim = 128,
     .n_ctx_train = 2048, .rope_freq_base = 1000000.0f, .rms_eps = 1e-6f, .qk_norm = true},
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", .about = "8 experts, top-2, Q/K norms (tests)",
     .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_ff = 768, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
     .n_ctx_train = 2048, .rope_freq_base = 1000000.0f, .rms_eps = 1e-6f, .qk_norm = true, .n_expert = 8,
     .n_expert_used = 2, .n_ff_exp = 1024},
    {.name = "qwen2.5-0.5b", .arch = "qwen2", .about = "Qwen2.5-0.5B shapes (494M params)",
     .n_vocab = 151936, .n_embd = 896, .n_layer = 24, .n_ff = 4864, .n_head = 14, .n_head_kv = 2,
     .n_ctx_train = 32768, .rope_freq_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qkv_bias = true},
    {.name = "qwen3-0.6b", .arch = "qwen3", .about = "Qwen3-0.6B shapes",
     .n_vocab = 151936, .n_embd = 1024, .n_layer = 28, .n_ff = 3072, .n_head = 16, .n_head_kv = 8, .head_dim = 128,
     .n_ctx_train = 40960, .rope_freq_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qk_norm = true},
    {.name = "llama-3.2-1b", .arch = "llama", .about = "Llama-3.2-1B shapes (1.24B params)",
     .n_vocab = 128256, .n_embd = 2048, .n_layer = 16, .n_ff = 8192, .n_head = 32, .n_head_kv = 8,
     .n_ctx_train = 131072, .rope_freq_base = 500000.0f, .rms_eps = 1e-5f, .tied = true, .llama3_rope_freqs = true,
     .rope_freqs_orig_ctx = 8192},
    {.name = "llama-3-8b", .arch = "llama", .about = "Llama-3-8B shapes (8.0B params)",
     .n_vocab = 128256, .n_embd = 4096, .n_layer = 32, .n_ff = 14336, .n_head = 32, .n_head_kv = 8,
     .n_ctx_train = 8192, .rope_freq_base = 500000.0f, .rms_eps = 1e-5f},
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .about = "Qwen3-30B-A3B shapes (30.5B params, 3.3B active)",
     .n_vocab = 151936, .n_embd = 2048, .n_layer = 48, .n_ff = 6144, .n_head = 32, .n_head_kv = 4, .head_dim = 128,
     .n_ctx_train = 40960, .rope_freq_base = 1000000.0f, .rms_eps = 1e-6f, .qk_norm = true, .n_expert = 128,
     .n_expert_used = 8, .n_ff_exp = 768},
    {0},
};

const struct mkmodel_preset *mkmodel_presets(void) { return k_presets; }

const struct mkmodel_preset *mkmodel_find_preset(const char *name) {
    for (const struct mkmodel_preset *p = k_presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

/* How a tensor's values are drawn. */
enum init_kind {
    INIT_MATMUL, /* uniform with std gain/sqrt(k): keeps activations O(1) through a block */
    INIT_EMBED,  /* uniform with std 0.1 */
    INIT_NORM,   /* 1 + uniform in [-0.2, 0.2] */
    INIT_BIAS,   /* uniform with std 0.5 */
    INIT_ROPE_FREQS,
};

struct tensor_spec {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[3]; /* ne[1] * ne[2] rows of ne[0] values */
    enum dtype type;
    enum init_kind init;
    float gain;
};

struct specs {
    struct tensor_spec *v;
    int n, cap;
};

static void add_spec3(struct specs *s, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                      enum dtype type, enum init_kind init, float gain) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
        NM_ASSERT(s->v);
    }
    struct tensor_spec *t = &s->v[s->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->type = type;
    t->init = init;
    t->gain = gain;
}

static void add_spec(struct specs *s, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, enum dtype type,
                     enum init_kind init, float gain) {
    add_spec3(s, name, n_dims, ne0, ne1, 1, type, init, gain);
}

/* Types of 256-value blocks need rows that are a multiple of 256. For tensors whose rows are not,
 * fall back as llama.cpp's llama-quantize does (its tensor-type fallback for such rows): Q2_K,
 * Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; the IQ types -> IQ4_NL; rows that
 * are not even a multiple of 32 -> F16. */
static enum dtype fallback_32(enum dtype t) {
    switch (t) {
    case DTYPE_Q2_K:
    case DTYPE_Q3_K: return DTYPE_Q4_0;
    case DTYPE_Q4_K: return DTYPE_Q5_0;
    case DTYPE_Q5_K: return DTYPE_Q5_1;
    case DTYPE_Q6_K: return DTYPE_Q8_0;
    default: return DTYPE_IQ4_NL;
    }
}

static enum dtype type_for_rows(enum dtype t, int64_t k, const char *name) {
    const struct dtype_info *ti = dtype_get(t);
    if (k % ti->blck_size == 0) return t;
    enum dtype fb = k % 32 == 0 ? fallback_32(t) : DTYPE_F16;
    if (!dtype_get(fb)) fb = DTYPE_Q8_0; /* a fallback type this build does not have yet */
    nm_log_info("%s: rows of %lld are not a multiple of %d for %s; using %s", name, (long long)k, ti->blck_size,
                ti->name, dtype_get(fb)->name);
    return fb;
}

static void add_matmul(struct specs *s, const char *name, int64_t k, int64_t n, enum dtype t, float gain) {
    add_spec(s, name, 2, k, n, type_for_rows(t, k, name), INIT_MATMUL, gain);
}

/* The n_expert matrices {k, n} of a MoE layer, stored as one 3-D tensor. */
static void add_experts(struct specs *s, const char *name, int64_t k, int64_t n, int64_t n_expert, enum dtype t) {
    add_spec3(s, name, 3, k, n, n_expert, type_for_rows(t, k, name), INIT_MATMUL, 1.0f);
}

static void build_specs(const struct mkmodel_params *p, int64_t n_vocab, struct specs *s) {
    const struct mkmodel_preset *m = p->preset;
    const int64_t hd = m->head_dim ? m->head_dim : m->n_embd / m->n_head;
    const enum dtype out_type = p->output_type >= 0 ? (enum dtype)p->output_type : p->type;
    char name[GGUF_MAX_NAME];
    add_spec(s, "token_embd.weight", 2, m->n_embd, n_vocab, type_for_rows(p->type, m->n_embd, "token_embd.weight"),
             INIT_EMBED, 1.0f);
    if (m->llama3_rope_freqs) add_spec(s, "rope_freqs.weight", 1, hd / 2, 1, DTYPE_F32, INIT_ROPE_FREQS, 0);
    for (int il = 0; il < m->n_layer; il++) {
#define N(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
        add_spec(s, N("attn_norm.weight"), 1, m->n_embd, 1, DTYPE_F32, INIT_NORM, 0);
        add_matmul(s, N("attn_q.weight"), m->n_embd, m->n_head * hd, p->type, 1.0f);
        add_matmul(s, N("attn_k.weight"), m->n_embd, m->n_head_kv * hd, p->type, 1.0f);
        add_matmul(s, N("attn_v.weight"), m->n_embd, m->n_head_kv * hd, p->type, 1.0f);
        if (m->qkv_bias) {
            add_spec(s, N("attn_q.bias"), 1, m->n_head * hd, 1, DTYPE_F32, INIT_BIAS, 0);
            add_spec(s, N("attn_k.bias"), 1, m->n_head_kv * hd, 1, DTYPE_F32, INIT_BIAS, 0);
            add_spec(s, N("attn_v.bias"), 1, m->n_head_kv * hd, 1, DTYPE_F32, INIT_BIAS, 0);
        }
        if (m->qk_norm) {
            add_spec(s, N("attn_q_norm.weight"), 1, hd, 1, DTYPE_F32, INIT_NORM, 0);
            add_spec(s, N("attn_k_norm.weight"), 1, hd, 1, DTYPE_F32, INIT_NORM, 0);
        }
        add_matmul(s, N("attn_output.weight"), m->n_head * hd, m->n_embd, p->type, 1.0f);
        add_spec(s, N("ffn_norm.weight"), 1, m->n_embd, 1, DTYPE_F32, INIT_NORM, 0);
        if (m->n_expert > 0) {
            /* The router stays f32 (as llama.cpp's quantizer keeps it); gain 4 spreads its logits
             * so the chosen experts are clear winners. */
            add_spec(s, N("ffn_gate_inp.weight"), 2, m->n_embd, m->n_expert, DTYPE_F32, INIT_MATMUL, 4.0f);
            add_experts(s, N("ffn_gate_exps.weight"), m->n_embd, m->n_ff_exp, m->n_expert, p->type);
            add_experts(s, N("ffn_up_exps.weight"), m->n_embd, m->n_ff_exp, m->n_expert, p->type);
            add_experts(s, N("ffn_down_exps.weight"), m->n_ff_exp, m->n_embd, m->n_expert, p->type);
        } else {
            add_matmul(s, N("ffn_gate.weight"), m->n_embd, m->n_ff, p->type, 1.0f);
            add_matmul(s, N("ffn_up.weight"), m->n_embd, m->n_ff, p->type, 1.0f);
            add_matmul(s, N("ffn_down.weight"), m->n_ff, m->n_embd, p->type, 1.0f);
        }
#undef N
    }
    add_spec(s, "output_norm.weight", 1, m->n_embd, 1, DTYPE_F32, INIT_NORM, 0);
    /* Logits a few units apart, so greedy choices are well separated. */
    if (!m->tied) add_matmul(s, "output.weight", m->n_embd, n_vocab, out_type, 4.0f);
}

/* Llama 3.1 long-context factors (HF rope_scaling factor 32, low 1, high 4, original context
 * old_ctx), which the converter stores as rope_freqs.weight and the rope op divides theta by. */
static void llama3_rope_freqs(float *out, int64_t n, int64_t n_rot, float base, double old_ctx) {
    const double factor = 32.0, low = 1.0, high = 4.0;
    const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (int64_t i = 0; i < n; i++) {
        const double freq = pow(base, -2.0 * (double)i / (double)n_rot), wavelen = 2.0 * M_PI / freq;
        if (wavelen < high_wavelen) out[i] = 1.0f;
        else if (wavelen > low_wavelen) out[i] = (float)factor;
        else {
            const double smooth = (old_ctx / wavelen - low) / (high - low);
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* Per-row generator: the stream depends on (seed, tensor, row) only. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_row(float *x, int64_t k, const struct tensor_spec *t, uint64_t seed, int tensor, int64_t row) {
    uint64_t s = mix64(seed ^ mix64(((uint64_t)tensor << 32) ^ (uint64_t)row ^ 0x6a09e667f3bcc909ull)) | 1;
    float amp;
    switch (t->init) {
    case INIT_MATMUL: amp = t->gain * sqrtf(3.0f / (float)k); break;
    /* Small next to the blocks' outputs, as in trained models: with tied embeddings a large
     * table would make every token predict itself. */
    case INIT_EMBED: amp = 0.1f * sqrtf(3.0f); break;
    case INIT_NORM: amp = 0.2f; break;
    case INIT_BIAS: amp = 0.5f * sqrtf(3.0f); break;
    default: amp = 0; break;
    }
    for (int64_t i = 0; i < k; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const float u = (float)(s >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; /* [-1, 1) */
        x[i] = (t->init == INIT_NORM ? 1.0f : 0.0f) + amp * u;
    }
}

struct gen_job {
    const struct tensor_spec *t;
    int tensor;
    uint64_t seed;
    int64_t row0, rows;
    size_t row_bytes;
    uint8_t *out;
    float *scratch; /* [n_threads][k] */
};

static void gen_worker(void *ctx, int ith, int nth) {
    const struct gen_job *j = ctx;
    const int64_t k = j->t->ne[0];
    float *x = j->scratch + (int64_t)ith * k;
    long lo, hi;
    pool_split((long)j->rows, 1, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        fill_row(x, k, j->t, j->seed, j->tensor, j->row0 + r);
        quantize_row_ref(j->t->type, x, j->out + (size_t)r * j->row_bytes, k);
    }
}

static void set_vocab(struct gguf_writer *w, int64_t n_vocab) {
    /* A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then filler
     * pieces. Enough for a valid file and byte-fallback tokenization. */
    char **tok = malloc((size_t)n_vocab * sizeof *tok);
    float *scores = malloc((size_t)n_vocab * sizeof *scores);
    int32_t *types = malloc((size_t)n_vocab * sizeof *types);
    NM_ASSERT(tok && scores && types);
    for (int64_t i = 0; i < n_vocab; i++) {
        char buf[32];
        if (i == 0) snprintf(buf, sizeof buf, "<unk>");
        else if (i == 1) snprintf(buf, sizeof buf, "<s>");
        else if (i == 2) snprintf(buf, sizeof buf, "</s>");
        else if (i < 3 + 256) snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)(i - 3));
        else snprintf(buf, sizeof buf, "\xe2\x96\x81t%lld", (long long)i);
        tok[i] = strdup(buf);
        NM_ASSERT(tok[i]);
        scores[i] = i < 3 + 256 ? 0.0f : -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n_vocab);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    for (int64_t i = 0; i < n_vocab; i++) free(tok[i]);
    free(tok);
    free(scores);
    free(types);
}

static uint32_t llama_ftype(enum dtype t) {
    switch (t) {
    case DTYPE_F32: return 0;
    case DTYPE_F16: return 1;
    case DTYPE_Q4_0: return 2;
    case DTYPE_Q4_1: return 3;
    case DTYPE_Q8_0: return 7;
    case DTYPE_Q5_0: return 8;
    case DTYPE_Q5_1: return 9;
    case DTYPE_Q2_K: return 10;
    case DTYPE_Q3_K: return 11; /* Q3_K_S: all Q3_K */
    case DTYPE_Q4_K: return 15; /* Q4_K_M */
    case DTYPE_Q5_K: return 17; /* Q5_K_M */
    case DTYPE_Q6_K: return 18;
    case DTYPE_IQ2_XXS: return 19;
    case DTYPE_IQ2_XS: return 20;
    case DTYPE_IQ3_XXS: return 23;
    case DTYPE_IQ1_S: return 24;
    case DTYPE_IQ4_NL: return 25;
    case DTYPE_IQ3_S: return 26;
    case DTYPE_IQ2_S: return 28;
    case DTYPE_IQ4_XS: return 30;
    case DTYPE_IQ1_M: return 31;
    case DTYPE_BF16: return 32;
    default: return 0;
    }
}

enum nm_status mkmodel_write(const struct mkmodel_params *p, const char *path, struct pool *pool, char *err,
                             size_t errlen) {
    const struct mkmodel_preset *m = p->preset;
    enum nm_status st = NM_OK;
    struct gguf_file *vocab = NULL;
    int64_t n_vocab = m->n_vocab;
    if (p->vocab_from) {
        if ((st = gguf_open(p->vocab_from, &vocab, err, errlen))) return st;
        const struct gguf_kv *toks = gguf_find_kv(vocab, "tokenizer.ggml.tokens");
        if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING || toks->n == 0) {
            gguf_close(vocab);
            return nm_errf(err, errlen, NM_ERR_NOT_FOUND, "%s: no tokenizer.ggml.tokens string array to copy",
                           p->vocab_from);
        }
        n_vocab = (int64_t)toks->n;
    }

    struct gguf_writer *w = gguf_writer_init();
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s." suffix, m->arch), key)
    gguf_writer_set_str(w, "general.architecture", m->arch);
    char gname[96];
    snprintf(gname, sizeof gname, "numallm synthetic %s", m->name);
    gguf_writer_set_str(w, "general.name", gname);
    gguf_writer_set_u32(w, "general.file_type", llama_ftype(p->type));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, K("context_length"), (uint32_t)m->n_ctx_train);
    gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)m->n_embd);
    gguf_writer_set_u32(w, K("block_count"), (uint32_t)m->n_layer);
    gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)m->n_ff);
    if (m->n_expert > 0) {
        gguf_writer_set_u32(w, K("expert_count"), (uint32_t)m->n_expert);
        gguf_writer_set_u32(w, K("expert_used_count"), (uint32_t)m->n_expert_used);
        gguf_writer_set_u32(w, K("expert_feed_forward_length"), (uint32_t)m->n_ff_exp);
    }
    gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)m->n_head);
    gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)m->n_head_kv);
    if (m->head_dim) {
        gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)m->head_dim);
        gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)m->head_dim);
    }
    gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), m->rms_eps);
    gguf_writer_set_f32(w, K("rope.freq_base"), m->rope_freq_base);
    if (m->rope_linear_factor > 0) {
        gguf_writer_set_str(w, K("rope.scaling.type"), "linear");
        gguf_writer_set_f32(w, K("rope.scaling.factor"), m->rope_linear_factor);
    }
    if (m->arch[0] == 'l') gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)n_vocab);
#undef K
    if (vocab) {
        for (uint64_t i = 0; i < vocab->n_kv; i++)
            if (vocab->kv[i].key.len > 10 && memcmp(vocab->kv[i].key.ptr, "tokenizer.", 10) == 0)
                gguf_writer_copy_kv(w, &vocab->kv[i]);
    } else {
        set_vocab(w, n_vocab);
    }

    struct specs specs = {0};
    build_specs(p, n_vocab, &specs);
    for (int i = 0; i < specs.n; i++) gguf_writer_add_tensor(w, specs.v[i].name, specs.v[i].n_dims, specs.v[i].ne,
                                                            (uint32_t)specs.v[i].type);
    if ((st = gguf_writer_begin(w, path, err, errlen))) goto done;

    uint64_t total = 0, written = 0;
    for (int i = 0; i < specs.n; i++)
        total += dtype_row_size(specs.v[i].type, specs.v[i].ne[0]) * (uint64_t)(specs.v[i].ne[1] * specs.v[i].ne[2]);
    const int nth = pool_size(pool);
    const double t0 = nm_time_s();
    double last_report = t0;
    for (int i = 0; i < specs.n && !st; i++) {
        const struct tensor_spec *t = &specs.v[i];
        const int64_t k = t->ne[0], n = t->ne[1] * t->ne[2];
        const size_t row_bytes = dtype_row_size(t->type, k);
        if (t->init == INIT_ROPE_FREQS) {
            float *f = nm_alloc((size_t)k * sizeof(float), 64, "rope_freqs");
            const int64_t hd = m->head_dim ? m->head_dim : m->n_embd / m->n_head;
            llama3_rope_freqs(f, k, hd, m->rope_freq_base, (double)m->rope_freqs_orig_ctx);
            st = gguf_writer_write_data(w, (uint64_t)i, f, row_bytes, err, errlen);
            nm_free(f);
            continue;
        }
        /* Rows in chunks of at most ~64 MiB so an 8B model never needs a tensor in memory. */
        const int64_t chunk = NM_MAX((int64_t)1, NM_MIN(n, (int64_t)(64 << 20) / (int64_t)row_bytes));
        uint8_t *buf = nm_alloc((size_t)chunk * row_bytes, 64, t->name);
        float *scratch = nm_alloc((size_t)nth * (size_t)k * sizeof(float), 64, "mkmodel scratch");
        for (int64_t r0 = 0; r0 < n && !st; r0 += chunk) {
            struct gen_job job = {.t = t, .tensor = i, .seed = p->seed, .row0 = r0, .rows = NM_MIN(chunk, n - r0),
                                  .row_bytes = row_bytes, .out = buf, .scratch = scratch};
            pool_run(pool, gen_worker, &job);
            st = gguf_writer_write_data(w, (uint64_t)i, buf, (uint64_t)job.rows * row_bytes, err, errlen);
            written += (uint64_t)job.rows * row_bytes;
            const double now = nm_time_s();
            if (now - last_report > 2.0) {
                nm_log_info("mkmodel: %.0f%% (%.2f of %.2f GiB, %.0f MB/s)", 100.0 * (double)written / (double)total,
                            (double)written / (1 << 30), (double)total / (1 << 30),
                            (double)written / (now - t0) / 1e6);
                last_report = now;
            }
        }
        nm_free(buf);
        nm_free(scratch);
    }
    if (!st) st = gguf_writer_end(w, err, errlen);
    if (!st)
        nm_log_info("mkmodel: wrote %s: %s preset, %d tensors, %.2f GiB in %.1f s", path, m->name, specs.n,
                    (double)total / (1 << 30), nm_time_s() - t0);
done:
    free(specs.v);
    gguf_writer_free(w);
    gguf_close(vocab);
    return st;
}
