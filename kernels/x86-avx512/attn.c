/* Attention over the KV cache with AVX-512 (decode: a row's query heads that share a KV head;
 * prompts: blocks of queries of one head): K and V rows converted from f16 16 values at a time
 * (vcvtph2ps), dot products and the weighted sums of V in vector registers,
 * and the softmax's exponentials 16 at a time with a polynomial (relative error < 2e-7, like
 * expf to a few ulp). The plain-C op_attention_heads_ref is the reference it is tested against. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../base.h"
#include "../ops.h"
#include "avx512.h"
#include "simd.h"

/* 16 values of a KV row as f32 (masked tail). */
static inline __m512 load16(const void *row, int64_t i, int64_t n, enum dtype t) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    if (t == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

/* 16 values of a KV row that has them all, as f32. */
NM_INLINE __m512 load16_full(const void *row, int64_t i, const enum dtype t) {
    return t == DTYPE_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)))
                          : _mm512_loadu_ps((const float *)row + i);
}

/* Lane j = the sum of a[j]'s 16 lanes (a transposing tree of unpacks, shuffles and adds). */
NM_INLINE __m512 hsum16x16(const __m512 *a) {
    __m512 b[8], c[4], d[2];
    NM_UNROLL for (int i = 0; i < 8; i++) b[i] =
        _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    NM_UNROLL for (int i = 0; i < 4; i++) c[i] =
        _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    NM_UNROLL for (int i = 0; i < 2; i++) d[i] =
        _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Scores q.k * scale of keys [t0, t0 + 16) into scratch (16 keys in the lanes of one vector:
 * no horizontal sum per key); returns them. */
NM_INLINE __m512 head_scores16(float *scratch, const float *q, const uint8_t *k, int64_t t0, int64_t k_stride,
                               int64_t head_dim, float scale, const enum dtype t) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    const uint8_t *kr[16];
    __m512 a[16];
    NM_UNROLL for (int j = 0; j < 16; j++) {
        a[j] = _mm512_setzero_ps();
        kr[j] = k + (size_t)((t0 + j) * k_stride) * es;
    }
    int64_t i = 0;
    for (; i + 16 <= head_dim; i += 16) {
        const __m512 qv = _mm512_loadu_ps(q + i);
        NM_UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_fmadd_ps(qv, load16_full(kr[j], i, t), a[j]);
    }
    if (i < head_dim) {
        const __m512 qv = _mm512_maskz_loadu_ps((__mmask16)((1u << (head_dim - i)) - 1), q + i);
        NM_UNROLL for (int j = 0; j < 16; j++) a[j] = _mm512_fmadd_ps(qv, load16(kr[j], i, head_dim, t), a[j]);
    }
    const __m512 s = _mm512_mul_ps(hsum16x16(a), _mm512_set1_ps(scale));
    _mm512_storeu_ps(scratch + t0, s);
    return s;
}

/* out[0, n) (n <= 16 NR; NR a literal) += sum over keys [u0, u1) of p[u] V[u][i0 ..]: NR
 * accumulators loaded from out, kept in registers over the keys, stored back (the same sums as
 * accumulating in registers over all the keys at once). */
NM_INLINE void head_pv(float *out, int64_t n, const float *p, const uint8_t *v, int64_t u0, int64_t u1,
                       int64_t v_stride, int64_t i0, int64_t head_dim_v, const int NR, const enum dtype t) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    __m512 acc[8];
    __mmask16 m[8];
    NM_UNROLL for (int r = 0; r < NR; r++) {
        const int64_t left = n - r * 16;
        m[r] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        acc[r] = _mm512_maskz_loadu_ps(m[r], out + r * 16);
    }
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *vt = v + (size_t)(u * v_stride) * es;
        const __m512 pu = _mm512_set1_ps(p[u]);
        NM_UNROLL for (int r = 0; r < NR; r++) {
            const __m512 x = i0 + r * 16 + 16 <= head_dim_v ? load16_full(vt, i0 + r * 16, t)
                                                            : load16(vt, i0 + r * 16, head_dim_v, t);
            acc[r] = _mm512_fmadd_ps(pu, x, acc[r]);
        }
    }
    NM_UNROLL for (int r = 0; r < NR; r++) _mm512_mask_storeu_ps(out + r * 16, m[r], acc[r]);
}

/* Query heads per pass of the decode kernel: ATTN_HEADS_PASS (ops.h; its per-head state lives in
 * arrays of this size). */
#define HEADS_PASS ATTN_HEADS_PASS

/* The decode kernel for n_q <= HEADS_PASS heads and one KV type t (a literal after inlining).
 * Keys go in blocks of 16, each block for every head in turn, so its K and V rows come from L1
 * after the first head; a head's operations are those it gets alone. */
NM_INLINE void attn_heads_avx512_t(float *out, int64_t ldo, const float *q, int64_t ldq, int n_q, const uint8_t *k,
                                   const uint8_t *v, int64_t n_kv, int64_t k_stride, int64_t v_stride, int64_t head_dim,
                                   int64_t head_dim_v, float scale, float *scratch, const enum dtype t) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    /* Scores into scratch + j n_kv, 16 keys at a time, then the rest one by one. */
    __m512 vmax[HEADS_PASS];
    float inv[HEADS_PASS];
    for (int j = 0; j < n_q; j++) vmax[j] = _mm512_set1_ps(-INFINITY);
    int64_t t0 = 0;
    for (; t0 + 16 <= n_kv; t0 += 16)
        for (int j = 0; j < n_q; j++)
            vmax[j] = _mm512_max_ps(vmax[j], head_scores16(scratch + j * n_kv, q + j * ldq, k, t0, k_stride, head_dim,
                                                           scale, t));
    for (int j = 0; j < n_q; j++) {
        const float *qj = q + j * ldq;
        float *sj = scratch + j * n_kv;
        float max = _mm512_reduce_max_ps(vmax[j]);
        for (int64_t u = t0; u < n_kv; u++) {
            const uint8_t *kt = k + (size_t)(u * k_stride) * es;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t i = 0; i < head_dim; i += 16) {
                const __mmask16 m = head_dim - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (head_dim - i)) - 1);
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, qj + i), load16(kt, i, head_dim, t), acc);
            }
            const float s = _mm512_reduce_add_ps(acc) * scale;
            sj[u] = s;
            max = s > max ? s : max;
        }
        /* Softmax numerators and their sum. */
        const __m512 bmax = _mm512_set1_ps(max);
        __m512 vsum = _mm512_setzero_ps();
        int64_t u = 0;
        for (; u + 16 <= n_kv; u += 16) {
            const __m512 e = nm_exp_ps(_mm512_sub_ps(_mm512_loadu_ps(sj + u), bmax));
            _mm512_storeu_ps(sj + u, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        if (u < n_kv) {
            const __mmask16 m = (__mmask16)((1u << (n_kv - u)) - 1);
            const __m512 e = nm_exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sj + u), bmax));
            _mm512_mask_storeu_ps(sj + u, m, e);
            vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
        }
        inv[j] = 1.0f / _mm512_reduce_add_ps(vsum);
    }
    /* Weighted sums of V rows, up to 128 output values per pass, 16 keys at a time for every
     * head, then each output times its head's 1 / sum. */
    for (int64_t i0 = 0; i0 < head_dim_v; i0 += 128) {
        const int64_t nv = head_dim_v - i0 < 128 ? head_dim_v - i0 : 128;
        for (int j = 0; j < n_q; j++) memset(out + j * ldo + i0, 0, (size_t)nv * sizeof(float));
        for (int64_t u0 = 0; u0 < n_kv; u0 += 16) {
            const int64_t u1 = n_kv - u0 < 16 ? n_kv : u0 + 16;
            for (int j = 0; j < n_q; j++) {
                float *oj = out + j * ldo + i0;
                const float *pj = scratch + j * n_kv;
                switch ((nv + 15) / 16) {
#define PV_CASE(NR) \
    case NR: head_pv(oj, nv, pj, v, u0, u1, v_stride, i0, head_dim_v, NR, t); break;
                    PV_CASE(1) PV_CASE(2) PV_CASE(3) PV_CASE(4) PV_CASE(5) PV_CASE(6) PV_CASE(7) PV_CASE(8)
#undef PV_CASE
                }
            }
        }
        for (int j = 0; j < n_q; j++) {
            float *oj = out + j * ldo + i0;
            const __m512 vi = _mm512_set1_ps(inv[j]);
            for (int64_t c = 0; c < nv; c += 16) {
                const __mmask16 m = nv - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nv - c)) - 1);
                _mm512_mask_storeu_ps(oj + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, oj + c), vi));
            }
        }
    }
}

/* Scores of 16 keys per vector (no horizontal sum per key), the weighted sums of V in registers,
 * each block of keys read once for up to HEADS_PASS heads; one copy per KV type. */
static void attn_heads_avx512(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                              const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                              int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    for (int j0 = 0; j0 < n_q; j0 += HEADS_PASS) {
        const int nj = n_q - j0 < HEADS_PASS ? n_q - j0 : HEADS_PASS;
        float *o = out + j0 * out_stride;
        const float *qj = q + j0 * q_stride;
        if (kv_type == DTYPE_F16)
            attn_heads_avx512_t(o, out_stride, qj, q_stride, nj, k, v, n_kv, k_stride, v_stride, head_dim, head_dim_v,
                                scale, scratch, DTYPE_F16);
        else
            attn_heads_avx512_t(o, out_stride, qj, q_stride, nj, k, v, n_kv, k_stride, v_stride, head_dim, head_dim_v,
                                scale, scratch, DTYPE_F32);
    }
}

/* ---- prompt attention: blocks of ATTN_Q_BLOCK queries x ATTN_KV_BLOCK keys -----------------
 *
 * Laid out so that no step needs a horizontal sum:
 *   - the block's queries are transposed once into QT[c][j] (query j in lane j, two vectors of
 *     16), and a key block is converted once to f32 rows KF[t][c] (and V to VF[t][c]);
 *   - scores S[t][j] = sum_c KF[t][c] * QT[c][j]: 8 keys x 2 query vectors per register tile,
 *     each step one broadcast of KF[t][c] (a load) and two FMAs, so a score row is one vector
 *     per 16 queries;
 *   - the online softmax works on those rows with queries in lanes: the running max, the
 *     rescale factor and the running sum are vectors, the exponentials 16 queries at a time;
 *   - O[j][c] += sum_t P[t][j] VF[t][c]: a tile of 4 queries x 64 columns in 16 registers over
 *     the block's keys, the rescale of the previous blocks folded into the tile's load.
 * Lanes of queries past n_q see every key with score 0 (finite, never written out), so no lane
 * is all -inf. */

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }
static inline int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

#define AQ ATTN_Q_BLOCK  /* 32 queries: two vectors */
#define AK ATTN_KV_BLOCK /* 64 keys */
#define AKT 8            /* keys per register tile of the scores */
#define AOQ 4            /* queries per register tile of P V */

static size_t attn_queries_avx512_scratch(int64_t head_dim, int64_t head_dim_v) {
    const int64_t hp = up16(head_dim), vp = up16(head_dim_v);
    return (size_t)(hp * AQ + AK * hp + AK * vp + AK * AQ + AQ * vp + 2 * AQ + 16);
}

/* Rows [t0, t0 + nb) of a K or V cache as f32 rows of stride dp (zero past dim; rows nb..nbp-1
 * all zero). */
static void kv_block_f32(float *dst, int64_t dp, const void *src, int64_t stride, enum dtype t, int64_t t0, int64_t nb,
                         int64_t nbp, int64_t dim) {
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    for (int64_t r = 0; r < nbp; r++) {
        float *d = dst + r * dp;
        if (r >= nb) {
            for (int64_t c = 0; c < dp; c += 16) _mm512_storeu_ps(d + c, _mm512_setzero_ps());
            continue;
        }
        const uint8_t *row = (const uint8_t *)src + (size_t)((t0 + r) * stride) * es;
        for (int64_t c = 0; c < dp; c += 16) _mm512_storeu_ps(d + c, c < dim ? load16(row, c, dim, t) : _mm512_setzero_ps());
    }
}

/* O rows j0..j0+AOQ-1, columns c0..c0+16*NV-1: O = O * corr + sum_t P[t][j] VF[t][c]. One
 * function per NV (a literal, so the 4 x NV accumulators stay in registers). */
#define ATTN_PV_TILE(NV)                                                                                        \
    static void attn_pv_tile##NV(float *O, int64_t vp, const float *P, const float *VF, const float *corr,    \
                                 int64_t nb, int j0, int64_t c0) {                                            \
        __m512 acc[AOQ][NV];                                                                                  \
        NM_UNROLL for (int jj = 0; jj < AOQ; jj++) {                                                          \
            const __m512 cr = _mm512_set1_ps(corr[j0 + jj]);                                                  \
            NM_UNROLL for (int i = 0; i < NV; i++)                                                            \
                acc[jj][i] = _mm512_mul_ps(_mm512_loadu_ps(O + (j0 + jj) * vp + c0 + 16 * i), cr);            \
        }                                                                                                     \
        for (int64_t t = 0; t < nb; t++) {                                                                    \
            __m512 vv[NV];                                                                                    \
            NM_UNROLL for (int i = 0; i < NV; i++) vv[i] = _mm512_loadu_ps(VF + t * vp + c0 + 16 * i);        \
            NM_UNROLL for (int jj = 0; jj < AOQ; jj++) {                                                      \
                const __m512 p = _mm512_set1_ps(P[t * AQ + j0 + jj]);                                         \
                NM_UNROLL for (int i = 0; i < NV; i++) acc[jj][i] = _mm512_fmadd_ps(p, vv[i], acc[jj][i]);    \
            }                                                                                                 \
        }                                                                                                     \
        NM_UNROLL for (int jj = 0; jj < AOQ; jj++)                                                            \
            NM_UNROLL for (int i = 0; i < NV; i++) _mm512_storeu_ps(O + (j0 + jj) * vp + c0 + 16 * i, acc[jj][i]); \
    }
ATTN_PV_TILE(4)
ATTN_PV_TILE(3)
ATTN_PV_TILE(2)
ATTN_PV_TILE(1)
#undef ATTN_PV_TILE

static void attn_queries_avx512(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q,
                                int64_t pos0, const void *k, const void *v, enum dtype kv_type, int64_t k_stride, int64_t v_stride,
                         int64_t head_dim, int64_t head_dim_v, float scale, float *scratch) {
    const int64_t hd = head_dim, hp = up16(head_dim), vp = up16(head_dim_v);
    float *QT = scratch;          /* [hd][AQ] */
    float *KF = QT + hp * AQ;     /* [AK][hp] */
    float *VF = KF + AK * hp;     /* [AK][vp] */
    float *P = VF + AK * vp;      /* [AK][AQ] scores, then probabilities */
    float *O = P + AK * AQ;       /* [AQ][vp] */
    float *corr = O + AQ * vp;    /* [AQ] */
    float *linv = corr + AQ;      /* [AQ] */
    const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t i0 = 0; i0 < n_q; i0 += AQ) {
        const int nq = (int)(n_q - i0 < AQ ? n_q - i0 : AQ);
        const int nqo = (nq + AOQ - 1) / AOQ * AOQ; /* rows of O computed (whole P V tiles) */
        for (int64_t c = 0; c < hd; c++)
            for (int j = 0; j < AQ; j++) QT[c * AQ + j] = j < nq ? q[(i0 + j) * q_stride + c] : 0.0f;
        for (int j = 0; j < nqo; j++)
            for (int64_t c = 0; c < vp; c += 16) _mm512_storeu_ps(O + j * vp + c, _mm512_setzero_ps());
        __m512 m[2] = {ninf, ninf}, l[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        const int64_t kv_end = pos0 + i0 + nq; /* the block's last query sees [0, kv_end) */
        for (int64_t t0 = 0; t0 < kv_end; t0 += AK) {
            const int64_t nb = kv_end - t0 < AK ? kv_end - t0 : AK, nbp = (nb + AKT - 1) / AKT * AKT;
            kv_block_f32(KF, hp, k, k_stride, kv_type, t0, nb, nbp, hd);
            kv_block_f32(VF, vp, v, v_stride, kv_type, t0, nb, nb, head_dim_v);
            /* S[t][j]; key t0 + t is hidden from query j (lane) when t0 + t > pos0 + i0 + j */
            __m512 bm[2] = {ninf, ninf};
            for (int64_t tb = 0; tb < nbp; tb += AKT) {
                __m512 acc[AKT][2];
                NM_UNROLL for (int i = 0; i < AKT; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
                const float *kt = KF + tb * hp;
                for (int64_t c = 0; c < hd; c++) {
                    const __m512 qa = _mm512_loadu_ps(QT + c * AQ), qb = _mm512_loadu_ps(QT + c * AQ + 16);
                    NM_UNROLL for (int i = 0; i < AKT; i++) {
                        const __m512 kb = _mm512_set1_ps(kt[i * hp + c]);
                        acc[i][0] = _mm512_fmadd_ps(kb, qa, acc[i][0]);
                        acc[i][1] = _mm512_fmadd_ps(kb, qb, acc[i][1]);
                    }
                }
                NM_UNROLL for (int i = 0; i < AKT; i++) {
                    if (tb + i >= nb) break;
                    const float first = (float)(t0 + tb + i - pos0 - i0); /* first lane that sees the key */
                    NM_UNROLL for (int h = 0; h < 2; h++) {
                        const __m512 lane = _mm512_add_ps(iota, _mm512_set1_ps(16.0f * h));
                        const __mmask16 hidden = _mm512_cmp_ps_mask(lane, _mm512_set1_ps(first), _CMP_LT_OQ) &
                                                 _mm512_cmp_ps_mask(lane, _mm512_set1_ps((float)nq), _CMP_LT_OQ);
                        const __m512 sv = _mm512_mask_mov_ps(_mm512_mul_ps(acc[i][h], vscale), hidden, ninf);
                        _mm512_storeu_ps(P + (tb + i) * AQ + 16 * h, sv);
                        bm[h] = _mm512_max_ps(bm[h], sv);
                    }
                }
            }
            /* online softmax, 16 queries per vector */
            for (int h = 0; h < 2; h++) {
                const __m512 mn = _mm512_max_ps(m[h], bm[h]); /* finite: key 0 or an earlier block */
                const __m512 cr = nm_exp_ps(_mm512_sub_ps(m[h], mn)); /* first block: m = -inf, O = l = 0 */
                _mm512_storeu_ps(corr + 16 * h, cr);
                __m512 ls = _mm512_mul_ps(l[h], cr);
                for (int64_t t = 0; t < nb; t++) {
                    const __m512 sv = _mm512_loadu_ps(P + t * AQ + 16 * h);
                    const __mmask16 live = _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_OQ);
                    const __m512 e = _mm512_maskz_mov_ps(live, nm_exp_ps(_mm512_sub_ps(sv, mn)));
                    _mm512_storeu_ps(P + t * AQ + 16 * h, e);
                    ls = _mm512_add_ps(ls, e);
                }
                m[h] = mn;
                l[h] = ls;
            }
            /* O = O * corr + P V */
            for (int j0 = 0; j0 < nqo; j0 += AOQ) {
                int64_t c0 = 0;
                for (; c0 + 64 <= vp; c0 += 64) attn_pv_tile4(O, vp, P, VF, corr, nb, j0, c0);
                switch ((vp - c0) / 16) {
                case 3: attn_pv_tile3(O, vp, P, VF, corr, nb, j0, c0); break;
                case 2: attn_pv_tile2(O, vp, P, VF, corr, nb, j0, c0); break;
                case 1: attn_pv_tile1(O, vp, P, VF, corr, nb, j0, c0); break;
                default: break;
                }
            }
        }
        _mm512_storeu_ps(linv, _mm512_div_ps(_mm512_set1_ps(1.0f), l[0]));
        _mm512_storeu_ps(linv + 16, _mm512_div_ps(_mm512_set1_ps(1.0f), l[1]));
        for (int j = 0; j < nq; j++) {
            const __m512 inv = _mm512_set1_ps(linv[j]);
            for (int64_t c = 0; c < head_dim_v; c += 16) {
                const __mmask16 mk = tail_mask(head_dim_v - c);
                _mm512_mask_storeu_ps(out + (i0 + j) * out_stride + c, mk,
                                      _mm512_mul_ps(_mm512_loadu_ps(O + j * vp + c), inv));
            }
        }
    }
}

void avx512_fill_attn(struct kern_isa *t) {
    t->attn_heads = attn_heads_avx512;
    t->attn_queries = attn_queries_avx512;
    t->attn_queries_scratch = attn_queries_avx512_scratch;
}
