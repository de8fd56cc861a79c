/* AVX-512 VNNI dot products of Q5_0 and Q5_1 (32-value blocks, 22 and 24 bytes) with q8x
 * activations, through the block tile of dot_blk.h (groups of 8 blocks).
 *  - head: the fp16 d (Q5_1: d and m) of the 8 blocks with two word permutes of the group's
 *    bytes (nm_blk_words16; a masked vpgatherdd in a short last group); Q5_0's offset is
 *    -16 d, Q5_1's m.
 *  - step (2 blocks): the 16 nibble bytes of each block broadcast to two 128-bit lanes, one
 *    vpsrlvw (0 or 4 per lane) and an AND give the low 4 bits in natural order; the fifth bits
 *    are the 32-bit qh of each block, which is already the byte mask of the 32 values: one
 *    masked add of 16 (qh0 | qh1 << 32 into a mask register).
 * Layouts: ggml-common.h block_q5_0 (d, qh[4], qs[16]) and block_q5_1 (d, m, qh[4], qs[16]). */
#include "dot_blk.h"

/* Word picks of nm_blk_words16 for full groups: Q5_0's d (words 11b, the last two from the
 * group's last 64 bytes, words 56 ..); Q5_1's d (words 12b) then m (12b + 1), the last two of
 * each from words 64 .. */
static const int16_t k_q5_0_i01[32] __attribute__((aligned(64))) = {0, 11, 22, 33, 44, 55};
static const int16_t k_q5_0_i2[32] __attribute__((aligned(64))) = {0, 0, 0, 0, 0, 0, 66 - 56, 77 - 56};
static const int16_t k_q5_1_i01[32] __attribute__((aligned(64))) = {0, 12, 24, 36, 48, 60, 0, 0, 1, 13, 25, 37, 49, 61};
static const int16_t k_q5_1_i2[32] __attribute__((aligned(64))) = {0, 0, 0, 0, 0, 0, 72 - 64, 84 - 64,
                                                                   0, 0, 0, 0, 0, 0, 73 - 64, 85 - 64};

NM_INLINE void q5_0_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    if (nblk == 8)
        *sc = nm_blk_halves(_mm256_cvtph_ps(_mm256_castsi256_si128(nm_blk_words16(g, 176, k_q5_0_i01, k_q5_0_i2, 0xC0))));
    else
        *sc = nm_blk_halves(nm_blk_fp16x8(nm_blk_dword8(g, 22, nblk)));
    *off = _mm512_mul_ps(*sc, _mm512_set1_ps(-16.0f));
}

NM_INLINE void q5_1_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    if (nblk == 8) {
        const __m512 dm = _mm512_cvtph_ps(nm_blk_words16(g, 192, k_q5_1_i01, k_q5_1_i2, 0xC0C0));
        *sc = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), dm);
        *off = _mm512_permutexvar_ps(_mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), dm);
        return;
    }
    const __m256i dm = nm_blk_dword8(g, 24, nblk);
    *sc = nm_blk_halves(nm_blk_fp16x8(dm));
    *off = nm_blk_halves(nm_blk_fp16x8(_mm256_srli_epi32(dm, 16)));
}

/* The 5-bit codes of blocks 2z and 2z + 1 (bsize bytes each; qh at qh_off, qs at qh_off + 4). */
NM_INLINE __m512i q5_codes(const uint8_t *g, int z, int nblk, int bsize, int qh_off) {
    const uint8_t *b0 = g + (size_t)(2 * z) * bsize, *b1 = b0 + bsize;
    const int two = 2 * z + 1 < nblk;
    const __m512i u = nm_blk_nib64(b0 + qh_off + 4, two ? b1 + qh_off + 4 : NULL);
    uint32_t h0, h1 = 0;
    memcpy(&h0, b0 + qh_off, 4);
    if (two) memcpy(&h1, b1 + qh_off, 4);
    return _mm512_mask_add_epi8(u, (__mmask64)((uint64_t)h0 | (uint64_t)h1 << 32), u, _mm512_set1_epi8(16));
}

NM_INLINE __m512i q5_0_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)neg;
    return q5_codes(g, z, nblk, 22, 2);
}
NM_INLINE __m512i q5_1_step(const uint8_t *g, int z, int nblk, __mmask64 *neg, const struct nm_blk_gs *gs) {
    (void)neg;
    return q5_codes(g, z, nblk, 24, 4);
}

NM_BLK_DEFINE(q5_0, 8 * 22, NM_BLK_OFF)
NM_BLK_DEFINE(q5_1, 8 * 24, NM_BLK_OFF)

void avx512_fill_q5(struct kern_isa *t) {
    t->vec_dot[DTYPE_Q5_0] = vec_dot_q5_0;
    t->gemm[DTYPE_Q5_0] = gemm_q5_0;
    t->vec_dot[DTYPE_Q5_1] = vec_dot_q5_1;
    t->gemm[DTYPE_Q5_1] = gemm_q5_1;
}
