/* AVX2 dot products of the block decoder types (Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ2_*,
 * IQ3_*, IQ1_*: kernels/blocks/block.h) on their GGUF blocks, for CPUs without AVX-512, which
 * ran them in plain C. A tile is 8 weight rows (one per f32 lane) x up to BLK_ROWS activation
 * rows: each 32-value sub-block of the 8 rows is decoded once per tile into block.h's form (32
 * int8 codes, a scale and an offset per half) and dotted with each activation row through
 * vpmaddubsw/vpmaddwd. Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL and IQ4_XS decode in registers (nibbles
 * and 2-bit codes by AND and shift, fifth and high bits by a byte shuffle or mask and compare,
 * the IQ4 codebook by vpshufb, gsc_codes; the small unsigned codes of Q5_0, Q5_1, Q2_K and Q3_K
 * go to vpmaddubsw as they are, blk_uoff; their scales come for the 8 rows at once from gathers,
 * gsc_scales); IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S take their 4 grid entries per
 * sub-block by loads built into a vector in registers and their 32 signs from a table of the
 * 7-bit sign groups (or a byte shuffle and compare of stored sign bytes), the magnitudes going to
 * vpmaddubsw as they are and the signs onto the activations (blk_msign), IQ1_S and IQ1_M their
 * grid entries the same way (IQ1_M's deltas by a byte shuffle and compare); the IQ types' scales
 * are their integer k per half and d per super-block, for the tile's 8 rows at once from gathers
 * (iq_k_lanes, iq_d_lanes), and one vector formula (iq_scale); block_codec.decode32 (the plain-C
 * decoder the references use) is left for types without such a case. The float arithmetic per
 * sub-block is block_vec_dot_ref's, term for term and in the same order, one weight row per lane
 * (this file is built with -ffp-contract=off, kernels.cmake), and the integer sums are exact, so
 * every (weight row, activation row) result has the reference's bits, in any tile
 * (test_kernels_fast). */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "../base.h"
#include "../blocks/block.h"
#include "../blocks/iq1_m.h"
#include "../blocks/iq1_s.h"
#include "../blocks/iq2_s.h"
#include "../blocks/iq2_xs.h"
#include "../blocks/iq2_xxs.h"
#include "../blocks/iq3_s.h"
#include "../blocks/iq3_xxs.h"
#include "../blocks/iq4_nl.h"
#include "../blocks/iq4_xs.h"
#include "../blocks/q2_k.h"
#include "../blocks/q3_k.h"
#include "../blocks/q5_0.h"
#include "../blocks/q5_1.h"
#include "../quant.h"
#include "simd.h"

#define BLK_ROWS 4  /* activation rows per tile */
#define BLK_WROWS 8 /* weight rows per tile: one per f32 lane */
/* GEMV prefetch: a tile reads its 8 rows side by side, each over all of K, so the hardware sees 8
 * short streams (a row of a 4096-column IQ2_XXS matrix is 1056 bytes); at the start of each
 * block the kernel prefetches the same block of the next tile's row (8 rows ahead). */

/* The 32 nibbles of 16 bytes at qs in ggml's order (byte l: value l low, value l + 16 high). */
NM_INLINE __m256i nibbles32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

/* The 32 codes of a Q5_0/Q5_1 block in natural order: its nibbles at qs, fifth bits in qh (bit
 * l: value l). */
NM_INLINE __m256i q5_codes(const uint8_t *qs, const uint8_t *qh4) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    return _mm256_or_si256(nibbles32(qs), _mm256_and_si256(avx2_bytes_of_bits(qh), _mm256_set1_epi8(16)));
}

/* The signs of the IQ types' 7-bit sign groups (ggml's ksigns) as vpsignb operands: byte c of
 * entry i is -1 where bit c of iq_sign_byte(i) is set (the eighth bit the parity of the seven),
 * else +1. Filled once by avx2_fill_blocks. */
static uint64_t g_signs7[128];

/* The 32 signs (-1, +1) of a sub-block whose 4 groups of 7 sign bits are bits 7l .. 7l + 6 of w. */
NM_INLINE __m256i iq_sign_7x4(uint32_t w) {
    return _mm256_setr_epi64x((long long)g_signs7[w & 127], (long long)g_signs7[(w >> 7) & 127],
                              (long long)g_signs7[(w >> 14) & 127], (long long)g_signs7[(w >> 21) & 127]);
}

/* The IQ grid types: their sub-block scales are d (the block's f16) times a small integer k per
 * half (their decode32's operations on the same values, in the same order, here on 8 rows' lanes):
 *   IQ2_XXS, IQ2_XS, IQ2_S: (d * (k + 0.5)) * 0.25; IQ3_XXS: (d * (k + 0.5)) * 0.5;
 *   IQ3_S: d * k (k = 1 + 2 s); IQ1_S, IQ1_M: (d * k) * 0.125 (k = 2 s + 1);
 * and no offset (IQ_NO_OFFSET). */
NM_INLINE bool blk_iq(const enum dtype t) {
    return t == DTYPE_IQ2_XXS || t == DTYPE_IQ2_XS || t == DTYPE_IQ2_S || t == DTYPE_IQ3_XXS || t == DTYPE_IQ3_S ||
           t == DTYPE_IQ1_S || t == DTYPE_IQ1_M;
}
NM_INLINE __m256 iq_scale(const enum dtype t, __m256 d, __m256i k) {
    const __m256 kf = _mm256_cvtepi32_ps(k);
    switch (t) {
    case DTYPE_IQ3_S: return _mm256_mul_ps(d, kf);
    case DTYPE_IQ1_S:
    case DTYPE_IQ1_M: return _mm256_mul_ps(_mm256_mul_ps(d, kf), _mm256_set1_ps(0.125f));
    default:
        return _mm256_mul_ps(_mm256_mul_ps(d, _mm256_add_ps(kf, _mm256_set1_ps(0.5f))),
                             _mm256_set1_ps(t == DTYPE_IQ3_XXS ? 0.5f : 0.25f));
    }
}
/* The IQ grid types whose codes are a grid magnitude (unsigned, at most 62) with a sign bit:
 * blk_decode gives the magnitudes and the signs (-1, +1) apart, and the sign goes onto the
 * activation (IQ1_S/IQ1_M's codes are signed values). */
NM_INLINE bool blk_msign(const enum dtype t) { return blk_iq(t) && t != DTYPE_IQ1_S && t != DTYPE_IQ1_M; }
/* 4 grid entries of 8 bytes as one vector (entry l: bytes 8l .. 8l + 7), built in registers. */
NM_INLINE __m256i iq_grid4(const uint64_t g[4]) {
    return _mm256_setr_epi64x((long long)g[0], (long long)g[1], (long long)g[2], (long long)g[3]);
}

/* IQ1_S/IQ1_M's grid entries with each byte g (-1, 0, 1) as 8 g + 9 (1, 9, 17): filled once from
 * iq_grid_iq1s by avx2_fill_blocks. */
static uint64_t g_iq1_u9[2048];

/* IQ1_S/IQ1_M's 32 codes 8 g + delta (iq1_code) plus blk_uoff's 9 (0..18, unsigned), from the
 * g_iq1_u9 entries of 4 groups and the deltas (-1, +1) per byte. */
NM_INLINE __m256i iq1_codes(const uint64_t u9[4], __m256i delta) { return _mm256_add_epi8(iq_grid4(u9), delta); }

/* IQ1_M's deltas of a sub-block's 4 groups of 8, -1 or +1 per byte (iq1_codes): group l's is -1
 * where bit 3 of its nibble (bit 4l + 3 of w, the sub-block's two qh bytes) is set. */
NM_INLINE __m256i iq1m_delta(uint16_t w) {
    const __m256i lo_hi = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                           1, 1, 1, 1, 1, 1); /* groups 0, 1: qh byte 0; 2, 3: byte 1 */
    const __m256i bit = _mm256_setr_epi8(8, 8, 8, 8, 8, 8, 8, 8, -128, -128, -128, -128, -128, -128, -128, -128, 8, 8, 8,
                                         8, 8, 8, 8, 8, -128, -128, -128, -128, -128, -128, -128, -128);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi16((short)w), lo_hi);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(1));
}

/* The signs (-1, +1) of 32 values from their 32 sign bits (bit c set: value c negative). */
NM_INLINE __m256i iq_sign_bits(uint32_t sg) { return _mm256_or_si256(avx2_bytes_of_bits(sg), _mm256_set1_epi8(1)); }

/* The 2-bit codes of sub-block j of a Q2_K/Q3_K block: bits 2(j % 4) .. +1 of the 32 bytes at
 * qs + 32 (j / 4) (a 16-bit shift moves each byte's bits down within the byte's low 2 bits' reach). */
NM_INLINE __m256i k_low2(const uint8_t *qs, int j) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 4)));
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (j % 4))), _mm256_set1_epi8(3));
}

/* The codebook values of 32 IQ4_NL indices (16 bytes at qs: low nibbles first), by vpshufb. */
NM_INLINE __m256i iq4nl_codes(const uint8_t *qs) { return _mm256_shuffle_epi8(avx2_iq4nl_lut(), nibbles32(qs)); }

/* The types whose block.h codes are u - blk_uoff(t) with u small and unsigned (0..31): gsc_codes
 * (and IQ1_S/IQ1_M's iq1_codes) give u, which vpmaddubsw takes as it is (2 x 31 x 127 fits its
 * int16), and the integer sums subtract blk_uoff(t) times the activations' sum, the same
 * integers as the codes' sums. The other types' codes are signed (or too large for that) and
 * take vpsignb: -1. */
NM_INLINE int blk_uoff(const enum dtype t) {
    switch (t) {
    case DTYPE_Q5_0: return 16;
    case DTYPE_IQ1_S:
    case DTYPE_IQ1_M: return 9;
    case DTYPE_Q3_K: return 4;
    case DTYPE_Q5_1:
    case DTYPE_Q2_K: return 0;
    default: return -1;
    }
}

/* The types whose scales come for the tile's 8 rows at once from gathers (gsc_d, gsc_scales):
 * every type that decodes in registers but the IQ grid ones. */
NM_INLINE bool blk_gathered(const enum dtype t) {
    return t == DTYPE_Q5_0 || t == DTYPE_Q5_1 || t == DTYPE_IQ4_NL || t == DTYPE_IQ4_XS || t == DTYPE_Q2_K ||
           t == DTYPE_Q3_K;
}

/* Sub-block j's 32 codes of a blk_gathered type, as block.h decodes them (plus blk_uoff(t) where
 * that is >= 0): Q5_0 code - 16 (here: code), Q5_1 code, IQ4_NL and IQ4_XS the codebook's value,
 * Q2_K code, Q3_K low - 4 where bit j of hmask is clear (here: low + 4 where it is set). */
NM_INLINE __m256i gsc_codes(const enum dtype t, const uint8_t *blk, int j) {
    switch (t) {
    case DTYPE_Q5_0: return q5_codes(((const block_q5_0 *)blk)->qs, ((const block_q5_0 *)blk)->qh);
    case DTYPE_Q5_1: return q5_codes(((const block_q5_1 *)blk)->qs, ((const block_q5_1 *)blk)->qh);
    case DTYPE_IQ4_NL: return iq4nl_codes(((const block_iq4_nl *)blk)->qs);
    case DTYPE_IQ4_XS: return iq4nl_codes(((const block_iq4_xs *)blk)->qs + 16 * j);
    case DTYPE_Q2_K: return k_low2(((const block_q2_K *)blk)->qs, j);
    default: { /* Q3_K */
        const block_q3_K *b = (const block_q3_K *)blk;
        const __m256i bit = _mm256_set1_epi8((char)(1 << j));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)b->hmask), bit), bit);
        return _mm256_or_si256(k_low2(b->qs, j), _mm256_and_si256(set, _mm256_set1_epi8(4)));
    }
    }
}

/* Sub-block j of the block at blk of a type that is not blk_gathered, as block.h decodes it:
 * codes into *q and, for blk_msign types, the magnitudes into *q and the signs into *sg; for
 * iq_k_inline types k into *k (the other IQ grid types' scales come from iq_k_lanes), for the
 * types that are not IQ grid types scales d and offsets m (F16C's conversion: blk_fp16's bits
 * for every input, NaNs quieted as it does). */
NM_INLINE void blk_decode(const enum dtype t, const struct block_codec *c, const uint8_t *blk, int j, __m256i *q,
                          __m256i *sg, float *d, float *m, uint32_t *k) {
    switch (t) {
    case DTYPE_IQ2_XXS: { /* iq2_xxs_decode32 */
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        const uint8_t *p = (const uint8_t *)b->qs + 8 * j;
        uint32_t w;
        memcpy(&w, p + 4, 4);
        uint64_t g[4];
        NM_UNROLL for (int l = 0; l < 4; l++) g[l] = iq_grid_iq2xxs[p[l]];
        *q = iq_grid4(g), *sg = iq_sign_7x4(w);
        *k = w >> 28;
        return;
    }
    case DTYPE_IQ2_XS: { /* iq2_xs_decode32 */
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        uint64_t g[4], sgn[4];
        NM_UNROLL for (int l = 0; l < 4; l++) {
            const uint32_t v = b->qs[4 * j + l];
            g[l] = iq_grid_iq2xs[v & 511u];
            sgn[l] = g_signs7[v >> 9];
        }
        *q = iq_grid4(g), *sg = iq_grid4(sgn);
        return;
    }
    case DTYPE_IQ2_S: { /* iq2_s_decode32 */
        const block_iq2_s *b = (const block_iq2_s *)blk;
        uint64_t g[4];
        NM_UNROLL for (int l = 0; l < 4; l++)
            g[l] = iq_grid_iq2s[(uint32_t)b->qs[4 * j + l] | ((uint32_t)(b->qh[j] >> (2 * l)) & 3u) << 8];
        uint32_t sb;
        memcpy(&sb, b->qs + QK_IQ2_S / 8 + 4 * j, 4);
        *q = iq_grid4(g), *sg = iq_sign_bits(sb);
        return;
    }
    case DTYPE_IQ3_XXS: { /* iq3_xxs_decode32 */
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint8_t *idx = b->qs + 8 * j;
        uint32_t w;
        memcpy(&w, b->qs + QK_IQ3_XXS / 4 + 4 * j, 4);
        uint64_t g[4];
        NM_UNROLL for (int l = 0; l < 4; l++)
            g[l] = (uint64_t)iq_grid_iq3xxs[idx[2 * l]] | (uint64_t)iq_grid_iq3xxs[idx[2 * l + 1]] << 32;
        *q = iq_grid4(g), *sg = iq_sign_7x4(w);
        *k = w >> 28;
        return;
    }
    case DTYPE_IQ3_S: { /* iq3_s_decode32 */
        const block_iq3_s *b = (const block_iq3_s *)blk;
        uint64_t g[4];
        NM_UNROLL for (int l = 0; l < 4; l++) {
            const uint32_t i0 = (uint32_t)b->qs[8 * j + 2 * l] | ((uint32_t)(b->qh[j] >> (2 * l)) & 1u) << 8;
            const uint32_t i1 = (uint32_t)b->qs[8 * j + 2 * l + 1] | ((uint32_t)(b->qh[j] >> (2 * l + 1)) & 1u) << 8;
            g[l] = (uint64_t)iq_grid_iq3s[i0] | (uint64_t)iq_grid_iq3s[i1] << 32;
        }
        uint32_t sb;
        memcpy(&sb, b->signs + 4 * j, 4);
        *q = iq_grid4(g), *sg = iq_sign_bits(sb);
        return;
    }
    case DTYPE_IQ1_S: { /* iq1_s_decode32: 8 g + delta, delta -1 or +1 for the sub-block */
        const block_iq1_s *b = (const block_iq1_s *)blk;
        const uint32_t w = b->qh[j];
        uint64_t g[4];
        NM_UNROLL for (int l = 0; l < 4; l++) g[l] = g_iq1_u9[(uint32_t)b->qs[4 * j + l] | ((w >> (3 * l)) & 7u) << 8];
        *q = iq1_codes(g, _mm256_set1_epi8((w >> 15) ? -1 : 1));
        return;
    }
    case DTYPE_IQ1_M: { /* iq1_m_decode32: 8 g + delta, delta -1 or +1 per group of 8 */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        uint16_t w; /* the sub-block's 4 nibbles: group l's at bit 4l */
        memcpy(&w, b->qh + 2 * j, 2);
        uint64_t g[4];
        NM_UNROLL for (int l = 0; l < 4; l++) g[l] = g_iq1_u9[(uint32_t)b->qs[4 * j + l] | ((uint32_t)w >> (4 * l) & 7u) << 8];
        *q = iq1_codes(g, iq1m_delta(w));
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

/* The blk_gathered types' scales and offsets, which a row at a time took scalar conversions
 * and products (16 a sub-block for Q2_K) and a trip through memory into the lanes: here they
 * come for the tile's 8 rows at once, lane i = row i, from gathers of the rows' scale bytes (d,
 * dmin once per block or super-block; per sub-block the K-quants' and IQ4_XS's scale bytes),
 * with the operations of their decode32 on the same values. The tile's rows for the gathers:
 * their byte offsets from the first (lane i: i x the row stride) and the lanes of rows that exist
 * (the others read nothing and are zero; their lanes are never stored), formed once per tile. */
struct gsc_rows {
    __m256i off, mask;
};
NM_INLINE struct gsc_rows gsc_rows_of(size_t ws, int rows) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (struct gsc_rows){.off = _mm256_mullo_epi32(lane, _mm256_set1_epi32((int)ws)),
                             .mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), lane)};
}
/* The dword at byte off of each row's block (blk0: the first row's). */
NM_INLINE __m256i gsc_gather(const uint8_t *blk0, const struct gsc_rows *g, int off) {
    return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(blk0 + off), g->off, g->mask, 1);
}

/* IQ2_XXS and IQ3_XXS: k is the top 4 bits of the sign word their decode reads anyway, so
 * blk_decode gives it per row (a gather would cost more); the other IQ grid types: iq_k_lanes. */
NM_INLINE bool iq_k_inline(const enum dtype t) { return t == DTYPE_IQ2_XXS || t == DTYPE_IQ3_XXS; }

/* The integers k of iq_scale for sub-block j (per half: k0, k1) of the rows' blocks at blk0 (the
 * IQ grid types but iq_k_inline), as their decode32 computes them, from a gather of the dword that
 * holds them (a dword inside the block: where the field is near the block's end, the dword ending
 * on it). */
NM_INLINE void iq_k_lanes(const enum dtype t, const uint8_t *blk0, const struct gsc_rows *g, int j, __m256i *k0,
                          __m256i *k1) {
    const __m256i f = _mm256_set1_epi32(0xF), s7 = _mm256_set1_epi32(7), one = _mm256_set1_epi32(1);
    switch (t) {
    case DTYPE_IQ2_XS:
    case DTYPE_IQ2_S: { /* scales[j], the dword's top byte: low nibble k0, high nibble k1 */
        const int sc = t == DTYPE_IQ2_XS ? (int)offsetof(block_iq2_xs, scales) : (int)offsetof(block_iq2_s, scales);
        const __m256i v = gsc_gather(blk0, g, sc + j - 3);
        *k0 = _mm256_and_si256(_mm256_srli_epi32(v, 24), f);
        *k1 = _mm256_srli_epi32(v, 28);
        return;
    }
    case DTYPE_IQ3_S: { /* 1 + 2 s, s nibble j of the 4 scale bytes (the block's last dword) */
        const __m256i v = _mm256_srl_epi32(gsc_gather(blk0, g, (int)offsetof(block_iq3_s, scales)), _mm_cvtsi32_si128(4 * j));
        *k0 = *k1 = _mm256_add_epi32(one, _mm256_slli_epi32(_mm256_and_si256(v, f), 1));
        return;
    }
    case DTYPE_IQ1_S: { /* 2 s + 1, s bits 12..14 of qh[j] (the dword's upper half) */
        const __m256i v = gsc_gather(blk0, g, (int)offsetof(block_iq1_s, qh) + 2 * j - 2);
        *k0 = *k1 = _mm256_add_epi32(one, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v, 28), s7), 1));
        return;
    }
    case DTYPE_IQ1_M: { /* 2 s + 1 per half h, s the 3 bits at 6 (j % 2) + 3 h of sc[j / 2] (the dword's upper half) */
        const __m256i v = _mm256_srl_epi32(gsc_gather(blk0, g, (int)offsetof(block_iq1_m, scales) + 2 * (j / 2) - 2),
                                           _mm_cvtsi32_si128(16 + 6 * (j % 2)));
        *k0 = _mm256_add_epi32(one, _mm256_slli_epi32(_mm256_and_si256(v, s7), 1));
        *k1 = _mm256_add_epi32(one, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v, 3), s7), 1));
        return;
    }
    default: nm_bug(__FILE__, __LINE__, "iq_k_lanes: not an IQ grid type with gathered scales");
    }
}

/* 8 f16 bits (lane i: the low 16 bits of v's lane i) as f32 lanes. */
NM_INLINE __m256 gsc_f16(__m256i v) {
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08)));
}

/* The IQ grid types' super-block d of the rows' blocks at blk0 as f32 lanes: the leading f16, or
 * IQ1_M's, assembled from the top nibbles of sc[0..3] (iq1_m_d_bits). */
NM_INLINE __m256 iq_d_lanes(const enum dtype t, const uint8_t *blk0, const struct gsc_rows *g) {
    const __m256i m16 = _mm256_set1_epi32(0xFFFF);
    if (t != DTYPE_IQ1_M) return gsc_f16(_mm256_and_si256(gsc_gather(blk0, g, 0), m16));
    const int sc = (int)offsetof(block_iq1_m, scales);
    const __m256i a = gsc_gather(blk0, g, sc), b = gsc_gather(blk0, g, sc + 4); /* sc0 | sc1 << 16, sc2 | sc3 << 16 */
    const __m256i d = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a, 12), _mm256_set1_epi32(0x000F)),
                        _mm256_and_si256(_mm256_srli_epi32(a, 24), _mm256_set1_epi32(0x00F0))),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(b, 4), _mm256_set1_epi32(0x0F00)),
                        _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0xF000))));
    return gsc_f16(d);
}

/* d (and Q2_K's dmin, Q5_1's m) of the rows' block or super-block at blk0 as f32 lanes. */
NM_INLINE void gsc_d(const enum dtype t, const uint8_t *blk0, const struct gsc_rows *g, __m256 *d, __m256 *dmin) {
    /* Q2_K: d, dmin at bytes 80, 82; Q3_K: d at 108, the block's last 2 bytes (the dword at 106);
     * the others: d at 0 (Q5_1: m at 2) */
    const __m256i v = gsc_gather(blk0, g, t == DTYPE_Q2_K ? 80 : t == DTYPE_Q3_K ? 106 : 0);
    const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), hi = _mm256_srli_epi32(v, 16);
    const __m256i d16 = t == DTYPE_Q3_K ? hi : lo;
    *d = gsc_f16(d16);
    *dmin = gsc_f16(hi);
}

/* Sub-block j's half scales d0, d1 and offsets m0, m1 of the rows' super-block at blk0. */
NM_INLINE void gsc_scales(const enum dtype t, const uint8_t *blk0, const struct gsc_rows *g, int j, __m256 d, __m256 dmin,
                          __m256 *d0, __m256 *d1, __m256 *m0, __m256 *m1) {
    const __m256i f = _mm256_set1_epi32(0xF);
    const __m256 neg0 = _mm256_set1_ps(-0.0f);
    if (t == DTYPE_Q5_0 || t == DTYPE_Q5_1 || t == DTYPE_IQ4_NL) { /* d per block; offset Q5_1's m, else -0.0 */
        *d0 = *d1 = d;
        *m0 = *m1 = t == DTYPE_Q5_1 ? dmin : neg0;
        return;
    }
    if (t == DTYPE_Q2_K) { /* scales[2j], scales[2j + 1]: d * (sc & 15), -(dmin * (sc >> 4)) */
        const __m256i v = gsc_gather(blk0, g, 2 * j);
        *d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(v, f)));
        *m0 = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 4), f))), neg0);
        *d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8), f)));
        *m1 = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 12), f))), neg0);
        return;
    }
    if (t == DTYPE_IQ4_XS) { /* iq4_xs_scale6: low 4 bits at bit 4j of scales_l (byte 4), high 2
                                at bit 2j of scales_h (byte 2); d * (ls - 32), offset -0.0 */
        const __m256i l = _mm256_srl_epi32(gsc_gather(blk0, g, 4), _mm_cvtsi32_si128(4 * j));
        const __m256i h = _mm256_srl_epi32(gsc_gather(blk0, g, 0), _mm_cvtsi32_si128(16 + 2 * j));
        const __m256i ls = _mm256_or_si256(_mm256_and_si256(l, f),
                                           _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4));
        *d0 = *d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
        *m0 = *m1 = neg0;
        return;
    }
    /* Q3_K, scales at byte 96: q3_k_scale6 of k = 2j, 2j + 1: low 4 bits in byte k % 8 (high
     * nibble from k = 8), high 2 bits in byte 8 + k % 4 at bit 2 (k / 4), the same for both */
    const __m256i l = _mm256_srli_epi32(gsc_gather(blk0, g, 96 + (2 * j) % 8), 4 * (j >= 4));
    const __m256i h = _mm256_srli_epi32(gsc_gather(blk0, g, 96 + 8 + (2 * j) % 4), 2 * (j / 2));
    const __m256i three = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    const __m256i s0 = _mm256_or_si256(_mm256_and_si256(l, f), _mm256_slli_epi32(_mm256_and_si256(h, three), 4));
    const __m256i s1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(l, 8), f),
                                       _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 8), three), 4));
    *d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(s0, k32)));
    *d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(s1, k32)));
    *m0 = *m1 = neg0;
}

/* v[0..7] as the lanes of a vector, built in registers. */
NM_INLINE __m256 blk_lanes(const float *v) {
    const __m128 lo = _mm_setr_ps(v[0], v[1], v[2], v[3]), hi = _mm_setr_ps(v[4], v[5], v[6], v[7]);
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

/* The int32 sums of 4-value groups of one row's sub-block (codes q, signs sg) with activation a,
 * exact (blk_tiles). */
NM_INLINE __m256i blk_rowdot(const enum dtype t, __m256i q, __m256i sg, __m256i a) {
    const __m256i p = blk_uoff(t) >= 0 ? _mm256_maddubs_epi16(q, a)
                      : blk_msign(t)   ? _mm256_maddubs_epi16(q, _mm256_sign_epi8(a, sg))
                                       : _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* One tile: weight rows [r0, r0 + rr) against activation rows [c0, c0 + cc) (x: their q8x
 * blocks). */
NM_INLINE void blk_tile(const enum dtype t, const struct block_codec *c, const int cc, const int rr, int64_t n,
                        const uint8_t *row0, size_t ws, int nr, int r0, const block_q8x *const *x, int c0, float *y,
                        int64_t ldy) {
    const int per = t == DTYPE_Q5_0 || t == DTYPE_Q5_1 || t == DTYPE_IQ4_NL ? 1 : 8; /* sub-blocks per block */
    const int64_t nsub = n / 32;
    const size_t tsz = c->info.type_size;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const int uoff = blk_uoff(t);
    const bool gsc = blk_gathered(t);
    __m256 sum[BLK_ROWS];
    NM_UNROLL for (int k = 0; k < cc; k++) sum[k] = _mm256_setzero_ps();
    /* gsc: the super-block's d, dmin; blk_iq: its d */
    __m256 kd = _mm256_setzero_ps(), kdmin = _mm256_setzero_ps();
    const struct gsc_rows g = gsc_rows_of(ws, rr);
    for (int64_t s = 0; s < nsub; s++) {
        __m256i q[BLK_WROWS], sg[BLK_WROWS]; /* blk_msign: magnitudes q, signs sg */
        float d0[BLK_WROWS], d1[BLK_WROWS], m0[BLK_WROWS], m1[BLK_WROWS];
        uint32_t krow[BLK_WROWS] = {0}; /* iq_k_inline: the rows' k */
        const uint8_t *blk0 = row0 + (size_t)(s / per) * tsz;
        const int j = (int)(s % per);
        if (gsc && j == 0) gsc_d(t, blk0, &g, &kd, &kdmin);
        if (blk_iq(t) && j == 0) kd = iq_d_lanes(t, blk0, &g);
        /* one activation row: each row pair's vphaddd as soon as its two rows are decoded, so
         * that neither the codes nor 8 rows' products stay live (they spilled) */
        __m256i pp[BLK_WROWS / 2], pe = _mm256_setzero_si256();
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)(x[0] + s)->qs);
        NM_UNROLL for (int i = 0; i < BLK_WROWS; i++) {
            float d[2] = {0, 0}, m[2] = {0, 0};
            q[i] = sg[i] = _mm256_setzero_si256();
            if (i < rr) {
                const uint8_t *blk = blk0 + (size_t)i * ws;
                if (cc == 1 && j == 0 && r0 + BLK_WROWS < nr) /* the GEMV */
                    for (size_t o = 0; o < tsz; o += 64)
                        _mm_prefetch((const char *)blk + BLK_WROWS * ws + o, _MM_HINT_T0);
                if (gsc) q[i] = gsc_codes(t, blk, j);
                else blk_decode(t, c, blk, j, &q[i], &sg[i], d, m, &krow[i]);
            }
            if (cc == 1) {
                const __m256i p = blk_rowdot(t, q[i], sg[i], a1);
                if (i & 1) pp[i / 2] = _mm256_hadd_epi32(pe, p);
                else pe = p;
            }
            d0[i] = d[0], d1[i] = d[1], m0[i] = m[0], m1[i] = m[1];
        }
        /* the 8 rows' scalars into lanes in registers: a vector load of 8 scalar stores
         * would wait for them to retire (no store forwarding) */
        __m256 vd0, vd1, vm0, vm1;
        if (gsc) {
            gsc_scales(t, blk0, &g, j, kd, kdmin, &vd0, &vd1, &vm0, &vm1);
        } else if (blk_iq(t)) {
            __m256i k0, k1;
            if (iq_k_inline(t))
                k0 = k1 = _mm256_setr_epi32((int)krow[0], (int)krow[1], (int)krow[2], (int)krow[3], (int)krow[4],
                                            (int)krow[5], (int)krow[6], (int)krow[7]);
            else iq_k_lanes(t, blk0, &g, j, &k0, &k1);
            vd0 = iq_scale(t, kd, k0);
            vd1 = t == DTYPE_IQ2_XS || t == DTYPE_IQ2_S || t == DTYPE_IQ1_M /* a scale per half */ ? iq_scale(t, kd, k1) : vd0;
            vm0 = vm1 = _mm256_set1_ps(IQ_NO_OFFSET); /* unused: see the f32 step */
        } else {
            vd0 = blk_lanes(d0), vd1 = blk_lanes(d1);
            vm0 = blk_lanes(m0), vm1 = blk_lanes(m1);
        }
        NM_UNROLL for (int k = 0; k < cc; k++) {
            const block_q8x *xa = x[k] + s;
            const __m256i a = _mm256_loadu_si256((const __m256i *)xa->qs);
            __m256i hp[BLK_WROWS / 2]; /* the row pairs' vphaddd */
            NM_UNROLL for (int i = 0; i < BLK_WROWS / 2; i++)
                hp[i] = cc == 1 ? pp[i]
                               : _mm256_hadd_epi32(blk_rowdot(t, q[2 * i], sg[2 * i], a),
                                                   blk_rowdot(t, q[2 * i + 1], sg[2 * i + 1], a));
            /* the activations' half sums: for the code offset and the offsets m (the IQ grid
             * types have no m, and only IQ1_S and IQ1_M a code offset) */
            __m256i sa = _mm256_setzero_si256();
            if (!blk_iq(t) || uoff > 0) {
                sa = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, a), ones16);
                sa = _mm256_hadd_epi32(sa, sa);
                sa = _mm256_hadd_epi32(sa, sa); /* 128-bit lane 0: half 0's sum, lane 1: half 1's */
            }
            /* dwords of a row's products: 0..3 half 0, 4..7 half 1 -> x0: rows 0..3 (half 0 | half 1), x1: rows 4..7 */
            const __m256i x0 = _mm256_hadd_epi32(hp[0], hp[1]), x1 = _mm256_hadd_epi32(hp[2], hp[3]);
            __m256i si0 = _mm256_permute2x128_si256(x0, x1, 0x20), si1 = _mm256_permute2x128_si256(x0, x1, 0x31);
            if (uoff > 0) { /* sum of (u - uoff) a = sum of u a - uoff sum of a */
                const __m256i o = _mm256_mullo_epi32(sa, _mm256_set1_epi32(uoff));
                si0 = _mm256_sub_epi32(si0, _mm256_permute2x128_si256(o, o, 0x00));
                si1 = _mm256_sub_epi32(si1, _mm256_permute2x128_si256(o, o, 0x11));
            }
            const __m256 sq0 = _mm256_cvtepi32_ps(si0), sq1 = _mm256_cvtepi32_ps(si1);
            __m256 h = _mm256_add_ps(_mm256_mul_ps(vd0, sq0), _mm256_mul_ps(vd1, sq1));
            /* + (m0 sa0 + m1 sa1). With m0 = m1 = -0.0 (the IQ grid types) that term is a
             * zero, and adding it cannot change the row's sum (which starts at +0.0 and so
             * is never -0.0): it is left out, the same bits. */
            if (!blk_iq(t)) {
                const __m256 sa0 = _mm256_set1_ps((float)_mm_cvtsi128_si32(_mm256_castsi256_si128(sa)));
                const __m256 sa1 = _mm256_set1_ps((float)_mm_cvtsi128_si32(_mm256_extracti128_si256(sa, 1)));
                h = _mm256_add_ps(h, _mm256_add_ps(_mm256_mul_ps(vm0, sa0), _mm256_mul_ps(vm1, sa1)));
            }
            sum[k] = _mm256_add_ps(sum[k], _mm256_mul_ps(_mm256_set1_ps(xa->d), h));
        }
    }
    NM_UNROLL for (int k = 0; k < cc; k++) {
        float o[BLK_WROWS];
        _mm256_storeu_ps(o, sum[k]);
        for (int i = 0; i < rr; i++) y[(int64_t)(c0 + k) * ldy + r0 + i] = o[i];
    }
}

/* gemm slot semantics (cpu.h) for type t (codec c): y[ci * ldy + r] = vec_dot(row r, activation
 * row ci). A tile is BLK_WROWS weight rows (one per f32 lane) x up to BLK_ROWS activation rows.
 * Per sub-block and activation row: the rows' integer sums, exact (|code| x act with the code's
 * sign moved onto act: codes -128..127, q8x codes -127..127, so a pair of products fits int16;
 * or, for blk_uoff(t) >= 0, the unsigned codes x act less the offset times the act's sum; or,
 * for blk_msign(t), the magnitudes x act with the stored sign moved onto act),
 * reduced per 16-value half across the 8 rows by two rounds of vphaddd; then block_vec_dot_ref's
 * f32 step, d_a ((d0 sq0 + d1 sq1) + (m0 sa0 + m1 sa1)) added to the row's sum, in the lanes. */
NM_INLINE void blk_tiles(const enum dtype t, const struct block_codec *c, const int cc, int64_t n, const void *w,
                         size_t ws, int nr, const void *act, size_t as, int c0, float *y, int64_t ldy) {
    /* sub-blocks per block: a constant, no division per sub-block */
    NM_ASSERT((t == DTYPE_Q5_0 || t == DTYPE_Q5_1 || t == DTYPE_IQ4_NL ? 1 : 8) == (int)c->info.blck_size / 32);
    NM_ASSERT(!(blk_gathered(t) || blk_iq(t)) || ws <= (size_t)INT32_MAX / 16); /* the gathers' int32 byte offsets */
    const block_q8x *x[BLK_ROWS];
    NM_UNROLL for (int k = 0; k < cc; k++) x[k] = (const block_q8x *)((const uint8_t *)act + (size_t)(c0 + k) * as);
    for (int r0 = 0; r0 < nr; r0 += BLK_WROWS) { /* full tiles compiled apart, without the row checks */
        const uint8_t *row0 = (const uint8_t *)w + (size_t)r0 * ws;
        if (nr - r0 >= BLK_WROWS) blk_tile(t, c, cc, BLK_WROWS, n, row0, ws, nr, r0, x, c0, y, ldy);
        else blk_tile(t, c, cc, nr - r0, n, row0, ws, nr, r0, x, c0, y, ldy);
    }
}

/* All activation rows, BLK_ROWS at a time, each tile compiled for its row count. */
NM_INLINE void blk_gemm(const enum dtype t, const struct block_codec *c, int64_t n, const void *w, size_t ws, int nr,
                        const void *act, size_t as, int nc, float *y, int64_t ldy) {
    for (int c0 = 0; c0 < nc; c0 += BLK_ROWS) {
        switch (NM_MIN(BLK_ROWS, nc - c0)) {
        case 1: blk_tiles(t, c, 1, n, w, ws, nr, act, as, c0, y, ldy); break;
        case 2: blk_tiles(t, c, 2, n, w, ws, nr, act, as, c0, y, ldy); break;
        case 3: blk_tiles(t, c, 3, n, w, ws, nr, act, as, c0, y, ldy); break;
        default: blk_tiles(t, c, 4, n, w, ws, nr, act, as, c0, y, ldy); break;
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
    for (uint32_t i = 0; i < 2048; i++) {
        uint64_t u = 0;
        for (int c = 0; c < 8; c++) u |= (uint64_t)(uint8_t)(8 * (int)(int8_t)iq_grid_byte(iq_grid_iq1s[i], c) + 9) << (8 * c);
        g_iq1_u9[i] = u;
    }
    for (uint32_t i = 0; i < 128; i++) {
        const uint32_t sb = iq_sign_byte(i);
        uint64_t m = 0;
        for (int c = 0; c < 8; c++)
            m |= (uint64_t)(sb >> c & 1 ? 0xFF : 0x01) << (8 * c);
        g_signs7[i] = m;
    }
#define BLK_FILL(T, t_)                                                                                     \
    t->gemm[DTYPE_##T] = gemm_##t_;                                                                          \
    t->vec_dot[DTYPE_##T] = vec_dot_##t_;
    BLOCK_TYPES(BLK_FILL)
#undef BLK_FILL
}
