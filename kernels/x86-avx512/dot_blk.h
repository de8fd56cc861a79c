/* The one tile of the AVX-512 dot products of the types that came with the block decoder
 * interface (kernels/blocks/block.h, issue 15): Q5_0, Q5_1, IQ4_NL (dot_q5.c, dot_iq4.c), Q2_K,
 * Q3_K (dot_k23.c), IQ4_XS (dot_iq4.c), IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M
 * (dot_iq.h's hooks: dot_iq.c, and dot_iq_vbmi.c for IQ2_XXS, IQ3_XXS), read from the native GGUF blocks (no repacking) with q8x activations packed in
 * natural order (simd.h). The engine runs only the IQ grid types on them: the layout planner
 * packs the other six into q_tile16 units on AVX-512 CPUs (packed.h, x86-avx512/packed.c), as it
 * does Q4_0 and Q4_K, whose rows kernels (dot_q.c, dot_k.c) likewise stay this path's full table
 * of row kernels (kern_isa: tests, benchmarks, NM_ISA comparisons).
 *
 * A row is walked in groups of 256 values: one super-block, or 8 blocks of the 32-value types
 * (the last group of those may hold fewer). Like the decoded form of block.h, every type is
 *     value = sc[h] * u + off[h]      for the 16 halves h (16 values each) of the group,
 * with u an unsigned byte code (vpdpbusd's unsigned operand), or, for the types with sign bits
 * (IQ2, IQ3), value = sc[h] * (-1)^neg * u with the sign moved onto the activation:
 * vpdpbusd(u, neg ? -a : a) (a q8x code is in -127..127, so -a is exact). The type's file gives
 * two hooks:
 *   t##_head(g, nblk, &sc, &off, gs)   the 16 half scales and offsets of the group at g as f32
 *                                  vectors (lane h = half h); nblk: the 32-value blocks of the
 *                                  group that exist (8 but in a 32-value type's last group);
 *                                  nothing past them is read, and their lanes are 0. gs: the
 *                                  row's struct nm_blk_gs, where a type may decode once what
 *                                  its 4 steps share (the IQ grid lookups of dot_iq_vbmi.c);
 *   u = t##_step(g, z, nblk, &neg, gs) the 64 codes of values 64z .. 64z + 63 of the group
 *                                  (blocks 2z and 2z + 1) in natural order, and the 64-bit mask
 *                                  of the negative ones (types with signs).
 * Per (weight row, activation row) the tile adds, per group:
 *     off . sh                    (16 lanes: sh = d_a * sum of the half's activation codes)
 * and per step of 64 values:
 *     f32(vpdpbusd(0, u, a)) * (sc of the lane's half * d_a of the lane's block)
 * Each int32 lane holds 4 products of one half, exact; the float terms are rounded and summed in
 * an order that depends only on the row length, never on the tile: a (row, activation) pair
 * gets the same bits in any nr x nc call, at any position, and from vec_dot (test_fast checks).
 *
 * Cost per 64 values and weight row in the GEMV tiles (one activation row): one lane permute of
 * the scales (sc * d_a, formed once per group), vpdpbusd, vcvtdq2ps and one FMA, plus the
 * type's unpack and (IQ2/IQ3) one masked negation; per group one FMA for the offsets and the
 * head. GEMM tiles form sc * d_a per step and activation row (the same product, same bits). */
#ifndef NM_X86_AVX512_DOT_BLK_H
#define NM_X86_AVX512_DOT_BLK_H

#include <string.h>

#include "avx512.h"
#include "simd.h"

/* Lane permutes of step z: lanes 4i..4i+3 take half 4z + i (scales; 16 lanes, one half per 128
 * bits of codes), lanes 0..7 and 8..15 take blocks 2z and 2z + 1 (d_a of the 8 blocks). */
static const int32_t k_blk_half_idx[4][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15},
};
static const int32_t k_blk_act_idx[4][16] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
};

/* Software prefetch distance of the GEMV tiles in each weight row, rounded down to whole groups
 * (as Q_PREFETCH_BYTES in dot_q.c; not measured separately for these types). */
#ifndef NM_BLK_PREFETCH_BYTES
#define NM_BLK_PREFETCH_BYTES 4608
#endif

/* Weight-row streams per thread of the GEMV (gemm with nc = 1): a call's nr rows are cut into
 * this many runs of consecutive rows, and the R x 1 tile takes one row of each run, so each of
 * its rows walks one long sequential stream (the run's rows are contiguous) and the software
 * prefetch of a row runs on into the run's next row (as packed.c's GEMV_STREAMS). Device Xeon,
 * with the gather-free heads: the six 32-value and K types read 1.1-2.0x the GB/s of one 4-row
 * stream with 2 threads (figures in the commit message; a noisy host); a prefetch distance of
 * 2048 instead of 4608 measured within the noise. */
#define NM_BLK_STREAMS 4

/* Grid lookups of the IQ types: 1 = vpgatherdq/vpgatherdd (default), 0 = one scalar-indexed load
 * per entry (for measuring which is faster: -DNM_IQ_GATHER=0). Device Xeon, llama-3-8b shapes,
 * 2 and 16 threads: 0 read the seven IQ grid types at 0.3-0.6x the GB/s of 1 (one run). */
#ifndef NM_IQ_GATHER
#define NM_IQ_GATHER 1
#endif

/* What a head may decode once per group and weight row for the group's 4 steps: the codes
 * and sign masks of each step (unused by the types that decode in their steps). */
struct nm_blk_gs {
    __m512i u[4];
    uint64_t neg[4];
};

/* Flags of NM_BLK_DEFINE. */
#define NM_BLK_OFF 1   /* the type has offsets (the per-group off . sh FMA) */
#define NM_BLK_SIGNS 2 /* the step returns sign masks (applied to the activations) */

/* ---- helpers of the hooks ----------------------------------------------------------------- */

/* The dword at g + b * bsize for the blocks b < nblk of a group of 8 (lanes b >= nblk are 0 and
 * read nothing): the fp16 scale (and Q5_1's min) at the start of each block. */
NM_INLINE __m256i nm_blk_dword8(const uint8_t *g, int bsize, int nblk) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bsize));
    return _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), (__mmask8)((1u << nblk) - 1u), idx, g, 1);
}

/* 16 words picked from a full group at g of gbytes (<= 192) bytes without a gather (which the
 * Xeon's microcode makes slow): word k is word i01[k] (0..63) of the group's first 128 bytes,
 * or, where bit k of hi is set, word i2[k] of its last 64 bytes. Reads only the group's bytes. */
NM_INLINE __m256i nm_blk_words16(const uint8_t *g, int gbytes, const int16_t *i01, const int16_t *i2, __mmask32 hi) {
    const __m512i r = _mm512_permutex2var_epi16(_mm512_loadu_si512(g), _mm512_load_si512(i01), _mm512_loadu_si512(g + 64));
    if (!hi) return _mm512_castsi512_si256(r);
    return _mm512_castsi512_si256(
        _mm512_mask_permutexvar_epi16(r, hi, _mm512_load_si512(i2), _mm512_loadu_si512(g + gbytes - 64)));
}

/* The fp16 in the low 16 bits of each dword, as f32. */
NM_INLINE __m256 nm_blk_fp16x8(__m256i v) { return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(v)); }

/* 8 per-block values to 16 per-half lanes (lanes 2b and 2b + 1 take v[b]). */
NM_INLINE __m512 nm_blk_halves(__m256 v) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}
NM_INLINE __m512 nm_blk_halves_epi32(__m256i v) { return nm_blk_halves(_mm256_cvtepi32_ps(v)); }

/* The fp16 at p as f32 (unaligned). */
NM_INLINE float nm_blk_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The 4-bit codes of two 32-value blocks whose 16 nibble bytes are at p0 and p1 (ggml's order:
 * byte i holds value i in its low nibble and value i + 16 in its high one), in natural order:
 * 128-bit lanes [p0 low, p0 high, p1 low, p1 high]. p1 NULL: the second block's codes are 0. */
NM_INLINE __m512i nm_blk_nib64(const uint8_t *p0, const uint8_t *p1) {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p0));
    const __m256i b = p1 ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p1)) : _mm256_setzero_si256();
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    const long long s4 = 0x0004000400040004ll;
    const __m512i sh = _mm512_setr_epi64(0, 0, s4, s4, 0, 0, s4, s4);
    return _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
}

/* Sign masks: 8 bytes of 7 sign bits each (ggml's ksigns index) to the 64-bit mask of negative
 * values: bit 7 of each byte is the parity of its other 7 bits (the sign count is even). */
NM_INLINE uint64_t nm_blk_signs7(uint64_t s) {
    uint64_t p = s ^ (s >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return s | (p & 0x0101010101010101ull) << 7;
}

/* The 7-bit fields l = 0..3 (bits 7l .. 7l + 6) of two dwords of v as 8 bytes: those of dword
 * i0 in bytes 0..3, those of dword i1 in bytes 4..7 (IQ2_XXS/IQ3_XXS sign indices). */
NM_INLINE uint64_t nm_blk_fields7(__m128i v, int i0, int i1) {
    const __m256i rep = _mm256_permutexvar_epi32(_mm256_setr_epi32(i0, i0, i0, i0, i1, i1, i1, i1),
                                                 _mm256_castsi128_si256(v));
    const __m256i f = _mm256_and_si256(_mm256_srlv_epi32(rep, _mm256_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21)),
                                       _mm256_set1_epi32(0x7F));
    return (uint64_t)_mm_cvtsi128_si64(_mm256_cvtepi32_epi8(f));
}

/* Grid entries tab[idx[i]] of 8 bytes (8 indices) or 4 bytes (16 indices), in index order. */
NM_INLINE __m512i nm_blk_grid8(const uint64_t *tab, __m256i idx) {
#if NM_IQ_GATHER
    return _mm512_i32gather_epi64(idx, (const void *)tab, 8);
#else
    uint32_t i[8];
    _mm256_storeu_si256((__m256i *)i, idx);
    return _mm512_setr_epi64((long long)tab[i[0]], (long long)tab[i[1]], (long long)tab[i[2]],
                             (long long)tab[i[3]], (long long)tab[i[4]], (long long)tab[i[5]],
                             (long long)tab[i[6]], (long long)tab[i[7]]);
#endif
}
NM_INLINE __m512i nm_blk_grid4(const uint32_t *tab, __m512i idx) {
#if NM_IQ_GATHER
    return _mm512_i32gather_epi32(idx, (const void *)tab, 4);
#else
    uint32_t i[16];
    _mm512_storeu_si512(i, idx);
    return _mm512_setr_epi32((int)tab[i[0]], (int)tab[i[1]], (int)tab[i[2]], (int)tab[i[3]],
                             (int)tab[i[4]], (int)tab[i[5]], (int)tab[i[6]], (int)tab[i[7]],
                             (int)tab[i[8]], (int)tab[i[9]], (int)tab[i[10]], (int)tab[i[11]],
                             (int)tab[i[12]], (int)tab[i[13]], (int)tab[i[14]], (int)tab[i[15]]);
#endif
}

/* ---- the tile ----------------------------------------------------------------------------- */

/* Defines t##_tile (an NM_INLINE tile function of simd.h) from the hooks t##_head and t##_step
 * of a type whose groups of 256 values take gbytes bytes, then gemm_##t and vec_dot_##t with 4 x
 * 4 register tiles (NM_GEMM_DEFINE, as gemm_##t##_g); gemm_##t walks nc = 1 (the GEMV) as
 * NM_BLK_STREAMS row streams. flags: NM_BLK_OFF, NM_BLK_SIGNS. */
#define NM_BLK_DEFINE(t, gbytes, flags)                                                            \
    NM_INLINE void t##_zstep(const int R, const int C, int z, int nblk, const uint8_t *w, size_t ws, \
                             const uint8_t *x, size_t xs, int64_t g, const __m512 *da,            \
                             const __m512 *fsc, const struct nm_blk_gs *gs,                       \
                             __m512 (*acc)[NM_TILE_CMAX]) {                                       \
        __m512i aq[NM_TILE_CMAX];                                                                  \
        __m512 dap[NM_TILE_CMAX];                                                                  \
        NM_UNROLL for (int c = 0; c < C; c++) {                                                    \
            aq[c] = _mm512_load_si512(nm_pack_qs(x + (size_t)c * xs) + 256 * g + 64 * z);          \
            dap[c] = _mm512_permutexvar_ps(_mm512_load_si512(k_blk_act_idx[z]), da[c]);           \
        }                                                                                          \
        NM_UNROLL for (int r = 0; r < R; r++) {                                                    \
            __mmask64 neg = 0;                                                                     \
            const __m512i u = t##_step(w + (size_t)r * ws + (size_t)g * (gbytes), z, nblk, &neg, \
                                             &gs[r]);                                              \
            const __m512i hidx = _mm512_load_si512(k_blk_half_idx[z]);                             \
            const __m512 scp = C == 1 ? _mm512_setzero_ps() : _mm512_permutexvar_ps(hidx, fsc[r]); \
            NM_UNROLL for (int c = 0; c < C; c++) {                                                \
                const __m512i a = ((flags) & NM_BLK_SIGNS)                                          \
                                      ? _mm512_mask_sub_epi8(aq[c], neg, _mm512_setzero_si512(), aq[c]) \
                                      : aq[c];                                                     \
                const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a);             \
                /* the same product sc[h] * d_a[b] per lane either way (same bits) */               \
                const __m512 s = C == 1 ? _mm512_permutexvar_ps(hidx, fsc[r])                       \
                                        : _mm512_mul_ps(scp, dap[c]);                              \
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc[r][c]);                \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    NM_INLINE void t##_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,      \
                            const uint8_t *x, size_t xs, float *y, int64_t ldy) {                  \
        const int64_t nb = n / 32, nbp = nm_pack_nbp(n);                                           \
        __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];                                                    \
        NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =    \
            _mm512_setzero_ps();                                                                   \
        for (int64_t g = 0; 8 * g < nb; g++) {                                                     \
            const int nblk = (int)NM_MIN(8, nb - 8 * g);                                           \
            __m512 fsc[NM_TILE_RMAX], foff[NM_TILE_RMAX], da[NM_TILE_CMAX];                        \
            struct nm_blk_gs gs[NM_TILE_RMAX];                                                     \
            NM_UNROLL for (int r = 0; r < R; r++) {                                                \
                const uint8_t *wg = w + (size_t)r * ws + (size_t)g * (gbytes);                     \
                if (C == 1)                                                                        \
                    nm_prefetch(wg + NM_BLK_PREFETCH_BYTES / (gbytes) * (gbytes), (gbytes));       \
                if (nblk == 8) t##_head(wg, 8, &fsc[r], &foff[r], &gs[r]);                         \
                else t##_head(wg, nblk, &fsc[r], &foff[r], &gs[r]);                                \
            }                                                                                      \
            NM_UNROLL for (int c = 0; c < C; c++) {                                                \
                const uint8_t *row = x + (size_t)c * xs;                                           \
                da[c] = _mm512_zextps256_ps512(_mm256_load_ps(nm_pack_d(row, nbp) + 8 * g));       \
                if ((flags) & NM_BLK_OFF) {                                                        \
                    const __m512 sh = _mm512_load_ps(nm_pack_sh(row, nbp) + 16 * g);               \
                    NM_UNROLL for (int r = 0; r < R; r++) acc[r][c] =                              \
                        _mm512_fmadd_ps(foff[r], sh, acc[r][c]);                                   \
                }                                                                                  \
            }                                                                                      \
            /* GEMV: sc[h] * d_a[h / 2] once per group, one lane permute per step after that */    \
            if (C == 1)                                                                            \
                NM_UNROLL for (int r = 0; r < R; r++) fsc[r] =                                     \
                    _mm512_mul_ps(fsc[r], nm_blk_halves(_mm512_castps512_ps256(da[0])));           \
            if (nblk == 8) {                                                                       \
                NM_UNROLL for (int z = 0; z < 4; z++)                                              \
                    t##_zstep(R, C, z, 8, w, ws, x, xs, g, da, fsc, gs, acc);                      \
            } else {                                                                               \
                for (int z = 0; 2 * z < nblk; z++)                                                 \
                    t##_zstep(R, C, z, nblk, w, ws, x, xs, g, da, fsc, gs, acc);                   \
            }                                                                                      \
        }                                                                                          \
        NM_TILE_STORE(acc, R, C, y, ldy);                                                          \
    }                                                                                              \
    NM_GEMM_DEFINE(t##_g, t##_tile, 4, 4, NM_PACK_NATURAL)                                         \
    /* the GEMV: NM_BLK_STREAMS runs of rows walked side by side by the 4 x 1 tile (the same     \
     * tile as in gemm_##t##_g: the same bits per row) */                                         \
    static void gemm_##t(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
                         int nc, float *y, int64_t ldy) {                                          \
        if (nc != 1 || nr < NM_BLK_STREAMS) {                                                      \
            gemm_##t##_g(n, w, ws, nr, x, xs, nc, y, ldy);                                         \
            return;                                                                                \
        }                                                                                          \
        const size_t xps = nm_pack_row_bytes(n);                                                   \
        uint8_t *xp = nm_thread_buf(NM_TBUF_KERNEL, xps);                                                             \
        nm_pack_act(NM_PACK_NATURAL, x, xs, 1, n, xp, xps);                                        \
        const uint8_t *wb = w;                                                                     \
        const int run = nr / NM_BLK_STREAMS;                                                       \
        for (int i = 0; i < run; i++) {                                                            \
            float yr[NM_BLK_STREAMS];                                                              \
            t##_g_tile_4x1(n, wb + (size_t)i * ws, (size_t)run * ws, xp, xps, yr, 1);              \
            NM_UNROLL for (int s_ = 0; s_ < NM_BLK_STREAMS; s_++) y[i + s_ * run] = yr[s_];        \
        }                                                                                          \
        for (int r = NM_BLK_STREAMS * run; r < nr; r++)                                            \
            t##_g_tile_1x1(n, wb + (size_t)r * ws, ws, xp, xps, y + r, 1);                         \
    }                                                                                              \
    static float vec_dot_##t(int64_t n, const void *w, const void *x) { return vec_dot_##t##_g(n, w, x); }

#endif
