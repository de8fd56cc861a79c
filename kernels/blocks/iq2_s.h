/* IQ2_S: 256 values in 82 bytes (2.56 bits per value): f16 d; qs[64]: bytes 0..31 the low 8 bits
 * of the 32 grid indices (group l of sub-block j at 4j + l), bytes 32..63 the groups' sign bytes
 * (all 8 signs stored, bit c set = value c negative); qh[8]: sub-block j's byte holds the top 2
 * bits of group l's 10-bit index (1024-entry iq_grid_iq2s) in bits 2l, 2l + 1; scales[8] as
 * IQ2_XS (low nibble values 0..15, high nibble 16..31).
 * value = db * g * sign, db = d * (0.5 + s) * 0.25 (in f32, in that order), g in {8, 25, 43}.
 * Source: ggml-common.h block_iq2_s, ggml-quants.c dequantize_row_iq2_s (FORMATS.md). */
#ifndef NM_BLOCK_IQ2_S_H
#define NM_BLOCK_IQ2_S_H

#include "iq_common.h"

#define QK_IQ2_S 256
typedef struct {
    uint16_t d;
    uint8_t qs[QK_IQ2_S / 4]; /* indices' low bytes, then sign bytes */
    uint8_t qh[QK_IQ2_S / 32];
    uint8_t scales[QK_IQ2_S / 32];
} block_iq2_s; /* 82 B */

BLK_HD void iq2_s_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq2_s *b = (const block_iq2_s *)blk;
    const float d = blk_fp16(b->d);
    for (int l = 0; l < 4; l++) {
        const uint32_t idx = (uint32_t)b->qs[4 * j + l] | ((uint32_t)(b->qh[j] >> (2 * l)) & 3u) << 8;
        const uint64_t e = iq_grid_iq2s[idx];
        const uint32_t signs = b->qs[QK_IQ2_S / 8 + 4 * j + l];
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq_signed(iq_grid_byte(e, c), signs, c);
    }
    out->d[0] = d * (0.5f + (float)(b->scales[j] & 0xF)) * 0.25f;
    out->d[1] = d * (0.5f + (float)(b->scales[j] >> 4)) * 0.25f;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
