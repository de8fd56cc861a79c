/* AVX-512 dot products of float weight rows (F32, F16, BF16) with f32 activations: 16 values
 * per step, weights widened to f32 (vcvtph2ps for F16, a 16-bit shift for BF16, both exact)
 * and multiplied in f32 FMA. Any row length: the last partial step uses masked loads. */
#include "avx512.h"
#include "simd.h"

enum fkind { FK_F32, FK_F16, FK_BF16 };

/* Software prefetch distance in each weight row (see dot_q.c; rows are contiguous). */
#ifndef F_PREFETCH_BYTES
#define F_PREFETCH_BYTES 4096
#endif

NM_INLINE __m512 f_load_w(const enum fkind kind, const uint8_t *row, int64_t j, __mmask16 m) {
    switch (kind) {
    case FK_F32: return _mm512_maskz_loadu_ps(m, (const float *)row + j);
    case FK_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + j));
    case FK_BF16:
    default:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + j)), 16));
    }
}

NM_INLINE void f_step(const enum fkind kind, const int R, const int C, int64_t j, __mmask16 m,
                      const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                      __m512 (*acc)[NM_TILE_CMAX]) {
    __m512 a[NM_TILE_CMAX];
    NM_UNROLL for (int c = 0; c < C; c++) a[c] =
        _mm512_maskz_loadu_ps(m, (const float *)(x + (size_t)c * xs) + j);
    const int esize = kind == FK_F32 ? 4 : 2;
    NM_UNROLL for (int r = 0; r < R; r++) {
        /* one cache line of prefetch per 64 bytes of weights */
        if (C == 1 && (esize == 4 || (j & 31) == 0))
            _mm_prefetch((const char *)(w + (size_t)r * ws + (size_t)j * esize) + F_PREFETCH_BYTES,
                         NM_PF_HINT);
        __m512 wv = f_load_w(kind, w + (size_t)r * ws, j, m);
        NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(wv, a[c], acc[r][c]);
    }
}

NM_INLINE void f_tile(const enum fkind kind, const int R, const int C, int64_t n,
                      const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
                      int64_t ldy) {
    __m512 acc[NM_TILE_RMAX][NM_TILE_CMAX];
    NM_UNROLL for (int r = 0; r < R; r++) NM_UNROLL for (int c = 0; c < C; c++) acc[r][c] =
        _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) f_step(kind, R, C, j, 0xFFFF, w, ws, x, xs, acc);
    if (j < n) f_step(kind, R, C, j, (__mmask16)((1u << (n - j)) - 1u), w, ws, x, xs, acc);
    NM_TILE_STORE(acc, R, C, y, ldy);
}

NM_INLINE void f32_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                        const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    f_tile(FK_F32, R, C, n, w, ws, x, xs, y, ldy);
}
NM_INLINE void f16_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                        const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    f_tile(FK_F16, R, C, n, w, ws, x, xs, y, ldy);
}
NM_INLINE void bf16_tile(const int R, const int C, int64_t n, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    f_tile(FK_BF16, R, C, n, w, ws, x, xs, y, ldy);
}

NM_GEMM_DEFINE(f32, f32_tile, 4, 4, -1)
NM_GEMM_DEFINE(f16, f16_tile, 4, 4, -1)
NM_GEMM_DEFINE(bf16, bf16_tile, 4, 4, -1)

void avx512_fill_f(struct kern_isa *t) {
    t->vec_dot[DTYPE_F32] = vec_dot_f32;
    t->gemm[DTYPE_F32] = gemm_f32;
    t->vec_dot[DTYPE_F16] = vec_dot_f16;
    t->gemm[DTYPE_F16] = gemm_f16;
    t->vec_dot[DTYPE_BF16] = vec_dot_bf16;
    t->gemm[DTYPE_BF16] = gemm_bf16;
}
