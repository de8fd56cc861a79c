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

#ifdef __CUDA_ARCH__
/* The device's form of iq4nl_value for 4 indices at once, nibble j of sel (bits 4j..4j+3) giving
 * byte j of the result: two byte permutes pick each index's byte from the low and the high
 * constant (prmt selects one of the 8 bytes of a pair of words by 3 bits; the selectors' top
 * bits stay clear, which would replicate a sign), a third takes the high one where bit 3 of the
 * index is set. A shift and a select per value, as iq4nl_value does, left the IQ4 GEMV 1.4x
 * slower than a table in local memory. */
__device__ static inline uint32_t iq4nl_values4(uint32_t sel) {
    const uint32_t lo = __byte_perm((uint32_t)IQ4NL_LO, (uint32_t)(IQ4NL_LO >> 32), sel & 0x7777u);
    const uint32_t hi = __byte_perm((uint32_t)IQ4NL_HI, (uint32_t)(IQ4NL_HI >> 32), sel & 0x7777u);
    return __byte_perm(lo, hi, 0x3210u | ((sel & 0x8888u) >> 1));
}
/* The 4 nibbles at bits 0, 8, 16 and 24 of x (x & 0x0F0F0F0F) as the 4 nibbles of bits 0..15. */
__device__ static inline uint32_t iq4nl_nibbles4(uint32_t x) {
    x = (x | (x >> 4)) & 0x00FF00FFu;
    return (x | (x >> 8)) & 0xFFFFu;
}
#endif

/* Codes of 32 values from 16 index bytes (low nibbles first). */
BLK_HD void iq4nl_codes32(const uint8_t *qs, int8_t *q) {
#ifdef __CUDA_ARCH__
    for (int i = 0; i < 4; i++) { /* qs may be 2-byte aligned only (IQ4_NL's 18-byte blocks) */
        const uint32_t w = (uint32_t)qs[4 * i] | (uint32_t)qs[4 * i + 1] << 8 | (uint32_t)qs[4 * i + 2] << 16 |
                           (uint32_t)qs[4 * i + 3] << 24;
        *(uint32_t *)(q + 4 * i) = iq4nl_values4(iq4nl_nibbles4(w & 0x0F0F0F0Fu));
        *(uint32_t *)(q + 16 + 4 * i) = iq4nl_values4(iq4nl_nibbles4((w >> 4) & 0x0F0F0F0Fu));
    }
#else
    for (int l = 0; l < 16; l++) {
        q[l] = (int8_t)iq4nl_value(qs[l] & 0xF);
        q[l + 16] = (int8_t)iq4nl_value(qs[l] >> 4);
    }
#endif
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
