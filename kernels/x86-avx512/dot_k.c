/* AVX-512 VNNI dot products of the K-quants (Q4_K, Q5_K, Q6_K) with q8x activations.
 *
 * A super-block of 256 weights meets 8 q8x blocks. It is walked as 4 zmm steps of 64 codes;
 * the order of the blocks inside a step is the one the weight bytes unpack to cheaply:
 *  - Q4_K/Q5_K: qs bytes 0..63 give sub-blocks 0 and 2 (low nibbles) and 1 and 3 (high
 *    nibbles), so the steps hold sub-blocks (0,2), (1,3), (4,6), (5,7); the packed activation
 *    row (NM_PACK_K4) has the same two q8x blocks side by side, one aligned zmm. Q5_K's fifth
 *    bit comes from qh, bit j for sub-block j, added with a byte mask.
 *  - Q6_K: ql bytes 0..63 give values 0..63 (low nibbles) and 64..127 (high nibbles) of a
 *    128-half in natural order, so the steps hold q8x blocks (0,1), (2,3), (4,5), (6,7); the two
 *    high bits come from qh.
 * vpdpbusd multiplies the unsigned codes (0..15, 0..31, 0..63) with the signed activations;
 * each lane (4 products) is converted to float and scaled by d * scale(sub-block or 16-group)
 * * d_a(q8x block). The offsets are exact per-block terms: Q4_K/Q5_K subtract
 * dmin * m_j * d_a * isum_j (one 8-lane FMA per super-block); Q6_K subtracts 32 * sum of the 4
 * activations of each lane, folded into the vpdpbusd accumulator. */
#include <string.h>

#include "avx512.h"
#include "simd.h"

/* Lane permutes: element a for lanes 0..7 and b for lanes 8..15 (zmm steps of Q4_K/Q5_K and of
 * the q8x blocks of Q6_K), or elements 4z..4z+3 each for 4 lanes (the 16-groups of Q6_K). */
static const int32_t k_step_idx_k4[4][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2},
    {1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6},
    {5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const int32_t k_step_idx_q6blk[4][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const int32_t k_step_idx_q6grp[4][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15},
};
/* The sub-blocks of step z for Q4_K/Q5_K (as packed by NM_PACK_K4): Q5_K's qh bit numbers. */
static const int k_step_blk_k4[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

/* Software prefetch distance, in super-blocks (3.5-5 KB) ahead in each weight row. GEMV from
 * DRAM, one thread: on Zen 5 Q6_K 12 -> 17 GB/s with 8 ahead (its reads inside a super-block
 * go backwards, scales at byte 192 first, which the hardware prefetcher follows poorly), Q4_K
 * +6-11%; on a Xeon 8 -> 24 ahead gave Q4_K 8.0 -> 8.6 and Q6_K 11.1 -> 11.7 GB/s. */
#ifndef K_PREFETCH_SB
#define K_PREFETCH_SB 24
#endif

NM_INLINE __m512 perm_ps(const int32_t *idx, __m512 v) {
    return _mm512_permutexvar_ps(_mm512_load_si512(idx), v);
}

/* d_a of the 8 q8x blocks of super-block i of a packed row (lanes 0..7; 8..15 zero) and, if sa,
 * d_a * isum likewise. */
NM_INLINE __m512 act_sb(const uint8_t *row, int64_t nbp, int64_t i, __m512 *sa) {
    if (sa) *sa = _mm512_zextps256_ps512(_mm256_load_ps(nm_pack_sa(row, nbp) + 8 * i));
    return _mm512_zextps256_ps512(_mm256_load_ps(nm_pack_d(row, nbp) + 8 * i));
}

/* The 64 packed codes of step z of super-block i. */
NM_INLINE __m512i act_step(const uint8_t *row, int64_t i, int z) {
    return _mm512_load_si512(nm_pack_qs(row) + 256 * i + 64 * z);
}

/* The 8 six-bit scales and mins of a Q4_K/Q5_K super-block as 8 bytes each (ggml's
 * get_scale_min_k4 for all j at once). */
NM_INLINE void k4_scales(const uint8_t *scales, uint64_t *sc, uint64_t *mn) {
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = uaux;
    u[0] &= kmask1;
    *sc = (uint64_t)u[0] | ((uint64_t)u[1] << 32);
    *mn = (uint64_t)u[2] | ((uint64_t)u[3] << 32);
}

NM_INLINE __m512 u8x8_to_ps(uint64_t v, float mul) {
    __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v)));
    return _mm512_zextps256_ps512(_mm256_mul_ps(f, _mm256_set1_ps(mul)));
}

/* ---------------------------------------------------------------------------------------- */
/* Q4_K and Q5_K                                                                            */

NM_INLINE void k45_tile(const int five, const int R, const int C, int64_t n, const uint8_t *w,
                        size_t ws, const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    const int bsize = five ? (int)sizeof(block_q5_K) : (int)sizeof(block_q4_K);
    const int qs_off = five ? 48 : 16;
    const int64_t nsb = n / QK_K, nbp = nm_pack_nbp(n);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];
    NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =
        _mm512_setzero_ps();

    for (int64_t i = 0; i < nsb; i++) {
        __m512 fsc[NM_TILE_RMAX], fm[NM_TILE_RMAX], da[NM_TILE_CMAX], sa[NM_TILE_CMAX];
        NM_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)r * ws + (size_t)i * bsize;
            if (C == 1) nm_prefetch(blk + K_PREFETCH_SB * bsize, bsize);
            uint16_t d16, dmin16;
            memcpy(&d16, blk, 2);
            memcpy(&dmin16, blk + 2, 2);
            uint64_t sc, mn;
            k4_scales(blk + 4, &sc, &mn);
            fsc[r] = u8x8_to_ps(sc, _cvtsh_ss(d16));
            fm[r] = u8x8_to_ps(mn, _cvtsh_ss(dmin16));
        }
        NM_UNROLL for (int c = 0; c < C; c++) {
            da[c] = act_sb(x + (size_t)c * xs, nbp, i, &sa[c]);
            NM_UNROLL for (int r = 0; r < R; r++) acc[r][c] =
                _mm512_fnmadd_ps(fm[r], sa[c], acc[r][c]);
        }
        NM_UNROLL for (int z = 0; z < 4; z++) {
            __m512i aq[NM_TILE_CMAX];
            __m512 dap[NM_TILE_CMAX];
            NM_UNROLL for (int c = 0; c < C; c++) {
                aq[c] = act_step(x + (size_t)c * xs, i, z);
                dap[c] = perm_ps(k_step_idx_k4[z], da[c]);
            }
            NM_UNROLL for (int r = 0; r < R; r++) {
                const uint8_t *blk = w + (size_t)r * ws + (size_t)i * bsize;
                __m512i raw = _mm512_loadu_si512(blk + qs_off + 64 * (z / 2));
                __m512i q = (z & 1) ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4)
                                    : _mm512_and_si512(raw, m4);
                if (five) {
                    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
                    const int b0 = k_step_blk_k4[z][0], b1 = k_step_blk_k4[z][1];
                    const __m512i sel = _mm512_inserti64x4(
                        _mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << b0))),
                        _mm256_set1_epi8((char)(1 << b1)), 1);
                    q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, sel), q,
                                             _mm512_set1_epi8(16));
                }
                __m512 scp = perm_ps(k_step_idx_k4[z], fsc[r]);
                NM_UNROLL for (int c = 0; c < C; c++) {
                    __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, aq[c]);
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                                _mm512_mul_ps(scp, dap[c]), acc[r][c]);
                }
            }
        }
    }
    NM_TILE_STORE(acc, R, C, y, ldy);
}

NM_INLINE void q4_K_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    k45_tile(0, R, C, n, w, ws, x, xs, y, ldy);
}
NM_INLINE void q5_K_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    k45_tile(1, R, C, n, w, ws, x, xs, y, ldy);
}

/* ---------------------------------------------------------------------------------------- */
/* Q6_K                                                                                     */

NM_INLINE void q6_K_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    const int64_t nsb = n / QK_K, nbp = nm_pack_nbp(n);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i c32 = _mm512_set1_epi8(32);
    __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];
    NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =
        _mm512_setzero_ps();

    for (int64_t i = 0; i < nsb; i++) {
        __m512 fsc[NM_TILE_RMAX], da[NM_TILE_CMAX];
        NM_UNROLL for (int r = 0; r < R; r++) {
            const block_q6_K *b = (const block_q6_K *)(w + (size_t)r * ws) + i;
            if (C == 1) nm_prefetch(b + K_PREFETCH_SB, (int)sizeof(block_q6_K));
            __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)));
            uint16_t d16;
            memcpy(&d16, &b->d, 2);
            fsc[r] = _mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(d16)));
        }
        NM_UNROLL for (int c = 0; c < C; c++) da[c] = act_sb(x + (size_t)c * xs, nbp, i, NULL);
        NM_UNROLL for (int z = 0; z < 4; z++) {
            __m512i aq[NM_TILE_CMAX], off[NM_TILE_CMAX];
            __m512 dap[NM_TILE_CMAX];
            NM_UNROLL for (int c = 0; c < C; c++) {
                aq[c] = act_step(x + (size_t)c * xs, i, z);
                /* -32 * (sum of the lane's 4 activations): the codes' offset */
                off[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), c32, aq[c]));
                dap[c] = perm_ps(k_step_idx_q6blk[z], da[c]);
            }
            NM_UNROLL for (int r = 0; r < R; r++) {
                const block_q6_K *b = (const block_q6_K *)(w + (size_t)r * ws) + i;
                const int h = z / 2;
                __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
                __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
                __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
                __m512i q;
                if ((z & 1) == 0) /* (ql & 0xF) | ((hh << 4) & 0x30) */
                    q = _mm512_ternarylogic_epi32(ql, m4, _mm512_and_si512(_mm512_slli_epi16(hh, 4), m30), 0xEA);
                else /* ((ql >> 4) & 0xF) | (hh & 0x30) */
                    q = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, _mm512_and_si512(hh, m30), 0xEA);
                __m512 scp = perm_ps(k_step_idx_q6grp[z], fsc[r]);
                NM_UNROLL for (int c = 0; c < C; c++) {
                    __m512i dot = _mm512_dpbusd_epi32(off[c], q, aq[c]);
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                                _mm512_mul_ps(scp, dap[c]), acc[r][c]);
                }
            }
        }
    }
    NM_TILE_STORE(acc, R, C, y, ldy);
}

NM_GEMM_DEFINE(q4_K, q4_K_tile, 4, 4, NM_PACK_K4)
NM_GEMM_DEFINE(q5_K, q5_K_tile, 4, 4, NM_PACK_K4)
NM_GEMM_DEFINE(q6_K, q6_K_tile, 4, 4, NM_PACK_NATURAL)

void avx512_fill_k(struct kern_isa *t) {
    t->vec_dot[DTYPE_Q4_K] = vec_dot_q4_K;
    t->gemm[DTYPE_Q4_K] = gemm_q4_K;
    t->vec_dot[DTYPE_Q5_K] = vec_dot_q5_K;
    t->gemm[DTYPE_Q5_K] = gemm_q5_K;
    t->vec_dot[DTYPE_Q6_K] = vec_dot_q6_K;
    t->gemm[DTYPE_Q6_K] = gemm_q6_K;
}
