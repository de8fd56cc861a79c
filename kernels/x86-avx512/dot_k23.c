/* AVX-512 VNNI dot products of Q2_K (84 bytes) and Q3_K (110 bytes) super-blocks of 256 values
 * with q8x activations, through the block tile of dot_blk.h (one super-block per group).
 * Both hold 2-bit codes in ggml's K order: value 128h + 32j + l (l < 32) is bits 2j, 2j + 1 of
 * qs[32h + l], and one scale per 16 values in natural order (16 halves).
 *  - step z (values 64z .. 64z + 63: h = z / 2, j = 2 (z % 2) and j + 1): the 32 bytes
 *    qs[32h ..] broadcast to both 256-bit halves, one vpsrlvw (2j in the low half, 2j + 2 in
 *    the high one) and an AND with 3. Q3_K adds 4 where its hmask bit is set: the 32 hmask bytes
 *    broadcast likewise, tested against bit 2z (low half) and 2z + 1 (high half) into a byte
 *    mask, one masked add.
 *  - head: Q2_K: scale d * (sc & 15) and offset -dmin * (sc >> 4) per half from the 16 scale
 *    bytes (vpmovzxbd). Q3_K: the 16 6-bit scales (low 4 bits: bytes 0..7, low nibbles then
 *    high nibbles; high 2 bits: bytes 8..11, 2 bits per 4 scales) from the 12 bytes with two
 *    lane permutes and two vpsrlvd; scale d * (s - 32), offset -4 times that (codes 0..7 for
 *    ggml's -4..3).
 * Layouts: ggml-common.h block_q2_K (scales[16], qs[64], d, dmin), block_q3_K (hmask[32],
 * qs[64], scales[12], d). */
#include "dot_blk.h"

/* The 2-bit codes of step z from the 64 qs bytes at qs. */
NM_INLINE __m512i k23_low2(const uint8_t *qs, int z) {
    const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (z / 2))));
    const int s = 4 * (z % 2);
    const __m512i cnt = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)s)),
                                           _mm256_set1_epi16((short)(s + 2)), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(raw, cnt), _mm512_set1_epi8(3));
}

NM_INLINE void q2_K_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)g));
    *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(s, _mm512_set1_epi32(0xF))),
                        _mm512_set1_ps(nm_blk_f16(g + 80)));
    *off = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(s, 4)), _mm512_set1_ps(-nm_blk_f16(g + 82)));
}

NM_INLINE __m512i q2_K_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    (void)neg;
    return k23_low2(g + 16, z);
}

NM_INLINE void q3_K_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    (void)nblk;
    /* the 12 scale bytes (the block ends 2 bytes after them: a masked load) */
    const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)0x0FFF, g + 96));
    const __m512i lo = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7), b),
                          _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
        _mm512_set1_epi32(0xF));
    const __m512i hi = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_setr_epi32(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11), b),
                          _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
        _mm512_set1_epi32(3));
    const __m512i s = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(nm_blk_f16(g + 108)));
    *off = _mm512_mul_ps(*sc, _mm512_set1_ps(-4.0f));
}

NM_INLINE __m512i q3_K_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)nblk;
    (void)neg;
    const __m512i u = k23_low2(g + 32, z);
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)g));
    const __m512i sel = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * z)))),
                                           _mm256_set1_epi8((char)(1 << (2 * z + 1))), 1);
    return _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, sel), u, _mm512_set1_epi8(4));
}

NM_BLK_DEFINE(q2_K, 84, NM_BLK_OFF)
NM_BLK_DEFINE(q3_K, 110, NM_BLK_OFF)

void avx512_fill_k23(struct kern_isa *t) {
    t->vec_dot[DTYPE_Q2_K] = vec_dot_q2_K;
    t->gemm[DTYPE_Q2_K] = gemm_q2_K;
    t->vec_dot[DTYPE_Q3_K] = vec_dot_q3_K;
    t->gemm[DTYPE_Q3_K] = gemm_q3_K;
}
