/* Helpers shared by the AVX-512 kernel files; only included by files built with the AVX-512
 * flags of kernels.cmake.
 *
 * Every gemm kernel is one always-inline "tile" function tile(R, C, ...) that keeps R weight
 * rows x C activation rows of accumulators in registers and walks the whole row length once.
 * NM_GEMM_DEFINE instantiates it for R in {1, RT} and C in 1..CT and writes the gemm slot that
 * covers any nr x nc block with those tiles (the vec_dot slot is its 1 x 1 case). */
#ifndef NM_X86_AVX512_SIMD_H
#define NM_X86_AVX512_SIMD_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "../base.h"
#include "../quant.h"

#define NM_INLINE static inline __attribute__((always_inline))
#define NM_UNROLL _Pragma("GCC unroll 16")

/* Largest tile any kernel uses; accumulator arrays are declared this big and only R x C of
 * them survive after unrolling. */
#define NM_TILE_RMAX 4
#define NM_TILE_CMAX 4

/* Sum of the 16 float lanes. */
NM_INLINE float hsum_ps(__m512 v) {
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

/* Store the R x C accumulators, reduced to scalars: y[c * ldy + r]. */
#define NM_TILE_STORE(acc, R, C, y, ldy)                                                    \
    do {                                                                                    \
        NM_UNROLL for (int c_ = 0; c_ < (C); c_++) {                                        \
            NM_UNROLL for (int r_ = 0; r_ < (R); r_++)(y)[c_ * (ldy) + r_] =                \
                hsum_ps((acc)[r_][c_]);                                                     \
        }                                                                                   \
    } while (0)

typedef void (*nm_tile_fn)(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                           float *y, int64_t ldy);

/* Instantiate tile_fn (an NM_INLINE function with the signature
 * (int R, int C, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
 * int64_t ldy)) as gemm_<name> and vec_dot_<name>. RT must be >= 2, CT in 1..4. */
#define NM_TILE_INST(name, tile_fn, R, C)                                                   \
    static void name##_tile_##R##x##C(int64_t n, const uint8_t *w, size_t ws,               \
                                      const uint8_t *x, size_t xs, float *y, int64_t ldy) { \
        tile_fn(R, C, n, w, ws, x, xs, y, ldy);                                             \
    }

#define NM_GEMM_DEFINE(name, tile_fn, RT)                                                   \
    NM_TILE_INST(name, tile_fn, 1, 1)                                                       \
    NM_TILE_INST(name, tile_fn, 1, 2)                                                       \
    NM_TILE_INST(name, tile_fn, 1, 3)                                                       \
    NM_TILE_INST(name, tile_fn, 1, 4)                                                       \
    NM_TILE_INST(name, tile_fn, RT, 1)                                                      \
    NM_TILE_INST(name, tile_fn, RT, 2)                                                      \
    NM_TILE_INST(name, tile_fn, RT, 3)                                                      \
    NM_TILE_INST(name, tile_fn, RT, 4)                                                      \
    static const nm_tile_fn name##_tiles_1[5] = {NULL, name##_tile_1x1, name##_tile_1x2,    \
                                                 name##_tile_1x3, name##_tile_1x4};         \
    static const nm_tile_fn name##_tiles_R[5] = {NULL, name##_tile_##RT##x1,                \
                                                 name##_tile_##RT##x2, name##_tile_##RT##x3, \
                                                 name##_tile_##RT##x4};                     \
    static void gemm_##name(int64_t n, const void *w, size_t ws, int nr, const void *x,     \
                            size_t xs, int nc, float *y, int64_t ldy) {                     \
        nm_gemm_tiles(name##_tiles_1, name##_tiles_R, RT, n, w, ws, nr, x, xs, nc, y, ldy); \
    }                                                                                       \
    static float vec_dot_##name(int64_t n, const void *w, const void *x) {                  \
        float y;                                                                            \
        name##_tile_1x1(n, w, 0, x, 0, &y, 1);                                              \
        return y;                                                                           \
    }

/* Cover an nr x nc block: CT = 4 activation rows at a time; RT weight rows at a time, the
 * remainder one row at a time. */
NM_INLINE void nm_gemm_tiles(const nm_tile_fn *tiles_1, const nm_tile_fn *tiles_R, int RT,
                             int64_t n, const void *w, size_t ws, int nr, const void *x,
                             size_t xs, int nc, float *y, int64_t ldy) {
    const uint8_t *wb = w, *xb = x;
    for (int c0 = 0; c0 < nc; c0 += 4) {
        const int cc = NM_MIN(4, nc - c0);
        int r0 = 0;
        for (; r0 + RT <= nr; r0 += RT)
            tiles_R[cc](n, wb + (size_t)r0 * ws, ws, xb + (size_t)c0 * xs, xs, y + c0 * ldy + r0,
                        ldy);
        for (; r0 < nr; r0++)
            tiles_1[cc](n, wb + (size_t)r0 * ws, ws, xb + (size_t)c0 * xs, xs, y + c0 * ldy + r0,
                        ldy);
    }
}

/* Two q8x blocks as one zmm: qs of block 0 in bytes 0..31, block 1 in 32..63. With one == 1
 * only block 0 is read and the upper half is zero. */
NM_INLINE __m512i act_load_pair(const block_q8x *a, int one) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)a[0].qs);
    if (one) return _mm512_zextsi256_si512(lo);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)a[1].qs), 1);
}

#endif
