/* Q3_K: 256 values in 110 bytes: hmask[32], qs[64] (2-bit low codes), scales[12] (16 packed
 * 6-bit scales), then f16 d. Sub-block j (values 32j .. 32j + 31):
 *   - low bits: bits 2(j % 4) .. +1 of qs[32(j / 4) + l], l = 0..31 (as Q2_K);
 *   - high bit: bit j of hmask[l]; the code is low - 4 when that bit is CLEAR, low when set,
 *     so codes run -4..3;
 *   - scales 2j (values 0..15) and 2j + 1 (16..31); scale k (0..15) is the 6-bit number
 *     (low nibble: scales[k % 8] >> 4(k / 8)) | (2 high bits: scales[8 + k % 4] >> 2(k / 4)) << 4,
 *     used as k6 - 32 (-32..31).
 * value = (d * (k6 - 32)) * code.
 * Source: ggml-common.h block_q3_K, dequantize_row_q3_K (kernels/blocks/FORMATS.md). */
#ifndef NM_BLOCK_Q3_K_H
#define NM_BLOCK_Q3_K_H

#include "block.h"

#ifndef QK_K
#define QK_K 256
#endif

typedef struct {
    uint8_t hmask[QK_K / 8]; /* high bit of each code: bit j of byte l for value 32j + l */
    uint8_t qs[QK_K / 4];    /* low 2 bits of each code, 4 per byte */
    uint8_t scales[12];      /* 16 6-bit scales: low nibbles in bytes 0..7, high pairs in 8..11 */
    uint16_t d;              /* f16 scale of the scales */
} block_q3_K; /* 110 B */

/* The 6-bit scale k of a Q3_K block, 0..63 (the format stores it biased by 32). */
BLK_HD int q3_k_scale6(const uint8_t *scales, int k) {
    const int lo = (scales[k % 8] >> (4 * (k / 8))) & 0xF;
    const int hi = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
    return lo | hi << 4;
}

/* ggml forms dl = d * (k6 - 32) in f32, then dl * code: the decoded scale is dl. The offset is
 * -0.0f, which adds nothing to any value (a zero product keeps its sign, as in ggml). */
BLK_HD void q3_k_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_q3_K *b = (const block_q3_K *)blk;
    const float d = blk_fp16(b->d);
    const uint8_t *qs = b->qs + 32 * (j / 4);
    const int shift = 2 * (j % 4);
    for (int l = 0; l < 32; l++) {
        const int low = (qs[l] >> shift) & 3;
        out->q[l] = (int8_t)(((b->hmask[l] >> j) & 1) ? low : low - 4);
    }
    for (int h = 0; h < 2; h++) {
        out->d[h] = d * (float)(q3_k_scale6(b->scales, 2 * j + h) - 32);
        out->m[h] = -0.0f;
    }
}

#endif
