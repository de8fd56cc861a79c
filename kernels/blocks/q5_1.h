/* Q5_1: 32 values in 24 bytes: f16 d, f16 m, 32 high bits qh (little-endian u32), 16 bytes of
 * low nibbles (value i < 16 in the low nibble of qs[i], value i + 16 in its high nibble).
 * value[i] = q[i] * d + m, q the unsigned 5-bit code (low nibble | bit i of qh << 4).
 * Source: ggml-common.h block_q5_1, dequantize_row_q5_1 (kernels/blocks/FORMATS.md). */
#ifndef NM_BLOCK_Q5_1_H
#define NM_BLOCK_Q5_1_H

#include "block.h"

#define QK5_1 32
typedef struct {
    uint16_t d; /* scale */
    uint16_t m; /* offset (the block's minimum) */
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1; /* 24 B */

/* The codes stay unsigned (0..31) and m is ggml's own f32 offset, so d * q + m is ggml's
 * x0 * d + m operation for operation. */
BLK_HD void q5_1_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_q5_1 *b = (const block_q5_1 *)blk;
    const uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 |
                        (uint32_t)b->qh[3] << 24;
    (void)j;
    for (int l = 0; l < 16; l++) {
        out->q[l] = (int8_t)((b->qs[l] & 0xF) | ((qh >> l) & 1) << 4);
        out->q[l + 16] = (int8_t)((b->qs[l] >> 4) | ((qh >> (l + 16)) & 1) << 4);
    }
    out->d[0] = out->d[1] = blk_fp16(b->d);
    out->m[0] = out->m[1] = blk_fp16(b->m);
}

#endif
