/* What the IQ1/IQ2/IQ3 decoders share: the generated codebooks (iq_grids.h), reading one value
 * of a grid entry, and the sign byte of the types that store 7 sign bits per 8 values.
 * Plain C for gcc and nvcc, like every decoder header (block.h). */
#ifndef NM_BLOCK_IQ_COMMON_H
#define NM_BLOCK_IQ_COMMON_H

#include "block.h"
#include "iq_grids.h"

/* Value j (0..7) of a grid entry: byte j, little-endian (how ggml's tables lay out a group). */
BLK_HD uint8_t iq_grid_byte(uint64_t entry, int j) { return (uint8_t)(entry >> (8 * j)); }

/* IQ2_XXS, IQ2_XS and IQ3_XXS store 7 sign bits per group of 8 values; the 8th is implied so that
 * the group has an even number of minus signs: bit 7 = parity of the stored 7 (ggml's
 * ksigns_iq2xs table, computed here). Bit c set = value c is negative. */
BLK_HD uint32_t iq_sign_byte(uint32_t bits) {
    const uint32_t bits7 = bits & 0x7Fu; /* callers pass a word shifted down to the group's bits */
    uint32_t p = bits7 ^ (bits7 >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return bits7 | (p & 1u) << 7;
}

/* A grid magnitude with its sign applied, as a code. */
BLK_HD int8_t iq_signed(uint32_t mag, uint32_t signs, int c) {
    return (int8_t)((signs >> c) & 1u ? -(int)mag : (int)mag);
}

/* The offset of the symmetric IQ types: -0.0f, not 0.0f. Adding -0 leaves every float as it is
 * (x + -0 = x, also for x = -0), while +0 would turn ggml's -0 (a zero scale times a negative
 * code) into +0; so d * q + m is ggml's float bit for bit, signed zeros included. */
#define IQ_NO_OFFSET (-0.0f)

#endif
