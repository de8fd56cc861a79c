/* Plain-C reference ("_ref") quantization, dequantization and dot products for every supported
 * weight type, bit-exact with ggml's block layouts (shared FORMATS.md). These are the truth for
 * tests and the fallback path; the ISA-specific twins live in kernels/x86-avx512 (and later ISA folders) and are reached
 * through struct kern_isa (cpu.h).
 *
 * Activations. Quantized weights are multiplied with activations quantized per block of 32
 * values to int8 ("q8x" blocks); float weights (F32/F16/BF16) with f32 activations. */
#ifndef NM_QUANT_H
#define NM_QUANT_H

#include <stdint.h>

#include "types.h"

#define QK8X 32

/* One block of 32 activations: x[i] ~= d * qs[i]. isum = sum of qs[i], used for the offsets of
 * Q4_0 (-8), Q4_1 (+m) and the K-quant mins. 40 bytes. */
typedef struct {
    float d;
    int32_t isum;
    int8_t qs[QK8X];
} block_q8x;

/* ggml block structs (fp16 fields as uint16_t), sizes checked by static asserts in quant.c. */
#define QK4_0 32
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;                 /* 18 B */
#define QK4_1 32
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;              /* 20 B */
#define QK8_0 32
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;                      /* 34 B */
#define QK_K 256
#define K_SCALE_SIZE 12
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K; /* 144 B */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K; /* 176 B */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K; /* 210 B */

/* Dequantize n values (a multiple of the type's block size) of any supported type to f32. */
void dequantize_row_ref(enum dtype t, const void *src, float *dst, int64_t n);

/* Quantize n f32 values into type t's blocks (numallm's own quantizers; the output is a valid
 * ggml block stream of that type). For float types this is a conversion. */
void quantize_row_ref(enum dtype t, const float *src, void *dst, int64_t n);

/* Quantize n activations (n a multiple of 32) to q8x blocks: d = max|x|/127, qs = round(x/d). */
void quantize_act_q8x_ref(const float *x, block_q8x *y, int64_t n);

/* Dot product of one weight row (n values of type t) with one activation row: a block_q8x row
 * for quantized t, an f32 row for F32/F16/BF16. Returns the f32 sum. */
float vec_dot_ref(enum dtype t, int64_t n, const void *w_row, const void *act_row);

/* Whether type t consumes q8x activations (true for every quantized type). */
static inline int dtype_uses_q8x(enum dtype t) {
    return t != DTYPE_F32 && t != DTYPE_F16 && t != DTYPE_BF16;
}

#endif
