/* The hooks of the AVX-512 VNNI dot products of the IQ grid types with q8x activations, through
 * the block tile of dot_blk.h (one 256-value super-block per group): IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S
 * (grid magnitudes with sign bits) and IQ1_S, IQ1_M (grid values -1, 0, 1 plus a shift).
 *
 * A step (64 values = 2 sub-blocks of 32) looks up 8 grid entries of 8 bytes (iq2*, iq1s) or 16
 * of 4 bytes (iq3*) with one vpgatherdq / vpgatherdd (NM_IQ_GATHER) from indices built with a
 * zero-extension (vpmovzx) and, for 9-11 bit indices, one variable shift or masked OR of the
 * high bits; the entries land in natural value order.
 *  - IQ2/IQ3: the magnitudes (8, 25, 43 / 4 .. 62 / 1 .. 15) are vpdpbusd's unsigned codes; the
 *    64 signs become one mask register that negates the activations (dot_blk.h). IQ2_S and
 *    IQ3_S store the 8 sign bytes of a step as they are; IQ2_XXS, IQ2_XS and IQ3_XXS store 7
 *    bits per 8 values (ggml's ksigns index), the eighth being their parity (nm_blk_signs7).
 *  - IQ1_S/IQ1_M: value = dl * (g + delta), g in {-1, 0, 1}, delta = +-1/8 per 32 values
 *    (IQ1_S) or per 8 (IQ1_M): code u = 8 (g + 1) + (delta > 0 ? 2 : 0) = 8 (g + delta) + 9,
 *    scale dl / 8, offset -9 dl / 8 (block.h folds the delta the same way). vpaddb, vpsllw and
 *    one masked 64-bit add (delta per 8 bytes).
 * Scales (head): IQ2_XXS/IQ3_XXS d * (0.5 + s) * 0.25 / 0.5 with s the top 4 bits of each
 * sub-block's dword; IQ2_XS/IQ2_S the same per half from a nibble; IQ3_S d * (1 + 2s) per
 * sub-block from a nibble; IQ1_S d * (2s + 1) / 8 per sub-block; IQ1_M d * (2s + 1) / 8 per
 * half, d an fp16 spread over the top nibbles of the 4 scale words.
 * Layouts and grids: ggml-common.h block_iq2_xxs, block_iq2_xs, block_iq2_s, block_iq3_xxs,
 * block_iq3_s, block_iq1_s, block_iq1_m, ggml's iq2xxs_grid .. iq1s_grid (ours: iq_grid_iq2xxs .. iq_grid_iq1s, kernels/blocks/iq_grids.h);
 * dequantize_row_iq* in ggml-quants.c for the bit positions. */
#ifndef NM_X86_AVX512_DOT_IQ_H
#define NM_X86_AVX512_DOT_IQ_H

#include "../blocks/iq_grids.h"
#include "dot_blk.h"

/* (0.5 + s) * mul * d for the 8 sub-block scales s (top 4 bits of 8 dwords), per half. */
NM_INLINE __m512 iq_scale_half_step(__m256i s, float d, float mul) {
    const __m512 f = _mm512_add_ps(nm_blk_halves_epi32(s), _mm512_set1_ps(0.5f));
    return _mm512_mul_ps(_mm512_mul_ps(f, _mm512_set1_ps(d)), _mm512_set1_ps(mul));
}

/* The 16 4-bit scales of 8 bytes at p, low nibble first (half 2b and 2b + 1 of sub-block b),
 * as 16 int32 lanes. */
NM_INLINE __m512i iq_nibbles16(const uint8_t *p) {
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    const __m128i t = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(0x0F)),
                                   _mm_and_si128(_mm_slli_epi16(w, 4), _mm_set1_epi16(0x0F00)));
    return _mm512_cvtepu8_epi32(t);
}

/* IQ2_XS and IQ2_S: d * (0.5 + s) * 0.25 per half from the 8 scale bytes at p. */
NM_INLINE void iq2_nibble_head(const uint8_t *g, const uint8_t *p, __m512 *sc, __m512 *off) {
    const __m512 f = _mm512_add_ps(_mm512_cvtepi32_ps(iq_nibbles16(p)), _mm512_set1_ps(0.5f));
    *sc = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_set1_ps(nm_blk_f16(g))), _mm512_set1_ps(0.25f));
    *off = _mm512_setzero_ps();
}

/* ---- IQ2_XXS (66 bytes: d, then per sub-block 4 index bytes and a dword of 4 x 7 sign bits and
 * a 4-bit scale) ---- */

NM_INLINE void iq2_xxs_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    /* the scale dwords are dwords 1, 3, .. 15 of the 64 bytes at g + 2 */
    const __m512i v = _mm512_loadu_si512(g + 2);
    const __m512i s = _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0),
                                               _mm512_srli_epi32(v, 28));
    *sc = iq_scale_half_step(_mm512_castsi512_si256(s), nm_blk_f16(g), 0.25f);
    *off = _mm512_setzero_ps();
}

NM_INLINE __m512i iq2_xxs_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    const __m128i v = _mm_loadu_si128((const __m128i *)(g + 2 + 16 * z));
    const __m128i pick = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(v, pick));
    *neg = nm_blk_signs7(nm_blk_fields7(v, 1, 3));
    return nm_blk_grid8(iq_grid_iq2xxs, idx);
}

/* ---- IQ2_XS (74 bytes: d, 32 u16 of a 9-bit index and 7 sign bits, 8 scale bytes) ---- */

NM_INLINE void iq2_xs_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    iq2_nibble_head(g, g + 66, sc, off);
}

NM_INLINE __m512i iq2_xs_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    const __m128i v = _mm_loadu_si128((const __m128i *)(g + 2 + 16 * z));
    const __m256i idx = _mm256_cvtepu16_epi32(_mm_and_si128(v, _mm_set1_epi16(511)));
    const __m128i s = _mm_srli_epi16(v, 9);
    *neg = nm_blk_signs7((uint64_t)_mm_cvtsi128_si64(_mm_packus_epi16(s, s)));
    return nm_blk_grid8(iq_grid_iq2xs, idx);
}

/* ---- IQ2_S (82 bytes: d, 32 index bytes, 32 sign bytes, 8 qh bytes of 2 index bits per 8
 * values, 8 scale bytes) ---- */

NM_INLINE void iq2_s_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    iq2_nibble_head(g, g + 74, sc, off);
}

NM_INLINE __m512i iq2_s_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    uint16_t qh;
    uint64_t signs;
    memcpy(&qh, g + 66 + 2 * z, 2);
    memcpy(&signs, g + 34 + 8 * z, 8);
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + 2 + 8 * z)));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(qh), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    *neg = signs;
    return nm_blk_grid8(iq_grid_iq2s, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)));
}

/* ---- IQ3_XXS (98 bytes: d, 64 index bytes, 8 dwords of 4 x 7 sign bits and a 4-bit scale) ---- */

NM_INLINE void iq3_xxs_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    const __m256i s = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(g + 66)), 28);
    *sc = iq_scale_half_step(s, nm_blk_f16(g), 0.5f);
    *off = _mm512_setzero_ps();
}

NM_INLINE __m512i iq3_xxs_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + 2 + 16 * z)));
    *neg = nm_blk_signs7(nm_blk_fields7(_mm_loadl_epi64((const __m128i *)(g + 66 + 8 * z)), 0, 1));
    return nm_blk_grid4(iq_grid_iq3xxs, idx);
}

/* ---- IQ3_S (110 bytes: d, 64 index bytes, 8 qh bytes (index bit 8, one per index), 32 sign
 * bytes, 4 scale bytes) ---- */

NM_INLINE void iq3_s_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    uint32_t s4;
    memcpy(&s4, g + 106, 4);
    const __m128i w = _mm_cvtepu8_epi16(_mm_cvtsi32_si128((int)s4));
    const __m128i t = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(0x0F)),
                                   _mm_and_si128(_mm_slli_epi16(w, 4), _mm_set1_epi16(0x0F00)));
    const __m256i s = _mm256_cvtepu8_epi32(t); /* sub-block b: nibble b */
    const __m256i m = _mm256_add_epi32(_mm256_slli_epi32(s, 1), _mm256_set1_epi32(1));
    *sc = _mm512_mul_ps(nm_blk_halves_epi32(m), _mm512_set1_ps(nm_blk_f16(g)));
    *off = _mm512_setzero_ps();
}

NM_INLINE __m512i iq3_s_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    uint16_t qh;
    uint64_t signs;
    memcpy(&qh, g + 66 + 2 * z, 2);
    memcpy(&signs, g + 74 + 8 * z, 8);
    __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + 2 + 16 * z)));
    idx = _mm512_mask_or_epi32(idx, (__mmask16)qh, idx, _mm512_set1_epi32(256));
    *neg = signs;
    return nm_blk_grid4(iq_grid_iq3s, idx);
}

/* ---- IQ1_S (50 bytes: d, 32 index bytes, 8 u16 qh: 3 index bits per 8 values, a 3-bit scale,
 * the delta's sign in bit 15) and IQ1_M (56 bytes: 32 index bytes, 16 qh bytes: per 8 values 3
 * index bits and the delta's sign bit, 8 scale bytes) ---- */

/* The codes 8 (g + 1) + 2 [delta > 0] from the 8 grid entries idx; pos: bit i set when group i
 * (8 values) has delta > 0. */
NM_INLINE __m512i iq1_codes(__m256i idx, __mmask8 pos) {
    const __m512i g1 = _mm512_add_epi8(nm_blk_grid8(iq_grid_iq1s, idx), _mm512_set1_epi8(1)); /* 0, 1, 2 */
    const __m512i u = _mm512_slli_epi16(g1, 3); /* no carry into the next byte: at most 16 */
    return _mm512_mask_add_epi64(u, pos, u, _mm512_set1_epi8(2));
}

NM_INLINE void iq1_s_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    const __m128i qh = _mm_loadu_si128((const __m128i *)(g + 34));
    const __m128i s = _mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7));
    const __m256i m = _mm256_add_epi32(_mm256_slli_epi32(_mm256_cvtepu16_epi32(s), 1), _mm256_set1_epi32(1));
    *sc = _mm512_mul_ps(_mm512_mul_ps(nm_blk_halves_epi32(m), _mm512_set1_ps(nm_blk_f16(g))), _mm512_set1_ps(0.125f));
    *off = _mm512_mul_ps(*sc, _mm512_set1_ps(-9.0f));
}

NM_INLINE __m512i iq1_s_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    (void)neg;
    uint32_t qh; /* qh of sub-blocks 2z (low 16 bits) and 2z + 1 */
    memcpy(&qh, g + 34 + 4 * z, 4);
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + 2 + 8 * z)));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)qh), _mm256_setr_epi32(0, 3, 6, 9, 16, 19, 22, 25)),
                                        _mm256_set1_epi32(7));
    const unsigned pos = ((qh >> 15) & 1 ? 0u : 0x0Fu) | ((qh >> 31) & 1 ? 0u : 0xF0u);
    return iq1_codes(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)), (__mmask8)pos);
}

NM_INLINE void iq1_m_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    uint16_t w[4];
    memcpy(w, g + 48, 8);
    const uint16_t d16 = (uint16_t)((w[0] >> 12) | ((w[1] >> 8) & 0x00F0) | ((w[2] >> 4) & 0x0F00) | (w[3] & 0xF000));
    /* half h: bits 3 (h % 4) .. + 2 of word h / 4 */
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_zextsi128_si256(_mm_loadl_epi64((const __m128i *)(g + 48))));
    const __m512i s = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), v),
                          _mm512_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9)),
        _mm512_set1_epi32(7));
    const __m512i m = _mm512_add_epi32(_mm512_slli_epi32(s, 1), _mm512_set1_epi32(1));
    *sc = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(_cvtsh_ss(d16))), _mm512_set1_ps(0.125f));
    *off = _mm512_mul_ps(*sc, _mm512_set1_ps(-9.0f));
}

NM_INLINE __m512i iq1_m_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    (void)neg;
    uint32_t qh; /* nibble i: group i's 3 index bits and (bit 3) the delta's sign */
    memcpy(&qh, g + 32 + 4 * z, 4);
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + 8 * z)));
    const __m256i q = _mm256_srlv_epi32(_mm256_set1_epi32((int)qh), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i hi = _mm256_and_si256(q, _mm256_set1_epi32(7));
    const __mmask8 pos = _mm256_testn_epi32_mask(q, _mm256_set1_epi32(8));
    return iq1_codes(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)), pos);
}

#endif
