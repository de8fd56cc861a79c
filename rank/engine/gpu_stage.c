/* The GPU rank's engine (see gpu_stage.h): binding and uploading its tensors, then the forward
 * pass of rank/engine/forward.c on the device, read top to bottom: gpu_stage_eval -> eval_chunk ->
 * attention and FFN (dense or MoE) per layer -> output head. Host-side C11; every device
 * operation goes through kernels/cuda/cuda_kernels.h. */
#include "gpu_stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "ops.h"
#include "quant.h"

/* A matmul weight on the device, in its GGUF block form: n rows of k values (n_expert such
 * matrices, expert_bytes apart, for the 3-D expert tensors). */
struct gmat {
    enum dtype type;
    int64_t k, n, n_expert;
    size_t row_bytes, expert_bytes;
    const void *d;
    const void *d16; /* the prompt path's f16 copy (keep_f16), or NULL: dequantized per call */
};

/* The most rows the decode path may take (decode_rows_of): the tensor-core matmul's. */
#define DECODE_MAX_ROWS CUK_MMQ_MAX_ROWS

struct glayer {
    bool moe;
    const float *attn_norm;           /* [n_embd] f32 */
    struct gmat wq, wk, wv, wo;       /* [n_embd -> n_head*head_dim], [.. -> n_head_kv*head_dim],
                                         [.. -> n_head_kv*head_dim_v], [n_head*head_dim_v -> n_embd] */
    const float *bq, *bk, *bv, *bo;   /* optional biases, f32 */
    const float *q_norm, *k_norm;     /* [head_dim] f32, qwen3 / qwen3moe */
    const float *ffn_norm;            /* [n_embd] f32 */
    struct gmat w_gate, w_up, w_down; /* dense: [n_embd -> n_ff] x2, [n_ff -> n_embd] */
    struct gmat w_router;             /* MoE: [n_embd -> n_expert] */
    struct gmat gate_exps, up_exps;   /* MoE: n_expert x [n_embd -> n_ff_exp] */
    struct gmat down_exps;            /* MoE: n_expert x [n_ff_exp -> n_embd] */
};

struct gpu_stage {
    struct cuk_ctx *ctx;
    struct model_config cfg;
    int64_t layer_first, n_ctx;
    int n_batch;
    int n_seq;          /* sequences held */
    int64_t n_ctx_seq;  /* positions each holds: sequence q's position p is cache row q * n_ctx_seq + p */
    int64_t *seq_pos;   /* [n_seq] positions each holds now */
    uint8_t *seq_seen;  /* [n_seq] scratch of the batch check */
    enum dtype kv_type;
    int64_t n_expert, n_expert_used, n_ff_exp; /* 0 without MoE layers */
    struct glayer *layers;                     /* [n_layer - layer_first] */
    const float *output_norm;                  /* [n_embd] f32 */
    struct gmat output;                        /* [n_embd -> n_vocab] (token_embd when tied) */
    const float *output_bias;                  /* [n_vocab] f32, optional */
    bool output_tied;

    /* Weights: one device allocation, filled at open through upload_weight only. */
    uint8_t *wbuf;
    uint8_t *f16buf; /* the dense weights' f16 copies (keep_f16), made from wbuf at open, or NULL */
    size_t wbuf_bytes, wbuf_used;
    uint64_t weight_bytes, weight_bytes_after_load;
    int n_tensors;
    bool loaded;

    /* KV cache of the stage's layers: per layer [n_ctx][k_row] and [n_ctx][v_row]. */
    void *kv_k, *kv_v;
    int64_t k_row, v_row;
    uint64_t kv_bytes;
    float *rope; /* [n_ctx][n_rot] cos/sin pairs from op_rope_cache, computed once */

    /* Scratch for one chunk of n_batch rows. */
    float *x, *xn, *q, *k, *v, *att, *proj, *gate, *up;
    float *xq; /* [n_batch][max k] a matmul input rounded as the CPU ranks do (matmul_input) */
    void *xq8; /* q8 of a matmul input: CUK_MMQ_MAX_ROWS rows of the widest k (cuk_q8_bytes) */
    float *router, *moe_w, *moe_down;
    int32_t *moe_ids;
    float *logits; /* [logit_rows][n_vocab] */
    int logit_rows;
    const float *last_logits;
    /* rows of logits kept for top-k: asked rows held_ask0 .. held_ask0 + held_n - 1 of the last
     * evaluation are rows held_dev[..] of logits */
    int held_ask0, held_n, held_dev[PIPELINE_KEPT_ROWS + 1];
    void *topk_scratch;
    float *pin_in, *pin_out; /* page-locked staging: [n_batch][n_embd], [logit_rows][n_vocab] */

    /* The chunk's rows' places (cuda_kernels.h: position, first cache row of the sequence),
     * [n_batch][2]: built in rows (host), copied to d_rows for the decode kernels. */
    int64_t *rows, *d_rows;

    /* Chunks of up to decode_rows rows take the decode path (decode_rows_of). A decode step of
     * n rows whose first row asks for logits (one token, or one token of each of n sequences,
     * with pieces of prompts after them; the head then runs on all n rows) as one CUDA graph,
     * decode_graph[n - 1], captured at the first such step and then replayed: the rows' places
     * are read from d_rows, filled from pin_rows by the graph itself, as their hidden states
     * from pin_in. */
    int decode_rows;
    struct cuk_graph *decode_graph[DECODE_MAX_ROWS];
    bool use_graph; /* false with NM_GPU_GRAPHS=0 */
    int64_t *pin_rows; /* [DECODE_MAX_ROWS][2] */

    engine_layer_hook hook;
    void *hook_ctx;
    float *hook_buf;
};

/* ---- the prompt path's f16 copies ------------------------------------------------------------
 * A prompt's matmul (more than CUK_GEMV_MAX_ROWS rows; more than CUK_MMQ_MAX_ROWS for the types
 * of the int8 tensor cores) is a cuBLAS GEMM on f16 weights. Without
 * copies each call dequantizes its weight to f16 in tiles first (reading the blocks, writing
 * their values as f16 and reading those again, for every chunk of every prompt); where the device
 * has room once the stage is allocated, every dense matmul weight is dequantized here, once, into
 * an f16 copy the GEMMs read instead (F16 weights are their own copy). The same values either way
 * (the same dequantization kernel), so the same results up to cuBLAS's choice of algorithm for
 * the shape. Not for the MoE experts (their prompt path is the expert GEMV). NM_GPU_F16=0: none. */

/* The dense matmul weights of the stage (its layers' and the head's; not the MoE experts), into w
 * (up to cap, 7 a layer and the head); their count. Without f32, those of F32 are left out (the
 * prompt GEMM's f16 copies are not made for them). */
static int dense_mats(struct gpu_stage *s, struct gmat **w, int cap, bool f32) {
    int n = 0;
#define ADD(m)                                                                                                     \
    do {                                                                                                           \
        if ((m)->d && (m)->n_expert == 0 && (f32 || (m)->type != DTYPE_F32)) {                                     \
            NM_ASSERT(n < cap);                                                                                    \
            w[n++] = (m);                                                                                          \
        }                                                                                                          \
    } while (0)
    for (int64_t l = 0; l < s->cfg.n_layer - s->layer_first; l++) {
        struct glayer *L = &s->layers[l];
        ADD(&L->wq);
        ADD(&L->wk);
        ADD(&L->wv);
        ADD(&L->wo);
        if (!L->moe) {
            ADD(&L->w_gate);
            ADD(&L->w_up);
            ADD(&L->w_down);
        }
    }
    ADD(&s->output);
#undef ADD
    return n;
}

/* The most rows of a chunk that take the decode path (layer_decode: the fused kernels, and one
 * CUDA graph per row count): CUK_GEMV_MAX_ROWS, and up to DECODE_MAX_ROWS when the stage's layers
 * are dense and every matmul of them and the head runs on the int8 tensor cores at that many rows,
 * as their q8 activations allow (k a multiple of 32); *why says what kept it at CUK_GEMV_MAX_ROWS
 * ("" when nothing did). Then a server's step of 16 decode rows and a 32-row piece of a new prompt
 * is one graph on the tensor cores instead of cuBLAS's GEMMs on f16 copies launched one by one
 * (measured: RESULTS.md, session 22). Its decode rows also get the bits of a step of their own:
 * the tensor-core matmul's arithmetic does not depend on the row count, and decode rows take the
 * one-row attention kernel either way (test_gpu_stage, decode_rows_keep_bits). */
static int decode_rows_of(struct gpu_stage *s, const char **why) {
    const int m = NM_MIN(DECODE_MAX_ROWS, NM_MIN(s->n_batch, s->logit_rows));
    *why = "";
    if (m <= CUK_GEMV_MAX_ROWS) return CUK_GEMV_MAX_ROWS;
    if (s->n_expert > 0) {
        *why = "; MoE layers";
        return CUK_GEMV_MAX_ROWS;
    }
    const int cap = (int)(7 * (s->cfg.n_layer - s->layer_first) + 1);
    struct gmat **w = malloc((size_t)cap * sizeof *w);
    NM_ASSERT(w);
    const int nw = dense_mats(s, w, cap, true);
    int rows = m;
    for (int i = 0; i < nw && rows == m; i++)
        if (w[i]->k % 32 != 0 || !cuk_q8_tensor_cores(s->ctx, w[i]->type, m)) {
            *why = "; not every matmul on the tensor cores";
            rows = CUK_GEMV_MAX_ROWS;
        }
    free(w);
    return rows;
}

static void keep_f16(struct gpu_stage *s) {
    const char *env = getenv("NM_GPU_F16");
    if (env && strcmp(env, "0") == 0) {
        nm_log_info("GPU: prompt matmuls dequantize their weights to f16 per call (NM_GPU_F16=0)");
        return;
    }
    const int cap = (int)(7 * (s->cfg.n_layer - s->layer_first) + 1);
    struct gmat **w = malloc((size_t)cap * sizeof *w);
    NM_ASSERT(w);
    const int nw = dense_mats(s, w, cap, false);
    size_t bytes = 0;
    for (int i = 0; i < nw; i++)
        if (w[i]->type != DTYPE_F16 || w[i]->row_bytes != (size_t)w[i]->k * 2)
            bytes += ((size_t)w[i]->n * (size_t)w[i]->k * 2 + 255) / 256 * 256;
    uint64_t fr, tot;
    cuk_mem_info(s->ctx, &fr, &tot);
    const uint64_t room = (1ull << 30) + tot / 50; /* left free: 1 GiB and 2% of the device */
    if (bytes + room > fr) {
        nm_log_info("GPU: prompt matmuls dequantize their weights to f16 per call (f16 copies would need %.1f GiB; "
                    "%.1f GiB free)",
                    (double)bytes / (1 << 30), (double)fr / (1 << 30));
        free(w);
        return;
    }
    if (bytes) s->f16buf = cuk_malloc(s->ctx, bytes, "f16 copies of the weights", NULL, 0);
    if (bytes && !s->f16buf) {
        nm_log_info("GPU: prompt matmuls dequantize their weights to f16 per call (no %.1f GiB for f16 copies)",
                    (double)bytes / (1 << 30));
        free(w);
        return;
    }
    const double t0 = nm_time_s();
    size_t off = 0;
    for (int i = 0; i < nw; i++) {
        if (w[i]->type == DTYPE_F16 && w[i]->row_bytes == (size_t)w[i]->k * 2) {
            w[i]->d16 = w[i]->d;
            continue;
        }
        w[i]->d16 = s->f16buf + off;
        cuk_dequant_f16(s->ctx, w[i]->type, w[i]->d, w[i]->k, w[i]->n, s->f16buf + off);
        off += ((size_t)w[i]->n * (size_t)w[i]->k * 2 + 255) / 256 * 256;
    }
    cuk_sync(s->ctx);
    nm_log_info("GPU: prompt matmuls on f16 copies of %d weights made at load, %.1f GiB in %.2f s (NM_GPU_F16=0: "
                "dequantized per call instead)",
                nw, (double)bytes / (1 << 30), nm_time_s() - t0);
    free(w);
}

/* ---- devices ------------------------------------------------------------------------------ */

int gpu_device_count(char *why, size_t whylen) { return cuk_device_count(why, whylen); }

enum nm_status gpu_device_info(int dev, struct cuk_device_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char why[256];
    const int n = cuk_device_count(why, sizeof why);
    if (n == 0) return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s", why);
    if (dev < 0 || dev >= n) return nm_errf(err, errlen, NM_ERR_ARGS, "CUDA device %d; devices are 0..%d", dev, n - 1);
    if (cuk_device_info_get(dev, out, why, sizeof why)) return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s", why);
    return NM_OK;
}

/* ---- binding: a check-and-size pass, then an upload pass over the same code ---------------- */

#define WALIGN 256 /* every tensor starts on this boundary in the weight buffer */

struct binder {
    struct gpu_stage *s;
    const struct gguf_file *f;
    bool upload; /* false: check and size only */
    char *err;
    size_t errlen;
};

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The one way a weight reaches the device (DESIGN lesson 1): counted, and fatal after load. */
static void upload_weight(struct gpu_stage *s, const char *name, void *dst, const void *src, size_t bytes) {
    if (s->loaded) {
        s->weight_bytes_after_load += bytes;
        nm_fatal("GPU: weight %s (%zu bytes) uploaded after load; weights are uploaded once, at open (a bug)", name,
                 bytes);
    }
    cuk_h2d(s->ctx, dst, src, bytes);
    s->weight_bytes += bytes;
    s->n_tensors++;
}

/* Room for bytes in the weight buffer: sized in the check pass, handed out in the upload pass. */
static void *wbuf_take(struct binder *b, size_t bytes) {
    struct gpu_stage *s = b->s;
    const size_t off = s->wbuf_used;
    s->wbuf_used = align_up(off + bytes, WALIGN);
    if (!b->upload) return NULL;
    NM_ASSERT(s->wbuf_used <= s->wbuf_bytes);
    return s->wbuf + off;
}

static enum nm_status shape_mismatch(struct binder *b, const struct gguf_tensor *t, const char *expected) {
    char got[96];
    return nm_errf(b->err, b->errlen, NM_ERR_MISMATCH, "%s: tensor %s has shape %s; the configuration expects %s",
                   b->f->path, t->name, gguf_tensor_shape_str(t, got, sizeof got), expected);
}

/* The names of the types the device can multiply, comma separated, for error messages. */
static const char *gpu_types_list(char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t id = 0; id < DTYPE_COUNT; id++) {
        if (!dtype_get(id) || !cuk_matmul_type_supported((enum dtype)id)) continue;
        const int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", dtype_get(id)->name);
        if (w < 0 || (size_t)w >= len - at) break; /* a display string: cut if it must be */
        at += (size_t)w;
    }
    return buf;
}

/* A matmul weight {k, n} or, with n_expert > 0, {k, n, n_expert}. */
static enum nm_status bind_mat(struct binder *b, const char *name, int64_t k, int64_t n, int64_t n_expert,
                               bool required, struct gmat *w) {
    memset(w, 0, sizeof *w);
    const struct gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t) return required ? nm_errf(b->err, b->errlen, NM_ERR_NOT_FOUND, "%s: missing tensor %s", b->f->path, name) : NM_OK;
    const uint32_t nd = n_expert > 0 ? 3 : 2;
    if (t->n_dims != nd || t->ne[0] != k || t->ne[1] != n || (n_expert > 0 && t->ne[2] != n_expert)) {
        char exp[80];
        if (n_expert > 0) snprintf(exp, sizeof exp, "{%lld, %lld, %lld}", (long long)k, (long long)n, (long long)n_expert);
        else snprintf(exp, sizeof exp, "{%lld, %lld}", (long long)k, (long long)n);
        return shape_mismatch(b, t, exp);
    }
    const enum dtype ty = (enum dtype)t->type;
    if (!dtype_get(t->type) || !cuk_matmul_type_supported(ty)) {
        char list[512];
        return nm_errf(b->err, b->errlen, NM_ERR_UNSUPPORTED,
                       "%s: tensor %s has type %s, which has no CUDA kernel; the GPU rank supports %s", b->f->path,
                       name, dtype_ggml_name(t->type), gpu_types_list(list, sizeof list));
    }
    const struct dtype_info *ti = dtype_get(t->type);
    if (k % ti->blck_size != 0)
        return nm_errf(b->err, b->errlen, NM_ERR_MISMATCH, "%s: tensor %s: row length %lld is not a multiple of %s's block of %d",
                       b->f->path, name, (long long)k, ti->name, ti->blck_size);
    w->type = ty;
    w->k = k;
    w->n = n;
    w->n_expert = n_expert;
    w->row_bytes = dtype_row_size(ty, k);
    w->expert_bytes = w->row_bytes * (size_t)n;
    const size_t bytes = w->expert_bytes * (size_t)(n_expert > 0 ? n_expert : 1);
    NM_ASSERT(bytes == t->size);
    void *dst = wbuf_take(b, bytes);
    if (b->upload) upload_weight(b->s, name, dst, t->data, bytes);
    w->d = dst;
    return NM_OK;
}

/* A vector {n} used as f32 (norms, biases): converted on the host, uploaded as f32. */
static enum nm_status bind_vec(struct binder *b, const char *name, int64_t n, bool required, const float **out) {
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t) return required ? nm_errf(b->err, b->errlen, NM_ERR_NOT_FOUND, "%s: missing tensor %s", b->f->path, name) : NM_OK;
    if (t->n_dims != 1 || t->ne[0] != n) {
        char exp[32];
        snprintf(exp, sizeof exp, "{%lld}", (long long)n);
        return shape_mismatch(b, t, exp);
    }
    const struct dtype_info *ti = dtype_get(t->type);
    if (!ti || n % ti->blck_size != 0)
        return nm_errf(b->err, b->errlen, NM_ERR_UNSUPPORTED, "%s: tensor %s has type %s; a vector must be f32, f16 or bf16",
                       b->f->path, name, dtype_ggml_name(t->type));
    const size_t bytes = (size_t)n * sizeof(float);
    void *dst = wbuf_take(b, bytes);
    if (b->upload) {
        float *tmp = malloc(bytes);
        NM_ASSERT(tmp);
        dequantize_row_ref((enum dtype)t->type, t->data, tmp, n);
        upload_weight(b->s, name, dst, tmp, bytes); /* returns once tmp may be reused */
        free(tmp);
    }
    *out = b->upload ? dst : (const float *)(uintptr_t)1; /* marks it present in the check pass */
    return NM_OK;
}

static enum nm_status bind_layer(struct binder *b, int il, struct glayer *L) {
    const struct gpu_stage *s = b->s;
    const struct model_config *c = &s->cfg;
    const int64_t e = c->n_embd, q = c->n_head * c->head_dim, kv = c->n_head_kv * c->head_dim,
                  vv = c->n_head_kv * c->head_dim_v, o = c->n_head * c->head_dim_v;
    /* As rank/model/model.c: qwen2 requires Q/K/V biases; qwen3 and qwen3moe require Q/K norms, which
     * the other architectures do not use. */
    const bool qwen2 = c->arch == ARCH_QWEN2, qwen3 = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE;
    char name[GGUF_MAX_NAME];
    enum nm_status st;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    if ((st = bind_vec(b, NAME("attn_norm.weight"), e, true, &L->attn_norm))) return st;
    if ((st = bind_mat(b, NAME("attn_q.weight"), e, q, 0, true, &L->wq))) return st;
    if ((st = bind_mat(b, NAME("attn_k.weight"), e, kv, 0, true, &L->wk))) return st;
    if ((st = bind_mat(b, NAME("attn_v.weight"), e, vv, 0, true, &L->wv))) return st;
    if ((st = bind_mat(b, NAME("attn_output.weight"), o, e, 0, true, &L->wo))) return st;
    if ((st = bind_vec(b, NAME("attn_q.bias"), q, qwen2, &L->bq))) return st;
    if ((st = bind_vec(b, NAME("attn_k.bias"), kv, qwen2, &L->bk))) return st;
    if ((st = bind_vec(b, NAME("attn_v.bias"), vv, qwen2, &L->bv))) return st;
    if ((st = bind_vec(b, NAME("attn_output.bias"), e, false, &L->bo))) return st;
    if (qwen3) {
        if ((st = bind_vec(b, NAME("attn_q_norm.weight"), c->head_dim, true, &L->q_norm))) return st;
        if ((st = bind_vec(b, NAME("attn_k_norm.weight"), c->head_dim, true, &L->k_norm))) return st;
    }
    if ((st = bind_vec(b, NAME("ffn_norm.weight"), e, true, &L->ffn_norm))) return st;
    L->moe = s->n_expert > 0;
    if (L->moe) {
        if ((st = bind_mat(b, NAME("ffn_gate_inp.weight"), e, s->n_expert, 0, true, &L->w_router))) return st;
        if ((st = bind_mat(b, NAME("ffn_gate_exps.weight"), e, s->n_ff_exp, s->n_expert, true, &L->gate_exps))) return st;
        if ((st = bind_mat(b, NAME("ffn_up_exps.weight"), e, s->n_ff_exp, s->n_expert, true, &L->up_exps))) return st;
        if ((st = bind_mat(b, NAME("ffn_down_exps.weight"), s->n_ff_exp, e, s->n_expert, true, &L->down_exps))) return st;
    } else {
        if ((st = bind_mat(b, NAME("ffn_gate.weight"), e, c->n_ff, 0, true, &L->w_gate))) return st;
        if ((st = bind_mat(b, NAME("ffn_up.weight"), e, c->n_ff, 0, true, &L->w_up))) return st;
        if ((st = bind_mat(b, NAME("ffn_down.weight"), c->n_ff, e, 0, true, &L->w_down))) return st;
    }
#undef NAME
    return NM_OK;
}

static enum nm_status bind_all(struct binder *b) {
    struct gpu_stage *s = b->s;
    const struct model_config *c = &s->cfg;
    enum nm_status st;
    s->wbuf_used = 0;
    for (int64_t il = s->layer_first; il < c->n_layer; il++)
        if ((st = bind_layer(b, (int)il, &s->layers[il - s->layer_first]))) return st;
    if ((st = bind_vec(b, "output_norm.weight", c->n_embd, true, &s->output_norm))) return st;
    s->output_tied = !gguf_find_tensor(b->f, "output.weight");
    if ((st = bind_mat(b, s->output_tied ? "token_embd.weight" : "output.weight", c->n_embd, c->n_vocab, 0, true,
                       &s->output)))
        return st;
    if ((st = bind_vec(b, "output.bias", c->n_vocab, false, &s->output_bias))) return st;
    return NM_OK;
}

/* MoE sizes come from the configuration (model_config_read: expert_count, expert_used_count,
 * expert_feed_forward_length); a router in a model without them is an error. */
static enum nm_status check_moe(struct gpu_stage *s, const struct gguf_file *f, char *err, size_t errlen) {
    const struct model_config *c = &s->cfg;
    char name[GGUF_MAX_NAME];
    for (int64_t il = s->layer_first; il < c->n_layer && c->n_expert == 0; il++) {
        snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.weight", (long long)il);
        if (gguf_find_tensor(f, name))
            return nm_errf(err, errlen, NM_ERR_MISMATCH, "%s: tensor %s is a MoE router, but %s has no expert_count",
                           f->path, name, arch_name(c->arch));
    }
    s->n_expert = c->n_expert;
    s->n_expert_used = c->n_expert_used;
    s->n_ff_exp = c->n_ff_exp;
    if (s->n_expert > 0 && (s->n_expert_used < 1 || s->n_expert_used > s->n_expert || s->n_expert > 4096 ||
                            s->n_expert_used > 64 || s->n_ff_exp < 1))
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                       "%s: %lld experts of width %lld, %lld used per token; the GPU rank supports up to 4096 experts "
                       "and 64 used",
                       f->path, (long long)s->n_expert, (long long)s->n_ff_exp, (long long)s->n_expert_used);
    return NM_OK;
}

static float *dalloc(struct gpu_stage *s, int64_t n_floats, const char *what, enum nm_status *st, char *err,
                     size_t errlen) {
    if (*st) return NULL;
    float *p = cuk_malloc(s->ctx, (size_t)NM_MAX(n_floats, 1) * sizeof(float), what, err, errlen);
    if (!p) *st = NM_ERR_NOMEM;
    return p;
}

enum nm_status gpu_stage_open(struct gpu_stage **out, const struct gguf_file *f, const struct model_config *cfg,
                              const struct gpu_stage_params *p, char *err, size_t errlen) {
    *out = NULL;
    const struct model_config *c = cfg;
    if (p->layer_first < 0 || p->layer_first > c->n_layer)
        return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: first layer %lld; allowed are 0..%lld (n_layer: only the head)",
                       (long long)p->layer_first, (long long)c->n_layer);
    const int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : c->n_ctx_train;
    if (n_ctx < 1 || n_ctx > (int64_t)1 << 24)
        return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: context size %lld; allowed are 1..16777216", (long long)n_ctx);
    if (p->n_batch < 1) return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: batch size %d; it must be >= 1", p->n_batch);
    const int n_seq = p->n_seq > 0 ? p->n_seq : 1;
    if (n_seq > 4096 || n_seq > n_ctx)
        return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: %d sequences in a context of %lld; allowed are 1..%lld", n_seq,
                       (long long)n_ctx, (long long)NM_MIN(n_ctx, 4096));
    if (p->kv_type != DTYPE_F16 && p->kv_type != DTYPE_F32)
        return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: KV cache type %s; allowed are f16 and f32",
                       dtype_ggml_name(p->kv_type));
    if (c->head_dim > 512 || c->head_dim_v > 512)
        return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "GPU stage: head_dim %lld / %lld; the attention kernel takes up to 512",
                       (long long)c->head_dim, (long long)c->head_dim_v);
    char why[256];
    if (gpu_device_count(why, sizeof why) == 0) return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s", why);

    struct gpu_stage *s = calloc(1, sizeof *s);
    NM_ASSERT(s);
    s->cfg = *c;
    s->layer_first = p->layer_first;
    s->n_ctx = n_ctx;
    s->n_batch = (int)NM_MIN((int64_t)p->n_batch, n_ctx);
    s->n_seq = n_seq;
    s->n_ctx_seq = n_ctx / n_seq;
    s->seq_pos = calloc((size_t)n_seq, sizeof *s->seq_pos);
    s->seq_seen = calloc((size_t)n_seq, 1);
    s->rows = calloc((size_t)s->n_batch * 2, sizeof *s->rows);
    NM_ASSERT(s->seq_pos && s->seq_seen && s->rows);
    s->kv_type = p->kv_type;
    s->layers = calloc((size_t)NM_MAX(c->n_layer - p->layer_first, 1), sizeof *s->layers);
    NM_ASSERT(s->layers);
    enum nm_status st = check_moe(s, f, err, errlen);
    if (st) goto fail;

    /* Pass 1: check every tensor and size the weight buffer before touching the device. */
    struct binder b = {.s = s, .f = f, .upload = false, .err = err, .errlen = errlen};
    if ((st = bind_all(&b))) goto fail;
    s->wbuf_bytes = s->wbuf_used;

    s->ctx = cuk_ctx_init(p->device, why, sizeof why);
    if (!s->ctx) {
        st = nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s", why);
        goto fail;
    }
    struct cuk_device_info gi;
    if (gpu_device_info(p->device, &gi, NULL, 0) == NM_OK)
        nm_log_info("GPU: device %d: %s, %.1f GiB (%.1f free), %d-bit bus at %d MHz: %.0f GB/s theoretical, PCI %s",
                    p->device, gi.name, (double)gi.total_bytes / (1 << 30), (double)gi.free_bytes / (1 << 30),
                    gi.bus_width_bits, gi.mem_clock_khz / 1000, gi.bandwidth_gbs, gi.pci_bus_id);

    /* Sizes of everything else, checked against the free memory in one message. */
    const int64_t B = s->n_batch, E = c->n_embd, nl = c->n_layer - s->layer_first;
    const int64_t qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim, vd = c->n_head_kv * c->head_dim_v,
                  ad = c->n_head * c->head_dim_v;
    const size_t es = s->kv_type == DTYPE_F16 ? 2 : 4;
    s->k_row = kd;
    s->v_row = vd;
    s->kv_bytes = (uint64_t)nl * (uint64_t)n_ctx * (uint64_t)(kd + vd) * es;
    const int64_t nu = s->n_expert_used, ff_rows = NM_MAX(c->n_ff, nu * s->n_ff_exp);
    /* the rows that ask, and the last row; a head of more than CUK_MMQ_MAX_ROWS rows takes the
     * prompt matmul (cuBLAS on the f16 copy), as any matmul of that many rows */
    s->logit_rows = (int)NM_MIN(B, PIPELINE_KEPT_ROWS + 1);
    const int64_t max_k = NM_MAX(NM_MAX(E, ad), NM_MAX(c->n_ff, s->n_ff_exp));
    const size_t tile_bytes = (size_t)NM_MAX((int64_t)64 << 20, max_k * 2 * 64);
    const uint64_t scratch = sizeof(float) * (uint64_t)(B * (3 * E + qd + kd + vd + ad + 2 * ff_rows) +
                                                        B * (s->n_expert + nu * (E + 2)) +
                                                        (int64_t)s->logit_rows * c->n_vocab + n_ctx * c->n_rot) +
                             cuk_topk_scratch_bytes(c->n_vocab) + (uint64_t)B * (uint64_t)max_k * 2 + tile_bytes +
                             sizeof(float) * (uint64_t)B * (uint64_t)NM_MAX(max_k, ff_rows) +
                             cuk_attention_scratch_bytes(DECODE_MAX_ROWS, (int)c->n_head, c->head_dim_v,
                                                         s->n_ctx_seq);
    uint64_t fr, tot;
    cuk_mem_info(s->ctx, &fr, &tot);
    const uint64_t need = s->wbuf_bytes + s->kv_bytes + scratch;
    if (need + (256u << 20) > fr) {
        st = nm_errf(err, errlen, NM_ERR_NOMEM,
                     "GPU stage: device %d has %.1f MiB free of %.1f MiB; layers %lld..%lld + head need %.1f MiB "
                     "(weights %.1f, KV cache %.1f for %lld tokens, scratch %.1f) plus 256 MiB of headroom; "
                     "offload fewer layers (-ngl) or use a smaller context (-c)",
                     p->device, (double)fr / (1 << 20), (double)tot / (1 << 20), (long long)s->layer_first,
                     (long long)c->n_layer - 1, (double)need / (1 << 20), (double)s->wbuf_bytes / (1 << 20),
                     (double)s->kv_bytes / (1 << 20), (long long)n_ctx, (double)scratch / (1 << 20));
        goto fail;
    }

    /* Pass 2: upload. */
    const double t0 = nm_time_s();
    s->wbuf = cuk_malloc(s->ctx, NM_MAX(s->wbuf_bytes, 1), "the GPU rank's weights", err, errlen);
    if (!s->wbuf) {
        st = NM_ERR_NOMEM;
        goto fail;
    }
    b.upload = true;
    if ((st = bind_all(&b))) goto fail;
    NM_ASSERT(s->wbuf_used == s->wbuf_bytes);

    /* RoPE table for every position, from the CPU's own op_rope_cache: the same cos/sin bits. */
    const struct gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
    float *freqs = NULL;
    if (rf) {
        if (rf->n_dims != 1 || rf->ne[0] != c->n_rot / 2 || !dtype_get(rf->type)) {
            st = nm_errf(err, errlen, NM_ERR_MISMATCH, "%s: tensor rope_freqs.weight: expected {%lld} f32", f->path,
                         (long long)c->n_rot / 2);
            goto fail;
        }
        freqs = malloc((size_t)(c->n_rot / 2) * sizeof(float));
        NM_ASSERT(freqs);
        dequantize_row_ref((enum dtype)rf->type, rf->data, freqs, c->n_rot / 2);
    }
    float *table = malloc((size_t)(n_ctx * c->n_rot) * sizeof(float));
    NM_ASSERT(table);
    for (int64_t pos = 0; pos < n_ctx; pos++)
        op_rope_cache(table + pos * c->n_rot, pos, c->n_rot, c->rope_freq_base, c->rope_freq_scale, freqs);
    s->rope = dalloc(s, n_ctx * c->n_rot, "the RoPE table", &st, err, errlen);
    if (s->rope) cuk_h2d(s->ctx, s->rope, table, (size_t)(n_ctx * c->n_rot) * sizeof(float));
    free(table);
    free(freqs);

    s->kv_k = cuk_malloc(s->ctx, NM_MAX((size_t)nl * (size_t)n_ctx * (size_t)kd * es, 1), "the KV cache (K)", err, errlen);
    s->kv_v = s->kv_k ? cuk_malloc(s->ctx, NM_MAX((size_t)nl * (size_t)n_ctx * (size_t)vd * es, 1), "the KV cache (V)", err, errlen)
                      : NULL;
    if (!s->kv_k || !s->kv_v) st = st ? st : NM_ERR_NOMEM;
    s->x = dalloc(s, B * E, "x", &st, err, errlen);
    s->xn = dalloc(s, B * E, "xn", &st, err, errlen);
    s->proj = dalloc(s, B * E, "proj", &st, err, errlen);
    s->q = dalloc(s, B * qd, "q", &st, err, errlen);
    s->k = dalloc(s, B * kd, "k", &st, err, errlen);
    s->v = dalloc(s, B * vd, "v", &st, err, errlen);
    s->att = dalloc(s, B * ad, "att", &st, err, errlen);
    s->gate = dalloc(s, B * ff_rows, "gate", &st, err, errlen);
    s->up = dalloc(s, B * ff_rows, "up", &st, err, errlen);
    s->xq = dalloc(s, B * NM_MAX(max_k, ff_rows), "rounded matmul inputs", &st, err, errlen);
    const size_t q8_bytes = cuk_q8_bytes(CUK_MMQ_MAX_ROWS, NM_MAX(NM_MAX(max_k, ff_rows), E) + 32);
    if (!st && !(s->xq8 = cuk_malloc(s->ctx, q8_bytes, "int8 matmul inputs", err, errlen))) st = NM_ERR_NOMEM;
    s->d_rows = (int64_t *)dalloc(s, 4 * B, "row positions", &st, err, errlen); /* [B][2] int64: 4 B floats */
    if (s->n_expert > 0) {
        s->router = dalloc(s, B * s->n_expert, "router logits", &st, err, errlen);
        s->moe_w = dalloc(s, B * nu, "expert weights", &st, err, errlen);
        s->moe_ids = (int32_t *)dalloc(s, B * nu, "expert ids", &st, err, errlen);
        s->moe_down = dalloc(s, B * nu * E, "expert outputs", &st, err, errlen);
    }
    s->logits = dalloc(s, (int64_t)s->logit_rows * c->n_vocab, "logits", &st, err, errlen);
    if (!st) {
        s->topk_scratch = cuk_malloc(s->ctx, cuk_topk_scratch_bytes(c->n_vocab), "top-k scratch", err, errlen);
        if (!s->topk_scratch) st = NM_ERR_NOMEM;
    }
    if (!st && cuk_ctx_reserve_gemm(s->ctx, s->n_batch, max_k, tile_bytes, err, errlen)) st = NM_ERR_NOMEM;
    /* a decode row's attention over spans of its positions, taken by several blocks at once */
    const char *decode_why;
    s->decode_rows = decode_rows_of(s, &decode_why);
    if (!st && cuk_ctx_reserve_attention(s->ctx, s->decode_rows, (int)c->n_head, c->head_dim_v, s->n_ctx_seq, err,
                                         errlen))
        st = NM_ERR_NOMEM;
    if (st) goto fail;
    keep_f16(s);
    s->pin_in = cuk_host_alloc((size_t)(B * E) * sizeof(float), "hidden-state staging");
    s->pin_out = cuk_host_alloc((size_t)s->logit_rows * (size_t)c->n_vocab * sizeof(float), "logits staging");
    s->pin_rows = cuk_host_alloc(2 * DECODE_MAX_ROWS * sizeof(int64_t), "decode row staging");
    const char *ge = getenv("NM_GPU_GRAPHS");
    s->use_graph = !(ge && strcmp(ge, "0") == 0);
    s->hook_buf = malloc((size_t)(B * E) * sizeof(float));
    NM_ASSERT(s->hook_buf);
    cuk_sync(s->ctx);
    s->loaded = true;

    const double dt = nm_time_s() - t0;
    char layers[64];
    if (nl > 0) snprintf(layers, sizeof layers, "layers %lld..%lld", (long long)s->layer_first, (long long)c->n_layer - 1);
    else snprintf(layers, sizeof layers, "no layers");
    nm_log_info("GPU: uploaded %d tensors, %.1f MiB, %s + output head%s in %.2f s (%.2f GB/s)%s", s->n_tensors,
                (double)s->weight_bytes / (1 << 20), layers, s->output_tied ? " (tied to token_embd)" : "", dt,
                (double)s->weight_bytes / 1e9 / (dt > 0 ? dt : 1e-9),
                s->n_expert ? "; MoE layers on the device" : "");
    if (s->n_seq == 1)
        nm_log_info("GPU: KV cache %lld tokens x %lld layers, %s, %.1f MiB; batch %d", (long long)n_ctx, (long long)nl,
                    s->kv_type == DTYPE_F16 ? "f16" : "f32", (double)s->kv_bytes / (1 << 20), s->n_batch);
    else
        nm_log_info("GPU: KV cache %lld tokens x %lld layers, %s, %.1f MiB: %d sequences of %lld tokens; batch %d",
                    (long long)n_ctx, (long long)nl, s->kv_type == DTYPE_F16 ? "f16" : "f32",
                    (double)s->kv_bytes / (1 << 20), s->n_seq, (long long)s->n_ctx_seq, s->n_batch);
    nm_log_info("GPU: decode (steps of up to %d rows%s): block-quantized weights on int8 activations (dp4a GEMV; "
                "from %d rows of Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K int8 tensor cores, and prompt chunks of up to %d rows%s), "
                "fused norm/rope/KV/residual kernels, %s, %s",
                s->decode_rows, decode_why, CUK_MMQ_MIN_ROWS, CUK_MMQ_MAX_ROWS,
                cuk_q8_tensor_cores(s->ctx, DTYPE_Q4_0, CUK_GEMV_MAX_ROWS) ? "" : ": off here",
                s->use_graph ? "one CUDA graph per step" : "no CUDA graph (NM_GPU_GRAPHS=0)",
                cuk_ctx_overlaps_launches(s->ctx) ? "each kernel starting while the one before finishes"
                                                  : "kernels one after another (NM_GPU_PDL=0 or before sm_90)");
    *out = s;
    return NM_OK;
fail:
    gpu_stage_free(s);
    return st;
}

void gpu_stage_free(struct gpu_stage *s) {
    if (!s) return;
    if (s->ctx) {
        cuk_sync(s->ctx);
        void *bufs[] = {s->wbuf, s->f16buf, s->kv_k, s->kv_v, s->rope, s->x, s->xn, s->q, s->k, s->v, s->att, s->proj,
                        s->gate, s->up, s->xq, s->router, s->moe_w, s->moe_ids, s->moe_down, s->logits, s->topk_scratch,
                        s->xq8, s->d_rows};
        for (int i = 0; i < DECODE_MAX_ROWS; i++) cuk_graph_free(s->decode_graph[i]);
        for (size_t i = 0; i < NM_ARRAY_LEN(bufs); i++) cuk_free(bufs[i]);
        cuk_host_free(s->pin_in);
        cuk_host_free(s->pin_out);
        cuk_host_free(s->pin_rows);
        cuk_ctx_free(s->ctx);
    }
    free(s->hook_buf);
    free(s->seq_pos);
    free(s->seq_seen);
    free(s->rows);
    free(s->layers);
    free(s);
}

int64_t gpu_stage_seq_pos(const struct gpu_stage *s, int seq) {
    NM_ASSERT(seq >= 0 && seq < s->n_seq);
    return s->seq_pos[seq];
}
int64_t gpu_stage_n_past(const struct gpu_stage *s) { return gpu_stage_seq_pos(s, 0); }
int gpu_stage_decode_rows(const struct gpu_stage *s) { return NM_MIN(s->decode_rows, s->logit_rows); }
int64_t gpu_stage_n_ctx(const struct gpu_stage *s) { return s->n_ctx; }
uint64_t gpu_stage_weight_bytes_uploaded(const struct gpu_stage *s) { return s->weight_bytes; }
uint64_t gpu_stage_weight_bytes_after_load(const struct gpu_stage *s) { return s->weight_bytes_after_load; }
uint64_t gpu_stage_kv_bytes(const struct gpu_stage *s) { return s->kv_bytes; }

void gpu_stage_seq_keep(struct gpu_stage *s, int seq, int64_t n) {
    NM_ASSERT(seq >= 0 && seq < s->n_seq && n >= 0 && n <= s->seq_pos[seq]);
    s->seq_pos[seq] = n; /* the cache rows after n are rewritten before any row reads them */
    s->last_logits = NULL;
    s->held_n = 0;
}
void gpu_stage_truncate(struct gpu_stage *s, int64_t n_past) { gpu_stage_seq_keep(s, 0, n_past); }

void gpu_stage_set_layer_hook(struct gpu_stage *s, engine_layer_hook hook, void *ctx) {
    s->hook = hook;
    s->hook_ctx = ctx;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The input of a matmul as the CPU ranks multiply it: rounded to their int8 blocks for
 * block-quantized weights (cuk_act_round_q8), as is for float weights. */
static const float *matmul_input(struct gpu_stage *s, enum dtype t, const float *x, int64_t n) {
    if (!dtype_uses_q8x(t)) return x;
    cuk_act_round_q8(s->ctx, s->xq, x, n);
    return s->xq;
}

/* y[i] = W_i x for nw weights of one input x [n][k]. Few rows (up to CUK_GEMV_MAX_ROWS, or
 * CUK_MMQ_MAX_ROWS of a type the int8 tensor cores take): a GEMV or tensor-core matmul per
 * weight. More: the input is staged once as the GEMM's f16 operand (rounded as the CPU rounds it
 * for block-quantized weights) for every weight that reads it the same way. */
static void matmuls(struct gpu_stage *s, const struct gmat *const *w, float *const *y, int nw, const float *x, int n) {
    int staged = -1; /* the rounding of the staged input: -1 none yet, 0 as is, 1 q8 */
    bool quantized = false; /* s->xq8 holds x's q8 */
    for (int i = 0; i < nw; i++) {
        const struct gmat *wi = w[i];
        NM_ASSERT(wi->k == w[0]->k);
        if (cuk_gemv_q8_takes(s->ctx, wi->type, n)) {
            if (!quantized) cuk_quantize_q8(s->ctx, s->xq8, x, wi->k, n, wi->k);
            quantized = true;
            const struct cuk_gemv_out o = {.w = wi->d, .n = wi->n, .y = y[i], .ldy = wi->n};
            cuk_gemv_q8(s->ctx, wi->type, wi->k, s->xq8, n, &o, 1);
        } else if (n <= CUK_GEMV_MAX_ROWS || wi->type == DTYPE_F32) {
            cuk_matmul(s->ctx, wi->type, wi->d, wi->k, wi->n, matmul_input(s, wi->type, x, (int64_t)n * wi->k), wi->k,
                       n, y[i], wi->n);
        } else {
            const int round = dtype_uses_q8x(wi->type);
            if (staged != round) cuk_gemm_input(s->ctx, x, wi->k, n, wi->k, round);
            staged = round;
            cuk_gemm_staged(s->ctx, wi->type, wi->d, wi->d16, wi->k, wi->n, n, y[i], wi->n);
        }
    }
}

static void matmul(struct gpu_stage *s, const struct gmat *w, const float *x, int n, float *y) {
    matmuls(s, &w, &y, 1, x, n);
}

static void add_bias(struct gpu_stage *s, float *y, const float *b, int n, int64_t dim) {
    if (b) cuk_add_bias(s->ctx, y, b, n, dim);
}

static const uint8_t *kv_layer(const struct gpu_stage *s, const void *base, int64_t li, int64_t row) {
    const size_t es = s->kv_type == DTYPE_F16 ? 2 : 4;
    return (const uint8_t *)base + (size_t)li * (size_t)s->n_ctx * (size_t)row * es;
}

/* How layer L rotates q and k (cuk_rope). */
static struct cuk_rope rope_of(const struct gpu_stage *s, const struct glayer *L) {
    const struct model_config *c = &s->cfg;
    return (struct cuk_rope){.q_norm = L->q_norm, .k_norm = L->k_norm, .eps = c->rms_eps, .cos_sin = s->rope,
                             .n_rot = c->n_rot, .neox = c->rope_type == ROPE_TYPE_NEOX};
}

/* Attention of the chunk's n rows (q, rotated, and the caches holding their K and V rows) into
 * s->att, each row over its own sequence: a run of 8 or more rows of one sequence that the
 * tensor-core kernel takes as one prompt chunk, the rest by the kernel of single rows in as few
 * launches as the runs allow. s->rows holds the rows' places (host), s->d_rows the same. */
static void attention_rows(struct gpu_stage *s, void *kc, void *vc, int n) {
    const struct model_config *c = &s->cfg;
    const int64_t qd = c->n_head * c->head_dim, ad = c->n_head * c->head_dim_v;
    const size_t es = s->kv_type == DTYPE_F16 ? 2 : 4;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    const int64_t *r = s->rows;
    int single = 0; /* rows single .. i0 - 1 wait for the kernel of single rows */
    for (int i0 = 0, i1; i0 < n; i0 = i1) {
        for (i1 = i0 + 1; i1 < n && r[2 * i1 + 1] == r[2 * i0 + 1] && r[2 * i1] == r[2 * i1 - 2] + 1;) i1++;
        if (!cuk_attention_tensor_cores(s->ctx, s->kv_type, i1 - i0, c->head_dim, c->head_dim_v)) continue;
        if (single < i0)
            cuk_attention_at(s->ctx, s->att + single * ad, ad, s->q + single * qd, NULL, NULL, kc, vc, s->kv_type,
                             i0 - single, s->d_rows + 2 * single, (int)c->n_head, (int)c->n_head_kv, c->head_dim,
                             c->head_dim_v, scale, NULL, NULL);
        const size_t base = (size_t)r[2 * i0 + 1];
        cuk_attention(s->ctx, s->att + i0 * ad, ad, s->q + i0 * qd, (uint8_t *)kc + base * (size_t)s->k_row * es,
                      (uint8_t *)vc + base * (size_t)s->v_row * es, s->kv_type, i1 - i0, r[2 * i0], (int)c->n_head,
                      (int)c->n_head_kv, c->head_dim, c->head_dim_v, scale);
        single = i1;
    }
    if (single < n)
        cuk_attention_at(s->ctx, s->att + single * ad, ad, s->q + single * qd, NULL, NULL, kc, vc, s->kv_type,
                         n - single, s->d_rows + 2 * single, (int)c->n_head, (int)c->n_head_kv, c->head_dim,
                         c->head_dim_v, scale, NULL, NULL);
}

/* x += attn_output(attention(rope(q), rope(k), v)); xn holds attn_norm(x). */
static void attention_block(struct gpu_stage *s, const struct glayer *L, int64_t li, int n) {
    const struct model_config *c = &s->cfg;
    const int64_t qd = c->n_head * c->head_dim, kd = s->k_row, vd = s->v_row;
    {
        const struct gmat *w[3] = {&L->wq, &L->wk, &L->wv};
        float *y[3] = {s->q, s->k, s->v};
        matmuls(s, w, y, 3, s->xn, n);
    }
    add_bias(s, s->q, L->bq, n, qd);
    add_bias(s, s->k, L->bk, n, kd);
    add_bias(s, s->v, L->bv, n, vd);
    void *kc = (void *)kv_layer(s, s->kv_k, li, kd), *vc = (void *)kv_layer(s, s->kv_v, li, vd);
    const struct cuk_rope rope = rope_of(s, L);
    cuk_rope_store(s->ctx, s->q, s->k, s->v, n, (int)c->n_head, (int)c->n_head_kv, c->head_dim, c->head_dim_v, &rope,
                   kc, vc, s->kv_type, s->d_rows);
    attention_rows(s, kc, vc, n);
    matmul(s, &L->wo, s->att, n, s->proj);
    add_bias(s, s->proj, L->bo, n, c->n_embd);
    cuk_add(s->ctx, s->x, s->proj, (int64_t)n * c->n_embd);
}

/* x += ffn_down(silu(ffn_gate(xn)) * ffn_up(xn)); xn holds ffn_norm(x). */
static void ffn_dense(struct gpu_stage *s, const struct glayer *L, int n) {
    const struct model_config *c = &s->cfg;
    {
        const struct gmat *w[2] = {&L->w_gate, &L->w_up};
        float *y[2] = {s->gate, s->up};
        matmuls(s, w, y, 2, s->xn, n);
    }
    cuk_swiglu(s->ctx, s->gate, s->gate, s->up, (int64_t)n * c->n_ff);
    matmul(s, &L->w_down, s->gate, n, s->proj);
    cuk_add(s->ctx, s->x, s->proj, (int64_t)n * c->n_embd);
}

/* qwen3moe: x += sum over the n_used selected experts e of w_e * down_e(silu(gate_e(xn)) *
 * up_e(xn)), with softmax router weights renormalized over the selection. Rows of the expert
 * scratch are (token, slot) pairs. */
static void ffn_moe(struct gpu_stage *s, const struct glayer *L, int n) {
    const struct model_config *c = &s->cfg;
    const int nu = (int)s->n_expert_used, pairs = n * nu;
    const int64_t ff = s->n_ff_exp, E = c->n_embd;
    matmul(s, &L->w_router, s->xn, n, s->router);
    cuk_moe_route(s->ctx, s->router, n, (int)s->n_expert, nu, s->moe_ids, s->moe_w);
    NM_ASSERT(L->gate_exps.type == L->up_exps.type);
    const float *in = matmul_input(s, L->gate_exps.type, s->xn, (int64_t)n * E);
    cuk_matmul_id(s->ctx, L->gate_exps.type, L->gate_exps.d, L->gate_exps.expert_bytes, E, ff, in, E, nu,
                  s->moe_ids, pairs, s->gate, ff);
    cuk_matmul_id(s->ctx, L->up_exps.type, L->up_exps.d, L->up_exps.expert_bytes, E, ff, in, E, nu, s->moe_ids,
                  pairs, s->up, ff);
    cuk_swiglu(s->ctx, s->gate, s->gate, s->up, (int64_t)pairs * ff);
    cuk_matmul_id(s->ctx, L->down_exps.type, L->down_exps.d, L->down_exps.expert_bytes, ff, E,
                  matmul_input(s, L->down_exps.type, s->gate, (int64_t)pairs * ff), ff, 1, s->moe_ids, pairs,
                  s->moe_down, E);
    cuk_moe_combine(s->ctx, s->x, s->moe_down, s->moe_w, n, nu, E);
}

static void hook(struct gpu_stage *s, int layer, const float *dx, int n) {
    if (!s->hook) return;
    const int64_t E = s->cfg.n_embd;
    cuk_d2h(s->ctx, s->hook_buf, dx, (size_t)(n * E) * sizeof(float));
    s->hook(s->hook_ctx, layer, s->rows[0], s->hook_buf, n, E);
}

/* ---- decode: n <= CUK_GEMV_MAX_ROWS rows ------------------------------------------------------
 * The same arithmetic as attention_block/ffn_dense and the head, in fewer kernels: a norm (and
 * the attention) writes the q8 of its output for the matmuls after it; Q/K/V and gate/up run as
 * one cuk_gemv_q8 each on int8 activations (a GEMV, or int8 tensor cores for several rows); the
 * attention's launch does RoPE and the KV stores first (the bytes cuk_rope_store gives); biases
 * and residual adds happen in the GEMV's epilogue (y + (W x + b), the CPU's order). The rows'
 * places come from d_rows. */

/* The q8 scratch when the matmul reading an input of k values takes q8 activations, else NULL. */
static void *q8_input(struct gpu_stage *s, int64_t k, const struct gmat *w) {
    return k % 32 == 0 && cuk_gemv_q8_supported(w->type) ? s->xq8 : NULL;
}

/* y[i] = W_i x (+ bias[i]) (added to y[i] when accum[i]) for nw matmuls of one input: xf (f32,
 * rows of k) and xq (its q8, or NULL). Matmuls of one q8 type share one launch. */
static void gemv_group(struct gpu_stage *s, const struct gmat *const *w, float *const *y, const float *const *bias,
                       const bool *accum, int nw, const float *xf, const void *xq, int n) {
    bool one = xq != NULL;
    for (int i = 0; i < nw; i++)
        one = one && cuk_gemv_q8_supported(w[i]->type) && w[i]->type == w[0]->type && w[i]->k == w[0]->k;
    struct cuk_gemv_out o[CUK_GEMV_MAX_OUTS];
    NM_ASSERT(nw <= CUK_GEMV_MAX_OUTS);
    for (int i = 0; i < nw; i++)
        o[i] = (struct cuk_gemv_out){.w = w[i]->d, .n = w[i]->n, .y = y[i], .ldy = w[i]->n, .bias = bias[i],
                                     .accumulate = accum[i]};
    if (one) {
        cuk_gemv_q8(s->ctx, w[0]->type, w[0]->k, xq, n, o, nw);
        return;
    }
    for (int i = 0; i < nw; i++) {
        if (xq && cuk_gemv_q8_supported(w[i]->type)) {
            cuk_gemv_q8(s->ctx, w[i]->type, w[i]->k, xq, n, &o[i], 1);
            continue;
        }
        float *dst = accum[i] ? s->proj : y[i];
        NM_ASSERT(!accum[i] || w[i]->n == s->cfg.n_embd);
        matmul(s, w[i], xf, n, dst);
        add_bias(s, dst, bias[i], n, w[i]->n);
        if (accum[i]) cuk_add(s->ctx, y[i], dst, (int64_t)n * w[i]->n);
    }
}

static void layer_decode(struct gpu_stage *s, const struct glayer *L, int64_t li, int n) {
    const struct model_config *c = &s->cfg;
    const int64_t E = c->n_embd, ad = c->n_head * c->head_dim_v;
    void *xq = q8_input(s, E, &L->wq);
    cuk_rmsnorm_q8(s->ctx, s->xn, xq, s->x, L->attn_norm, n, E, c->rms_eps);
    {
        const struct gmat *w[3] = {&L->wq, &L->wk, &L->wv};
        float *y[3] = {s->q, s->k, s->v};
        const float *b[3] = {L->bq, L->bk, L->bv};
        const bool acc[3] = {false, false, false};
        gemv_group(s, w, y, b, acc, 3, s->xn, xq, n);
    }
    void *kc = (void *)kv_layer(s, s->kv_k, li, s->k_row), *vc = (void *)kv_layer(s, s->kv_v, li, s->v_row);
    void *xa = q8_input(s, ad, &L->wo);
    const bool fused = xa && c->head_dim_v % 32 == 0; /* the attention launch writes the q8 too */
    const struct cuk_rope rope = rope_of(s, L); /* and rotates q and k and stores k and v first */
    cuk_attention_at(s->ctx, s->att, ad, s->q, s->k, s->v, kc, vc, s->kv_type, n, s->d_rows, (int)c->n_head,
                     (int)c->n_head_kv, c->head_dim, c->head_dim_v, 1.0f / sqrtf((float)c->head_dim), &rope,
                     fused ? xa : NULL);
    {
        if (xa && !fused) cuk_quantize_q8(s->ctx, xa, s->att, ad, n, ad);
        const struct gmat *w[1] = {&L->wo};
        float *y[1] = {s->x};
        const float *b[1] = {L->bo};
        const bool acc[1] = {true};
        gemv_group(s, w, y, b, acc, 1, s->att, xa, n);
    }
    if (L->moe) {
        cuk_rmsnorm(s->ctx, s->xn, s->x, L->ffn_norm, n, E, c->rms_eps);
        ffn_moe(s, L, n);
        return;
    }
    void *xf = q8_input(s, E, &L->w_gate);
    cuk_rmsnorm_q8(s->ctx, s->xn, xf, s->x, L->ffn_norm, n, E, c->rms_eps);
    {
        const struct gmat *w[2] = {&L->w_gate, &L->w_up};
        float *y[2] = {s->gate, s->up};
        const float *b[2] = {NULL, NULL};
        const bool acc[2] = {false, false};
        gemv_group(s, w, y, b, acc, 2, s->xn, xf, n);
    }
    void *xd = q8_input(s, c->n_ff, &L->w_down);
    cuk_swiglu_q8(s->ctx, s->gate, xd, s->gate, s->up, n, c->n_ff);
    {
        const struct gmat *w[1] = {&L->w_down};
        float *y[1] = {s->x};
        const float *b[1] = {NULL};
        const bool acc[1] = {true};
        gemv_group(s, w, y, b, acc, 1, s->gate, xd, n);
    }
}

/* The device work of a decode step whose input rows and places are already in s->x and
 * s->d_rows: the layers, then the head for rows first .. n-1 into s->logits. No host
 * synchronization, so a graph can record it. */
static void decode_device(struct gpu_stage *s, int n, int first) {
    const struct model_config *c = &s->cfg;
    const int64_t E = c->n_embd;
    for (int64_t il = s->layer_first; il < c->n_layer; il++) {
        layer_decode(s, &s->layers[il - s->layer_first], il - s->layer_first, n);
        hook(s, (int)il, s->x, n);
    }
    if (s->hook) {
        cuk_rmsnorm(s->ctx, s->xn, s->x, s->output_norm, n, E, c->rms_eps);
        hook(s, (int)c->n_layer, s->xn, n);
    }
    const int rows = n - first;
    NM_ASSERT(rows <= s->logit_rows);
    void *xo = q8_input(s, E, &s->output);
    cuk_rmsnorm_q8(s->ctx, s->xn + first * E, xo, s->x + first * E, s->output_norm, rows, E, c->rms_eps);
    const struct gmat *w[1] = {&s->output};
    float *y[1] = {s->logits};
    const float *b[1] = {s->output_bias};
    const bool acc[1] = {false};
    gemv_group(s, w, y, b, acc, 1, s->xn + first * E, xo, rows);
    s->last_logits = s->logits + (int64_t)(rows - 1) * c->n_vocab;
}

/* Rows of logits from the device to out: straight there when out is page-locked
 * (engine_logits_buffer's), else through pin_out. */
static void logits_out(struct gpu_stage *s, float *out, const float *d_logits, int rows) {
    const size_t bytes = (size_t)rows * (size_t)s->cfg.n_vocab * sizeof(float);
    if (cuk_host_pinned(out)) {
        cuk_d2h(s->ctx, out, d_logits, bytes);
        return;
    }
    cuk_d2h(s->ctx, s->pin_out, d_logits, bytes);
    memcpy(out, s->pin_out, bytes);
}

/* The rows of a chunk whose logits are computed: head[0 .. n_head), ascending (none: only the
 * layers); the first n_out of them go to the caller's buffer (the rows that ask, ask0 .. of the
 * batch's; in a batch's last chunk its last row follows them when it does not ask itself, for
 * gpu_stage_topk). */
struct chunk_head {
    const int *head;
    int n_head, n_out, ask0;
};

/* Asked rows ask0 .. ask0 + n - 1 are kept in rows dev[0 .. n) of s->logits (n <= 0: none). */
static void hold_rows(struct gpu_stage *s, int ask0, int n, const int *dev) {
    s->held_ask0 = ask0;
    s->held_n = NM_MAX(n, 0);
    for (int j = 0; j < s->held_n; j++) s->held_dev[j] = dev ? dev[j] : j;
}

/* Decode rows: through the graph of n rows when the first row asks for logits (so the head runs
 * on all n) and no hook is set, else launched one by one. first_chunk: the chunk opens its batch
 * (the stream is idle). */
static void eval_decode(struct gpu_stage *s, const float *hidden, int n, const struct chunk_head *h, float *out,
                        bool first_chunk) {
    const int64_t E = s->cfg.n_embd, V = s->cfg.n_vocab;
    const int first = h->n_head > 0 ? h->head[0] : n - 1; /* (the GEMV reads the head's weights once for all) */
    if (first == 0 && !s->hook && s->use_graph) {
        struct cuk_graph **g = &s->decode_graph[n - 1];
        if (!first_chunk) cuk_sync(s->ctx); /* the chunk before may still be reading pin_in */
        memcpy(s->pin_in, hidden, (size_t)(n * E) * sizeof(float));
        memcpy(s->pin_rows, s->rows, (size_t)n * 2 * sizeof(int64_t));
        if (!*g) {
            cuk_capture_begin(s->ctx);
            cuk_h2d(s->ctx, s->d_rows, s->pin_rows, (size_t)n * 2 * sizeof(int64_t));
            cuk_h2d(s->ctx, s->x, s->pin_in, (size_t)(n * E) * sizeof(float));
            decode_device(s, n, 0);
            *g = cuk_capture_end(s->ctx);
        }
        cuk_graph_launch(s->ctx, *g);
        s->last_logits = s->logits + (int64_t)(n - 1) * V;
    } else {
        /* from pageable memory: the copies are staged when they return (the next chunk may
         * reuse the sources at once) */
        cuk_h2d(s->ctx, s->x, hidden, (size_t)(n * E) * sizeof(float));
        cuk_h2d(s->ctx, s->d_rows, s->rows, (size_t)n * 2 * sizeof(int64_t));
        decode_device(s, n, first);
    }
    int dev[DECODE_MAX_ROWS];
    for (int j = 0; j < h->n_out; j++) dev[j] = h->head[j] - first;
    hold_rows(s, h->ask0, h->n_out, dev);
    if (out && h->n_out > 0) {
        bool dense = true; /* the rows that ask are the head's first n_out */
        for (int j = 0; j < h->n_out; j++) dense = dense && h->head[j] - first == j;
        if (dense) {
            logits_out(s, out, s->logits, h->n_out);
            return;
        }
        const int rows = n - first;
        cuk_d2h(s->ctx, s->pin_out, s->logits, (size_t)(rows * V) * sizeof(float));
        for (int j = 0; j < h->n_out; j++)
            memcpy(out + (int64_t)j * V, s->pin_out + (int64_t)(h->head[j] - first) * V, (size_t)V * sizeof(float));
    }
}

/* One chunk of n <= n_batch rows, their places in s->rows. */
static void eval_chunk(struct gpu_stage *s, const float *hidden, int n, const struct chunk_head *h, float *out,
                       bool first_chunk) {
    const struct model_config *c = &s->cfg;
    const int64_t E = c->n_embd, V = c->n_vocab;
    if (n <= s->decode_rows && n <= s->logit_rows) {
        eval_decode(s, hidden, n, h, out, first_chunk);
        return;
    }
    cuk_h2d(s->ctx, s->x, hidden, (size_t)(n * E) * sizeof(float)); /* pageable: staged on return */
    cuk_h2d(s->ctx, s->d_rows, s->rows, (size_t)n * 2 * sizeof(int64_t));
    for (int64_t il = s->layer_first; il < c->n_layer; il++) {
        const struct glayer *L = &s->layers[il - s->layer_first];
        cuk_rmsnorm(s->ctx, s->xn, s->x, L->attn_norm, n, E, c->rms_eps);
        attention_block(s, L, il - s->layer_first, n);
        cuk_rmsnorm(s->ctx, s->xn, s->x, L->ffn_norm, n, E, c->rms_eps);
        if (L->moe) ffn_moe(s, L, n);
        else ffn_dense(s, L, n);
        hook(s, (int)il, s->x, n);
    }
    if (s->hook) {
        cuk_rmsnorm(s->ctx, s->xn, s->x, s->output_norm, n, E, c->rms_eps);
        hook(s, (int)c->n_layer, s->xn, n);
    }
    /* Output head for the rows in h, in groups of logit_rows; a group of rows that are not
     * adjacent is gathered into s->proj first. */
    for (int j0 = 0; j0 < h->n_head; j0 += s->logit_rows) {
        const int rows = NM_MIN(s->logit_rows, h->n_head - j0);
        const float *src = s->x + (int64_t)h->head[j0] * E;
        if (h->head[j0 + rows - 1] - h->head[j0] != rows - 1) {
            for (int j = 0; j < rows; j++)
                cuk_d2d(s->ctx, s->proj + (int64_t)j * E, s->x + (int64_t)h->head[j0 + j] * E, (size_t)E * sizeof(float));
            src = s->proj;
        }
        cuk_rmsnorm(s->ctx, s->xn, src, s->output_norm, rows, E, c->rms_eps);
        matmul(s, &s->output, s->xn, rows, s->logits);
        add_bias(s, s->logits, s->output_bias, rows, V);
        s->last_logits = s->logits + (int64_t)(rows - 1) * V;
        const int n_copy = NM_MIN(rows, h->n_out - j0);
        hold_rows(s, h->ask0 + j0, n_copy, NULL);
        if (out && n_copy > 0) logits_out(s, out + (int64_t)j0 * V, s->logits, n_copy);
    }
}

enum nm_status gpu_stage_eval_batch(struct gpu_stage *s, const struct stage_batch *b, float *logits, char *err,
                                    size_t errlen) {
    if (b->n < 1) return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: no rows to evaluate");
    char why[400];
    enum nm_status st = kv_batch_check(b->n, b->seq, b->pos, s->n_seq, s->seq_pos, s->n_ctx_seq, s->seq_seen,
                                       "the stage", why, sizeof why);
    if (st) return nm_errf(err, errlen, st, "GPU stage: %s", why);
    const int64_t E = s->cfg.n_embd, V = s->cfg.n_vocab;
    int *head = malloc((size_t)NM_MIN(b->n, s->n_batch) * sizeof *head);
    NM_ASSERT(head);
    s->held_n = 0;
    int64_t out_rows = 0;
    for (int done = 0; done < b->n;) {
        const int n = NM_MIN(s->n_batch, b->n - done);
        for (int i = 0; i < n; i++) {
            s->rows[2 * i] = b->pos[done + i];
            s->rows[2 * i + 1] = (int64_t)b->seq[done + i] * s->n_ctx_seq;
        }
        struct chunk_head h = {.head = head, .ask0 = (int)out_rows};
        for (int i = 0; i < n; i++)
            if (b->logits[done + i]) head[h.n_head++] = i;
        h.n_out = h.n_head;
        if (done + n == b->n && (h.n_head == 0 || head[h.n_head - 1] != n - 1)) head[h.n_head++] = n - 1;
        eval_chunk(s, b->hidden + (int64_t)done * E, n, &h, logits ? logits + out_rows * V : NULL, done == 0);
        out_rows += h.n_out;
        done += n;
    }
    free(head);
    for (int i = 0; i < b->n; i++) s->seq_pos[b->seq[i]] = b->pos[i] + 1;
    cuk_sync(s->ctx);
    return NM_OK;
}

enum nm_status gpu_stage_eval(struct gpu_stage *s, const float *hidden, int n, int64_t pos0, bool logits_all,
                              float *logits, char *err, size_t errlen) {
    if (n < 1) return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: no rows to evaluate");
    int32_t *seq = calloc((size_t)n, sizeof *seq);
    int64_t *pos = malloc((size_t)n * sizeof *pos);
    bool *ask = malloc((size_t)n);
    NM_ASSERT(seq && pos && ask);
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        ask[i] = logits_all || i == n - 1;
    }
    const struct stage_batch b = {.n = n, .hidden = hidden, .seq = seq, .pos = pos, .logits = ask};
    const enum nm_status st = gpu_stage_eval_batch(s, &b, logits, err, errlen);
    free(seq);
    free(pos);
    free(ask);
    return st;
}

enum nm_status gpu_stage_topk(struct gpu_stage *s, int n, const struct stage_topk *q, int32_t *ids, float *vals,
                              char *err, size_t errlen) {
    if (!s->last_logits) return nm_errf(err, errlen, NM_ERR_ARGS, "GPU stage: top-k before any row was evaluated");
    const int64_t V = s->cfg.n_vocab, kmax = NM_MIN((int64_t)CUK_TOPK_MAX, V);
    for (int i = 0; i < n; i++) {
        const int j = q[i].row - s->held_ask0;
        if (q[i].k < 1 || q[i].k > kmax)
            return nm_errf(err, errlen, NM_ERR_ARGS,
                           "GPU stage: top-k of %d; allowed are 1..%lld (larger: take the logits)", q[i].k,
                           (long long)kmax);
        if (q[i].row < -1 || (q[i].row >= 0 && (j < 0 || j >= s->held_n)))
            return nm_errf(err, errlen, NM_ERR_ARGS,
                           "GPU stage: the logits of row %d (of those that asked; -1: the last row) are not kept on "
                           "the device (kept: %d .. %d)", q[i].row, s->held_ask0, s->held_ask0 + s->held_n - 1);
    }
    if (n < 1) return NM_OK;
    struct cuk_topk_row *r = malloc((size_t)n * sizeof *r);
    NM_ASSERT(r);
    for (int i = 0; i < n; i++)
        r[i] = (struct cuk_topk_row){.row = q[i].row < 0 ? (s->last_logits - s->logits) / V
                                                         : s->held_dev[q[i].row - s->held_ask0],
                                     .k = q[i].k, .n_pen = q[i].n_tokens, .pen_ids = q[i].tokens,
                                     .penalty = q[i].penalty};
    cuk_topk(s->ctx, s->logits, V, V, r, n, s->topk_scratch, ids, vals);
    free(r);
    return NM_OK;
}
