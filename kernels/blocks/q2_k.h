/* Q2_K: 256 values in 84 bytes: 16 scale bytes, 64 bytes of 2-bit codes, then f16 d and f16
 * dmin (the super-block scales come last). Scale byte k covers values 16k .. 16k + 15: its low
 * nibble scales d, its high nibble scales dmin. Codes: each 128-value half h reads the 32 bytes
 * qs[32h .. 32h + 31] four times, at bit shifts 0, 2, 4, 6, so sub-block j (values 32j ..) holds
 * bits 2(j % 4) .. +1 of qs[32(j / 4) + l], l = 0..31.
 * value = (d * sc) * q - (dmin * mn), q in 0..3, sc and mn the two nibbles.
 * Source: ggml-common.h block_q2_K, dequantize_row_q2_K (kernels/blocks/FORMATS.md). */
#ifndef NM_BLOCK_Q2_K_H
#define NM_BLOCK_Q2_K_H

#include "block.h"

#ifndef QK_K
#define QK_K 256
#endif

typedef struct {
    uint8_t scales[QK_K / 16]; /* low nibble: scale of 16 values, high nibble: their min */
    uint8_t qs[QK_K / 4];      /* 2-bit codes, 4 per byte (see above) */
    uint16_t d;                /* f16 scale of the scales */
    uint16_t dmin;             /* f16 scale of the mins */
} block_q2_K; /* 84 B */

/* ggml forms dl = d * sc and ml = dmin * mn in f32 and then dl * q - ml; the decoded scale is
 * dl and the offset -ml (negation is exact, and x - y is x + (-y) in IEEE arithmetic). */
BLK_HD void q2_k_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_q2_K *b = (const block_q2_K *)blk;
    const float d = blk_fp16(b->d), dmin = blk_fp16(b->dmin);
    const uint8_t *qs = b->qs + 32 * (j / 4);
    const int shift = 2 * (j % 4);
    for (int l = 0; l < 32; l++) out->q[l] = (int8_t)((qs[l] >> shift) & 3);
    for (int h = 0; h < 2; h++) {
        const uint8_t sc = b->scales[2 * j + h];
        out->d[h] = d * (float)(sc & 0xF);
        out->m[h] = -(dmin * (float)(sc >> 4));
    }
}

#endif
