/* Attention of one query head over the KV cache with AVX-512: K and V rows converted from f16
 * 16 values at a time (vcvtph2ps), dot products and the weighted sum of V in vector registers,
 * and the softmax's exponentials 16 at a time with a polynomial (relative error < 2e-7, like
 * expf to a few ulp). The plain-C op_attention_head is the reference it is tested against. */
#include "attn.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) for x <= 0 (scores minus their max), 16 lanes: 2^(x log2 e) = 2^n * 2^f, f in
 * [-0.5, 0.5], 2^f by a degree-6 polynomial; lanes below -87 flush to 0. */
static inline __m512 exp_neg_ps(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 t = _mm512_mul_ps(x, log2e);
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.69314718055994531f)); /* ln 2 * frac */
    /* e^f, |f| <= 0.347: Taylor to degree 6 (error < 1e-7 relative). */
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 16 values of a KV row as f32 (masked tail). */
static inline __m512 load16(const void *row, int64_t i, int64_t n, enum dtype t) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    if (t == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

void attn_head_avx512(float *out, const float *q, const void *k, const void *v, enum dtype kv_type, int64_t n_kv,
                      int64_t k_stride, int64_t v_stride, int64_t head_dim, int64_t head_dim_v, float scale,
                      float *scratch) {
    const size_t es = kv_type == DTYPE_F16 ? 2 : 4;
    /* Scores. */
    float max = -INFINITY;
    for (int64_t t = 0; t < n_kv; t++) {
        const uint8_t *kt = (const uint8_t *)k + (size_t)(t * k_stride) * es;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < head_dim; i += 16) {
            const __mmask16 m = head_dim - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (head_dim - i)) - 1);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16(kt, i, head_dim, kv_type), acc);
        }
        const float s = _mm512_reduce_add_ps(acc) * scale;
        scratch[t] = s;
        max = s > max ? s : max;
    }
    /* Softmax numerators and their sum. */
    const __m512 vmax = _mm512_set1_ps(max);
    __m512 vsum = _mm512_setzero_ps();
    int64_t t = 0;
    for (; t + 16 <= n_kv; t += 16) {
        const __m512 e = exp_neg_ps(_mm512_sub_ps(_mm512_loadu_ps(scratch + t), vmax));
        _mm512_storeu_ps(scratch + t, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (t < n_kv) {
        const __mmask16 m = (__mmask16)((1u << (n_kv - t)) - 1);
        const __m512 e = exp_neg_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scratch + t), vmax));
        _mm512_mask_storeu_ps(scratch + t, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    const float inv = 1.0f / _mm512_reduce_add_ps(vsum);
    /* Weighted sum of V rows, 16 output values per register; head_dim_v <= 512 in one pass. */
    for (int64_t i0 = 0; i0 < head_dim_v; i0 += 128) {
        const int64_t nv = head_dim_v - i0 < 128 ? head_dim_v - i0 : 128;
        __m512 acc[8];
        for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t u = 0; u < n_kv; u++) {
            const uint8_t *vt = (const uint8_t *)v + (size_t)(u * v_stride) * es;
            const __m512 p = _mm512_set1_ps(scratch[u]);
            for (int r = 0; r * 16 < nv; r++) acc[r] = _mm512_fmadd_ps(p, load16(vt, i0 + r * 16, head_dim_v, kv_type), acc[r]);
        }
        const __m512 vinv = _mm512_set1_ps(inv);
        for (int r = 0; r * 16 < nv; r++) {
            const int64_t n = nv - r * 16;
            const __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
            _mm512_mask_storeu_ps(out + i0 + r * 16, m, _mm512_mul_ps(acc[r], vinv));
        }
    }
}

/* ---- prompt attention: groups of ATTN_Q_BLOCK queries x blocks of ATTN_KV_BLOCK keys ------- */

#include "../ops.h"

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

void attn_queries_avx512(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q, int64_t pos0,
                         const void *k, const void *v, enum dtype kv_type, int64_t k_stride, int64_t v_stride,
                         int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    const size_t es = kv_type == DTYPE_F16 ? 2 : 4;
    float *S = scratch;                       /* [ATTN_Q_BLOCK][ATTN_KV_BLOCK] scores of this block */
    float *O = scratch + ATTN_Q_BLOCK * ATTN_KV_BLOCK; /* [ATTN_Q_BLOCK][head_dim_v] */
    for (int64_t i0 = 0; i0 < n_q; i0 += ATTN_Q_BLOCK) {
        const int nq = (int)(n_q - i0 < ATTN_Q_BLOCK ? n_q - i0 : ATTN_Q_BLOCK);
        const int64_t kv_end = pos0 + i0 + nq; /* the group's last query sees [0, kv_end) */
        float m[ATTN_Q_BLOCK], l[ATTN_Q_BLOCK];
        for (int j = 0; j < nq; j++) {
            m[j] = -INFINITY;
            l[j] = 0.0f;
            for (int64_t c = 0; c < head_dim_v; c++) O[j * head_dim_v + c] = 0.0f;
        }
        for (int64_t t0 = 0; t0 < kv_end; t0 += ATTN_KV_BLOCK) {
            const int64_t nb = kv_end - t0 < ATTN_KV_BLOCK ? kv_end - t0 : ATTN_KV_BLOCK;
            /* scores: each K row is read once for the group */
            for (int64_t t = 0; t < nb; t++) {
                const uint8_t *kt = (const uint8_t *)k + (size_t)((t0 + t) * k_stride) * es;
                __m512 acc[ATTN_Q_BLOCK];
                for (int j = 0; j < nq; j++) acc[j] = _mm512_setzero_ps();
                for (int64_t c = 0; c < head_dim; c += 16) {
                    const __mmask16 mk = tail_mask(head_dim - c);
                    const __m512 kv = load16(kt, c, head_dim, kv_type);
                    for (int j = 0; j < nq; j++)
                        acc[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + (i0 + j) * q_stride + c), kv, acc[j]);
                }
                for (int j = 0; j < nq; j++)
                    S[j * ATTN_KV_BLOCK + t] = t0 + t <= pos0 + i0 + j ? _mm512_reduce_add_ps(acc[j]) * scale : -INFINITY;
            }
            /* online softmax per query: new max, rescale, exponentials */
            for (int j = 0; j < nq; j++) {
                float *sj = S + j * ATTN_KV_BLOCK;
                __m512 vm = _mm512_set1_ps(-INFINITY);
                for (int64_t t = 0; t < nb; t += 16)
                    vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(nb - t), sj + t));
                const float bm = _mm512_reduce_max_ps(vm);
                const float mn = bm > m[j] ? bm : m[j];
                if (mn == -INFINITY) continue; /* nothing visible yet (cannot happen: position 0 is) */
                const float corr = m[j] == -INFINITY ? 0.0f : expf(m[j] - mn);
                m[j] = mn;
                l[j] *= corr;
                const __m512 vc = _mm512_set1_ps(corr);
                for (int64_t c = 0; c < head_dim_v; c += 16) {
                    const __mmask16 mk = tail_mask(head_dim_v - c);
                    float *oj = O + j * head_dim_v + c;
                    _mm512_mask_storeu_ps(oj, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, oj), vc));
                }
                __m512 vs = _mm512_setzero_ps();
                for (int64_t t = 0; t < nb; t += 16) {
                    const __mmask16 mk = tail_mask(nb - t);
                    const __m512 sv = _mm512_maskz_loadu_ps(mk, sj + t);
                    const __mmask16 live = mk & _mm512_cmp_ps_mask(sv, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
                    const __m512 e = exp_neg_ps(_mm512_sub_ps(sv, _mm512_set1_ps(mn)));
                    const __m512 e0 = _mm512_maskz_mov_ps(live, e); /* tail lanes and causally hidden keys: 0 */
                    _mm512_mask_storeu_ps(sj + t, mk, e0);
                    vs = _mm512_add_ps(vs, e0);
                }
                l[j] += _mm512_reduce_add_ps(vs);
            }
            /* O += P V: each V row is read once for the group */
            for (int64_t t = 0; t < nb; t++) {
                const uint8_t *vt = (const uint8_t *)v + (size_t)((t0 + t) * v_stride) * es;
                for (int64_t c = 0; c < head_dim_v; c += 16) {
                    const __mmask16 mk = tail_mask(head_dim_v - c);
                    const __m512 vv = load16(vt, c, head_dim_v, kv_type);
                    for (int j = 0; j < nq; j++) {
                        float *oj = O + j * head_dim_v + c;
                        _mm512_mask_storeu_ps(oj, mk, _mm512_fmadd_ps(_mm512_set1_ps(S[j * ATTN_KV_BLOCK + t]), vv,
                                                                      _mm512_maskz_loadu_ps(mk, oj)));
                    }
                }
            }
        }
        for (int j = 0; j < nq; j++) {
            const __m512 inv = _mm512_set1_ps(1.0f / l[j]);
            for (int64_t c = 0; c < head_dim_v; c += 16) {
                const __mmask16 mk = tail_mask(head_dim_v - c);
                _mm512_mask_storeu_ps(out + (i0 + j) * out_stride + c, mk,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, O + j * head_dim_v + c), inv));
            }
        }
    }
}
