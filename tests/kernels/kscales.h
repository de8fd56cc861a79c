/* Where the fp16 scales of each quantized type's block are, for the generators of random weight
 * rows (tests/kernels/ktest.h krng_row, tests/bench/bench_util.h bench_fill_weight): they fill
 * every byte at random, then set these fields to finite values so the dot products are finite.
 * Header-only. Offsets: ggml-common.h's block structs. */
#ifndef NM_TESTS_KSCALES_H
#define NM_TESTS_KSCALES_H

#include <stdint.h>
#include <string.h>

#include "types.h"

/* Set the fp16 scale fields of the block at blk of type t: h0 into the scale d (and the only
 * one where a type has one), h1 into the second one (min or dmin). IQ1_M has no d field: its d
 * is spread over the top nibbles of its 4 scale words (bytes 48..55), one nibble per word. Types
 * without fp16 scales (float types) are left alone. */
static inline void kscales_set(enum dtype t, uint8_t *blk, uint16_t h0, uint16_t h1) {
    switch (t) {
    case DTYPE_Q4_0: case DTYPE_Q8_0: case DTYPE_Q5_0: case DTYPE_IQ4_NL: case DTYPE_IQ4_XS:
    case DTYPE_IQ2_XXS: case DTYPE_IQ2_XS: case DTYPE_IQ2_S: case DTYPE_IQ3_XXS: case DTYPE_IQ3_S:
    case DTYPE_IQ1_S:
        memcpy(blk, &h0, 2);
        break;
    case DTYPE_Q4_1: case DTYPE_Q5_1: case DTYPE_Q4_K: case DTYPE_Q5_K:
        memcpy(blk, &h0, 2);
        memcpy(blk + 2, &h1, 2);
        break;
    case DTYPE_Q2_K: /* scales[16], qs[64], d, dmin */
        memcpy(blk + 80, &h0, 2);
        memcpy(blk + 82, &h1, 2);
        break;
    case DTYPE_Q3_K: memcpy(blk + 108, &h0, 2); break; /* hmask[32], qs[64], scales[12], d */
    case DTYPE_Q6_K: memcpy(blk + 208, &h0, 2); break;
    case DTYPE_IQ1_M:
        for (int k = 0; k < 4; k++)
            blk[48 + 2 * k + 1] = (uint8_t)((blk[48 + 2 * k + 1] & 0x0F) | ((h0 >> (4 * k)) & 0xF) << 4);
        break;
    default: break;
    }
}

#endif
