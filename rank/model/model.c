/* Model configuration from GGUF metadata and tensor binding (see model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cpu.h"
#include "layout.h"
#include "quant.h"

const char *arch_name(enum arch a) {
    switch (a) {
    case ARCH_LLAMA: return "llama";
    case ARCH_QWEN2: return "qwen2";
    case ARCH_QWEN3: return "qwen3";
    case ARCH_QWEN3MOE: return "qwen3moe";
    }
    return "?";
}

/* ---- configuration --------------------------------------------------------------------- */

struct cfg_reader {
    const struct gguf_file *f;
    const char *arch;
    char *err;
    size_t errlen;
};

static void arch_key(const struct cfg_reader *r, const char *suffix, char *key, size_t len) {
    snprintf(key, len, "%s.%s", r->arch, suffix);
}

/* An integer key that may also be stored as a per-layer array (head_count, feed_forward_length);
 * per-layer arrays must hold one value, since numallm runs uniform layers. */
static enum nm_status get_uniform_int(const struct cfg_reader *r, const char *suffix, int64_t *out) {
    char key[128];
    arch_key(r, suffix, key, sizeof key);
    const struct gguf_kv *kv = gguf_find_kv(r->f, key);
    if (!kv) return NM_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_ARRAY) return gguf_get_int(r->f, key, out, r->err, r->errlen);
    if (kv->n == 0 || kv->arr_type == GGUF_TYPE_STRING || kv->arr_type == GGUF_TYPE_FLOAT32 ||
        kv->arr_type == GGUF_TYPE_FLOAT64 || kv->arr_type == GGUF_TYPE_BOOL)
        return nm_errf(r->err, r->errlen, NM_ERR_FORMAT, "%s: key %s is an array of %llu %s; expected integers",
                       r->f->path, key, (unsigned long long)kv->n, gguf_type_name(kv->arr_type));
    for (uint64_t i = 0; kv->arr_type == GGUF_TYPE_UINT64 && i < kv->n; i++) {
        uint64_t u; /* gguf_arr_int asserts on a uint64 that does not fit in int64: refuse it first */
        memcpy(&u, kv->data + 8 * i, 8);
        if (u > (uint64_t)INT64_MAX)
            return nm_errf(r->err, r->errlen, NM_ERR_FORMAT, "%s: key %s[%llu] is %llu; it does not fit in int64",
                           r->f->path, key, (unsigned long long)i, (unsigned long long)u);
    }
    int64_t v0 = gguf_arr_int(kv, 0);
    for (uint64_t i = 1; i < kv->n; i++)
        if (gguf_arr_int(kv, i) != v0)
            return nm_errf(r->err, r->errlen, NM_ERR_UNSUPPORTED,
                           "%s: key %s differs between layers (%lld at layer 0, %lld at layer %llu); numallm "
                           "supports uniform layers only",
                           r->f->path, key, (long long)v0, (long long)gguf_arr_int(kv, i), (unsigned long long)i);
    *out = v0;
    return NM_OK;
}

static enum nm_status req_int(const struct cfg_reader *r, const char *suffix, int64_t min, int64_t *out) {
    char key[128];
    arch_key(r, suffix, key, sizeof key);
    enum nm_status st = get_uniform_int(r, suffix, out);
    if (st == NM_ERR_NOT_FOUND)
        return nm_errf(r->err, r->errlen, NM_ERR_NOT_FOUND, "%s: missing required key %s", r->f->path, key);
    if (st) return st;
    if (*out < min || *out > (int64_t)1 << 31)
        return nm_errf(r->err, r->errlen, NM_ERR_FORMAT, "%s: key %s is %lld; allowed are %lld..%lld", r->f->path,
                       key, (long long)*out, (long long)min, (long long)1 << 31);
    return NM_OK;
}

static enum nm_status opt_int(const struct cfg_reader *r, const char *suffix, int64_t min, int64_t def,
                              const char *def_why, int64_t *out) {
    char key[128];
    arch_key(r, suffix, key, sizeof key);
    enum nm_status st = get_uniform_int(r, suffix, out);
    if (st == NM_ERR_NOT_FOUND) {
        nm_log_info("%s not set; using %lld (%s)", key, (long long)def, def_why);
        *out = def;
        return NM_OK;
    }
    if (st) return st;
    if (*out < min || *out > (int64_t)1 << 31)
        return nm_errf(r->err, r->errlen, NM_ERR_FORMAT, "%s: key %s is %lld; allowed are %lld..%lld", r->f->path,
                       key, (long long)*out, (long long)min, (long long)1 << 31);
    return NM_OK;
}

static enum nm_status opt_float(const struct cfg_reader *r, const char *suffix, double def, double *out, bool *found) {
    char key[128];
    arch_key(r, suffix, key, sizeof key);
    enum nm_status st = gguf_get_float(r->f, key, out, r->err, r->errlen);
    if (found) *found = st == NM_OK;
    if (st == NM_ERR_NOT_FOUND) {
        *out = def;
        return NM_OK;
    }
    if (st) return st;
    if (!isfinite(*out))
        return nm_errf(r->err, r->errlen, NM_ERR_FORMAT, "%s: key %s is %g; it must be finite", r->f->path, key, *out);
    return NM_OK;
}

/* qwen3moe's FFN keys (FORMATS.md): expert count, experts per token, expert width; softmax
 * gating with the selected weights renormalized is the only scheme it uses. */
static enum nm_status moe_config(const struct cfg_reader *r, struct model_config *cfg) {
    enum nm_status st;
    char key[128];
    if ((st = req_int(r, "expert_count", 1, &cfg->n_expert))) return st;
    if ((st = req_int(r, "expert_used_count", 1, &cfg->n_expert_used))) return st;
    if (cfg->n_expert_used > cfg->n_expert) {
        arch_key(r, "expert_used_count", key, sizeof key);
        return nm_errf(r->err, r->errlen, NM_ERR_FORMAT, "%s: key %s is %lld; it must be at most expert_count (%lld)",
                       r->f->path, key, (long long)cfg->n_expert_used, (long long)cfg->n_expert);
    }
    if ((st = req_int(r, "expert_feed_forward_length", 1, &cfg->n_ff_exp))) return st;
    int64_t gating;
    if ((st = opt_int(r, "expert_gating_func", 0, 1, "softmax", &gating))) return st;
    if (gating != 1) {
        arch_key(r, "expert_gating_func", key, sizeof key);
        return nm_errf(r->err, r->errlen, NM_ERR_UNSUPPORTED, "%s: key %s is %lld; qwen3moe supports softmax (1) only",
                       r->f->path, key, (long long)gating);
    }
    arch_key(r, "expert_weights_norm", key, sizeof key);
    const struct gguf_kv *norm = gguf_find_kv(r->f, key);
    if (norm && norm->type == GGUF_TYPE_BOOL && norm->data[0] == 0)
        return nm_errf(r->err, r->errlen, NM_ERR_UNSUPPORTED,
                       "%s: key %s is false; qwen3moe renormalizes the selected experts' weights", r->f->path, key);
    cfg->n_ff = 0;
    return NM_OK;
}

enum nm_status model_config_read(const struct gguf_file *f, struct model_config *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    /* Say so before the architecture: vocabulary files carry ones numallm does not run. */
    if (f->n_tensors == 0)
        return nm_errf(err, errlen, NM_ERR_NOT_FOUND,
                       "%s: the file has no tensors (a vocabulary-only GGUF?); a model needs its weights", f->path);
    struct gguf_str a;
    enum nm_status st = gguf_get_str(f, "general.architecture", &a, err, errlen);
    if (st == NM_ERR_NOT_FOUND)
        return nm_errf(err, errlen, NM_ERR_NOT_FOUND, "%s: missing required key general.architecture", f->path);
    if (st) return st;
    char arch[32];
    if (a.len >= sizeof arch || a.len == 0)
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s: unknown architecture '%.*s'; supported: llama, qwen2, qwen3, "
                       "qwen3moe",
                       f->path, (int)NM_MIN(a.len, 64), a.ptr);
    memcpy(arch, a.ptr, a.len);
    arch[a.len] = 0;
    if (strcmp(arch, "llama") == 0) cfg->arch = ARCH_LLAMA;
    else if (strcmp(arch, "qwen2") == 0) cfg->arch = ARCH_QWEN2;
    else if (strcmp(arch, "qwen3") == 0) cfg->arch = ARCH_QWEN3;
    else if (strcmp(arch, "qwen3moe") == 0) cfg->arch = ARCH_QWEN3MOE;
    else
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                       "%s: unknown architecture '%s'; supported: llama, qwen2, qwen3, qwen3moe", f->path, arch);
    cfg->rope_type = cfg->arch == ARCH_LLAMA ? ROPE_TYPE_NORM : ROPE_TYPE_NEOX;

    struct cfg_reader r = {.f = f, .arch = arch, .err = err, .errlen = errlen};
    if ((st = req_int(&r, "context_length", 1, &cfg->n_ctx_train))) return st;
    if ((st = req_int(&r, "embedding_length", 1, &cfg->n_embd))) return st;
    if ((st = req_int(&r, "block_count", 1, &cfg->n_layer))) return st;
    /* Refuse an absurd block_count before anyone allocates or loops per layer (a layer has
     * several tensors). */
    if ((uint64_t)cfg->n_layer > f->n_tensors)
        return nm_errf(err, errlen, NM_ERR_MISMATCH, "%s: %s.block_count is %lld, but the file has only %llu tensors",
                       f->path, arch, (long long)cfg->n_layer, (unsigned long long)f->n_tensors);
    if (cfg->arch == ARCH_QWEN3MOE) {
        if ((st = moe_config(&r, cfg))) return st;
    } else if ((st = req_int(&r, "feed_forward_length", 1, &cfg->n_ff)))
        return st;
    if ((st = req_int(&r, "attention.head_count", 1, &cfg->n_head))) return st;
    if ((st = opt_int(&r, "attention.head_count_kv", 1, cfg->n_head, "no grouped-query attention", &cfg->n_head_kv)))
        return st;
    if (cfg->n_head % cfg->n_head_kv != 0)
        return nm_errf(err, errlen, NM_ERR_FORMAT,
                       "%s: %s.attention.head_count (%lld) is not a multiple of head_count_kv (%lld)", f->path, arch,
                       (long long)cfg->n_head, (long long)cfg->n_head_kv);
    char why[64];
    snprintf(why, sizeof why, "n_embd/n_head = %lld/%lld", (long long)cfg->n_embd, (long long)cfg->n_head);
    if ((st = opt_int(&r, "attention.key_length", 1, cfg->n_embd / cfg->n_head, why, &cfg->head_dim))) return st;
    if ((st = opt_int(&r, "attention.value_length", 1, cfg->head_dim, "key_length", &cfg->head_dim_v))) return st;
    if ((st = opt_int(&r, "rope.dimension_count", 2, cfg->head_dim, "head_dim", &cfg->n_rot))) return st;
    if (cfg->n_rot > cfg->head_dim || cfg->n_rot % 2 != 0)
        return nm_errf(err, errlen, NM_ERR_FORMAT,
                       "%s: %s.rope.dimension_count is %lld; it must be even and at most head_dim (%lld)", f->path,
                       arch, (long long)cfg->n_rot, (long long)cfg->head_dim);
    if (cfg->arch == ARCH_LLAMA && cfg->n_rot != cfg->head_dim)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: llama.rope.dimension_count is %lld; llama requires head_dim (%lld)",
                       f->path, (long long)cfg->n_rot, (long long)cfg->head_dim);

    double v;
    bool found;
    char key[128];
    if ((st = opt_float(&r, "attention.layer_norm_rms_epsilon", 0, &v, &found))) return st;
    if (!found) {
        arch_key(&r, "attention.layer_norm_rms_epsilon", key, sizeof key);
        return nm_errf(err, errlen, NM_ERR_NOT_FOUND, "%s: missing required key %s", f->path, key);
    }
    if (!(v > 0 && v < 1))
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: %s.attention.layer_norm_rms_epsilon is %g; allowed is (0, 1)",
                       f->path, arch, v);
    cfg->rms_eps = (float)v;
    if ((st = opt_float(&r, "rope.freq_base", 10000.0, &v, &found))) return st;
    if (!found) nm_log_info("%s.rope.freq_base not set; using 10000", arch);
    if (!(v > 0))
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: %s.rope.freq_base is %g; it must be > 0", f->path, arch, v);
    cfg->rope_freq_base = (float)v;

    /* RoPE scaling: none or linear (yarn is not implemented: refuse rather than run wrong). */
    cfg->rope_freq_scale = 1.0f;
    struct gguf_str stype = {0};
    arch_key(&r, "rope.scaling.type", key, sizeof key);
    st = gguf_get_str(f, key, &stype, err, errlen);
    if (st && st != NM_ERR_NOT_FOUND) return st;
    bool linear = st == NM_ERR_NOT_FOUND || gguf_str_eq(stype, "linear");
    if (st == NM_OK && !linear && !gguf_str_eq(stype, "none"))
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s: %s is '%.*s'; supported are none and linear", f->path, key,
                       (int)NM_MIN(stype.len, 64), stype.ptr);
    if (linear) {
        double factor;
        if ((st = opt_float(&r, "rope.scaling.factor", 0.0, &factor, &found))) return st;
        if (!found && (st = opt_float(&r, "rope.scale_linear", 0.0, &factor, &found))) return st;
        if (found && factor != 0.0) {
            if (!(factor > 0))
                return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: %s.rope.scaling.factor is %g; it must be > 0", f->path,
                               arch, factor);
            cfg->rope_freq_scale = (float)(1.0 / factor);
        }
    }

    /* Vocabulary size: {arch}.vocab_size, else the tokenizer's token list, else token_embd. */
    int64_t nv;
    arch_key(&r, "vocab_size", key, sizeof key);
    st = gguf_get_int(f, key, &nv, err, errlen);
    if (st && st != NM_ERR_NOT_FOUND) return st;
    if (st == NM_ERR_NOT_FOUND) {
        const struct gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
        const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
        if (toks && toks->type == GGUF_TYPE_ARRAY) nv = (int64_t)toks->n;
        else if (te && te->n_dims == 2) {
            nv = te->ne[1];
            nm_log_info("%s and tokenizer.ggml.tokens not set; n_vocab = %lld from token_embd.weight", key, (long long)nv);
        } else
            return nm_errf(err, errlen, NM_ERR_NOT_FOUND,
                           "%s: cannot tell the vocabulary size: no %s, no tokenizer.ggml.tokens, no token_embd.weight",
                           f->path, key);
    }
    if (nv < 1 || nv > (int64_t)1 << 31)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: vocabulary size %lld; allowed are 1..2^31", f->path, (long long)nv);
    cfg->n_vocab = nv;
    return NM_OK;
}

/* ---- tensor binding ---------------------------------------------------------------------
 * Two passes over the same code: the check pass validates every tensor against the full
 * configuration and computes the bytes this rank will hold; the copy pass (only if every check
 * passed) copies the slices into the arena. */

struct binder {
    struct model *m;
    const struct model_load_params *p;
    bool copy;            /* false: check only */
    uint64_t copy_bytes;  /* bytes of this rank's slices (check pass) / copied so far */
    char *err;
    size_t errlen;
    int type_count[DTYPE_COUNT];
    uint64_t expert_bytes; /* of copy_bytes, the experts' (copy pass) */
};

static enum nm_status find_tensor(struct binder *b, const char *name, bool required, const struct gguf_tensor **out) {
    *out = gguf_find_tensor(b->m->file, name);
    if (!*out && required)
        return nm_errf(b->err, b->errlen, NM_ERR_NOT_FOUND, "%s: missing tensor %s", b->m->path, name);
    if (*out && !dtype_get((*out)->type))
        return nm_errf(b->err, b->errlen, NM_ERR_UNSUPPORTED, "%s: tensor %s has type %s; supported types are %s",
                       b->m->path, name, dtype_ggml_name((*out)->type), dtype_supported_list());
    return NM_OK;
}

static enum nm_status shape_mismatch(struct binder *b, const struct gguf_tensor *t, const char *expected) {
    char got[96];
    return nm_errf(b->err, b->errlen, NM_ERR_MISMATCH, "%s: tensor %s has shape %s; the configuration expects %s",
                   b->m->path, t->name, gguf_tensor_shape_str(t, got, sizeof got), expected);
}

struct copy_job {
    const uint8_t *src;
    uint8_t *dst;
    int64_t rows;
    size_t src_stride, src_offset, bytes; /* per row: copy bytes from src + offset */
};

static void copy_worker(void *ctx, int ith, int nth) {
    const struct copy_job *j = ctx;
    long lo, hi;
    pool_split((long)j->rows, 1, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++)
        memcpy(j->dst + (size_t)r * j->bytes, j->src + (size_t)r * j->src_stride + j->src_offset, j->bytes);
}

/* Copy rows [rows.begin, rows.end) x values [cols.begin, cols.end) of a {k, n} tensor of type
 * t into the arena, on the pool's threads (so pages are first touched on the rank's node). */
static void *copy_slice(struct binder *b, const struct gguf_tensor *t, struct range rows, struct range cols) {
    const struct dtype_info *ti = dtype_get(t->type);
    NM_ASSERT(cols.begin % ti->blck_size == 0 && (cols.end % ti->blck_size == 0 || cols.end == t->ne[0]));
    const size_t src_stride = dtype_row_size((enum dtype)t->type, t->ne[0]);
    const size_t bytes = dtype_row_size((enum dtype)t->type, range_len(cols));
    uint8_t *dst = arena_alloc(b->m->arena, bytes * (size_t)range_len(rows), t->name);
    struct copy_job j = {.src = (const uint8_t *)t->data + (size_t)rows.begin * src_stride,
                         .dst = dst,
                         .rows = range_len(rows),
                         .src_stride = src_stride,
                         .src_offset = dtype_row_size((enum dtype)t->type, cols.begin),
                         .bytes = bytes};
    if (b->p->pool) pool_run(b->p->pool, copy_worker, &j);
    else copy_worker(&j, 0, 1);
    return dst;
}

/* This rank's slice of a matmul weight, in the layout the planner picks: rows `rows` and values
 * `cols` of a {k, n} tensor copied as GGUF rows, or repacked (weight_pack, the only producer of
 * packed layouts) straight from the mapped file into the arena, on the pool's threads. */
static struct weight load_matmul_slice(struct binder *b, const struct gguf_tensor *t, struct range rows,
                                       struct range cols) {
    const enum dtype type = (enum dtype)t->type;
    const enum weight_layout layout = layout_plan(TENSOR_USE_MATMUL, type, layout_cpu(), NULL);
    if (layout == WEIGHT_LAYOUT_ROWS)
        return weight_rows(type, range_len(cols), range_len(rows), copy_slice(b, t, rows, cols));
    const size_t src_stride = dtype_row_size(type, t->ne[0]);
    const uint8_t *src = (const uint8_t *)t->data + (size_t)rows.begin * src_stride + dtype_row_size(type, cols.begin);
    void *dst = arena_alloc(b->m->arena, weight_packed_bytes(layout, type, range_len(cols), range_len(rows)), t->name);
    struct weight w;
    weight_pack(b->p->pool, layout, type, range_len(cols), range_len(rows), src, src_stride, dst, &w);
    return w;
}

/* A matmul weight {k, n} (y[n] = W x[k]); this rank keeps rows `rows` and values `cols`. */
static enum nm_status bind_matmul(struct binder *b, const char *name, int64_t k, int64_t n, bool required,
                                  struct range rows, struct range cols, struct weight *w) {
    const struct gguf_tensor *t;
    enum nm_status st = find_tensor(b, name, required, &t);
    if (st || !t) return st;
    if (t->n_dims != 2 || t->ne[0] != k || t->ne[1] != n) {
        char exp[64];
        snprintf(exp, sizeof exp, "{%lld, %lld}", (long long)k, (long long)n);
        return shape_mismatch(b, t, exp);
    }
    const size_t slice_bytes = dtype_row_size((enum dtype)t->type, range_len(cols)) * (size_t)range_len(rows);
    if (!b->copy) {
        b->m->weight_bytes += t->size;
        b->m->n_params += (uint64_t)(k * n);
        b->type_count[t->type]++;
        b->copy_bytes += slice_bytes;
        *w = weight_rows((enum dtype)t->type, k, n, t->data); /* marks the tensor present */
        return NM_OK;
    }
    *w = load_matmul_slice(b, t, rows, cols);
    b->copy_bytes += slice_bytes;
    return NM_OK;
}

/* A vector {n} used as f32 (norm weights, biases): this rank's values [part), converted to an
 * f32 copy in the arena. */
static enum nm_status bind_vec(struct binder *b, const char *name, int64_t n, bool required, struct range part,
                               const float **out) {
    const struct gguf_tensor *t;
    *out = NULL;
    enum nm_status st = find_tensor(b, name, required, &t);
    if (st || !t) return st;
    if (t->n_dims != 1 || t->ne[0] != n) {
        char exp[32];
        snprintf(exp, sizeof exp, "{%lld}", (long long)n);
        return shape_mismatch(b, t, exp);
    }
    if (!b->copy) {
        b->m->weight_bytes += t->size;
        b->m->n_params += (uint64_t)n;
        b->copy_bytes += (uint64_t)range_len(part) * sizeof(float);
        *out = t->data; /* marks the tensor present */
        return NM_OK;
    }
    float *copy = arena_alloc(b->m->arena, (size_t)n * sizeof(float), name);
    dequantize_row_ref((enum dtype)t->type, t->data, copy, n); /* f32 vectors: a copy */
    memmove(copy, copy + part.begin, (size_t)range_len(part) * sizeof(float));
    b->copy_bytes += (uint64_t)range_len(part) * sizeof(float);
    *out = copy;
    return NM_OK;
}

static struct range whole(int64_t n) { return (struct range){0, n}; }
static struct range times(struct range r, int64_t f) { return (struct range){r.begin * f, r.end * f}; }
static struct range shift(struct range r, int64_t d) { return (struct range){r.begin + d, r.end + d}; }

/* The experts of a qwen3moe layer: a 3-D tensor {k, n, n_expert}, expert e being the {k, n}
 * matrix of rows [e*n, (e+1)*n). This rank keeps rows `rows` and values `cols` of every expert,
 * each expert a weight of its own in *out (an array of n_expert in the arena). */
static enum nm_status bind_experts(struct binder *b, const char *name, int64_t k, int64_t n, struct range rows,
                                   struct range cols, struct weight **out) {
    const int64_t n_expert = b->m->cfg.n_expert;
    const struct gguf_tensor *t;
    *out = NULL;
    enum nm_status st = find_tensor(b, name, true, &t);
    if (st) return st;
    if (t->n_dims != 3 || t->ne[0] != k || t->ne[1] != n || t->ne[2] != n_expert) {
        char exp[80];
        snprintf(exp, sizeof exp, "{%lld, %lld, %lld}", (long long)k, (long long)n, (long long)n_expert);
        return shape_mismatch(b, t, exp);
    }
    const struct dtype_info *ti = dtype_get(t->type);
    if (cols.begin % ti->blck_size || (cols.end % ti->blck_size && cols.end != k))
        return nm_errf(b->err, b->errlen, NM_ERR_UNSUPPORTED, "%s: tensor %s: columns %lld..%lld are not whole %s blocks",
                       b->m->path, name, (long long)cols.begin, (long long)cols.end, ti->name);
    const size_t slice_bytes = dtype_row_size((enum dtype)t->type, range_len(cols)) * (size_t)range_len(rows);
    if (!b->copy) {
        b->m->weight_bytes += t->size;
        b->m->n_params += (uint64_t)(k * n * n_expert);
        b->type_count[t->type]++;
        b->copy_bytes += slice_bytes * (uint64_t)n_expert;
        return NM_OK;
    }
    struct weight *w = arena_alloc(b->m->arena, (size_t)n_expert * sizeof *w, name);
    for (int64_t e = 0; e < n_expert; e++)
        w[e] = load_matmul_slice(b, t, shift(rows, e * n), cols);
    b->copy_bytes += slice_bytes * (uint64_t)n_expert;
    b->expert_bytes += slice_bytes * (uint64_t)n_expert;
    *out = w;
    return NM_OK;
}

static enum nm_status bind_layer(struct binder *b, int il, struct layer_weights *L) {
    const struct model_config *c = &b->m->cfg;
    const struct shard *s = &b->m->shard;
    const int64_t e = c->n_embd, q = c->n_head * c->head_dim, kv = c->n_head_kv * c->head_dim,
                  vv = c->n_head_kv * c->head_dim_v, o = c->n_head * c->head_dim_v;
    const struct range rq = times(s->q_heads, c->head_dim), rk = times(s->kv_heads, c->head_dim),
                       rv = times(s->kv_heads, c->head_dim_v), E = whole(e);
    const bool qwen2 = c->arch == ARCH_QWEN2, qwen3 = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE;
    char name[GGUF_MAX_NAME];
    enum nm_status st;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    if ((st = bind_vec(b, NAME("attn_norm.weight"), e, true, E, &L->attn_norm))) return st;
    if ((st = bind_matmul(b, NAME("attn_q.weight"), e, q, true, rq, E, &L->wq))) return st;
    if ((st = bind_matmul(b, NAME("attn_k.weight"), e, kv, true, rk, E, &L->wk))) return st;
    if ((st = bind_matmul(b, NAME("attn_v.weight"), e, vv, true, rv, E, &L->wv))) return st;
    if ((st = bind_matmul(b, NAME("attn_output.weight"), o, e, true, E, s->wo_cols, &L->wo))) return st;
    if ((st = bind_vec(b, NAME("attn_q.bias"), q, qwen2, rq, &L->bq))) return st;
    if ((st = bind_vec(b, NAME("attn_k.bias"), kv, qwen2, rk, &L->bk))) return st;
    if ((st = bind_vec(b, NAME("attn_v.bias"), vv, qwen2, rv, &L->bv))) return st;
    if ((st = bind_vec(b, NAME("attn_output.bias"), e, false, E, &L->bo))) return st;
    if ((st = bind_vec(b, NAME("attn_q_norm.weight"), c->head_dim, qwen3, whole(c->head_dim), &L->q_norm))) return st;
    if ((st = bind_vec(b, NAME("attn_k_norm.weight"), c->head_dim, qwen3, whole(c->head_dim), &L->k_norm))) return st;
    if ((st = bind_vec(b, NAME("ffn_norm.weight"), e, true, E, &L->ffn_norm))) return st;
    if (c->n_expert > 0) {
        const int64_t x = c->n_ff_exp;
        if ((st = bind_matmul(b, NAME("ffn_gate_inp.weight"), e, c->n_expert, true, whole(c->n_expert), E, &L->router)))
            return st;
        if ((st = bind_experts(b, NAME("ffn_gate_exps.weight"), e, x, s->ff, E, &L->gate_exps))) return st;
        if ((st = bind_experts(b, NAME("ffn_up_exps.weight"), e, x, s->ff, E, &L->up_exps))) return st;
        if ((st = bind_experts(b, NAME("ffn_down_exps.weight"), x, e, E, s->ff, &L->down_exps))) return st;
    } else {
        if ((st = bind_matmul(b, NAME("ffn_gate.weight"), e, c->n_ff, true, s->ff, E, &L->w_gate))) return st;
        if ((st = bind_matmul(b, NAME("ffn_up.weight"), e, c->n_ff, true, s->ff, E, &L->w_up))) return st;
        if ((st = bind_matmul(b, NAME("ffn_down.weight"), c->n_ff, e, true, E, s->ff, &L->w_down))) return st;
    }
#undef NAME
    if (!qwen3 && (L->q_norm || L->k_norm)) {
        if (!b->copy)
            nm_log_warn("blk.%d has attn_q_norm/attn_k_norm, which %s does not use; ignored", il, arch_name(c->arch));
        L->q_norm = L->k_norm = NULL;
    }
    return NM_OK;
}

/* The output head: this rank's vocabulary rows of output.weight (of token_embd.weight when
 * tied) and of the optional bias. */
static enum nm_status bind_head(struct binder *b, const struct gguf_tensor *te) {
    struct model *m = b->m;
    const struct model_config *c = &m->cfg;
    const struct range V = m->shard.vocab, E = whole(c->n_embd);
    enum nm_status st;
    if (m->output_tied && !b->copy) {
        /* The head reads this rank's rows of the embedding table: count its bytes, not the
         * parameters again. */
        b->copy_bytes += dtype_row_size(m->tok_embd.type, c->n_embd) * (uint64_t)range_len(V);
        nm_log_info("output.weight absent: output head tied to token_embd.weight");
    } else if (m->output_tied) {
        m->output = load_matmul_slice(b, te, V, E);
        b->copy_bytes += dtype_row_size(m->tok_embd.type, c->n_embd) * (uint64_t)range_len(V);
    } else {
        if ((st = bind_matmul(b, "output.weight", c->n_embd, c->n_vocab, true, V, E, &m->output))) return st;
        if (!b->copy) b->type_count[m->output.type]++;
    }
    return bind_vec(b, "output.bias", c->n_vocab, false, V, &m->output_bias);
}

/* Everything except the layers: embedding (left in the mapped file: one row is read per token),
 * output norm, output head rows, optional bias and RoPE factors. With the head on the GPU rank
 * it is checked (first pass) but neither counted nor loaded. */
static enum nm_status bind_globals(struct binder *b) {
    struct model *m = b->m;
    const struct model_config *c = &m->cfg;
    enum nm_status st;
    const struct gguf_tensor *te;
    if ((st = find_tensor(b, "token_embd.weight", true, &te))) return st;
    if (te->n_dims != 2 || te->ne[0] != c->n_embd || te->ne[1] != c->n_vocab) {
        char exp[64];
        snprintf(exp, sizeof exp, "{%lld, %lld}", (long long)c->n_embd, (long long)c->n_vocab);
        return shape_mismatch(b, te, exp);
    }
    m->tok_embd = weight_rows((enum dtype)te->type, c->n_embd, c->n_vocab, te->data);
    if (!b->copy) {
        m->weight_bytes += te->size;
        m->n_params += (uint64_t)(c->n_embd * c->n_vocab);
    }
    if ((st = bind_vec(b, "output_norm.weight", c->n_embd, true, whole(c->n_embd), &m->output_norm))) return st;
    m->output_tied = !gguf_find_tensor(m->file, "output.weight");
    const uint64_t before = b->copy_bytes;
    if (!(b->copy && m->head_remote) && (st = bind_head(b, te))) return st;
    if (m->head_remote) b->copy_bytes = before;
    return bind_vec(b, "rope_freqs.weight", c->n_rot / 2, false, whole(c->n_rot / 2), &m->rope_freqs);
}

/* Load progress of all ranks, summed on every rank once per layer (every rank loads the layers
 * in the same order) and printed by rank 0 every few seconds. total_mib: all ranks' bytes. */
static void report_progress(struct binder *b, int layer, int64_t n_layer, float total_mib, double t0, double *last) {
    float done = (float)((double)b->copy_bytes / (1 << 20));
    if (b->p->coll) coll_allreduce_sum_f32(b->p->coll, &done, &done, 1);
    const double now = nm_time_s();
    if (b->p->rank == 0 && (now - *last > 2.0 || layer + 1 == n_layer)) {
        nm_log_info("loading: %d/%lld layers, %.0f of %.0f MiB (all ranks), %.2f GB/s", layer + 1, (long long)n_layer, done, total_mib, (double)done * (1 << 20) / 1e9 / (now - t0));
        *last = now;
    }
}

static enum nm_status bind_all(struct binder *b) {
    float total_mib = (float)((double)b->copy_bytes / (1 << 20)); /* from the check pass */
    if (b->copy && b->p->coll) coll_allreduce_sum_f32(b->p->coll, &total_mib, &total_mib, 1);
    if (b->copy) b->copy_bytes = 0;
    const double t0 = nm_time_s();
    double last = t0;
    enum nm_status st = bind_globals(b);
    if (st) return st;
    for (int il = 0; il < b->m->cfg.n_layer; il++) {
        if (b->copy && il >= b->m->n_layer_local) break; /* the GPU rank's layers: checked only */
        const uint64_t before = b->copy_bytes;
        if ((st = bind_layer(b, il, &b->m->layers[il]))) return st;
        if (il >= b->m->n_layer_local) b->copy_bytes = before;
        if (b->copy) report_progress(b, il, b->m->n_layer_local, total_mib, t0, &last);
    }
    return NM_OK;
}

enum nm_status model_load_file(struct gguf_file *f, const struct model_load_params *params, struct model **out,
                               char *err, size_t errlen) {
    static const struct model_load_params k_single = {.rank = 0, .nranks = 1};
    const struct model_load_params *p = params ? params : &k_single;
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    NM_ASSERT(m);
    m->file = f;
    m->path = f->path;
    struct binder b = {.m = m, .p = p, .err = err, .errlen = errlen};
    enum nm_status st;
    if ((st = model_config_read(f, &m->cfg, err, errlen))) goto fail;
    if (f->n_parts > 1) nm_log_info("%s: the first of %u files of a split model (all found and checked)", f->path, f->n_parts);
    const struct model_config *c = &m->cfg;
    const struct gguf_tensor *wo = gguf_find_tensor(f, "blk.0.attn_output.weight");
    const struct gguf_tensor *down =
        gguf_find_tensor(f, c->n_expert ? "blk.0.ffn_down_exps.weight" : "blk.0.ffn_down.weight");
    struct shard_types types = {.wo = wo && dtype_get(wo->type) ? (enum dtype)wo->type : DTYPE_F32,
                                .w_down = down && dtype_get(down->type) ? (enum dtype)down->type : DTYPE_F32};
    if ((st = shard_plan(c, &types, p->rank, p->nranks, &m->shard, err, errlen))) goto fail;
    if (p->n_gpu_layers < 0) {
        st = nm_errf(err, errlen, NM_ERR_ARGS, "-ngl %lld: the GPU layer count must be >= 0", (long long)p->n_gpu_layers);
        goto fail;
    }
    m->n_layer_local = c->n_layer - NM_MIN(p->n_gpu_layers, c->n_layer);
    m->head_remote = p->n_gpu_layers > 0;
    if (m->head_remote) /* rank 0 receives the whole vocabulary's logits from the GPU rank */
        m->shard.vocab = p->rank == 0 ? (struct range){0, c->n_vocab} : (struct range){c->n_vocab, c->n_vocab};
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    NM_ASSERT(m->layers);

    /* Pass 1: check everything. */
    if ((st = bind_all(&b))) goto fail;
    int best = -1;
    for (int t = 0; t < DTYPE_COUNT; t++)
        if (b.type_count[t] > 0 && (best < 0 || b.type_count[t] > b.type_count[best])) best = t;
    m->cfg.weight_type = best < 0 ? DTYPE_F32 : (enum dtype)best;

    /* Pass 2: copy this rank's slices into node-local memory. */
    const double t0 = nm_time_s();
    m->arena = arena_init(-1);
    memset(m->layers, 0, (size_t)c->n_layer * sizeof *m->layers);
    b.copy = true;
    if ((st = bind_all(&b))) goto fail;
    m->loaded_bytes = b.copy_bytes;
    m->token_bytes = b.copy_bytes;
    if (c->n_expert > 0) /* a token reads expert_used_count of the n_expert experts */
        m->token_bytes -= b.expert_bytes / (uint64_t)c->n_expert * (uint64_t)(c->n_expert - c->n_expert_used);
    m->load_seconds = nm_time_s() - t0;
    *out = m;
    return NM_OK;
fail:
    model_free(m);
    return st;
}

enum nm_status model_load(const char *path, const struct model_load_params *p, struct model **out, char *err,
                          size_t errlen) {
    struct gguf_file *f;
    *out = NULL;
    enum nm_status st = gguf_open(path, &f, err, errlen);
    if (st) return st;
    return model_load_file(f, p, out, err, errlen);
}

void model_free(struct model *m) {
    if (!m) return;
    arena_free(m->arena);
    free(m->layers);
    gguf_close(m->file);
    free(m);
}

/* The names llama.cpp gives its mixes (general.file_type, a llama_ftype; llama_model_ftype_name),
 * so the model column reads as llama-bench's does; ids it does not list are described by the
 * most common weight type instead. */
static const char *ftype_name(uint32_t ftype) {
    switch (ftype & ~1024u) { /* 1024: llama.cpp's "guessed" flag */
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 19: return "IQ2_XXS - 2.0625 bpw";
    case 20: return "IQ2_XS - 2.3125 bpw";
    case 21: return "Q2_K - Small";
    case 22: return "IQ3_XS - 3.3 bpw";
    case 23: return "IQ3_XXS - 3.0625 bpw";
    case 24: return "IQ1_S - 1.5625 bpw";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 26: return "IQ3_S - 3.4375 bpw";
    case 27: return "IQ3_S mix - 3.66 bpw";
    case 28: return "IQ2_S - 2.5 bpw";
    case 29: return "IQ2_M - 2.7 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 31: return "IQ1_M - 1.75 bpw";
    case 32: return "BF16";
    default: return NULL;
    }
}

void model_describe(const struct model *m, char *buf, size_t len) {
    double p = (double)m->n_params;
    char size[32];
    if (p >= 1e9) snprintf(size, sizeof size, "%.1fB", p / 1e9);
    else snprintf(size, sizeof size, "%.0fM", p / 1e6);
    int64_t ftype = -1;
    if (gguf_find_kv(m->file, "general.file_type") && gguf_get_int(m->file, "general.file_type", &ftype, NULL, 0) == NM_OK &&
        ftype >= 0 && ftype <= UINT32_MAX && ftype_name((uint32_t)ftype)) {
        snprintf(buf, len, "%s %s %s", arch_name(m->cfg.arch), size, ftype_name((uint32_t)ftype));
        return;
    }
    const struct dtype_info *ti = dtype_get(m->cfg.weight_type);
    char tname[16];
    snprintf(tname, sizeof tname, "%s", ti ? ti->name : "?");
    for (char *c = tname; *c; c++)
        if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
    snprintf(buf, len, "%s %s %s", arch_name(m->cfg.arch), size, tname);
}

void model_embed_row(const struct model *m, int32_t token, float *out) {
    NM_ASSERT(token >= 0 && token < m->cfg.n_vocab);
    const struct weight *w = &m->tok_embd;
    dequantize_row_ref(w->type, (const uint8_t *)w->data + (size_t)token * w->row_bytes, out, w->k);
}
