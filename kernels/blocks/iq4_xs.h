/* IQ4_XS: 256 values in 136 bytes: f16 d, u16 scales_h, scales_l[4], qs[128]. Eight sub-blocks
 * of 32 values, each with a 6-bit scale ls_j = (low nibble of scales_l[j / 2], the high nibble
 * for odd j) | (bits 2j, 2j + 1 of scales_h) << 4, used as ls_j - 32 (-32..31). Sub-block j's
 * 16 index bytes are qs[16j .. 16j + 15], laid out as one IQ4_NL block's (low nibbles give its
 * first 16 values). value = (d * (ls_j - 32)) * iq4nl_value(index).
 * Source: ggml-common.h block_iq4_xs, dequantize_row_iq4_xs (kernels/blocks/FORMATS.md). */
#ifndef NM_BLOCK_IQ4_XS_H
#define NM_BLOCK_IQ4_XS_H

#include "block.h"
#include "iq4_nl.h"

#ifndef QK_K
#define QK_K 256
#endif

typedef struct {
    uint16_t d;                  /* f16 scale of the sub-block scales */
    uint16_t scales_h;           /* high 2 bits of sub-block j's scale at bits 2j, 2j + 1 */
    uint8_t scales_l[QK_K / 64]; /* low 4 bits: sub-blocks 2i (low nibble) and 2i + 1 (high) */
    uint8_t qs[QK_K / 2];        /* 4-bit indices of iq4nl_value, 16 bytes per sub-block */
} block_iq4_xs; /* 136 B */

/* The 6-bit scale of sub-block j, 0..63 (the format stores it biased by 32). */
BLK_HD int iq4_xs_scale6(const block_iq4_xs *b, int j) {
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | ((b->scales_h >> (2 * j)) & 3) << 4;
}

/* ggml forms dl = d * (ls - 32) in f32, then dl * value: the decoded scale is dl, the offset
 * -0.0f (adds nothing). */
BLK_HD void iq4_xs_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq4_xs *b = (const block_iq4_xs *)blk;
    iq4nl_codes32(b->qs + 16 * j, out->q);
    out->d[0] = out->d[1] = blk_fp16(b->d) * (float)(iq4_xs_scale6(b, j) - 32);
    out->m[0] = out->m[1] = -0.0f;
}

#endif
