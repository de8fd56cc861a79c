/* IQ3_XXS: 256 values in 98 bytes (3.06 bits per value): f16 d; qs[96]: bytes 0..63 the grid
 * indices, one per group of 4 values (sub-block j at 8j .. 8j + 7, into the 256-entry
 * iq_grid_iq3xxs); bytes 64..95 one little-endian u32 per sub-block (at 64 + 4j): 4 x 7 sign bits
 * (8-value group l in bits 7l .. 7l + 6, the 8th implied: even parity) and a 4-bit scale s in
 * bits 28..31. Group l of 8 values = grid entries 2l (values 0..3) and 2l + 1 (values 4..7).
 * value = db * g * sign, db = d * (0.5 + s) * 0.5 (in f32, in that order), g in {4, 12, .., 52, 62}.
 * Source: ggml-common.h block_iq3_xxs, ggml-quants.c dequantize_row_iq3_xxs (FORMATS.md). */
#ifndef NM_BLOCK_IQ3_XXS_H
#define NM_BLOCK_IQ3_XXS_H

#include "iq_common.h"

#define QK_IQ3_XXS 256
typedef struct {
    uint16_t d;
    uint8_t qs[3 * QK_IQ3_XXS / 8]; /* indices, then sign and scale words */
} block_iq3_xxs; /* 98 B */

BLK_HD void iq3_xxs_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
    const uint8_t *idx = b->qs + 8 * j, *p = b->qs + QK_IQ3_XXS / 4 + 4 * j;
    const uint32_t w = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    const float db = blk_fp16(b->d) * (0.5f + (float)(w >> 28)) * 0.5f;
    for (int l = 0; l < 4; l++) {
        const uint32_t signs = iq_sign_byte(w >> (7 * l));
        const uint64_t e = (uint64_t)iq_grid_iq3xxs[idx[2 * l]] | (uint64_t)iq_grid_iq3xxs[idx[2 * l + 1]] << 32;
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq_signed(iq_grid_byte(e, c), signs, c);
    }
    out->d[0] = out->d[1] = db;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
