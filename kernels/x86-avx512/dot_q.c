/* AVX-512 VNNI dot products of 32-value block types (Q4_0, Q4_1, Q8_0) with q8x activations.
 *
 * Scheme, per group of 16 blocks:
 *  - The fp16 scales d of the 16 weight blocks (and Q4_1's m) are gathered into one vector per
 *    weight row; the activation d and isum of the 16 blocks into one vector per activation row.
 *  - Two blocks at a time, vpdpbusd multiplies the unsigned weight codes (Q4: nibbles 0..15;
 *    Q8_0: qs ^ 0x80 = qs + 128) with the signed activations: lanes 0..7 hold block 2p, lanes
 *    8..15 block 2p+1. The lanes are converted to float and multiplied by d_w * d_a of their
 *    block (a lane permute of the group vectors), then summed into a float accumulator.
 *  - The offset of the unsigned codes (Q4_0: -8, Q8_0: -128, Q4_1: +m/d) is a per-block term
 *    d_w * d_a * isum * offset, added once per group as one 16-lane FMA (each lane one block).
 * A tile keeps R weight rows x C activation rows of accumulators, so the nibble unpacking of a
 * weight pair serves C activation rows and every activation load serves R weight rows. */
#include "avx512.h"
#include "simd.h"

/* pair p of a group: lanes 0..7 take element 2p of a 16-lane group vector, lanes 8..15 2p+1 */
static const int32_t k_pair_idx[8][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

NM_INLINE __m512 pair_bcast(__m512 group, int p) {
    return _mm512_permutexvar_ps(_mm512_load_si512(k_pair_idx[p]), group);
}

/* Byte offsets 0, s, 2s, ... 15s for the gathers of one group. */
NM_INLINE __m512i stride_idx(int s) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32(s));
}

/* 16 fp16 values at p, p + 1*stride, ... (idx in bytes), lanes outside m zero. */
NM_INLINE __m512 gather_fp16(__mmask16 m, __m512i idx, const void *p) {
    __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, p, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* Activation side of a group: d_a and d_a * isum * offset of each block. */
NM_INLINE void act_group(__mmask16 m, __m512i idx, const block_q8x *a, float offset, __m512 *ad,
                         __m512 *sa) {
    *ad = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, &a->d, 1);
    __m512 isum = _mm512_cvtepi32_ps(
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, &a->isum, 1));
    *sa = _mm512_mul_ps(_mm512_mul_ps(*ad, isum), _mm512_set1_ps(offset));
}

/* ---------------------------------------------------------------------------------------- */
/* Q4_0 and Q4_1: the 16 bytes of nibbles of a block give 32 codes (low nibbles first).      */

/* Codes of blocks b and b+1 (b+1 absent if one): bytes 0..15 low nibbles of b, 16..31 high
 * nibbles of b, 32..63 the same for b+1. qs_off/bsize: offset of qs in the block and its size. */
NM_INLINE __m512i q4_codes_pair(const uint8_t *blk, int qs_off, int bsize, int one) {
    __m128i q0 = _mm_loadu_si128((const __m128i *)(blk + qs_off));
    __m256i v = one ? _mm256_zextsi128_si256(q0)
                    : _mm256_inserti128_si256(_mm256_castsi128_si256(q0),
                                              _mm_loadu_si128((const __m128i *)(blk + bsize + qs_off)), 1);
    __m512i z = _mm512_castsi256_si512(v);
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                            0x0004000400040004, 0x0004000400040004, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0F));
}

/* Q8_0: codes qs + 128 as unsigned bytes. */
NM_INLINE __m512i q8_codes_pair(const uint8_t *blk, int one) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
    __m512i z = one ? _mm512_zextsi256_si512(lo)
                    : _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                         _mm256_loadu_si256((const __m256i *)(blk + 34 + 2)), 1);
    return _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80));
}

enum qkind { QK_Q4_0, QK_Q4_1, QK_Q8_0 };

/* One pair step (blocks 2p, 2p+1 of the group starting at block b0) for all R x C. */
NM_INLINE void q_pair(const enum qkind kind, const int R, const int C, int p, int one,
                      int64_t b0, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                      const __m512 *dw, const __m512 *ad, __m512 (*acc)[NM_TILE_CMAX]) {
    const int bsize = kind == QK_Q4_0 ? 18 : kind == QK_Q4_1 ? 20 : 34;
    __m512i aq[NM_TILE_CMAX];
    __m512 adp[NM_TILE_CMAX];
    NM_UNROLL for (int c = 0; c < C; c++) {
        aq[c] = act_load_pair((const block_q8x *)(x + (size_t)c * xs) + b0 + 2 * p, one);
        adp[c] = pair_bcast(ad[c], p);
    }
    NM_UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *blk = w + (size_t)r * ws + (size_t)(b0 + 2 * p) * bsize;
        __m512i q = kind == QK_Q8_0 ? q8_codes_pair(blk, one)
                                    : q4_codes_pair(blk, kind == QK_Q4_0 ? 2 : 4, bsize, one);
        __m512 dwp = pair_bcast(dw[r], p);
        NM_UNROLL for (int c = 0; c < C; c++) {
            __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, aq[c]);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dwp, adp[c]),
                                        acc[r][c]);
        }
    }
}

NM_INLINE void q_tile(const enum qkind kind, const int R, const int C, int64_t n,
                      const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
                      int64_t ldy) {
    const int bsize = kind == QK_Q4_0 ? 18 : kind == QK_Q4_1 ? 20 : 34;
    const float offset = kind == QK_Q4_0 ? -8.0f : kind == QK_Q8_0 ? -128.0f : 1.0f;
    const int64_t nb = n / 32;
    const __m512i widx = stride_idx(bsize), aidx = stride_idx(sizeof(block_q8x));
    __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];
    NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =
        _mm512_setzero_ps();

    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int nblk = (int)NM_MIN(16, nb - b0);
        const __mmask16 gm = (__mmask16)((1u << nblk) - 1u);
        __m512 dw[NM_TILE_RMAX], mw[NM_TILE_RMAX], ad[NM_TILE_CMAX], sa[NM_TILE_CMAX];
        NM_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *wg = w + (size_t)r * ws + (size_t)b0 * bsize;
            dw[r] = gather_fp16(gm, widx, wg);
            /* Q4_1's offset is m (per weight block) times isum: mw replaces d_w in the term */
            mw[r] = kind == QK_Q4_1 ? gather_fp16(gm, widx, wg + 2) : dw[r];
        }
        NM_UNROLL for (int c = 0; c < C; c++) {
            act_group(gm, aidx, (const block_q8x *)(x + (size_t)c * xs) + b0, offset, &ad[c],
                      &sa[c]);
            NM_UNROLL for (int r = 0; r < R; r++) acc[r][c] =
                _mm512_fmadd_ps(mw[r], sa[c], acc[r][c]);
        }
        if (nblk == 16) {
            NM_UNROLL for (int p = 0; p < 8; p++)
                q_pair(kind, R, C, p, 0, b0, w, ws, x, xs, dw, ad, acc);
        } else {
            for (int p = 0; p < nblk / 2; p++)
                q_pair(kind, R, C, p, 0, b0, w, ws, x, xs, dw, ad, acc);
            if (nblk & 1) q_pair(kind, R, C, nblk / 2, 1, b0, w, ws, x, xs, dw, ad, acc);
        }
    }
    NM_TILE_STORE(acc, R, C, y, ldy);
}

NM_INLINE void q4_0_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    q_tile(QK_Q4_0, R, C, n, w, ws, x, xs, y, ldy);
}
NM_INLINE void q4_1_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    q_tile(QK_Q4_1, R, C, n, w, ws, x, xs, y, ldy);
}
NM_INLINE void q8_0_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    q_tile(QK_Q8_0, R, C, n, w, ws, x, xs, y, ldy);
}

NM_GEMM_DEFINE(q4_0, q4_0_tile, 4)
NM_GEMM_DEFINE(q4_1, q4_1_tile, 4)
NM_GEMM_DEFINE(q8_0, q8_0_tile, 4)

void avx512_fill_q(struct kern_isa *t) {
    t->vec_dot[DTYPE_Q4_0] = vec_dot_q4_0;
    t->gemm[DTYPE_Q4_0] = gemm_q4_0;
    t->vec_dot[DTYPE_Q4_1] = vec_dot_q4_1;
    t->gemm[DTYPE_Q4_1] = gemm_q4_1;
    t->vec_dot[DTYPE_Q8_0] = vec_dot_q8_0;
    t->gemm[DTYPE_Q8_0] = gemm_q8_0;
}
