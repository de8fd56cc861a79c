/* IQ1_S: 256 values in 50 bytes (1.56 bits per value): f16 d; qs[32]: the low 8 bits of the 32
 * grid indices, one per group of 8 values (sub-block j, group l at 4j + l); qh[8]: one
 * little-endian u16 per sub-block: bits 3l .. 3l + 2 the top 3 bits of group l's 11-bit index
 * (2048-entry iq_grid_iq1s, values -1/0/+1), bits 12..14 a 3-bit scale s, bit 15 the sign of
 * the sub-block's shift delta (set: -1/8, clear: +1/8).
 * value = dl * (g + delta), dl = d * (2s + 1) (in f32; g + delta is exact).
 * Decoded as codes 8 (g + delta) in {-9, -7, -1, 1, 7, 9} with scale dl / 8: dividing by 8 and
 * multiplying by 8 (g + delta) are exact, so the one rounding of dl/8 * code is ggml's.
 * Source: ggml-common.h block_iq1_s, IQ1S_DELTA, ggml-quants.c dequantize_row_iq1_s (FORMATS.md). */
#ifndef NM_BLOCK_IQ1_S_H
#define NM_BLOCK_IQ1_S_H

#include "iq_common.h"

#define QK_IQ1_S 256
typedef struct {
    uint16_t d;
    uint8_t qs[QK_IQ1_S / 8];
    uint16_t qh[QK_IQ1_S / 32];
} block_iq1_s; /* 50 B */

/* Code of grid value g (int8 byte -1/0/+1) shifted by delta = sign/8: 8g + sign. */
BLK_HD int8_t iq1_code(uint8_t g, int delta_neg) {
    return (int8_t)(8 * (int)(int8_t)g + (delta_neg ? -1 : 1));
}

BLK_HD void iq1_s_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq1_s *b = (const block_iq1_s *)blk;
    const uint32_t w = b->qh[j];
    const float dl = blk_fp16(b->d) * (float)(2u * ((w >> 12) & 7u) + 1u);
    const int neg = (int)(w >> 15);
    for (int l = 0; l < 4; l++) {
        const uint64_t e = iq_grid_iq1s[(uint32_t)b->qs[4 * j + l] | ((w >> (3 * l)) & 7u) << 8];
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq1_code(iq_grid_byte(e, c), neg);
    }
    out->d[0] = out->d[1] = dl * 0.125f;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
