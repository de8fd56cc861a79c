/* AVX2 dot products of the block decoder types (Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ2_*,
 * IQ3_*, IQ1_*: kernels/blocks/block.h) on their GGUF blocks, for CPUs without AVX-512, which
 * ran them in plain C. Each 32-value sub-block of a weight row is decoded once per call into
 * block.h's form (32 int8 codes, a scale and an offset per half) and its codes serve every
 * activation row of the call (up to BLK_ROWS at a time) through vpmaddubsw/vpmaddwd. The
 * 32-value types Q5_0, Q5_1 and IQ4_NL decode in registers (nibbles by AND and shift, fifth bits
 * by a byte shuffle and compare, IQ4_NL's codebook by vpshufb); the others through the type's
 * own plain-C decoder (block_codec.decode32, the one the references use), which is then the
 * cost of a GEMV; a prompt shares it among BLK_ROWS activation rows. The float arithmetic per
 * sub-block is block_vec_dot_ref's, term for term and in the same order (this file is built
 * with -ffp-contract=off, kernels.cmake), and the integer sums are exact, so every (weight row,
 * activation row) result has the reference's bits, in any tile (test_kernels_fast). */
#include <immintrin.h>

#include "../base.h"
#include <string.h>

#include "../blocks/block.h"
#include "../blocks/iq4_nl.h"
#include "../blocks/q5_0.h"
#include "../blocks/q5_1.h"
#include "../quant.h"
#include "avx2.h"

#define BLK_ROWS 8

/* The exact integer sums of one sub-block against one activation block: per 16-value half h,
 * sq[h] = sum of code * act and sa[h] = sum of act. Codes are -128..127, q8x codes -127..127:
 * |code| * act with the code's sign moved onto act, pairs summed to at most 2 * 128 * 127 in
 * int16 (no saturation). */
NM_INLINE void blk_sums(__m256i q, __m256i uq, const int8_t *act, int32_t *sq0, int32_t *sq1, int32_t *sa0,
                        int32_t *sa1) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)act);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uq, _mm256_sign_epi8(a, q)), ones16);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), a), ones16);
    /* dwords 0..3 of p and s: half 0; 4..7: half 1 */
    const __m256i h = _mm256_hadd_epi32(p, s); /* p01 p23 s01 s23 | p45 p67 s45 s67 */
    const __m256i t = _mm256_hadd_epi32(h, h); /* p0-3 s0-3 . . | p4-7 s4-7 . . */
    const __m128i lo = _mm256_castsi256_si128(t), hi = _mm256_extracti128_si256(t, 1);
    *sq0 = _mm_cvtsi128_si32(lo);
    *sa0 = _mm_extract_epi32(lo, 1);
    *sq1 = _mm_cvtsi128_si32(hi);
    *sa1 = _mm_extract_epi32(hi, 1);
}

/* The 32 codes of a Q5_0/Q5_1 block in natural order: 16 nibble bytes at qs (byte l: value l
 * low, value l + 16 high), fifth bits in qh (bit l: value l). */
NM_INLINE __m256i q5_codes(const uint8_t *qs, const uint8_t *qh4) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                                             2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit);
    return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

/* Sub-block j of the block at blk as block.h decodes it: codes into *q, scales d, offsets m. */
NM_INLINE void blk_decode(const enum dtype t, const struct block_codec *c, const uint8_t *blk, int j, __m256i *q,
                          float *d, float *m) {
    switch (t) {
    case DTYPE_Q5_0: { /* q5_0_decode32: code - 16, offset -0.0 */
        const block_q5_0 *b = (const block_q5_0 *)blk;
        *q = _mm256_sub_epi8(q5_codes(b->qs, b->qh), _mm256_set1_epi8(16));
        d[0] = d[1] = blk_fp16(b->d);
        m[0] = m[1] = -0.0f;
        return;
    }
    case DTYPE_Q5_1: { /* q5_1_decode32: code, offset m */
        const block_q5_1 *b = (const block_q5_1 *)blk;
        *q = q5_codes(b->qs, b->qh);
        d[0] = d[1] = blk_fp16(b->d);
        m[0] = m[1] = blk_fp16(b->m);
        return;
    }
    case DTYPE_IQ4_NL: { /* iq4_nl_decode32: the codebook's value, offset -0.0 */
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        const __m128i v = _mm_loadu_si128((const __m128i *)b->qs);
        const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
        const __m256i tab = _mm256_set_epi64x((long long)IQ4NL_HI, (long long)IQ4NL_LO, (long long)IQ4NL_HI,
                                              (long long)IQ4NL_LO);
        *q = _mm256_shuffle_epi8(tab, nib);
        d[0] = d[1] = blk_fp16(b->d);
        m[0] = m[1] = -0.0f;
        return;
    }
    default: {
        struct block_sub32 b;
        c->decode32(blk, j, &b);
        *q = _mm256_loadu_si256((const __m256i *)b.q);
        d[0] = b.d[0], d[1] = b.d[1];
        m[0] = b.m[0], m[1] = b.m[1];
        return;
    }
    }
}

/* gemm slot semantics (cpu.h) for type t (codec c): y[ci * ldy + r] = vec_dot(row r, activation
 * row ci). */
NM_INLINE void blk_gemm(const enum dtype t, const struct block_codec *c, int64_t n, const void *w, size_t ws, int nr,
                        const void *act, size_t as, int nc, float *y, int64_t ldy) {
    const int per = (int)c->info.blck_size / 32;
    const int64_t nsub = n / 32;
    const size_t tsz = c->info.type_size;
    for (int c0 = 0; c0 < nc; c0 += BLK_ROWS) {
        const int cc = NM_MIN(BLK_ROWS, nc - c0);
        const block_q8x *x[BLK_ROWS];
        for (int k = 0; k < cc; k++) x[k] = (const block_q8x *)((const uint8_t *)act + (size_t)(c0 + k) * as);
        for (int r = 0; r < nr; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)r * ws;
            float sum[BLK_ROWS] = {0};
            for (int64_t s = 0; s < nsub; s++) {
                __m256i q;
                float d[2], m[2];
                blk_decode(t, c, row + (size_t)(s / per) * tsz, (int)(s % per), &q, d, m);
                const __m256i uq = _mm256_abs_epi8(q);
                for (int k = 0; k < cc; k++) {
                    const block_q8x *a = x[k] + s;
                    int32_t sq0, sq1, sa0, sa1;
                    blk_sums(q, uq, a->qs, &sq0, &sq1, &sa0, &sa1);
                    sum[k] += a->d * ((d[0] * (float)sq0 + d[1] * (float)sq1) + (m[0] * (float)sa0 + m[1] * (float)sa1));
                }
            }
            for (int k = 0; k < cc; k++) y[(int64_t)(c0 + k) * ldy + r] = sum[k];
        }
    }
}

#define BLK_FNS(T, t)                                                                                       \
    static void gemm_##t(int64_t n, const void *w, size_t ws, int nr, const void *act, size_t as, int nc,    \
                         float *y, int64_t ldy) {                                                            \
        blk_gemm(DTYPE_##T, &block_codec_##t, n, w, ws, nr, act, as, nc, y, ldy);                            \
    }                                                                                                        \
    static float vec_dot_##t(int64_t n, const void *w, const void *act) {                                    \
        float y;                                                                                             \
        blk_gemm(DTYPE_##T, &block_codec_##t, n, w, 0, 1, act, 0, 1, &y, 1);                                 \
        return y;                                                                                            \
    }
BLOCK_TYPES(BLK_FNS)
#undef BLK_FNS

void avx2_fill_blocks(struct kern_isa *t) {
#define BLK_FILL(T, t_)                                                                                     \
    t->gemm[DTYPE_##T] = gemm_##t_;                                                                          \
    t->vec_dot[DTYPE_##T] = vec_dot_##t_;
    BLOCK_TYPES(BLK_FILL)
#undef BLK_FILL
}
