/* AVX-512 VNNI dot products of IQ4_NL (32-value blocks of 18 bytes) and IQ4_XS (256-value
 * super-blocks of 136 bytes) with q8x activations, through the block tile of dot_blk.h.
 * Both store 4-bit indices into the 16-entry non-linear table kvalues_iq4nl (-127 .. 113) in
 * Q4_0's nibble order. The unpack is Q4_0's (vpsrlvw + AND to natural order) and one vpshufb
 * into the table plus 128 (1 .. 241, unsigned for vpdpbusd); the offset is -128 * scale.
 *  - IQ4_NL: scale d per block (fp16; the 8 of a group with one word permute, nm_blk_words16;
 *    a masked vpgatherdd in a short last group).
 *  - IQ4_XS: scale d * (ls - 32) per 32 values, ls 6 bits: low 4 in scales_l (two per byte),
 *    high 2 in scales_h (u16), decoded for the 8 blocks with two vpsrlvd.
 * Layouts: ggml-common.h block_iq4_nl (d, qs[16]), block_iq4_xs (d, scales_h, scales_l[4],
 * qs[128]); kvalues_iq4nl. */
#include "dot_blk.h"

/* kvalues_iq4nl + 128, in each 128-bit lane (vpshufb looks up within lanes). */
static const uint8_t k_iq4_lut[16] __attribute__((aligned(16))) = {
    1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241,
};

NM_INLINE __m512i iq4_lookup(__m512i nib) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)k_iq4_lut));
    return _mm512_shuffle_epi8(lut, nib);
}

/* Word picks of nm_blk_words16: IQ4_NL's d of the 8 blocks of a full group (words 9b). */
static const int16_t k_iq4_nl_i01[32] __attribute__((aligned(64))) = {0, 9, 18, 27, 36, 45, 54, 63};

NM_INLINE void iq4_nl_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    if (nblk == 8)
        *sc = nm_blk_halves(_mm256_cvtph_ps(_mm256_castsi256_si128(nm_blk_words16(g, 144, k_iq4_nl_i01, NULL, 0))));
    else
        *sc = nm_blk_halves(nm_blk_fp16x8(nm_blk_dword8(g, 18, nblk)));
    *off = _mm512_mul_ps(*sc, _mm512_set1_ps(-128.0f));
}

NM_INLINE __m512i iq4_nl_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)neg;
    const uint8_t *b0 = g + (size_t)(2 * z) * 18;
    return iq4_lookup(nm_blk_nib64(b0 + 2, 2 * z + 1 < nblk ? b0 + 18 + 2 : NULL));
}

NM_INLINE void iq4_xs_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    uint16_t sh;
    uint32_t sl;
    memcpy(&sh, g + 2, 2);
    memcpy(&sl, g + 4, 4);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    *sc = _mm512_mul_ps(nm_blk_halves_epi32(ls), _mm512_set1_ps(nm_blk_f16(g)));
    *off = _mm512_mul_ps(*sc, _mm512_set1_ps(-128.0f));
}

NM_INLINE __m512i iq4_xs_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)neg;
    (void)nblk;
    const uint8_t *qs = g + 8 + 32 * z;
    return iq4_lookup(nm_blk_nib64(qs, qs + 16));
}

NM_BLK_DEFINE(iq4_nl, 8 * 18, NM_BLK_OFF)
NM_BLK_DEFINE(iq4_xs, 136, NM_BLK_OFF)

void avx512_fill_iq4(struct kern_isa *t) {
    t->vec_dot[DTYPE_IQ4_NL] = vec_dot_iq4_nl;
    t->gemm[DTYPE_IQ4_NL] = gemm_iq4_nl;
    t->vec_dot[DTYPE_IQ4_XS] = vec_dot_iq4_xs;
    t->gemm[DTYPE_IQ4_XS] = gemm_iq4_xs;
}
