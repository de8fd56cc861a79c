/* The inputs of test_gpu_blocks_host.cu, made by the C helpers of ktest.h (C only): random weight
 * rows with sane f16 scales (krng_row) and q8x activations of random activation rows. */
#include "ktest.h"

void blocks_host_row(uint64_t seed, enum dtype t, void *dst, int64_t n) {
    krng r = {seed};
    krng_row(&r, t, dst, n);
}

void blocks_host_acts(uint64_t seed, block_q8x *q8, int64_t n) {
    krng r = {seed};
    float *x = malloc((size_t)n * sizeof(float));
    NM_ASSERT(x);
    krng_acts(&r, x, n);
    quantize_act_q8x_ref(x, q8, n);
    free(x);
}
