/* IQ2_XXS: 256 values in 66 bytes (2.06 bits per value): f16 d, then per 32-value sub-block j
 * 8 bytes: 4 grid indices (bytes 0..3, one per group of 8 values, into the 256-entry
 * iq_grid_iq2xxs) and a little-endian u32 (bytes 4..7) holding 4 x 7 sign bits (group l in bits
 * 7l .. 7l + 6, the 8th sign implied: even parity) and a 4-bit scale s in bits 28..31.
 * value = db * g * sign, db = d * (0.5 + s) * 0.25 (in f32, in that order), g in {8, 25, 43}.
 * Source: ggml-common.h block_iq2_xxs, ggml-quants.c dequantize_row_iq2_xxs (FORMATS.md). */
#ifndef NM_BLOCK_IQ2_XXS_H
#define NM_BLOCK_IQ2_XXS_H

#include "iq_common.h"

#define QK_IQ2_XXS 256
typedef struct {
    uint16_t d;
    uint16_t qs[QK_IQ2_XXS / 8]; /* 8 bytes per sub-block, read as bytes */
} block_iq2_xxs; /* 66 B */

BLK_HD void iq2_xxs_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
    const uint8_t *p = (const uint8_t *)b->qs + 8 * j;
    const uint32_t w = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    const float db = blk_fp16(b->d) * (0.5f + (float)(w >> 28)) * 0.25f;
    for (int l = 0; l < 4; l++) {
        const uint64_t e = iq_grid_iq2xxs[p[l]];
        const uint32_t signs = iq_sign_byte(w >> (7 * l));
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq_signed(iq_grid_byte(e, c), signs, c);
    }
    out->d[0] = out->d[1] = db;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
