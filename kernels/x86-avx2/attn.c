/* Attention with AVX2 + FMA (the twins of op_attention_heads_ref and op_attention_queries_ref,
 * ops.h), laid out as the AVX-512 kernels are, in 8-lane vectors and 16 registers: K and V rows
 * widened from f16 8 values at a time (vcvtph2ps), dot products and weighted sums in vector
 * registers, the softmax's exponentials 8 at a time with the polynomial of the AVX-512 files
 * (relative error < 2e-7). Tails of head dimensions that are not multiples of 8 go through a
 * zero-padded copy, never a read past a row. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../base.h"
#include "../ops.h"
#include "avx2.h"

/* e^x, 8 lanes: 2^n e^f with n = round(x log2 e), f = x - n ln 2 (ln 2 in two parts), e^f by
 * its degree-6 Taylor polynomial; x clamped to [-87, 88] so 2^n stays a normal float. */
NM_INLINE __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    f = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), f);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

NM_INLINE float hsum8(__m256 v) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

NM_INLINE float hmax8(__m256 v) {
    __m128 t = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    t = _mm_max_ps(t, _mm_movehl_ps(t, t));
    t = _mm_max_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

static inline int64_t up8(int64_t n) { return (n + 7) & ~(int64_t)7; }

/* Values [i, i + 8) of a KV row of n values as f32; lanes past n are 0. */
NM_INLINE __m256 load8(const void *row, int64_t i, int64_t n, enum dtype t) {
    if (n - i >= 8)
        return t == DTYPE_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)))
                              : _mm256_loadu_ps((const float *)row + i);
    float tmp[8] = {0};
    for (int64_t j = i; j < n; j++)
        tmp[j - i] = t == DTYPE_F16 ? fp16_to_fp32(((const uint16_t *)row)[j]) : ((const float *)row)[j];
    return _mm256_loadu_ps(tmp);
}

/* Values [i, i + 8) of a KV row that has them all, as f32. */
NM_INLINE __m256 load8_full(const void *row, int64_t i, const enum dtype t) {
    return t == DTYPE_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)))
                          : _mm256_loadu_ps((const float *)row + i);
}

/* Lanes [0, n) of the floats at p (lanes n.. 0; nothing past p + n read). */
NM_INLINE __m256 loadf8(const float *p, int64_t n) {
    if (n >= 8) return _mm256_loadu_ps(p);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, m);
}

/* Store lanes [0, n) of v (n <= 8) at p. */
NM_INLINE void store8(float *p, int64_t n, __m256 v) {
    if (n >= 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(p, m, v);
}

/* Lane j = the sum of a[j]'s 8 lanes (a transposing tree of unpacks, shuffles and adds). */
NM_INLINE __m256 hsum8x8(const __m256 *a) {
    __m256 b[4], c[2];
    NM_UNROLL for (int i = 0; i < 4; i++) b[i] =
        _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    NM_UNROLL for (int i = 0; i < 2; i++) c[i] =
        _mm256_add_ps(_mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20), _mm256_permute2f128_ps(c[0], c[1], 0x31));
}

/* Scores q.k * scale of keys [t0, t0 + 8) into scratch (8 keys in the lanes of one vector: no
 * horizontal sum per key); their maximum. */
NM_INLINE __m256 head_scores8(float *scratch, const float *q, const uint8_t *k, int64_t t0, int64_t k_stride,
                              int64_t head_dim, float scale, const enum dtype t) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    const uint8_t *kr[8];
    __m256 a[8];
    NM_UNROLL for (int j = 0; j < 8; j++) {
        a[j] = _mm256_setzero_ps();
        kr[j] = k + (size_t)((t0 + j) * k_stride) * es;
    }
    int64_t i = 0;
    for (; i + 8 <= head_dim; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        NM_UNROLL for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(qv, load8_full(kr[j], i, t), a[j]);
    }
    if (i < head_dim) {
        const __m256 qv = load8(q, i, head_dim, DTYPE_F32);
        NM_UNROLL for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(qv, load8(kr[j], i, head_dim, t), a[j]);
    }
    const __m256 s = _mm256_mul_ps(hsum8x8(a), _mm256_set1_ps(scale));
    _mm256_storeu_ps(scratch + t0, s);
    return s;
}

/* out[0, n) (n <= 8 NR; NR a literal) += sum over keys [u0, u1) of p[u] V[u][i0 ..]: NR
 * accumulators loaded from out, kept in registers over the keys, stored back (the same sums as
 * accumulating in registers over all the keys at once). */
NM_INLINE void head_pv(float *out, int64_t n, const float *p, const uint8_t *v, int64_t u0, int64_t u1,
                       int64_t v_stride, int64_t i0, int64_t head_dim_v, const int NR, const enum dtype t) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    __m256 acc[8];
    NM_UNROLL for (int r = 0; r < NR; r++) acc[r] = loadf8(out + r * 8, n - r * 8);
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *vt = v + (size_t)(u * v_stride) * es;
        const __m256 pu = _mm256_broadcast_ss(p + u);
        NM_UNROLL for (int r = 0; r < NR; r++) {
            const __m256 x = i0 + r * 8 + 8 <= head_dim_v ? load8_full(vt, i0 + r * 8, t) : load8(vt, i0 + r * 8, head_dim_v, t);
            acc[r] = _mm256_fmadd_ps(pu, x, acc[r]);
        }
    }
    NM_UNROLL for (int r = 0; r < NR; r++) store8(out + r * 8, n - r * 8, acc[r]);
}

/* Query heads per pass of the decode kernel: ATTN_HEADS_PASS (ops.h; its per-head state lives in
 * arrays of this size). */
#define HEADS_PASS ATTN_HEADS_PASS

/* The decode kernel for n_q <= HEADS_PASS heads and one KV type t (a literal after inlining).
 * Keys go in blocks of 8, each block for every head in turn, so its K and V rows come from L1
 * after the first head; a head's operations are those it gets alone. */
NM_INLINE void attn_heads_avx2_t(float *out, int64_t ldo, const float *q, int64_t ldq, int n_q, const uint8_t *k,
                                 const uint8_t *v, int64_t n_kv, int64_t k_stride, int64_t v_stride, int64_t head_dim,
                                 int64_t head_dim_v, float scale, float *scratch, const enum dtype t) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    /* Scores into scratch + j n_kv, 8 keys at a time, then the rest one by one. */
    __m256 vmax[HEADS_PASS];
    float inv[HEADS_PASS];
    for (int j = 0; j < n_q; j++) vmax[j] = _mm256_set1_ps(-INFINITY);
    int64_t t0 = 0;
    for (; t0 + 8 <= n_kv; t0 += 8)
        for (int j = 0; j < n_q; j++)
            vmax[j] = _mm256_max_ps(vmax[j], head_scores8(scratch + j * n_kv, q + j * ldq, k, t0, k_stride, head_dim,
                                                          scale, t));
    for (int j = 0; j < n_q; j++) {
        const float *qj = q + j * ldq;
        float *sj = scratch + j * n_kv;
        float max = hmax8(vmax[j]);
        for (int64_t u = t0; u < n_kv; u++) {
            const uint8_t *kt = k + (size_t)(u * k_stride) * es;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t i = 0; i < head_dim; i += 8)
                acc = _mm256_fmadd_ps(load8(qj, i, head_dim, DTYPE_F32), load8(kt, i, head_dim, t), acc);
            const float s = hsum8(acc) * scale;
            sj[u] = s;
            max = s > max ? s : max;
        }
        const __m256 bmax = _mm256_set1_ps(max);
        __m256 vsum = _mm256_setzero_ps();
        int64_t u = 0;
        for (; u + 8 <= n_kv; u += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sj + u), bmax));
            _mm256_storeu_ps(sj + u, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        float sum = hsum8(vsum);
        for (; u < n_kv; u++) { /* the tail one lane at a time, the same polynomial */
            const float e = _mm256_cvtss_f32(exp8(_mm256_set1_ps(sj[u] - max)));
            sj[u] = e;
            sum += e;
        }
        inv[j] = 1.0f / sum;
    }
    /* Weighted sums of V rows, up to 64 output values per pass, 8 keys at a time for every head,
     * then each output times its head's 1 / sum. */
    for (int64_t i0 = 0; i0 < head_dim_v; i0 += 64) {
        const int64_t nv = head_dim_v - i0 < 64 ? head_dim_v - i0 : 64;
        for (int j = 0; j < n_q; j++) memset(out + j * ldo + i0, 0, (size_t)nv * sizeof(float));
        for (int64_t u0 = 0; u0 < n_kv; u0 += 8) {
            const int64_t u1 = n_kv - u0 < 8 ? n_kv : u0 + 8;
            for (int j = 0; j < n_q; j++) {
                float *oj = out + j * ldo + i0;
                const float *pj = scratch + j * n_kv;
                switch ((nv + 7) / 8) {
#define PV_CASE(NR) \
    case NR: head_pv(oj, nv, pj, v, u0, u1, v_stride, i0, head_dim_v, NR, t); break;
                    PV_CASE(1) PV_CASE(2) PV_CASE(3) PV_CASE(4) PV_CASE(5) PV_CASE(6) PV_CASE(7) PV_CASE(8)
#undef PV_CASE
                }
            }
        }
        for (int j = 0; j < n_q; j++) {
            float *oj = out + j * ldo + i0;
            for (int64_t c = 0; c < nv; c += 8)
                store8(oj + c, nv - c, _mm256_mul_ps(loadf8(oj + c, nv - c), _mm256_set1_ps(inv[j])));
        }
    }
}

/* Scores of 8 keys per vector (no horizontal sum per key), the weighted sums of V in registers,
 * each block of keys read once for up to HEADS_PASS heads; one copy per KV type. */
static void attn_heads_avx2(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                            const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                            int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    for (int j0 = 0; j0 < n_q; j0 += HEADS_PASS) {
        const int nj = n_q - j0 < HEADS_PASS ? n_q - j0 : HEADS_PASS;
        float *o = out + j0 * out_stride;
        const float *qj = q + j0 * q_stride;
        if (kv_type == DTYPE_F16)
            attn_heads_avx2_t(o, out_stride, qj, q_stride, nj, k, v, n_kv, k_stride, v_stride, head_dim, head_dim_v,
                              scale, scratch, DTYPE_F16);
        else
            attn_heads_avx2_t(o, out_stride, qj, q_stride, nj, k, v, n_kv, k_stride, v_stride, head_dim, head_dim_v,
                              scale, scratch, DTYPE_F32);
    }
}

/* ---- prompt attention: blocks of ATTN_Q_BLOCK queries x ATTN_KV_BLOCK keys -----------------
 * As the AVX-512 kernel (x86-avx512/attn.c): the block's queries transposed to QT[c][j] (query j
 * in lane j % 8 of vector j / 8), a key block widened to f32 rows KF (and V to VF), scores
 * S[t][j] by broadcasts of KF[t][c] against the query vectors (4 keys x 2 vectors per register
 * tile), the online softmax with queries in lanes, and O[j][c] += P[t][j] VF[t][c] in tiles of
 * 4 queries x 16 columns. */

#define AQ ATTN_Q_BLOCK  /* 32 queries: four vectors */
#define AK ATTN_KV_BLOCK /* 64 keys */
#define AKT 4            /* keys per register tile of the scores */
#define AOQ 4            /* queries per register tile of P V */
#define NQV (AQ / 8)

static size_t attn_queries_avx2_scratch(int64_t head_dim, int64_t head_dim_v) {
    const int64_t hp = up8(head_dim), vp = up8(head_dim_v);
    return (size_t)(hp * AQ + AK * hp + AK * vp + AK * AQ + AQ * vp + 2 * AQ + 8);
}

/* Rows [t0, t0 + nb) of a K or V cache as f32 rows of stride dp (zero past dim; rows nb..nbp-1
 * all zero). */
static void kv_block_f32(float *dst, int64_t dp, const void *src, int64_t stride, enum dtype t, int64_t t0, int64_t nb,
                         int64_t nbp, int64_t dim) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    for (int64_t r = 0; r < nbp; r++) {
        float *d = dst + r * dp;
        if (r >= nb) {
            for (int64_t c = 0; c < dp; c += 8) _mm256_storeu_ps(d + c, _mm256_setzero_ps());
            continue;
        }
        const uint8_t *row = (const uint8_t *)src + (size_t)((t0 + r) * stride) * es;
        for (int64_t c = 0; c < dp; c += 8) _mm256_storeu_ps(d + c, load8(row, c, dim, t));
    }
}

/* O rows j0..j0+AOQ-1, columns c0..c0+8*NV-1: O = O * corr + sum_t P[t][j] VF[t][c]. */
#define ATTN_PV_TILE(NV)                                                                                           \
    static void attn_pv_tile##NV(float *O, int64_t vp, const float *P, const float *VF, const float *corr,       \
                                 int64_t nb, int j0, int64_t c0) {                                               \
        __m256 acc[AOQ][NV];                                                                                     \
        NM_UNROLL for (int jj = 0; jj < AOQ; jj++) {                                                             \
            const __m256 cr = _mm256_broadcast_ss(corr + j0 + jj);                                               \
            NM_UNROLL for (int i = 0; i < NV; i++)                                                               \
                acc[jj][i] = _mm256_mul_ps(_mm256_loadu_ps(O + (j0 + jj) * vp + c0 + 8 * i), cr);                \
        }                                                                                                        \
        for (int64_t t = 0; t < nb; t++) {                                                                       \
            __m256 vv[NV];                                                                                       \
            NM_UNROLL for (int i = 0; i < NV; i++) vv[i] = _mm256_loadu_ps(VF + t * vp + c0 + 8 * i);            \
            NM_UNROLL for (int jj = 0; jj < AOQ; jj++) {                                                         \
                const __m256 p = _mm256_broadcast_ss(P + t * AQ + j0 + jj);                                      \
                NM_UNROLL for (int i = 0; i < NV; i++) acc[jj][i] = _mm256_fmadd_ps(p, vv[i], acc[jj][i]);       \
            }                                                                                                    \
        }                                                                                                        \
        NM_UNROLL for (int jj = 0; jj < AOQ; jj++)                                                               \
            NM_UNROLL for (int i = 0; i < NV; i++) _mm256_storeu_ps(O + (j0 + jj) * vp + c0 + 8 * i, acc[jj][i]); \
    }
ATTN_PV_TILE(2)
ATTN_PV_TILE(1)
#undef ATTN_PV_TILE

static void attn_queries_avx2(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q,
                              int64_t pos0, const void *k, const void *v, enum dtype kv_type, int64_t k_stride,
                              int64_t v_stride, int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    const int64_t hd = head_dim, hp = up8(head_dim), vp = up8(head_dim_v);
    float *QT = scratch;       /* [hd][AQ] */
    float *KF = QT + hp * AQ;  /* [AK][hp] */
    float *VF = KF + AK * hp;  /* [AK][vp] */
    float *P = VF + AK * vp;   /* [AK][AQ] scores, then probabilities */
    float *O = P + AK * AQ;    /* [AQ][vp] */
    float *corr = O + AQ * vp; /* [AQ] */
    float *linv = corr + AQ;   /* [AQ] */
    const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 vscale = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    for (int64_t i0 = 0; i0 < n_q; i0 += AQ) {
        const int nq = (int)(n_q - i0 < AQ ? n_q - i0 : AQ);
        const int nqo = (nq + AOQ - 1) / AOQ * AOQ; /* rows of O computed (whole P V tiles) */
        for (int64_t c = 0; c < hd; c++)
            for (int j = 0; j < AQ; j++) QT[c * AQ + j] = j < nq ? q[(i0 + j) * q_stride + c] : 0.0f;
        for (int j = 0; j < nqo; j++)
            for (int64_t c = 0; c < vp; c += 8) _mm256_storeu_ps(O + j * vp + c, _mm256_setzero_ps());
        __m256 m[NQV], l[NQV];
        for (int h = 0; h < NQV; h++) m[h] = ninf, l[h] = _mm256_setzero_ps();
        const int64_t kv_end = pos0 + i0 + nq; /* the block's last query sees [0, kv_end) */
        for (int64_t t0 = 0; t0 < kv_end; t0 += AK) {
            const int64_t nb = kv_end - t0 < AK ? kv_end - t0 : AK, nbp = (nb + AKT - 1) / AKT * AKT;
            kv_block_f32(KF, hp, k, k_stride, kv_type, t0, nb, nbp, hd);
            kv_block_f32(VF, vp, v, v_stride, kv_type, t0, nb, nb, head_dim_v);
            /* S[t][j]; key t0 + t is hidden from query j when t0 + t > pos0 + i0 + j */
            __m256 bm[NQV];
            for (int h = 0; h < NQV; h++) bm[h] = ninf;
            for (int hq = 0; hq < NQV; hq += 2) {
                if (8 * hq >= nq) break; /* query vectors with no query */
                for (int64_t tb = 0; tb < nbp; tb += AKT) {
                    __m256 acc[AKT][2];
                    NM_UNROLL for (int i = 0; i < AKT; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
                    const float *kt = KF + tb * hp;
                    for (int64_t c = 0; c < hd; c++) {
                        const __m256 qa = _mm256_loadu_ps(QT + c * AQ + 8 * hq), qb = _mm256_loadu_ps(QT + c * AQ + 8 * hq + 8);
                        NM_UNROLL for (int i = 0; i < AKT; i++) {
                            const __m256 kb = _mm256_broadcast_ss(kt + i * hp + c);
                            acc[i][0] = _mm256_fmadd_ps(kb, qa, acc[i][0]);
                            acc[i][1] = _mm256_fmadd_ps(kb, qb, acc[i][1]);
                        }
                    }
                    NM_UNROLL for (int i = 0; i < AKT; i++) {
                        if (tb + i >= nb) break;
                        const float first = (float)(t0 + tb + i - pos0 - i0); /* first lane that sees the key */
                        NM_UNROLL for (int hh = 0; hh < 2; hh++) {
                            const int h = hq + hh;
                            const __m256 lane = _mm256_add_ps(iota, _mm256_set1_ps(8.0f * h));
                            const __m256 hidden = _mm256_and_ps(_mm256_cmp_ps(lane, _mm256_set1_ps(first), _CMP_LT_OQ),
                                                                _mm256_cmp_ps(lane, _mm256_set1_ps((float)nq), _CMP_LT_OQ));
                            const __m256 sv = _mm256_blendv_ps(_mm256_mul_ps(acc[i][hh], vscale), ninf, hidden);
                            _mm256_storeu_ps(P + (tb + i) * AQ + 8 * h, sv);
                            bm[h] = _mm256_max_ps(bm[h], sv);
                        }
                    }
                }
            }
            /* online softmax, 8 queries per vector (vectors past nq: P rows never read) */
            for (int h = 0; h < NQV; h++) {
                if (8 * h >= nq) {
                    for (int j = 0; j < 8; j++) corr[8 * h + j] = 0.0f;
                    continue;
                }
                const __m256 mn = _mm256_max_ps(m[h], bm[h]); /* finite: key 0 or an earlier block */
                const __m256 cr = exp8(_mm256_sub_ps(m[h], mn)); /* first block: m = -inf, O = l = 0 */
                _mm256_storeu_ps(corr + 8 * h, cr);
                __m256 ls = _mm256_mul_ps(l[h], cr);
                for (int64_t t = 0; t < nb; t++) {
                    const __m256 sv = _mm256_loadu_ps(P + t * AQ + 8 * h);
                    const __m256 live = _mm256_cmp_ps(sv, ninf, _CMP_NEQ_OQ);
                    const __m256 e = _mm256_and_ps(live, exp8(_mm256_sub_ps(sv, mn)));
                    _mm256_storeu_ps(P + t * AQ + 8 * h, e);
                    ls = _mm256_add_ps(ls, e);
                }
                m[h] = mn;
                l[h] = ls;
            }
            /* O = O * corr + P V */
            for (int j0 = 0; j0 < nqo; j0 += AOQ) {
                int64_t c0 = 0;
                for (; c0 + 16 <= vp; c0 += 16) attn_pv_tile2(O, vp, P, VF, corr, nb, j0, c0);
                if (c0 < vp) attn_pv_tile1(O, vp, P, VF, corr, nb, j0, c0);
            }
        }
        for (int h = 0; h < NQV; h++) _mm256_storeu_ps(linv + 8 * h, _mm256_div_ps(_mm256_set1_ps(1.0f), l[h]));
        for (int j = 0; j < nq; j++) {
            const __m256 inv = _mm256_broadcast_ss(linv + j);
            for (int64_t c = 0; c < head_dim_v; c += 8)
                store8(out + (i0 + j) * out_stride + c, head_dim_v - c, _mm256_mul_ps(_mm256_loadu_ps(O + j * vp + c), inv));
        }
    }
}

void avx2_fill_attn(struct kern_isa *t) {
    t->attn_heads = attn_heads_avx2;
    t->attn_queries = attn_queries_avx2;
    t->attn_queries_scratch = attn_queries_avx2_scratch;
}
