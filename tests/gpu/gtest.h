/* Shared by the GPU tests: the skip when no CUDA device can be used (exit 77, which ctest
 * reports as skipped, with the reason), and small helpers around the device layer. */
#ifndef NM_TESTS_GTEST_H
#define NM_TESTS_GTEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_kernels.h"

/* Exit 77 with "no CUDA device: ..." when there is none. */
static inline void gtest_require_device(const char *test) {
    char why[256];
    if (cuk_device_count(why, sizeof why) == 0) {
        printf("%s: skipped: %s\n", test, why);
        exit(77);
    }
}

/* Relative L2 distance ||a - b|| / ||b|| in double. */
static inline double gtest_rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int32_t gtest_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

#endif
