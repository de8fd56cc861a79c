/* IQ1_M: 256 values in 56 bytes (1.75 bits per value), no separate f16 field: qs[32]: the low
 * 8 bits of the 32 grid indices (sub-block j, group l of 8 values at 4j + l); qh[16]: byte 2j + h
 * covers groups 2h (low nibble) and 2h + 1 (high nibble): nibble bits 0..2 are the top 3 bits of
 * the 11-bit index (2048-entry iq_grid_iq1s, values -1/0/+1), bit 3 the sign of the group's shift
 * delta (set: -1/8); scales[8] read as 4 little-endian u16 sc[0..3]: bits 0..11 of sc[k] are four
 * 3-bit scales (sub-block 2k values 0..15, 2k values 16..31, 2k + 1 values 0..15, 2k + 1 values
 * 16..31), and the top nibbles of sc[0], sc[1], sc[2], sc[3] are bits 0-3, 4-7, 8-11, 12-15 of the
 * f16 super-block scale d.
 * value = dl * (g + delta), dl = d * (2s + 1) (in f32), per 16 values; decoded as codes
 * 8 (g + delta) with scale dl / 8, exact as in IQ1_S (iq1_s.h).
 * Source: ggml-common.h block_iq1_m, iq1m_scale_t, IQ1M_DELTA, ggml-quants.c
 * dequantize_row_iq1_m (FORMATS.md). */
#ifndef NM_BLOCK_IQ1_M_H
#define NM_BLOCK_IQ1_M_H

#include "iq1_s.h"

#define QK_IQ1_M 256
typedef struct {
    uint8_t qs[QK_IQ1_M / 8];
    uint8_t qh[QK_IQ1_M / 16];
    uint8_t scales[QK_IQ1_M / 32]; /* 4 u16: 3-bit scales + the f16 d's nibbles */
} block_iq1_m; /* 56 B */

/* The little-endian u16 k (0..3) of the scales. */
BLK_HD uint32_t iq1_m_sc(const block_iq1_m *b, int k) {
    return (uint32_t)b->scales[2 * k] | (uint32_t)b->scales[2 * k + 1] << 8;
}

/* The f16 super-block scale, assembled from the top nibbles of the 4 u16. */
BLK_HD uint16_t iq1_m_d_bits(const block_iq1_m *b) {
    return (uint16_t)(iq1_m_sc(b, 0) >> 12 | (iq1_m_sc(b, 1) >> 8 & 0x00F0u) |
                      (iq1_m_sc(b, 2) >> 4 & 0x0F00u) | (iq1_m_sc(b, 3) & 0xF000u));
}

BLK_HD void iq1_m_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq1_m *b = (const block_iq1_m *)blk;
    const float d = blk_fp16(iq1_m_d_bits(b));
    const uint32_t sc = iq1_m_sc(b, j / 2) >> (6 * (j % 2));
    for (int l = 0; l < 4; l++) {
        const uint32_t nib = (uint32_t)(b->qh[2 * j + l / 2] >> (4 * (l % 2))) & 0xFu;
        const uint64_t e = iq_grid_iq1s[(uint32_t)b->qs[4 * j + l] | (nib & 7u) << 8];
        for (int c = 0; c < 8; c++) out->q[8 * l + c] = iq1_code(iq_grid_byte(e, c), (int)(nib >> 3));
    }
    for (int h = 0; h < 2; h++) out->d[h] = d * (float)(2u * ((sc >> (3 * h)) & 7u) + 1u) * 0.125f;
    out->m[0] = out->m[1] = IQ_NO_OFFSET;
}

#endif
