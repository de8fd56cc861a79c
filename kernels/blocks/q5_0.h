/* Q5_0: 32 values in 22 bytes: f16 d, 32 high bits qh (little-endian u32), 16 bytes of low
 * nibbles (value i < 16 in the low nibble of qs[i], value i + 16 in its high nibble).
 * value[i] = d * (q[i] - 16), q the 5-bit code (low nibble | bit i of qh << 4).
 * Source: ggml-common.h block_q5_0, dequantize_row_q5_0 (kernels/blocks/FORMATS.md). */
#ifndef NM_BLOCK_Q5_0_H
#define NM_BLOCK_Q5_0_H

#include "block.h"

#define QK5_0 32
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0; /* 22 B */

BLK_HD void q5_0_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_q5_0 *b = (const block_q5_0 *)blk;
    const uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 |
                        (uint32_t)b->qh[3] << 24;
    (void)j;
    for (int l = 0; l < 16; l++) {
        out->q[l] = (int8_t)(((b->qs[l] & 0xF) | ((qh >> l) & 1) << 4) - 16);
        out->q[l + 16] = (int8_t)(((b->qs[l] >> 4) | ((qh >> (l + 16)) & 1) << 4) - 16);
    }
    out->d[0] = out->d[1] = blk_fp16(b->d);
    /* -0.0f, not 0.0f: ggml's (q - 16) * d is -0.0 for code 16 under a negative d, and only
     * -0.0 adds nothing to every value (-0 + +0 would be +0). */
    out->m[0] = out->m[1] = -0.0f;
}

#endif
