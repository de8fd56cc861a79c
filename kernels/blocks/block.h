/* The block decoder interface: one place per quantized GGUF type.
 *
 * A quantized type is described by
 *   - kernels/blocks/<type>.h: its ggml block struct and a decoder of one 32-value sub-block,
 *     written once in plain C that both gcc and nvcc compile (BLK_HD below), so the CPU
 *     reference, the CPU fast kernels' tests and the CUDA kernels read blocks through the same
 *     code;
 *   - kernels/blocks/<type>.c: its quantizer (numallm's own: nearest values, valid blocks, not
 *     llama.cpp's quality) and its row in the codec table (block_codec_get);
 *   - its tests (tests/kernels/test_blocks.c: hand-built blocks against FORMATS.md's formulas;
 *     tests/model/quant_hub.py: llama.cpp's files and logits in ../shared/data/quant).
 * Everything else (dequantize_row_ref, vec_dot_ref, the kernel tables, the layout planner, the
 * loader, mkmodel) reaches the type through the table.
 *
 * Decoded form. Sub-block j of a block (values 32j .. 32j + 31) decodes to 32 int8 codes q and,
 * for each half of 16 values, a scale d and an offset m:
 *     value[i] = d[i / 16] * q[i] + m[i / 16]        (one f32 multiply and one add, as written)
 * For every type here this is exactly ggml's dequantized float (same bits): the codes are the
 * integers ggml multiplies, the scales the f32 products it forms first. A type that needs a
 * finer offset than per 16 values (IQ1_S/IQ1_M's delta of 1/8) folds it into the codes and
 * scales by a power of two: 8 (g + delta) is an integer, d / 8 exact.
 * The q8x dot product (vec_dot_ref) is, per 32-value activation block a:
 *     a.d * ((d[0] * s[0] + d[1] * s[1]) + (m[0] * t[0] + m[1] * t[1]))
 * with s[h] the exact integer sum of q * a.qs over half h and t[h] the sum of a.qs over half h. */
#ifndef NM_BLOCK_H
#define NM_BLOCK_H

#include <stdint.h>

#ifdef __CUDACC__
#define BLK_HD __host__ __device__ static inline
/* A constant table of format data (codebooks): in device global memory in nvcc's device pass,
 * a plain host array in its host pass, so that a BLK_HD decoder reads the copy of the side it
 * runs on (a __device__ array read from the host half of a BLK_HD function would be the
 * unusable host shadow; nvcc warns #20091). */
#ifdef __CUDA_ARCH__
#define BLK_TABLE static __device__ const
#else
#define BLK_TABLE static const
#endif
#else
#define BLK_HD static inline
#define BLK_TABLE static const
#endif

#define BLK_SUB 32 /* values per decoded sub-block */

struct block_sub32 {
    int8_t q[BLK_SUB]; /* codes */
    float d[2];        /* scale of values 0..15 and of 16..31 */
    float m[2];        /* offset of values 0..15 and of 16..31 (0 for symmetric types) */
};

/* fp16 bits to f32, exact; usable on the host and the device (the decoders' only dependency). */
BLK_HD float blk_fp16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalize */
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
    }
    union {
        uint32_t u;
        float f;
    } v;
    v.u = bits;
    return v.f;
}

/* Every type that goes through this interface: X(UPPER, lower) for DTYPE_UPPER and
 * block_codec_lower. A new type adds its line here (and its header to blocks_all.h). Outside the
 * C-only part below: the CUDA kernels (kernels/cuda/matmul.cu) instantiate their templates from it. */
#define BLOCK_TYPES(X)   \
    X(Q5_0, q5_0)        \
    X(Q5_1, q5_1)        \
    X(Q2_K, q2_k)        \
    X(Q3_K, q3_k)        \
    X(IQ4_NL, iq4_nl)    \
    X(IQ4_XS, iq4_xs)    \
    X(IQ2_XXS, iq2_xxs)  \
    X(IQ2_XS, iq2_xs)    \
    X(IQ3_XXS, iq3_xxs)  \
    X(IQ1_S, iq1_s)      \
    X(IQ3_S, iq3_s)      \
    X(IQ2_S, iq2_s)      \
    X(IQ1_M, iq1_m)

#ifndef __CUDACC__
#include <stdbool.h>
#include <stddef.h>

#include "types.h"

struct block_codec {
    struct dtype_info info; /* name as users type it ("q5_0"), values and bytes per block */
    enum dtype type;
    /* Decode sub-block j (0 <= j < info.blck_size / 32) of the block at blk. */
    void (*decode32)(const void *blk, int j, struct block_sub32 *out);
    /* Quantize info.blck_size values (finite) into the block at blk. */
    void (*quantize)(const float *x, void *blk);
    /* Where the layout and the codebooks come from, one line (FORMATS notes give the detail). */
    const char *source;
};

/* The codec of a type that goes through this interface, or NULL (the 9 older types are still
 * written out in quant.c and the kernel folders). */
const struct block_codec *block_codec_get(enum dtype t);

/* The generic reference paths over a codec, for nb blocks (quant.h's _ref functions call them). */
void block_dequantize_ref(const struct block_codec *c, const void *src, float *dst, int64_t nb);
void block_quantize_ref(const struct block_codec *c, const float *src, void *dst, int64_t nb);
/* act: nb * blck_size / 32 q8x blocks (quant.h). */
float block_vec_dot_ref(const struct block_codec *c, int64_t nb, const void *w, const void *act);

/* The codecs, one per type file. */
#define BLOCK_CODEC_DECL(T, t) extern const struct block_codec block_codec_##t;
BLOCK_TYPES(BLOCK_CODEC_DECL)
#undef BLOCK_CODEC_DECL
#endif

#endif
