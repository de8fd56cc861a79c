/* AVX-512 VNNI dot products of 32-value block types (Q4_0, Q4_1, Q8_0) with q8x activations,
 * read from the packed activation rows of simd.h.
 *
 * Scheme, per group of 16 blocks:
 *  - The fp16 scales d of the 16 weight blocks (and Q4_1's m) become one f32 vector per weight
 *    row (64-byte windows and word permutes, no gathers); the packed activation row holds d_a
 *    and d_a * isum of the 16 blocks contiguously.
 *  - vpdpbusd multiplies unsigned weight codes (Q4: nibbles 0..15; Q8_0: qs ^ 0x80 = qs + 128)
 *    with the signed activations. Each int32 lane holds the products of one block; the lanes are
 *    converted to f32, multiplied by d_w * d_a of their block (a lane permute of the two group
 *    vectors) and summed into an f32 accumulator.
 *      Q4_0/Q4_1 take 4 blocks per step: the 16 nibble bytes of 4 blocks fill one zmm, whose
 *      low nibbles meet the first 16 activations of each block (packed that way) and whose
 *      high nibbles the last 16; both vpdpbusd go into the same lanes (4 per block).
 *      Q8_0 takes 2 blocks per step (8 lanes per block).
 *  - The offset of the unsigned codes (Q4_0: -8, Q8_0: -128, Q4_1: +m) contributes
 *    offset * d_w * d_a * isum per block: one 16-lane FMA per group (one lane per block).
 * A tile keeps R weight rows x C activation rows of accumulators, so unpacking a weight step
 * serves C activation rows and every activation load serves R weight rows. */
#include "avx512.h"
#include "simd.h"

/* Lane permutes. Quad q of a group: lanes 4i..4i+3 take element 4q+i (k_quad_idx). Pair p
 * (Q8_0): lanes 0..7 take element 2p, lanes 8..15 element 2p+1 (k_pair_idx). */
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
/* vpermt2w index picking the words 0, 9, 18, ... 63: the d of 8 consecutive Q4_0 blocks in a
 * 128-byte window that starts at the first of them. */
static const int16_t k_q4_0_d_idx[32] __attribute__((aligned(64))) = {
    0, 9, 18, 27, 36, 45, 54, 63, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* Software prefetch distance in each weight row, rounded down to whole groups of 16 blocks.
 * GEMV from DRAM, one thread, 4096x14336: Q4_0 8.3 -> 10.8 GB/s and Q8_0 11.3 -> 13.1 GB/s
 * (Xeon, 1152 -> 4608 bytes); on the Zen 5 host Q4_0 went 22 -> ~30 GB/s per CPU-second (noisy
 * shared machine). Rows are contiguous, so past a row's end this fetches the next rows. */
#ifndef Q_PREFETCH_BYTES
#define Q_PREFETCH_BYTES 4608
#endif

NM_INLINE __m512 perm_ps(const int32_t *idx, __m512 v) {
    return _mm512_permutexvar_ps(_mm512_load_si512(idx), v);
}

/* 64 bytes at p, of which only the first `avail` exist (avail may be <= 0 or >= 64): the rest
 * reads as zero and is never touched (a masked load does not fault). */
NM_INLINE __m512i load64(const uint8_t *p, int64_t avail) {
    if (__builtin_expect(avail >= 64, 1)) return _mm512_loadu_si512(p);
    if (avail <= 0) return _mm512_setzero_si512();
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << avail) - 1ull), p);
}

/* The fp16 scales of the 16 blocks of a group, as f32, read with a few 64-byte windows and
 * word/dword permutes (gathers are 2-3x slower on both Zen 5 and Sapphire Rapids). `avail` is
 * the number of bytes of the row from p on; blocks past the row give 0. */

/* Q4_0 (18-byte blocks): d of blocks 0..7 at words 0, 9, ... 63 of the 128 bytes at p, and of
 * blocks 8..15 likewise at p + 144. */
NM_INLINE __m512 q4_0_d16(const uint8_t *p, int64_t avail) {
    const __m512i idx = _mm512_load_si512(k_q4_0_d_idx);
    __m512i a = _mm512_permutex2var_epi16(load64(p, avail), idx, load64(p + 64, avail - 64));
    __m512i b = _mm512_permutex2var_epi16(load64(p + 144, avail - 144), idx,
                                          load64(p + 208, avail - 208));
    __m256i h = _mm256_permute2x128_si256(_mm512_castsi512_si256(a), _mm512_castsi512_si256(b), 0x20);
    return _mm512_cvtph_ps(h);
}

/* Q4_1 (20-byte blocks, d and m adjacent): the dword d | m << 16 of blocks 4q..4q+3 sits at
 * dwords 0, 5, 10, 15 of the 64 bytes at p + 80q. */
NM_INLINE void q4_1_dm16(const uint8_t *p, int64_t avail, __m512 *d, __m512 *m) {
    const __m512i idx = _mm512_setr_epi32(0, 5, 10, 15, 16, 21, 26, 31, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i a = _mm512_permutex2var_epi32(load64(p, avail), idx, load64(p + 80, avail - 80));
    __m512i b = _mm512_permutex2var_epi32(load64(p + 160, avail - 160), idx,
                                          load64(p + 240, avail - 240));
    __m512i dm = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0));
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
}

/* Q8_0 (34-byte blocks): d of blocks 2i and 2i+1 at words 0 and 17 of the 64 bytes at p + 68i;
 * one vpermt2w takes 4 of them from two such windows. */
NM_INLINE __m512 q8_0_d16(const uint8_t *p, int64_t avail) {
    /* words 4i..4i+3 <- window 2i words 0, 17 and window 2i+1 words 0, 17 (32 + ...) */
    const __m512i idx = _mm512_set1_epi64((long long)(0ull | 17ull << 16 | 32ull << 32 | 49ull << 48));
    __m512i r = _mm512_setzero_si512();
    NM_UNROLL for (int i = 0; i < 4; i++) {
        __m512i q = _mm512_permutex2var_epi16(load64(p + 136 * i, avail - 136 * i), idx,
                                              load64(p + 136 * i + 68, avail - 136 * i - 68));
        r = _mm512_mask_mov_epi16(r, (__mmask32)(0xFu << (4 * i)), q);
    }
    return _mm512_cvtph_ps(_mm512_castsi512_si256(r));
}

/* ---------------------------------------------------------------------------------------- */
/* Q4_0 and Q4_1: quads of blocks                                                           */

static const int32_t k_quad_idx[4][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15},
};

/* The nibble bytes of blocks b..b+nq-1 (nq <= 4; missing ones zero) in the 4 lanes of a zmm. */
NM_INLINE __m512i q4_quad_bytes(const uint8_t *blk, int qs_off, int bsize, int nq) {
    __m512i v = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(blk + qs_off)));
    if (nq > 1) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(blk + bsize + qs_off)), 1);
    if (nq > 2) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(blk + 2 * bsize + qs_off)), 2);
    if (nq > 3) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(blk + 3 * bsize + qs_off)), 3);
    return v;
}

/* One quad step: blocks 4q..4q+nq-1 of the group starting at block b0. */
NM_INLINE void q4_quad(const int one_m, const int R, const int C, int q, int nq, int64_t b0,
                       const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t nbp,
                       const __m512 *dw, __m512 (*acc)[NM_TILE_CMAX]) {
    const int bsize = one_m ? 20 : 18, qs_off = one_m ? 4 : 2;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 dap[NM_TILE_CMAX];
    NM_UNROLL for (int c = 0; c < C; c++) {
        const uint8_t *row = x + (size_t)c * xs;
        dap[c] = perm_ps(k_quad_idx[q], _mm512_load_ps(nm_pack_d(row, nbp) + b0));
    }
    NM_UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *blk = w + (size_t)r * ws + (size_t)(b0 + 4 * q) * bsize;
        const __m512i v = q4_quad_bytes(blk, qs_off, bsize, nq);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        const __m512 dwp = perm_ps(k_quad_idx[q], dw[r]);
        NM_UNROLL for (int c = 0; c < C; c++) {
            const int8_t *qs = nm_pack_qs(x + (size_t)c * xs) + 32 * (b0 + 4 * q);
            __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(qs));
            dot = _mm512_dpbusd_epi32(dot, hi, _mm512_load_si512(qs + 64));
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dwp, dap[c]), acc[r][c]);
        }
    }
}

NM_INLINE void q4_tile(const int one_m, const int R, const int C, int64_t n, const uint8_t *w,
                       size_t ws, const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    const int bsize = one_m ? 20 : 18;
    const int64_t nb = n / 32, nbp = nm_pack_nbp(n);
    __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];
    NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =
        _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int nblk = (int)NM_MIN(16, nb - b0);
        const int64_t avail = (int64_t)nblk * bsize;
        __m512 dw[NM_TILE_RMAX];
        NM_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *wg = w + (size_t)r * ws + (size_t)b0 * bsize;
            if (C == 1) nm_prefetch(wg + Q_PREFETCH_BYTES / (16 * bsize) * (16 * bsize), 16 * bsize);
            /* offset term: Q4_0 -8 * d_w, Q4_1 m_w; times d_a * isum of the activation */
            __m512 d, off;
            if (one_m) {
                if (nblk == 16) q4_1_dm16(wg, 16 * 20, &d, &off); /* constant: no masks */
                else q4_1_dm16(wg, avail, &d, &off);
            } else {
                d = nblk == 16 ? q4_0_d16(wg, 16 * 18) : q4_0_d16(wg, avail);
                off = _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
            }
            dw[r] = d;
            NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(
                off, _mm512_load_ps(nm_pack_sa(x + (size_t)c * xs, nbp) + b0), acc[r][c]);
        }
        if (nblk == 16) {
            NM_UNROLL for (int q = 0; q < 4; q++)
                q4_quad(one_m, R, C, q, 4, b0, w, ws, x, xs, nbp, dw, acc);
        } else {
            int q = 0;
            for (; 4 * q + 4 <= nblk; q++) q4_quad(one_m, R, C, q, 4, b0, w, ws, x, xs, nbp, dw, acc);
            const int rest = nblk - 4 * q;
            if (rest == 1) q4_quad(one_m, R, C, q, 1, b0, w, ws, x, xs, nbp, dw, acc);
            if (rest == 2) q4_quad(one_m, R, C, q, 2, b0, w, ws, x, xs, nbp, dw, acc);
            if (rest == 3) q4_quad(one_m, R, C, q, 3, b0, w, ws, x, xs, nbp, dw, acc);
        }
    }
    NM_TILE_STORE(acc, R, C, y, ldy);
}

NM_INLINE void q4_0_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    q4_tile(0, R, C, n, w, ws, x, xs, y, ldy);
}
NM_INLINE void q4_1_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    q4_tile(1, R, C, n, w, ws, x, xs, y, ldy);
}

/* ---------------------------------------------------------------------------------------- */
/* Q8_0: pairs of blocks                                                                    */

NM_INLINE void q8_pair(const int R, const int C, int p, int one, int64_t b0, const uint8_t *w,
                       size_t ws, const uint8_t *x, size_t xs, int64_t nbp, const __m512 *dw,
                       __m512 (*acc)[NM_TILE_CMAX]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 dap[NM_TILE_CMAX];
    NM_UNROLL for (int c = 0; c < C; c++)
        dap[c] = perm_ps(k_pair_idx[p], _mm512_load_ps(nm_pack_d(x + (size_t)c * xs, nbp) + b0));
    NM_UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *blk = w + (size_t)r * ws + (size_t)(b0 + 2 * p) * 34;
        __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
        __m512i v = one ? _mm512_zextsi256_si512(lo)
                        : _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                             _mm256_loadu_si256((const __m256i *)(blk + 36)), 1);
        /* qs + 128 as unsigned; the missing block of a lone tail block stays 0 */
        v = one ? _mm512_mask_xor_epi32(v, 0x00FF, v, flip) : _mm512_xor_si512(v, flip);
        const __m512 dwp = perm_ps(k_pair_idx[p], dw[r]);
        NM_UNROLL for (int c = 0; c < C; c++) {
            const int8_t *qs = nm_pack_qs(x + (size_t)c * xs) + 32 * (b0 + 2 * p);
            __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, _mm512_load_si512(qs));
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dwp, dap[c]), acc[r][c]);
        }
    }
}

NM_INLINE void q8_0_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    const int64_t nb = n / 32, nbp = nm_pack_nbp(n);
    __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];
    NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =
        _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int nblk = (int)NM_MIN(16, nb - b0);
        __m512 dw[NM_TILE_RMAX];
        NM_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *wg = w + (size_t)r * ws + (size_t)b0 * 34;
            if (C == 1) nm_prefetch(wg + Q_PREFETCH_BYTES / (16 * 34) * (16 * 34), 16 * 34);
            dw[r] = nblk == 16 ? q8_0_d16(wg, 16 * 34) : q8_0_d16(wg, (int64_t)nblk * 34);
            const __m512 off = _mm512_mul_ps(dw[r], _mm512_set1_ps(-128.0f));
            NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(
                off, _mm512_load_ps(nm_pack_sa(x + (size_t)c * xs, nbp) + b0), acc[r][c]);
        }
        if (nblk == 16) {
            NM_UNROLL for (int p = 0; p < 8; p++) q8_pair(R, C, p, 0, b0, w, ws, x, xs, nbp, dw, acc);
        } else {
            for (int p = 0; p < nblk / 2; p++) q8_pair(R, C, p, 0, b0, w, ws, x, xs, nbp, dw, acc);
            if (nblk & 1) q8_pair(R, C, nblk / 2, 1, b0, w, ws, x, xs, nbp, dw, acc);
        }
    }
    NM_TILE_STORE(acc, R, C, y, ldy);
}

NM_GEMM_DEFINE(q4_0, q4_0_tile, 4, 4, NM_PACK_QUAD_HALVES)
NM_GEMM_DEFINE(q4_1, q4_1_tile, 4, 4, NM_PACK_QUAD_HALVES)
NM_GEMM_DEFINE(q8_0, q8_0_tile, 4, 4, NM_PACK_NATURAL)

void avx512_fill_q(struct kern_isa *t) {
    t->vec_dot[DTYPE_Q4_0] = vec_dot_q4_0;
    t->gemm[DTYPE_Q4_0] = gemm_q4_0;
    t->vec_dot[DTYPE_Q4_1] = vec_dot_q4_1;
    t->gemm[DTYPE_Q4_1] = gemm_q4_1;
    t->vec_dot[DTYPE_Q8_0] = vec_dot_q8_0;
    t->gemm[DTYPE_Q8_0] = gemm_q8_0;
}
