/* IQ4_NL: 32 values in 18 bytes: f16 d, then 16 bytes of 4-bit indices (value i < 16 in the low
 * nibble of qs[i], value i + 16 in its high nibble). An index selects one of 16 fixed non-uniform
 * integers (iq4nl_value, -127..113); value = d * iq4nl_value(index).
 * Source: ggml-common.h block_iq4_nl and kvalues_iq4nl, dequantize_row_iq4_nl
 * (kernels/blocks/FORMATS.md). IQ4_XS (iq4_xs.h) uses the same 16 values. */
#ifndef NM_BLOCK_IQ4_NL_H
#define NM_BLOCK_IQ4_NL_H

#include "block.h"

#define QK4_NL 32
typedef struct {
    uint16_t d;             /* f16 scale */
    uint8_t qs[QK4_NL / 2]; /* 4-bit indices of iq4nl_value */
} block_iq4_nl; /* 18 B */

/* kvalues_iq4nl of ggml-common.h (format data), the value of each 4-bit index, ascending:
 * -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113. Stored as int8
 * bytes eight to a word (index i in byte i % 8 of word i / 8), so that a value is a shift and a
 * select of two constants with no table in memory: a table indexed per value is a local array on
 * the GPU, built on every call (nvcc cannot read one __device__ table from the host pass of a
 * __host__ __device__ function). test_blocks decodes every index against the list above, written
 * out again there. */
#define IQ4NL_LO 0xF6EADDCFBFAD9881ull
#define IQ4NL_HI 0x7159453526190D01ull
BLK_HD int iq4nl_value(unsigned idx) {
    const uint64_t w = idx & 8 ? IQ4NL_HI : IQ4NL_LO;
    return (int8_t)(uint8_t)(w >> (8 * (idx & 7)));
}

/* Codes of 32 values from 16 index bytes (low nibbles first). */
BLK_HD void iq4nl_codes32(const uint8_t *qs, int8_t *q) {
    for (int l = 0; l < 16; l++) {
        q[l] = (int8_t)iq4nl_value(qs[l] & 0xF);
        q[l + 16] = (int8_t)iq4nl_value(qs[l] >> 4);
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
/* The index (0..15) whose iq4nl_value is nearest to t, the lower one on a tie; for the
 * quantizers of IQ4_NL and IQ4_XS (iq4_nl.c). */
int iq4nl_nearest(float t);
#endif

#endif
