/* Rank-order sums, the arithmetic of every allreduce: out[i] = ((s0[i] + s1[i]) + s2[i]) + ...
 * in f32. The fixed order is what makes every rank (and every transport, and every run) end
 * with the same bits; vectorizing across i keeps it, reassociating across ranks would not. */
#include "coll_impl.h"

#include <string.h>

/* Elements per block: the accumulator stays in L1 while every source streams through it. */
enum { COLL_REDUCE_BLOCK = 1024 };

static inline float coll_bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void coll_acc_set_bf16(float *restrict acc, const uint16_t *restrict s, size_t m) {
    for (size_t i = 0; i < m; i++) acc[i] = coll_bf16_widen(s[i]);
}
static void coll_acc_add_bf16(float *restrict acc, const uint16_t *restrict s, size_t m) {
    for (size_t i = 0; i < m; i++) acc[i] += coll_bf16_widen(s[i]);
}
static void coll_acc_add_f32(float *restrict acc, const float *restrict s, size_t m) {
    for (size_t i = 0; i < m; i++) acc[i] += s[i];
}

void coll_reduce_sum(float *out, const void *const *src, int nsrc, bool bf16, size_t n) {
    NM_ASSERT(nsrc >= 1);
    float acc[COLL_REDUCE_BLOCK] __attribute__((aligned(64)));
    size_t esize = bf16 ? sizeof(uint16_t) : sizeof(float);
    for (size_t i0 = 0; i0 < n; i0 += COLL_REDUCE_BLOCK) {
        size_t m = NM_MIN((size_t)COLL_REDUCE_BLOCK, n - i0);
        /* Read every source's block before writing out's: out may be one of the sources. */
        if (bf16) {
            coll_acc_set_bf16(acc, (const uint16_t *)src[0] + i0, m);
            for (int r = 1; r < nsrc; r++)
                coll_acc_add_bf16(acc, (const uint16_t *)src[r] + i0, m);
        } else {
            memcpy(acc, (const char *)src[0] + i0 * esize, m * esize);
            for (int r = 1; r < nsrc; r++) coll_acc_add_f32(acc, (const float *)src[r] + i0, m);
        }
        memcpy(out + i0, acc, m * sizeof(float));
    }
}

void coll_reduce_sum_ref(float *out, const void *const *src, int nsrc, bool bf16, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < nsrc; r++) {
            float x = bf16 ? coll_bf16_widen(((const uint16_t *)src[r])[i])
                           : ((const float *)src[r])[i];
            s = r ? s + x : x; /* start from x, not 0 + x: -0.0 stays -0.0 */
        }
        out[i] = s;
    }
}
