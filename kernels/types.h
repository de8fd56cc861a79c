/* Element types of GGUF tensors (ids equal ggml's, see shared FORMATS.md), their block
 * geometry, and fp16/bf16 scalar conversions. */
#ifndef NM_TYPES_H
#define NM_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Values are ggml's type ids: they are what GGUF tensor infos store. */
enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16 = 1,
    DTYPE_Q4_0 = 2,
    DTYPE_Q4_1 = 3,
    DTYPE_Q5_0 = 6,
    DTYPE_Q5_1 = 7,
    DTYPE_Q8_0 = 8,
    DTYPE_Q2_K = 10,
    DTYPE_Q3_K = 11,
    DTYPE_Q4_K = 12,
    DTYPE_Q5_K = 13,
    DTYPE_Q6_K = 14,
    DTYPE_IQ2_XXS = 16,
    DTYPE_IQ2_XS = 17,
    DTYPE_IQ3_XXS = 18,
    DTYPE_IQ1_S = 19,
    DTYPE_IQ4_NL = 20,
    DTYPE_IQ3_S = 21,
    DTYPE_IQ2_S = 22,
    DTYPE_IQ4_XS = 23,
    DTYPE_IQ1_M = 29,
    DTYPE_BF16 = 30,
    DTYPE_COUNT = 31, /* one past the largest id; ids in between are not supported */
};

struct dtype_info {
    const char *name;  /* lower case, as users type it: "q4_k" */
    int blck_size;     /* elements per block (1 for float types) */
    int type_size;     /* bytes per block */
    bool quantized;
};

/* Info for a supported type, or NULL for an id numallm does not support (including ids ggml
 * knows, such as TQ1_0 or MXFP4, and ids of the enum whose codec is not built yet: the caller
 * names them in its error). Types of the block decoder interface (blocks/block.h) get their
 * row from their codec. */
const struct dtype_info *dtype_get(uint32_t id);
/* Name of any ggml type id, supported or not ("q5_0", "iq4_xs", ...), or "unknown". */
const char *dtype_ggml_name(uint32_t id);
/* The names of every supported type, comma separated ("f32, f16, ..."), for error messages. */
const char *dtype_supported_list(void);
/* Parse a user-typed name ("Q4_K", "bf16"); returns -1 if unknown. */
int dtype_from_name(const char *name);
/* Bytes of a row of n elements; n must be a multiple of the block size (asserted). */
size_t dtype_row_size(enum dtype t, int64_t n);

/* IEEE half and bfloat16. fp32->fp16 rounds to nearest even like ggml's
 * GGML_FP32_TO_FP16; fp32->bf16 rounds to nearest even and keeps NaN quiet (ggml's
 * ggml_compute_fp32_to_bf16). */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
/* y[i] = fp32_to_bf16(x[i]) for i < n (the reference twin of kern_isa.to_bf16). */
void fp32_to_bf16_row_ref(const float *x, uint16_t *y, int64_t n);

#endif
