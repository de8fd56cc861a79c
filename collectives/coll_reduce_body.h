/* The rank-order sum of coll_reduce.c, written once and compiled once per ISA: coll_reduce.c
 * includes it for the baseline (SSE2 on x86-64) and x86-avx512/coll_reduce_avx512.c with the
 * AVX-512 flags. The includer defines COLL_REDUCE_FN, the function's name.
 *
 * Elements go in blocks that stay in L1; inside a block, groups of COLL_REDUCE_GROUP elements
 * with a constant trip count, which the compiler unrolls and vectorizes at -O2. Every element
 * is still folded in rank order (vector lanes are different elements, never different ranks),
 * so the result is bit-identical to coll_reduce_sum_ref. */
#include <string.h>

#include "coll_impl.h"

#ifndef COLL_REDUCE_FN
#error "define COLL_REDUCE_FN before including coll_reduce_body.h"
#endif

enum { COLL_REDUCE_BLOCK = 1024, COLL_REDUCE_GROUP = 16 }; /* f32 elements (half as many f64) */

static inline float coll_reduce_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* acc = s (bf16 widened, or f32 copied) over m elements. */
static inline void coll_reduce_set(float *restrict acc, const void *restrict s, bool bf16,
                                   size_t m) {
    if (!bf16) {
        memcpy(acc, s, m * sizeof(float));
        return;
    }
    const uint16_t *h = s;
    size_t i = 0;
    for (; i + COLL_REDUCE_GROUP <= m; i += COLL_REDUCE_GROUP)
        for (int k = 0; k < COLL_REDUCE_GROUP; k++) acc[i + k] = coll_reduce_widen(h[i + k]);
    for (; i < m; i++) acc[i] = coll_reduce_widen(h[i]);
}

/* acc += s over m elements. */
static inline void coll_reduce_add(float *restrict acc, const void *restrict s, bool bf16,
                                   size_t m) {
    size_t i = 0;
    if (bf16) {
        const uint16_t *h = s;
        for (; i + COLL_REDUCE_GROUP <= m; i += COLL_REDUCE_GROUP)
            for (int k = 0; k < COLL_REDUCE_GROUP; k++) acc[i + k] += coll_reduce_widen(h[i + k]);
        for (; i < m; i++) acc[i] += coll_reduce_widen(h[i]);
    } else {
        const float *f = s;
        for (; i + COLL_REDUCE_GROUP <= m; i += COLL_REDUCE_GROUP)
            for (int k = 0; k < COLL_REDUCE_GROUP; k++) acc[i + k] += f[i + k];
        for (; i < m; i++) acc[i] += f[i];
    }
}

/* acc += s over m f64 elements (groups of 8: one zmm, or four xmm). */
static inline void coll_reduce_add_f64(double *restrict acc, const double *restrict s, size_t m) {
    size_t i = 0;
    for (; i + COLL_REDUCE_GROUP / 2 <= m; i += COLL_REDUCE_GROUP / 2)
        for (int k = 0; k < COLL_REDUCE_GROUP / 2; k++) acc[i + k] += s[i + k];
    for (; i < m; i++) acc[i] += s[i];
}

void COLL_REDUCE_FN(void *out, const void *const *src, int nsrc, enum coll_dtype dt, size_t n) {
    union {
        float f[COLL_REDUCE_BLOCK];
        double d[COLL_REDUCE_BLOCK / 2];
    } acc __attribute__((aligned(64)));
    if (dt == COLL_DTYPE_F64) {
        enum { B = COLL_REDUCE_BLOCK / 2 };
        for (size_t i0 = 0; i0 < n; i0 += B) {
            size_t m = n - i0 < B ? n - i0 : B;
            /* Every source's block is read before out's is written: out may be a source. */
            memcpy(acc.d, (const double *)src[0] + i0, m * sizeof(double));
            for (int r = 1; r < nsrc; r++)
                coll_reduce_add_f64(acc.d, (const double *)src[r] + i0, m);
            memcpy((double *)out + i0, acc.d, m * sizeof(double));
        }
        return;
    }
    bool bf16 = dt == COLL_DTYPE_BF16;
    size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);
    for (size_t i0 = 0; i0 < n; i0 += COLL_REDUCE_BLOCK) {
        size_t m = n - i0 < COLL_REDUCE_BLOCK ? n - i0 : COLL_REDUCE_BLOCK;
        coll_reduce_set(acc.f, (const char *)src[0] + i0 * es, bf16, m);
        for (int r = 1; r < nsrc; r++)
            coll_reduce_add(acc.f, (const char *)src[r] + i0 * es, bf16, m);
        memcpy((float *)out + i0, acc.f, m * sizeof(float));
    }
}
