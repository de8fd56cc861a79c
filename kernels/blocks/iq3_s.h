/* IQ3_S: 256 values in 110 bytes (3.44 bits per value): f16 d; qs[64]: the low 8 bits of the 64
 * grid indices, one per group of 4 values (sub-block j at 8j + k, k = 0..7); qh[8]: bit k of
 * sub-block j's byte is bit 8 of index k (512-entry iq_grid_iq3s); signs[32]: one byte per
 * 8 values (sub-block j, group l at 4j + l; all 8 signs stored, bit c set = value c negative;
 * values 0..3 of the group from index 2l, 4..7 from 2l + 1); scales[4]: a 4-bit s per sub-block
 * (j even: low nibble of byte j/2, j odd: high nibble).
 * value = db * g * sign, db = d * (1 + 2s) (in f32), g in {1, 3, .., 15}.
 * Source: ggml-common.h block_iq3_s, ggml-quants.c dequantize_row_iq3_s (FORMATS.md). */
#ifndef NM_BLOCK_IQ3_S_H
#define NM_BLOCK_IQ3_S_H

#include "iq_common.h"

#define QK_IQ3_S 256
typedef struct {
    uint16_t d;
    uint8_t qs[QK_IQ3_S / 4];
    uint8_t qh[QK_IQ3_S / 32];
    uint8_t signs[QK_IQ3_S / 8];
    uint8_t scales[QK_IQ3_S / 64];
} block_iq3_s; /* 110 B */

BLK_HD void iq3_s_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq3_s *b = (const block_iq3_s *)blk;
    const uint32_t s = (uint32_t)(b->scales[j / 2] >> (4 * (j % 2))) & 0xFu;
    const float db = blk_fp16(b->d) * (float)(1u + 2u * s);
    for (int l = 0; l < 4; l++) {
        uint64_t e = 0;
        for (int h = 0; h < 2; h++) {
            const int k = 2 * l + h;
            const uint32_t idx = (uint32_t)b->qs[8 * j + k] | ((uint32_t)(b->qh[j] >> k) & 1u) << 8;
            e |= (uint64_t)iq_grid_iq3s[idx] << (32 * h);
        }
        const uint32_t signs = b->signs[4 * j + l];
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq_signed(iq_grid_byte(e, c), signs, c);
    }
    out->d[0] = out->d[1] = db;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
