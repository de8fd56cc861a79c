/* Helpers shared by the AVX-512 kernel files; only included by files built with the AVX-512
 * flags of kernels.cmake.
 *
 * Every gemm kernel is one always-inline "tile" function tile(R, C, ...) that keeps R weight
 * rows x C activation rows of accumulators in registers and walks the whole row length once.
 * NM_GEMM_DEFINE instantiates it for R in {1, RT} and C in 1..CT and writes the gemm slot that
 * covers any nr x nc block with those tiles (the vec_dot slot is its 1 x 1 case; it packs its
 * one activation row on every call, so it is the slow way to use these kernels). */
#ifndef NM_X86_AVX512_SIMD_H
#define NM_X86_AVX512_SIMD_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "../base.h"
#include "../quant.h"

#define NM_INLINE static inline __attribute__((always_inline))
#define NM_UNROLL _Pragma("GCC unroll 16")

/* exp(x), 16 lanes: e^x = 2^n * e^f with n = round(x log2 e) and f = x - n ln 2 (ln 2 in two
 * parts, so f keeps full precision for large |x|), |f| <= 0.347, e^f by its Taylor polynomial
 * to degree 6 (relative error < 2e-7, like expf to a few ulp); x is clamped to [-87, 88], so
 * lanes below give ~1.6e-38 rather than 0 (callers that need 0 mask them) and lanes above stay
 * finite. */
NM_INLINE __m512 nm_exp_ps(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  /* ln 2, high part: exact n * it */
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), f);       /* ln 2, low part */
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Largest tile any kernel uses; accumulator arrays are declared this big and only R x C of
 * them survive after unrolling. */
#define NM_TILE_RMAX 4
#define NM_TILE_CMAX 4

/* Prefetch (to L1) the cache lines of [p, p + bytes): weight bytes a few blocks ahead of the
 * ones being read. Only the GEMV tiles (C = 1) do it: there the weights stream from DRAM once;
 * a GEMM tile rereads its weights from L2 and needs L1 for the packed activations. */
#ifndef NM_PF_HINT /* overridable for experiments; T1 (to L2) measured no better */
#define NM_PF_HINT _MM_HINT_T0
#endif
NM_INLINE void nm_prefetch(const void *p, int bytes) {
    const char *c = p;
    for (int o = 0; o < bytes; o += 64) _mm_prefetch(c + o, NM_PF_HINT);
    _mm_prefetch(c + bytes - 1, NM_PF_HINT);
}

/* Store the lanes of v selected by m at y, or (yd not NULL) add them, widened to double, to yd
 * (the packed kernels' output step, packed.h). */
NM_INLINE void nm_store_rows(float *y, double *yd, __mmask16 m, __m512 v) {
    if (!yd) {
        _mm512_mask_storeu_ps(y, m, v);
        return;
    }
    const __mmask8 m0 = (__mmask8)(m & 0xFF), m1 = (__mmask8)(m >> 8);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    _mm512_mask_storeu_pd(yd, m0, _mm512_add_pd(_mm512_maskz_loadu_pd(m0, yd), lo));
    _mm512_mask_storeu_pd(yd + 8, m1, _mm512_add_pd(_mm512_maskz_loadu_pd(m1, yd + 8), hi));
}

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

/* ---- packed activations ------------------------------------------------------------------
 * Before the tiles of a gemm call run, its activation rows are repacked once from q8x blocks
 * (40-byte structs) into struct-of-arrays rows in a per-thread scratch buffer:
 *   qs[32 * nbp]  int8 codes, in the order the type's kernel consumes them (see nm_pack_order)
 *   d[nbp]        float d of each block
 *   sa[nbp]       float d * isum of each block
 *   sh[2 * nbp]   float d * (sum of the codes of each half of 16 values), halves in natural
 *                 order whatever the code order (the per-16 offsets of the block types, dot_blk.h)
 * with nbp = nb rounded up to 16 and zeros past nb. A zmm of codes is then one aligned load
 * (a memory operand of vpdpbusd), and the scales of 16 blocks one vector load, instead of
 * inserts and gathers repeated for every weight row. The pack is O(n) per activation row and
 * serves every weight row of the call. */
enum nm_pack_order {
    NM_PACK_NATURAL,     /* blocks in order, 32 codes each (q8_0, q6_k) */
    NM_PACK_QUAD_HALVES, /* per 4 blocks: first 16 codes of each, then the last 16 of each
                          * (q4_0, q4_1: low nibbles of 4 blocks meet one zmm) */
    NM_PACK_K4,          /* per 8 blocks: 0,2,1,3,4,6,5,7 (q4_k, q5_k nibble order) */
};

static inline int64_t nm_pack_nbp(int64_t n) { return (n / 32 + 15) / 16 * 16; }
static inline size_t nm_pack_row_bytes(int64_t n) { return (size_t)nm_pack_nbp(n) * 48; }
static inline const int8_t *nm_pack_qs(const uint8_t *row) { return (const int8_t *)row; }
static inline const float *nm_pack_d(const uint8_t *row, int64_t nbp) {
    return (const float *)(row + 32 * nbp);
}
static inline const float *nm_pack_sa(const uint8_t *row, int64_t nbp) {
    return (const float *)(row + 36 * nbp);
}
static inline const float *nm_pack_sh(const uint8_t *row, int64_t nbp) {
    return (const float *)(row + 40 * nbp);
}

/* Pack nc q8x rows of n values (x, xs bytes apart) into dst (rows ds bytes apart). */
void nm_pack_act(enum nm_pack_order order, const uint8_t *x, size_t xs, int nc, int64_t n,
                 uint8_t *dst, size_t ds);

/* Instantiate tile_fn (an NM_INLINE function with the signature
 * (int R, int C, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
 * int64_t ldy)) for one R x C. */
#define NM_TILE_INST(name, tile_fn, R, C)                                                   \
    static void name##_tile_##R##x##C(int64_t n, const uint8_t *w, size_t ws,               \
                                      const uint8_t *x, size_t xs, float *y, int64_t ldy) { \
        tile_fn(R, C, n, w, ws, x, xs, y, ldy);                                             \
    }

/* gemm_<name> and vec_dot_<name> from tile_fn with RT x CT register tiles (RT >= 2, CT in
 * 1..4; remainders use R = 1 and C < CT). pack: -1 for f32 activations, else the
 * nm_pack_order of the kernel's packed activations. */
#define NM_GEMM_DEFINE(name, tile_fn, RT, CT, pack)                                         \
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
        nm_gemm_tiles(name##_tiles_1, name##_tiles_R, RT, CT, pack, n, w, ws, nr, x, xs, nc, \
                      y, ldy);                                                              \
    }                                                                                       \
    static float vec_dot_##name(int64_t n, const void *w, const void *x) {                  \
        float y;                                                                            \
        gemm_##name(n, w, 0, 1, x, 0, 1, &y, 1);                                            \
        return y;                                                                           \
    }

/* Weight rows per cache block of the gemm driver: about this many bytes, so the block stays in
 * L2 while every activation column group passes over it. */
#define NM_GEMM_W_BLOCK_BYTES (192 * 1024)

/* Cover an nr x nc block. The nc activation rows are packed once (unless pack < 0); then for
 * each cache block of weight rows, every group of CT activation rows runs over it in register
 * tiles: RT weight rows at a time, the remainder one row at a time. The caller keeps nc small
 * enough that the packed rows stay in L2 (kern_matmul blocks the activation rows). */
NM_INLINE void nm_gemm_tiles(const nm_tile_fn *tiles_1, const nm_tile_fn *tiles_R, int RT,
                             int CT, int pack, int64_t n, const void *w, size_t ws, int nr,
                             const void *x, size_t xs, int nc, float *y, int64_t ldy) {
    const uint8_t *wb = w, *xp = x;
    size_t xps = xs;
    if (pack >= 0) {
        xps = nm_pack_row_bytes(n);
        uint8_t *buf = nm_thread_buf(NM_TBUF_KERNEL, xps * (size_t)nc);
        nm_pack_act((enum nm_pack_order)pack, xp, xs, nc, n, buf, xps);
        xp = buf;
    }
    int wblock = nr;
    if (ws > 0 && (size_t)nr * ws > NM_GEMM_W_BLOCK_BYTES)
        wblock = NM_MAX(RT, (int)(NM_GEMM_W_BLOCK_BYTES / ws) / RT * RT);
    for (int r0 = 0; r0 < nr; r0 += wblock) {
        const int r1 = NM_MIN(nr, r0 + wblock);
        for (int c0 = 0; c0 < nc; c0 += CT) {
            const int cc = NM_MIN(CT, nc - c0);
            const uint8_t *xc = xp + (size_t)c0 * xps;
            int r = r0;
            for (; r + RT <= r1; r += RT)
                tiles_R[cc](n, wb + (size_t)r * ws, ws, xc, xps, y + c0 * ldy + r, ldy);
            for (; r < r1; r++)
                tiles_1[cc](n, wb + (size_t)r * ws, ws, xc, xps, y + c0 * ldy + r, ldy);
        }
    }
}

#endif
