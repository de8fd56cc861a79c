/* Forward-pass operations other than matmul (see ops.h). */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "base.h"
#include "cpu.h"

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

void op_rope_cache(float *cos_sin, int64_t pos, int64_t n_rot, float base, float freq_scale,
                   const float *freq_factors) {
    for (int64_t i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * freq_scale * pow((double)base, -2.0 * (double)i / (double)n_rot);
        if (freq_factors) theta /= freq_factors[i];
        cos_sin[2 * i] = (float)cos(theta);
        cos_sin[2 * i + 1] = (float)sin(theta);
    }
}

void op_rope(float *x, const float *cos_sin, int64_t n_rot, int neox) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float a = x[i0], b = x[i1];
        x[i0] = a * c - b * s;
        x[i1] = a * s + b * c;
    }
}

void op_swiglu(float *out, const float *gate, const float *up, int64_t n) { kern_isa_get()->swiglu(out, gate, up, n); }

void op_swiglu_ref(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void op_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

int64_t op_argmax(const float *x, int64_t n) { return kern_isa_get()->argmax(x, n); }

int64_t op_argmax_ref(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] != x[best] && !(x[i] < x[best])) best = i;
    return best;
}

static inline float kv_load(const void *row, int64_t i, enum dtype t) {
    return t == DTYPE_F16 ? fp16_to_fp32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

void op_store_kv(void *dst, const float *src, int64_t n, enum dtype kv_type) {
    if (kv_type == DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    NM_ASSERT(kv_type == DTYPE_F16);
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
}

/* The attention kernels follow the ISA path chosen once for all kernels (cpu.h). */
void op_attention_heads(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                        const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                        int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    kern_isa_get()->attn_heads(out, out_stride, q, q_stride, n_q, k, v, kv_type, n_kv, k_stride, v_stride, head_dim,
                               head_dim_v, scale, scratch);
}

void op_attention_heads_ref(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                            const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                            int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    const size_t esize = kv_type == DTYPE_F16 ? 2 : 4;
    for (int j = 0; j < n_q; j++) {
        const float *qj = q + j * q_stride;
        float *oj = out + j * out_stride;
        float max = -INFINITY;
        for (int64_t t = 0; t < n_kv; t++) {
            const void *kt = (const uint8_t *)k + (size_t)(t * k_stride) * esize;
            float s = 0.0f;
            for (int64_t i = 0; i < head_dim; i++) s += qj[i] * kv_load(kt, i, kv_type);
            s *= scale;
            scratch[t] = s;
            if (s > max) max = s;
        }
        double sum = 0.0;
        for (int64_t t = 0; t < n_kv; t++) {
            scratch[t] = expf(scratch[t] - max);
            sum += scratch[t];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < head_dim_v; i++) oj[i] = 0.0f;
        for (int64_t t = 0; t < n_kv; t++) {
            const float p = scratch[t] * inv;
            const void *vt = (const uint8_t *)v + (size_t)(t * v_stride) * esize;
            for (int64_t i = 0; i < head_dim_v; i++) oj[i] += p * kv_load(vt, i, kv_type);
        }
    }
}

/* ---- prompt attention (flash-style) ------------------------------------------------------ */

size_t op_attention_queries_ref_scratch(int64_t head_dim, int64_t head_dim_v) {
    (void)head_dim;
    return ATTN_KV_BLOCK + (size_t)head_dim_v;
}

size_t op_attention_queries_scratch(int64_t head_dim, int64_t head_dim_v) {
    const size_t ref = op_attention_queries_ref_scratch(head_dim, head_dim_v);
    return NM_MAX(ref, kern_isa_get()->attn_queries_scratch(head_dim, head_dim_v));
}

void op_attention_queries(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q, int64_t pos0,
                          const void *k, const void *v, enum dtype kv_type, int64_t k_stride, int64_t v_stride,
                          int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    kern_isa_get()->attn_queries(out, out_stride, q, q_stride, n_q, pos0, k, v, kv_type, k_stride, v_stride, head_dim,
                                 head_dim_v, scale, scratch);
}

void op_attention_queries_ref(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q,
                              int64_t pos0, const void *k, const void *v, enum dtype kv_type, int64_t k_stride,
                              int64_t v_stride, int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    const size_t esize = kv_type == DTYPE_F16 ? 2 : 4;
    float *s = scratch, *o = scratch + ATTN_KV_BLOCK;
    for (int64_t i = 0; i < n_q; i++) {
        const float *qi = q + i * q_stride;
        const int64_t n_kv = pos0 + i + 1;
        float m = -INFINITY, l = 0.0f;
        for (int64_t c = 0; c < head_dim_v; c++) o[c] = 0.0f;
        for (int64_t t0 = 0; t0 < n_kv; t0 += ATTN_KV_BLOCK) {
            const int64_t nb = NM_MIN((int64_t)ATTN_KV_BLOCK, n_kv - t0);
            float bm = -INFINITY;
            for (int64_t t = 0; t < nb; t++) {
                const void *kt = (const uint8_t *)k + (size_t)((t0 + t) * k_stride) * esize;
                float d = 0.0f;
                for (int64_t c = 0; c < head_dim; c++) d += qi[c] * kv_load(kt, c, kv_type);
                s[t] = d * scale;
                if (s[t] > bm) bm = s[t];
            }
            const float mn = bm > m ? bm : m;
            const float corr = expf(m - mn); /* 0 on the first block (m = -inf) */
            l *= corr;
            for (int64_t c = 0; c < head_dim_v; c++) o[c] *= corr;
            for (int64_t t = 0; t < nb; t++) {
                const float p = expf(s[t] - mn);
                l += p;
                const void *vt = (const uint8_t *)v + (size_t)((t0 + t) * v_stride) * esize;
                for (int64_t c = 0; c < head_dim_v; c++) o[c] += p * kv_load(vt, c, kv_type);
            }
            m = mn;
        }
        const float inv = 1.0f / l;
        for (int64_t c = 0; c < head_dim_v; c++) out[i * out_stride + c] = o[c] * inv;
    }
}
