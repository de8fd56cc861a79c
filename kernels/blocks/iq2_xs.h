/* IQ2_XS: 256 values in 74 bytes (2.31 bits per value): f16 d, 32 little-endian u16 (one per
 * group of 8 values: bits 0..8 index the 512-entry iq_grid_iq2xs, bits 9..15 are 7 sign bits,
 * the 8th implied: even parity), then 8 scale bytes (sub-block j: low nibble for values 0..15,
 * high nibble for 16..31).
 * value = db * g * sign, db = d * (0.5 + s) * 0.25 (in f32, in that order), g in {8, 25, 43}.
 * Source: ggml-common.h block_iq2_xs, ggml-quants.c dequantize_row_iq2_xs (FORMATS.md). */
#ifndef NM_BLOCK_IQ2_XS_H
#define NM_BLOCK_IQ2_XS_H

#include "iq_common.h"

#define QK_IQ2_XS 256
typedef struct {
    uint16_t d;
    uint16_t qs[QK_IQ2_XS / 8];
    uint8_t scales[QK_IQ2_XS / 32];
} block_iq2_xs; /* 74 B */

BLK_HD void iq2_xs_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq2_xs *b = (const block_iq2_xs *)blk;
    const float d = blk_fp16(b->d);
    for (int l = 0; l < 4; l++) {
        const uint32_t v = b->qs[4 * j + l];
        const uint64_t e = iq_grid_iq2xs[v & 511u];
        const uint32_t signs = iq_sign_byte(v >> 9);
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq_signed(iq_grid_byte(e, c), signs, c);
    }
    out->d[0] = d * (0.5f + (float)(b->scales[j] & 0xF)) * 0.25f;
    out->d[1] = d * (0.5f + (float)(b->scales[j] >> 4)) * 0.25f;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
