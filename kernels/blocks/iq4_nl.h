/* IQ4_NL: 32 values in 18 bytes: f16 d, then 16 bytes of 4-bit indices (value i < 16 in the low
 * nibble of qs[i], value i + 16 in its high nibble). An index selects one of 16 fixed non-uniform
 * integers (IQ4NL_VALUES, -127..113); value = d * IQ4NL_VALUES[index].
 * Source: ggml-common.h block_iq4_nl and kvalues_iq4nl, dequantize_row_iq4_nl
 * (kernels/blocks/FORMATS.md). IQ4_XS (iq4_xs.h) uses the same 16 values. */
#ifndef NM_BLOCK_IQ4_NL_H
#define NM_BLOCK_IQ4_NL_H

#include "block.h"

/* kvalues_iq4nl of ggml-common.h (format data): the value of each 4-bit index, ascending. */
#define IQ4NL_VALUES {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

#define QK4_NL 32
typedef struct {
    uint16_t d;             /* f16 scale */
    uint8_t qs[QK4_NL / 2]; /* 4-bit indices into IQ4NL_VALUES */
} block_iq4_nl; /* 18 B */

/* Codes of 32 values from 16 index bytes (low nibbles first). The table is a local array, not a
 * BLK_TABLE: nvcc cannot read a __device__ table from the host pass of a __host__ __device__
 * function (warning 20091, an error under NM_WERROR), and 16 bytes cost nothing to build. */
BLK_HD void iq4nl_codes32(const uint8_t *qs, int8_t *q) {
    const int8_t values[16] = IQ4NL_VALUES;
    for (int l = 0; l < 16; l++) {
        q[l] = values[qs[l] & 0xF];
        q[l + 16] = values[qs[l] >> 4];
    }
}

/* ggml computes d * value in f32: the decoded scale is d, the offset -0.0f (adds nothing to any
 * value, so a zero product keeps its sign). */
BLK_HD void iq4_nl_decode32(const void *blk, int j, struct block_sub32 *out) {
    const block_iq4_nl *b = (const block_iq4_nl *)blk;
    (void)j;
    iq4nl_codes32(b->qs, out->q);
    out->d[0] = out->d[1] = blk_fp16(b->d);
    out->m[0] = out->m[1] = -0.0f;
}

#ifndef __CUDACC__
/* The index (0..15) whose IQ4NL_VALUES entry is nearest to t, the lower one on a tie; for the
 * quantizers of IQ4_NL and IQ4_XS (iq4_nl.c). */
int iq4nl_nearest(float t);
#endif

#endif
