/* Matmuls on ggml blocks kept as they are in the file (see cuda_kernels.h).
 *
 * A row is cut into "units" of 16 or 32 values (8 for F16/BF16, 4 for F32) that one thread
 * decodes from the block bytes with loads of the block's natural alignment (Q4_0, Q8_0 and
 * Q6_K blocks are 18, 34 and 210 bytes, so only 2-byte loads are safe there). A unit's values
 * come in groups of 4 consecutive positions of the row, so the activations are read as float4.
 * The same decoder feeds the GEMV (one warp per output, lanes over units, warp-shuffle sum) and
 * the dequantization of weight tiles into f16 for cuBLAS. The decode GEMV (cuk_gemv_q8) has its
 * own integer decoders (QV) for int8 activations.
 *
 * The types of the block decoder interface (kernels/blocks/block.h: Q5_0, Q2_K, IQ4_XS, the IQ
 * grids, ...) have no code of their own here: one template (QB, cuk_blocks.cuh) over a type's
 * decoder serves all three kernels, a unit being one decoded 32-value sub-block, and the
 * dispatch tables are generated from BLOCK_TYPES, so a new type of that interface needs no edit
 * in kernels/cuda. */
#include <stdio.h>
#include <string.h>

#include "cuk_blocks.cuh"

namespace {

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* 4 bytes at a 2-byte aligned address. */
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t *p) { return (uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16); }
__device__ __forceinline__ uint32_t ld32(const uint8_t *p) { return *(const uint32_t *)p; }

/* ggml get_scale_min_k4 on the 12 scale bytes, held as three words s0..s2 (bytes 0-3, 4-7,
 * 8-11): shifts instead of a byte array, which a run-time j would put in local memory. */
__device__ __forceinline__ void scale_min_k4(int j, uint32_t s0, uint32_t s1, uint32_t s2, int *sc, int *m) {
    if (j < 4) {
        *sc = (int)((s0 >> (8 * j)) & 63);
        *m = (int)((s1 >> (8 * j)) & 63);
    } else {
        const int i = 8 * (j - 4);
        const uint32_t b = (s2 >> i) & 0xFF; /* byte j + 4 */
        *sc = (int)((b & 0xF) | (((s0 >> i) & 0xFF) >> 6 << 4));
        *m = (int)((b >> 4) | (((s1 >> i) & 0xFF) >> 6 << 4));
    }
}

/* Decoder of one unit u of a row: UV values in v, in G = UV/4 groups of 4 consecutive row
 * positions starting at pos[g]. */
template <int T> struct QT;

template <> struct QT<DTYPE_Q4_0> {
    static constexpr int UV = 16, G = 4;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const int b = u >> 1, p = u & 1;
        const uint8_t *blk = row + (size_t)b * 18;
        const float d = h2f(ld16(blk));
        const uint32_t w[2] = {ld32_a2(blk + 2 + p * 8), ld32_a2(blk + 6 + p * 8)};
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int q = (int)((w[h] >> (8 * j)) & 0xFF);
                v[h * 4 + j] = (float)((q & 0xF) - 8) * d;
                v[8 + h * 4 + j] = (float)((q >> 4) - 8) * d;
            }
        pos[0] = b * 32 + p * 8;
        pos[1] = pos[0] + 4;
        pos[2] = pos[0] + 16;
        pos[3] = pos[0] + 20;
    }
};

template <> struct QT<DTYPE_Q4_1> {
    static constexpr int UV = 16, G = 4;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const int b = u >> 1, p = u & 1;
        const uint8_t *blk = row + (size_t)b * 20;
        const float d = h2f(ld16(blk)), m = h2f(ld16(blk + 2));
        const uint32_t w[2] = {ld32(blk + 4 + p * 8), ld32(blk + 8 + p * 8)};
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int q = (int)((w[h] >> (8 * j)) & 0xFF);
                v[h * 4 + j] = (float)(q & 0xF) * d + m;
                v[8 + h * 4 + j] = (float)(q >> 4) * d + m;
            }
        pos[0] = b * 32 + p * 8;
        pos[1] = pos[0] + 4;
        pos[2] = pos[0] + 16;
        pos[3] = pos[0] + 20;
    }
};

template <> struct QT<DTYPE_Q8_0> {
    static constexpr int UV = 16, G = 4;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const int b = u >> 1, p = u & 1;
        const uint8_t *blk = row + (size_t)b * 34;
        const float d = h2f(ld16(blk));
        const uint8_t *q = blk + 2 + p * 16;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint16_t two = ld16(q + 2 * j);
            v[2 * j] = (float)(int8_t)(two & 0xFF) * d;
            v[2 * j + 1] = (float)(int8_t)(two >> 8) * d;
        }
#pragma unroll
        for (int g = 0; g < 4; g++) pos[g] = b * 32 + p * 16 + 4 * g;
    }
};

/* Q4_K/Q5_K: the scale and min of sub-blocks 2c and 2c + 1 (d, dmin at 0, the 12 scale bytes
 * at 4), as the dequantization uses them: value = d1 * q - m1. */
__device__ __forceinline__ void k4_scales(const uint8_t *blk, int c, float *d1, float *m1, float *d2, float *m2) {
    const float d = h2f(ld16(blk)), dmin = h2f(ld16(blk + 2));
    const uint32_t s0 = ld32(blk + 4), s1 = ld32(blk + 8), s2 = ld32(blk + 12);
    int sc, m;
    scale_min_k4(2 * c, s0, s1, s2, &sc, &m);
    *d1 = d * (float)sc, *m1 = dmin * (float)m;
    scale_min_k4(2 * c + 1, s0, s1, s2, &sc, &m);
    *d2 = d * (float)sc, *m2 = dmin * (float)m;
}

/* Q4_K and Q5_K (FIVE: the fifth bits, 32 bytes at 16, and the codes at 48 instead of 16). */
template <bool FIVE> struct QT_k45 {
    static constexpr int UV = 32, G = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const int b = u >> 3, i = u & 7, c = i >> 1, l0 = (i & 1) * 16;
        const uint8_t *blk = row + (size_t)b * (FIVE ? 176 : 144);
        float d1, m1, d2, m2;
        k4_scales(blk, c, &d1, &m1, &d2, &m2);
        const uint4 q4 = *(const uint4 *)(blk + (FIVE ? 48 : 16) + c * 32 + l0);
        const uint4 h4 = FIVE ? *(const uint4 *)(blk + 16 + l0) : make_uint4(0, 0, 0, 0);
        const uint32_t w[4] = {q4.x, q4.y, q4.z, q4.w}, hw[4] = {h4.x, h4.y, h4.z, h4.w};
#pragma unroll
        for (int h = 0; h < 4; h++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int q = (int)((w[h] >> (8 * j)) & 0xFF), qh = (int)((hw[h] >> (8 * j)) & 0xFF);
                v[h * 4 + j] = d1 * (float)((q & 0xF) + ((qh >> (2 * c)) & 1) * 16) - m1;
                v[16 + h * 4 + j] = d2 * (float)((q >> 4) + ((qh >> (2 * c + 1)) & 1) * 16) - m2;
            }
#pragma unroll
        for (int g = 0; g < 4; g++) {
            pos[g] = b * 256 + c * 64 + l0 + 4 * g;
            pos[4 + g] = pos[g] + 32;
        }
    }
};
template <> struct QT<DTYPE_Q4_K> : QT_k45<false> {};
template <> struct QT<DTYPE_Q5_K> : QT_k45<true> {};

template <> struct QT<DTYPE_Q6_K> {
    static constexpr int UV = 32, G = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const int b = u >> 3, i = u & 7, half = i >> 2, l0 = (i & 3) * 8;
        const uint8_t *blk = row + (size_t)b * 210;
        const uint8_t *ql = blk + half * 64, *qh = blk + 128 + half * 32;
        const int8_t *sc = (const int8_t *)(blk + 192) + half * 8 + l0 / 16;
        const float d = h2f(ld16(blk + 208));
        const float s1 = d * (float)sc[0], s2 = d * (float)sc[2], s3 = d * (float)sc[4], s4 = d * (float)sc[6];
#pragma unroll
        for (int j2 = 0; j2 < 4; j2++) {
            const uint16_t a = ld16(ql + l0 + 2 * j2), bb = ld16(ql + 32 + l0 + 2 * j2), h = ld16(qh + l0 + 2 * j2);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int j = 2 * j2 + e;
                const int qa = (a >> (8 * e)) & 0xFF, qb = (bb >> (8 * e)) & 0xFF, qhh = (h >> (8 * e)) & 0xFF;
                v[j] = s1 * (float)((int)((qa & 0xF) | (((qhh >> 0) & 3) << 4)) - 32);
                v[8 + j] = s2 * (float)((int)((qb & 0xF) | (((qhh >> 2) & 3) << 4)) - 32);
                v[16 + j] = s3 * (float)((int)((qa >> 4) | (((qhh >> 4) & 3) << 4)) - 32);
                v[24 + j] = s4 * (float)((int)((qb >> 4) | (((qhh >> 6) & 3) << 4)) - 32);
            }
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            pos[2 * q] = b * 256 + half * 128 + q * 32 + l0;
            pos[2 * q + 1] = pos[2 * q] + 4;
        }
    }
};

/* F16 and BF16 rows: 8 values per 16-byte unit, widened exactly. */
template <bool BF> struct QT_half {
    static constexpr int UV = 8, G = 2;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const uint4 r = *(const uint4 *)(row + (size_t)u * 16);
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint16_t lo = (uint16_t)(w[j] & 0xFFFF), hi = (uint16_t)(w[j] >> 16);
            v[2 * j] = BF ? bf2f(lo) : h2f(lo);
            v[2 * j + 1] = BF ? bf2f(hi) : h2f(hi);
        }
        pos[0] = u * 8;
        pos[1] = u * 8 + 4;
    }
};
template <> struct QT<DTYPE_F16> : QT_half<false> {};
template <> struct QT<DTYPE_BF16> : QT_half<true> {};

template <> struct QT<DTYPE_F32> {
    static constexpr int UV = 4, G = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) {
        const float4 r = *(const float4 *)(row + (size_t)u * 16);
        v[0] = r.x;
        v[1] = r.y;
        v[2] = r.z;
        v[3] = r.w;
        pos[0] = u * 4;
    }
};

constexpr int GEMV_WARPS = 8; /* rows per block: one warp each */

/* y[col][row] = W_row . x[col / x_div] for the block's 8 rows and column blockIdx.y (+ col0).
 * With ids, column col reads expert ids[col]'s matrix. */
template <class Q>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(const Q q, const uint8_t *__restrict__ w, size_t row_bytes, size_t expert_bytes,
                const int32_t *__restrict__ ids, int n_rows, int units, const float *__restrict__ x, int64_t ldx,
                int x_div, float *__restrict__ y, int64_t ldy, int col0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * GEMV_WARPS + warp;
    if (row >= n_rows) return;
    const int col = col0 + blockIdx.y;
    const uint8_t *wr = w + (ids ? (size_t)ids[col] * expert_bytes : 0) + (size_t)row * row_bytes;
    const float *xr = x + (int64_t)(col / x_div) * ldx;
    float acc = 0.0f;
    for (int u = lane; u < units; u += 32) {
        float v[Q::UV];
        int pos[Q::G];
        q.load(wr, u, v, pos);
#pragma unroll
        for (int g = 0; g < Q::G; g++) {
            const float4 xv = *(const float4 *)(xr + pos[g]);
            acc += v[4 * g] * xv.x + v[4 * g + 1] * xv.y + v[4 * g + 2] * xv.z + v[4 * g + 3] * xv.w;
        }
    }
    acc = cuk_warp_reduce(acc, cuk_op_add());
    if (lane == 0) y[(int64_t)col * ldy + row] = acc;
}

/* ---- the q8 matmuls of decode, and of prompt chunks on tensor cores (cuk_gemv_q8) ---------
 * Weights against int8 activations (aq: int8 values, as: one cuk_q8s per 32), as the CPU's
 * vec_dot_ref computes it: an exact integer sum per 32-value activation block, then one float
 * step per block in the CPU's order. QV<T> takes unit u of a weight row (one 32-value block of
 * Q4_0, Q4_1, Q8_0; one 32-value sub-block of Q4_K, Q5_K; 64 values sharing their bytes in Q6_K)
 * in two steps: unit(row, u) decodes its bytes into a W held in registers (codes ready for dp4a,
 * scales), once for all the activation rows; dot(w, u, aq, as) is its sum with one activation row;
 * dot1(row, u, aq, as) is both for the GEMV of one row.
 * The 32-value types build both from three pieces, which the tensor-core kernel (mmq_kernel)
 * uses too: scal(row, u), the unit's scales (an S); words(row, u, t, lo, hi), its codes 4t .. 4t+3
 * and 16+4t .. 16+4t+3 as two dp4a / mma operands (t = 0..3); and step(s, sum, a), the float step
 * on the integer sum of the unit's codes with activation block a. */
template <int T> struct QV;

__device__ __forceinline__ int nib_lo(uint32_t w) { return (int)(w & 0x0F0F0F0Fu); }
__device__ __forceinline__ int nib_hi(uint32_t w) { return (int)((w >> 4) & 0x0F0F0F0Fu); }

/* the 32 int8 activations of q8 block u as 8 words (dp4a operands) */
struct A8 {
    int v[8];
};
__device__ __forceinline__ A8 act8(const int8_t *__restrict__ aq, int u) {
    const int4 a0 = *(const int4 *)(aq + u * 32), a1 = *(const int4 *)(aq + u * 32 + 16);
    return A8{{a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}};
}

/* A block of 2 + 4N bytes at p (2-byte aligned, in a GEMV stage): its first 16 bits, returned,
 * and the N words after them, from N + 1 aligned 4-byte loads and funnel shifts instead of
 * 2N + 1 2-byte loads. It reads 2 bytes before the block (p 2 bytes into a word) or 2 after it
 * (p on a word), whose values are shifted out. Within the stage buffer: a block 2 bytes into a
 * word is never the stage's first (stages start 16-byte aligned), and one on a word is never a
 * full stage's last (a full stage has an even number of blocks, GQ_STAGE being even, so its last
 * block starts 2 bytes into a word); a partial stage's last block reads 2 bytes of the stage's
 * unused tail. Only for stage buffers: a row in global memory has no such slack. */
template <int N> __device__ __forceinline__ uint16_t ld_blk_a2(const uint8_t *p, uint32_t (&q)[N]) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const int sh = (int)((uintptr_t)p & 2) * 8; /* 0, or 16 when p is 2 bytes into a word */
    uint32_t w[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++) w[i] = a[i];
#pragma unroll
    for (int t = 0; t < N; t++) q[t] = __funnelshift_rc(w[t], w[t + 1], 16 + sh);
    return (uint16_t)(w[0] >> sh);
}

/* unit() and dot() of a 32-value type Q from its scal(), words() and step() */
template <class Q, class S> struct QV32 {
    static constexpr int UV = 32; /* values per unit */
    struct W {
        S s;
        int q[8]; /* q[t]: codes 4t .. 4t+3, q[4 + t]: codes 16+4t .. 16+4t+3 */
    };
    static __device__ __forceinline__ W unit(const uint8_t *__restrict__ row, int u) {
        W w;
        w.s = Q::scal(row, u);
#pragma unroll
        for (int t = 0; t < 4; t++) Q::words(row, u, t, &w.q[t], &w.q[4 + t]);
        return w;
    }
    static __device__ __forceinline__ float dot(const W &w, int u, const int8_t *__restrict__ aq,
                                                const cuk_q8s *__restrict__ as) {
        const A8 a = act8(aq, u);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a(w.q[i], a.v[i], s);
        return Q::step(w.s, s, as[u]);
    }
    /* dot(unit(row, u), ...) for one activation row, its loads issued before the weight's (one
     * row of the 8B layer, Q4_K: 68.0 us in the other order, job 33; 64.6-65.0, job 34) */
    static __device__ __forceinline__ float dot1(const uint8_t *__restrict__ row, int u, const int8_t *__restrict__ aq,
                                                 const cuk_q8s *__restrict__ as) {
        const A8 a = act8(aq, u);
        const cuk_q8s sa = as[u];
        const W w = Q::unit(row, u);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a(w.q[i], a.v[i], s);
        return Q::step(w.s, s, sa);
    }
};

struct S_d {
    float d;
};
template <> struct QV<DTYPE_Q4_0> : QV32<QV<DTYPE_Q4_0>, S_d> {
    static constexpr int UPB = 1, BB = 18; /* units per block, block bytes */
    static __device__ __forceinline__ S_d scal(const uint8_t *row, int u) { return S_d{h2f(ld16(row + (size_t)u * 18))}; }
    static __device__ __forceinline__ void words(const uint8_t *row, int u, int t, int *lo, int *hi) {
        const uint32_t x = ld32_a2(row + (size_t)u * 18 + 2 + 4 * t);
        *lo = nib_lo(x);
        *hi = nib_hi(x);
    }
    static __device__ __forceinline__ float step(const S_d &s, int sum, cuk_q8s a) {
        return s.d * a.d * (float)(sum - 8 * a.isum);
    }
    /* the GEMV's whole unit: words()' codes from aligned loads (ld_blk_a2) */
    static __device__ __forceinline__ W unit(const uint8_t *__restrict__ row, int u) {
        uint32_t x[4];
        W w;
        w.s = S_d{h2f(ld_blk_a2<4>(row + (size_t)u * 18, x))};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            w.q[t] = nib_lo(x[t]);
            w.q[4 + t] = nib_hi(x[t]);
        }
        return w;
    }
};

struct S_dm {
    float d, m;
};
template <> struct QV<DTYPE_Q4_1> : QV32<QV<DTYPE_Q4_1>, S_dm> {
    static constexpr int UPB = 1, BB = 20;
    static __device__ __forceinline__ S_dm scal(const uint8_t *row, int u) {
        const uint32_t dm = ld32(row + (size_t)u * 20);
        return S_dm{h2f((uint16_t)(dm & 0xFFFF)), h2f((uint16_t)(dm >> 16))};
    }
    static __device__ __forceinline__ void words(const uint8_t *row, int u, int t, int *lo, int *hi) {
        const uint32_t x = ld32(row + (size_t)u * 20 + 4 + 4 * t);
        *lo = nib_lo(x);
        *hi = nib_hi(x);
    }
    static __device__ __forceinline__ float step(const S_dm &s, int sum, cuk_q8s a) {
        return s.d * a.d * (float)sum + s.m * a.d * (float)a.isum;
    }
};

template <> struct QV<DTYPE_Q8_0> : QV32<QV<DTYPE_Q8_0>, S_d> {
    static constexpr int UPB = 1, BB = 34;
    static __device__ __forceinline__ S_d scal(const uint8_t *row, int u) { return S_d{h2f(ld16(row + (size_t)u * 34))}; }
    static __device__ __forceinline__ void words(const uint8_t *row, int u, int t, int *lo, int *hi) {
        const uint8_t *q = row + (size_t)u * 34 + 2;
        *lo = (int)ld32_a2(q + 4 * t);
        *hi = (int)ld32_a2(q + 16 + 4 * t);
    }
    static __device__ __forceinline__ float step(const S_d &s, int sum, cuk_q8s a) { return s.d * a.d * (float)sum; }
    /* the GEMV's whole unit: words()' codes from aligned loads (ld_blk_a2) */
    static __device__ __forceinline__ W unit(const uint8_t *__restrict__ row, int u) {
        uint32_t x[8];
        W w;
        w.s = S_d{h2f(ld_blk_a2<8>(row + (size_t)u * 34, x))};
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)x[i];
        return w;
    }
};

/* Q5_0 / Q5_1 (the fallbacks of the K mixes for rows that are not a multiple of 256, as in
 * Qwen2.5's): block d (and m), 32 high bits, 16 bytes of nibbles; code i = nibble | bit i << 4.
 * Written out here rather than through the block decoder interface (QB, whole sub-blocks) so that
 * the tensor-core kernel gets their words as it gets Q4_0's. */
__device__ __forceinline__ int bits4_to_bytes(uint32_t h) { /* bits 0..3 of h to bit 4 of bytes 0..3 */
    return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}
template <int T, int BB_, int QH, class S> struct QV_5 : QV32<QV<T>, S> {
    static constexpr int UPB = 1, BB = BB_;
    static __device__ __forceinline__ void words(const uint8_t *row, int u, int t, int *lo, int *hi) {
        const uint8_t *blk = row + (size_t)u * BB;
        const uint32_t x = ld32_a2(blk + QH + 4 + 4 * t), qh = ld32_a2(blk + QH);
        *lo = nib_lo(x) | bits4_to_bytes(qh >> (4 * t));
        *hi = nib_hi(x) | bits4_to_bytes(qh >> (16 + 4 * t));
    }
};
template <> struct QV<DTYPE_Q5_0> : QV_5<DTYPE_Q5_0, 22, 2, S_d> {
    static __device__ __forceinline__ S_d scal(const uint8_t *row, int u) { return S_d{h2f(ld16(row + (size_t)u * 22))}; }
    static __device__ __forceinline__ float step(const S_d &s, int sum, cuk_q8s a) {
        return s.d * a.d * (float)(sum - 16 * a.isum);
    }
};
template <> struct QV<DTYPE_Q5_1> : QV_5<DTYPE_Q5_1, 24, 4, S_dm> {
    static __device__ __forceinline__ S_dm scal(const uint8_t *row, int u) {
        const uint32_t dm = ld32_a2(row + (size_t)u * 24);
        return S_dm{h2f((uint16_t)(dm & 0xFFFF)), h2f((uint16_t)(dm >> 16))};
    }
    static __device__ __forceinline__ float step(const S_dm &s, int sum, cuk_q8s a) {
        return s.d * a.d * (float)sum + s.m * a.d * (float)a.isum;
    }
};

/* Q4_K / Q5_K: unit u is sub-block j = u % 8 of super-block u / 8, which meets q8 block u; its
 * codes are the low (j even) or high nibbles of 32 bytes, plus bit j of 32 more for Q5_K. */
struct S_k {
    float dsc, dmn; /* d * sc and dmin * m of the sub-block */
};
template <bool FIVE> struct QV_k45 : QV32<QV_k45<FIVE>, S_k> {
    static constexpr int UPB = 8, BB = FIVE ? 176 : 144;
    static __device__ __forceinline__ S_k scal(const uint8_t *row, int u) {
        const uint8_t *blk = row + (size_t)(u >> 3) * BB;
        const uint32_t dd = ld32(blk);
        int sc, m;
        scale_min_k4(u & 7, ld32(blk + 4), ld32(blk + 8), ld32(blk + 12), &sc, &m);
        return S_k{h2f((uint16_t)(dd & 0xFFFF)) * (float)sc, h2f((uint16_t)(dd >> 16)) * (float)m};
    }
    static __device__ __forceinline__ void words(const uint8_t *row, int u, int t, int *lo, int *hi) {
        const int j = u & 7, shift = (j & 1) * 4;
        const uint8_t *blk = row + (size_t)(u >> 3) * BB, *q = blk + (FIVE ? 48 : 16) + (j >> 1) * 32;
        uint32_t l = (ld32(q + 4 * t) >> shift) & 0x0F0F0F0Fu, h = (ld32(q + 16 + 4 * t) >> shift) & 0x0F0F0F0Fu;
        if (FIVE) {
            l |= ((ld32(blk + 16 + 4 * t) >> j) & 0x01010101u) << 4;
            h |= ((ld32(blk + 32 + 4 * t) >> j) & 0x01010101u) << 4;
        }
        *lo = (int)l;
        *hi = (int)h;
    }
    /* (d * sc and dmin * m folded once per sub-block in scal, and isum converted once for both
     * weight rows of the tensor-core kernel, where each product took d * (float)(sc * sum) and
     * dmin * (float)(m * isum). Not measured apart: job 4 of session 21, with the three other
     * changes of that commit to mmq_kernel, an 8B layer of Q4_K at 16 rows 117.1 -> 93.2 us) */
    static __device__ __forceinline__ float step(const S_k &s, int sum, cuk_q8s a) {
        return a.d * (s.dsc * (float)sum - s.dmn * (float)a.isum);
    }
    /* the GEMV's whole unit: the same codes as words(), from 16-byte loads (QV32's unit() issues
     * eight 4-byte loads: one row of the 8B layer, Q4_K, 73.1-73.5 us against 68.0, job 33) */
    static __device__ __forceinline__ typename QV32<QV_k45<FIVE>, S_k>::W unit(const uint8_t *__restrict__ row, int u) {
        typename QV32<QV_k45<FIVE>, S_k>::W w;
        w.s = scal(row, u);
        const int j = u & 7, shift = (j & 1) * 4;
        const uint8_t *blk = row + (size_t)(u >> 3) * BB, *q = blk + (FIVE ? 48 : 16) + (j >> 1) * 32;
        const uint4 q0 = *(const uint4 *)q, q1 = *(const uint4 *)(q + 16);
        const uint32_t lo[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)((lo[i] >> shift) & 0x0F0F0F0Fu);
        if (FIVE) {
            const uint4 h0 = *(const uint4 *)(blk + 16), h1 = *(const uint4 *)(blk + 32);
            const uint32_t h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) w.q[i] |= (int)(((h[i] >> j) & 0x01010101u) << 4);
        }
        return w;
    }
};
template <> struct QV<DTYPE_Q4_K> : QV_k45<false> {};
template <> struct QV<DTYPE_Q5_K> : QV_k45<true> {};

/* Q6_K: unit u is (super-block u / 4, half (u / 2) % 2, p = u % 2): the 32 ql bytes at
 * half * 64 + p * 32 and the 32 qh bytes of the half hold sub-blocks q = p (low nibbles, qh bits
 * 2p) and q = p + 2 (high nibbles, qh bits 2p + 4), each of two 16-value scales. */
template <> struct QV<DTYPE_Q6_K> {
    static constexpr int UV = 64, UPB = 4, BB = 210; /* values per unit, units per block, block bytes */
    struct W {
        float d;
        int sc[4];        /* the scales of sub-block p's halves, then of sub-block p + 2's */
        int lo[8], hi[8]; /* signed codes of sub-blocks p and p + 2 */
    };
    static __device__ __forceinline__ W unit(const uint8_t *__restrict__ row, int u) {
        const int b = u >> 2, half = (u >> 1) & 1, p = u & 1;
        const uint8_t *blk = row + (size_t)b * 210;
        const uint8_t *ql = blk + half * 64 + p * 32, *qh = blk + 128 + half * 32;
        const int8_t *sc = (const int8_t *)(blk + 192) + half * 8;
        W w;
        w.d = h2f(ld16(blk + 208));
        w.sc[0] = sc[2 * p];
        w.sc[1] = sc[2 * p + 1];
        w.sc[2] = sc[2 * p + 4];
        w.sc[3] = sc[2 * p + 5];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t L = ld32_a2(ql + 4 * i), H = ld32_a2(qh + 4 * i);
            const uint32_t vlo = (L & 0x0F0F0F0Fu) | (((H >> (2 * p)) & 0x03030303u) << 4);
            const uint32_t vhi = ((L >> 4) & 0x0F0F0F0Fu) | (((H >> (2 * p + 4)) & 0x03030303u) << 4);
            w.lo[i] = (int)__vsub4(vlo, 0x20202020u);
            w.hi[i] = (int)__vsub4(vhi, 0x20202020u);
        }
        return w;
    }
    static __device__ __forceinline__ float dot(const W &w, int u, const int8_t *__restrict__ aq,
                                                const cuk_q8s *__restrict__ as) {
        const int b = u >> 2, half = (u >> 1) & 1, p = u & 1;
        const int ab0 = b * 8 + half * 4 + p, ab1 = ab0 + 2; /* q8 blocks of sub-blocks p and p + 2 */
        const A8 a0 = act8(aq, ab0), a1 = act8(aq, ab1);
        const cuk_q8s s0 = as[ab0], s1 = as[ab1];
        int lo[2] = {0, 0}, hi[2] = {0, 0};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            lo[i >> 2] = __dp4a(w.lo[i], a0.v[i], lo[i >> 2]);
            hi[i >> 2] = __dp4a(w.hi[i], a1.v[i], hi[i >> 2]);
        }
        const int slo = w.sc[0] * lo[0] + w.sc[1] * lo[1];
        const int shi = w.sc[2] * hi[0] + w.sc[3] * hi[1];
        return w.d * s0.d * (float)slo + w.d * s1.d * (float)shi;
    }
    static __device__ __forceinline__ float dot1(const uint8_t *__restrict__ row, int u, const int8_t *__restrict__ aq,
                                                 const cuk_q8s *__restrict__ as) {
        return dot(unit(row, u), u, aq, as);
    }
};

struct gemv_q8_outs {
    const uint8_t *w[CUK_GEMV_MAX_OUTS];
    float *y[CUK_GEMV_MAX_OUTS];
    const float *bias[CUK_GEMV_MAX_OUTS];
    int64_t ldy[CUK_GEMV_MAX_OUTS];
    int row_end[CUK_GEMV_MAX_OUTS]; /* rows of outputs 0..i together */
    int accumulate[CUK_GEMV_MAX_OUTS];
    int n_outs, n_rows;
};

/* The output that row `row` of the outputs stacked falls in: its fields and the row within it.
 * Read with constant indices only (a kernel parameter indexed at run time is copied to local
 * memory first). */
struct gq_out {
    const uint8_t *w;
    float *y;
    const float *bias;
    int64_t ldy;
    int accumulate, row;
};
__device__ __forceinline__ gq_out gq_find(const gemv_q8_outs &o, int row) {
    gq_out r = {o.w[0], o.y[0], o.bias[0], o.ldy[0], o.accumulate[0], row};
#pragma unroll
    for (int i = 1; i < CUK_GEMV_MAX_OUTS; i++)
        if (i < o.n_outs && row >= o.row_end[i - 1]) /* row_end ascends: the last match is it */
            r = gq_out{o.w[i], o.y[i], o.bias[i], o.ldy[i], o.accumulate[i], row - o.row_end[i - 1]};
    return r;
}

constexpr int GQ_WARPS = 4;       /* warps per block of the q8 GEMV */
constexpr int GQ_MAX_ROWS = 8;    /* activation rows per GEMV launch (more: several passes) */
constexpr int GQ_STAGE = 128;     /* units of a row a warp stages at a time (64 where that exceeds GQ_STAGE_MAX) */
static_assert(GQ_STAGE % 4 == 0, "ld_blk_a2 relies on stages (and their halves) of an even number of blocks");
constexpr int GQ_STAGE_MAX = 4608; /* bytes of one stage */
#ifndef NM_GQ_DEPTH
#define NM_GQ_DEPTH 2 /* (a build option for measurements: -DNM_GQ_DEPTH=3 in CMAKE_CUDA_FLAGS) */
#endif
constexpr int GQ_DEPTH = NM_GQ_DEPTH; /* stages per warp: one is computed while the next ones are copied */

/* Asynchronous copies global -> shared (sm_80+): issued, committed as a group, waited for. */
__device__ __forceinline__ void cp_async(void *smem, const void *g, int bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    if (bytes == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g) : "memory");
    else if (bytes == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(g) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Each warp of the grid (gw of G) takes the rows gw, gw + G, ... of the outputs' rows stacked,
 * and every activation row (m of them, so each weight byte is read once). A row is cut into
 * stages of su units; the warp copies stage i + 1 into shared memory with coalesced
 * asynchronous loads of vec bytes (16 where the row and stage offsets allow) while its lanes
 * decode stage i from there (units lane, lane + 32, ...): the blocks' odd sizes (18, 34, 210
 * bytes) only allow 2-byte loads, which from global memory would cost several L1 wavefronts
 * each. A row's sum is the warp's shuffle sum of its lanes' sums. MR: the most activation rows
 * (m <= MR <= GQ_MAX_ROWS), so that one row's kernel keeps one accumulator per lane. */
template <class Q, int MR>
__global__ void __launch_bounds__(GQ_WARPS * 32)
    gemv_q8_kernel(const Q q, gemv_q8_outs o, size_t row_bytes, int units, int su, int stage_bytes,
                   const int8_t *__restrict__ aq, const cuk_q8s *__restrict__ as, int64_t k, int m, int vec) {
    extern __shared__ __align__(16) uint8_t gq_stage[]; /* [GQ_WARPS][GQ_DEPTH][stage_bytes] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n_rows = o.n_rows;
    const int gw = blockIdx.x * GQ_WARPS + warp, G = gridDim.x * GQ_WARPS;
    const int chunks = (units + su - 1) / su;
    const int n_items = gw < n_rows ? (n_rows - gw + G - 1) / G * chunks : 0; /* (row, stage) pairs */
    uint8_t *buf = gq_stage + (size_t)warp * GQ_DEPTH * stage_bytes;
    /* the bytes of item it into its buffer (an empty group past the end keeps the count) */
    auto fetch = [&](int it) {
        if (it < n_items) {
            const gq_out d = gq_find(o, gw + it / chunks * G);
            const int u0 = it % chunks * su, nu = NM_MIN(su, units - u0);
            const int nbytes = (nu + q.UPB - 1) / q.UPB * q.BB;
            const uint8_t *src = d.w + (size_t)d.row * row_bytes + (size_t)(u0 / q.UPB) * q.BB;
            uint8_t *dst = buf + (it % GQ_DEPTH) * stage_bytes;
            if (vec >= 4) {
                for (int off = lane * vec; off < nbytes; off += 32 * vec) cp_async(dst + off, src + off, vec);
            } else {
                for (int off = lane * 2; off < nbytes; off += 64) *(uint16_t *)(dst + off) = __ldg((const uint16_t *)(src + off));
            }
        }
        cp_async_commit();
    };
    /* launched with cuk_launch: the first weights (which no kernel writes) are on their way
     * before the wait for the activations */
    cuk_grid_release();
#pragma unroll
    for (int i = 0; i < GQ_DEPTH - 1; i++) fetch(i);
    cuk_grid_wait();
    float acc[MR] = {};
    for (int it = 0; it < n_items; it++) {
        fetch(it + GQ_DEPTH - 1);
        cp_async_wait<GQ_DEPTH - 1>();
        __syncwarp();
        const uint8_t *sm = buf + (it % GQ_DEPTH) * stage_bytes;
        const int ch = it % chunks, u0 = ch * su, nu = NM_MIN(su, units - u0);
        const int8_t *au = aq + (int64_t)u0 * Q::UV;
        const cuk_q8s *sa = as + (int64_t)u0 * Q::UV / 32;
#pragma unroll 2
        for (int u = lane; u < nu; u += 32) {
            if constexpr (MR == 1) {
                acc[0] += q.dot1(sm, u, au, sa);
                continue;
            }
            const auto wu = q.unit(sm, u); /* decoded once for the m activation rows */
#pragma unroll
            for (int r = 0; r < MR; r++)
                if (r < m) acc[r] += q.dot(wu, u, au + r * k, sa + r * (k / 32));
        }
        __syncwarp(); /* every lane is done with this buffer before it is refilled */
        if (ch == chunks - 1) {
            const gq_out d = gq_find(o, gw + it / chunks * G);
#pragma unroll
            for (int r = 0; r < MR; r++) {
                if (r >= m) break;
                const float v = cuk_warp_reduce(acc[r], cuk_op_add());
                acc[r] = 0.0f;
                if (lane == 0) {
                    float *y = d.y + (int64_t)r * d.ldy + d.row;
                    const float b = d.bias ? v + d.bias[d.row] : v;
                    *y = d.accumulate ? *y + b : b;
                }
            }
        }
    }
}

/* ---- batched decode and prompt chunks on int8 tensor cores --------------------------------
 * For CUK_MMQ_MIN_ROWS .. CUK_MMQ_MAX_ROWS activation rows of a 32-value QV type, mma.sync
 * m16n8k32 (s8 x s8 -> s32) takes, per 32-value unit, 16 weight rows (A: the codes as QV::words
 * gives them, thread t's words t and 4 + t for rows g = lane / 4 and g + 8) against 8 activation
 * rows (B: the same words of activation rows g, from the q8 buffer's fragment layout tq/ts,
 * cuk_q8buf), giving each (weight row, activation row) its exact integer sum;
 * QV::step then adds the unit's float step, as the GEMV does. A block of MQ_WARPS warps takes
 * groups of 16 weight rows (of the outputs stacked): one group whose units it splits in MQ_WARPS
 * contiguous slices, or, for a tall launch (mmq_tall), MQ_WARPS groups, one warp each (WPG: warps
 * per group, MQ_WARPS or 1); a warp streams its slice in chunks of MQ_CU units of its 16 rows
 * into shared memory (cp.async, MQ_DEPTH stages in flight), so each weight byte is read once for
 * all the activation rows. The warps' sums
 * are added in warp order: the same bits every run for a given row count, though not the GEMV's
 * (which sums in another order), so on the GPU a row's low bits depend on whether its step had
 * fewer than CUK_MMQ_MIN_ROWS rows. NT: n-tiles of 8 activation rows. */
#ifndef NM_MQ_UNROLL
#define NM_MQ_UNROLL 8 /* (a build option for measurements: units of a whole chunk unrolled) */
#endif
#ifndef NM_MQ_WARPS
#define NM_MQ_WARPS 8 /* (a build option for measurements: -DNM_MQ_WARPS=4 in CMAKE_CUDA_FLAGS) */
#endif
/* (job 31, H100, llama-3-8b layer of 16 rows: 4 warps and the unit loop rolled 262 / 410 / 285
 * us for Q4_0 / Q4_K / Q8_0, 8 warps and unrolled 211 / 208 / 227) */
/* (session 18, job 8, H100, llama-3-8b layer at 16 rows, Q4_0 / Q4_K: 188.5 / 182.7 us as
 * committed; chunks of 16 units with 2 in flight 192.2 / 184.5; 4 in flight 188.6 / 182.9: the
 * weight stream does not bound this kernel) */
#ifndef NM_MQ_CU
#define NM_MQ_CU 8 /* (a build option for measurements: units per staged chunk, a multiple of 8) */
#endif
#ifndef NM_MQ_DEPTH
#define NM_MQ_DEPTH 3 /* (a build option for measurements: chunks in flight per warp) */
#endif
constexpr int MQ_WARPS = NM_MQ_WARPS, MQ_CU = NM_MQ_CU, MQ_DEPTH = NM_MQ_DEPTH, MQ_UNROLL = NM_MQ_UNROLL;

__device__ __forceinline__ void mma_s8(int *c, const int *a, int b0, int b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* cuk_q8_tensor_cores picks this kernel on devices of sm_80 and up, and the build
                 targets sm_90 (CMakeLists.txt): code for an older target never reaches here */
#endif
}

/* Blocks per SM the registers must allow (launch bounds: at most 128 registers a thread). Job
 * 14, H100, one llama-3-8b layer at 8 / 12 / 16 rows, us: the whole-chunk loop unrolled as it
 * stands, Q4_0 125 / 159 / 189, Q4_K 122 / 155 / 182, Q8_0 142 / 165 / 196 (the loop before, with
 * an exit in it: 151 / 181 / 212, 142 / 177 / 208, 164 / 194 / 224); without the bound the
 * compiler took 142 registers for Q4_0 at 16 rows (one block per SM: 225 us); with 3 blocks (80
 * registers, spills) 122 / 169 / 201. */
#ifndef NM_MQ_MIN_BLOCKS
#define NM_MQ_MIN_BLOCKS 2 /* (a build option for measurements) */
#endif
template <class Q, int NT, int WPG>
__global__ void __launch_bounds__(MQ_WARPS * 32, NM_MQ_MIN_BLOCKS)
    mmq_kernel(gemv_q8_outs o, size_t row_bytes, int units, int chunk_bytes, const int8_t *__restrict__ tq,
               const cuk_q8s *__restrict__ ts, int R, int m, int vec) {
    static_assert(MQ_WARPS % WPG == 0, "whole groups of warps");
    constexpr int GROUPS = MQ_WARPS / WPG; /* groups of 16 weight rows per block */
    extern __shared__ __align__(16) uint8_t mq_stage[]; /* [MQ_WARPS][MQ_DEPTH][16][chunk_bytes] */
    __shared__ const uint8_t *src_row[16 * GROUPS]; /* where weight row row0 + r starts (past the end: the last row) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16 * GROUPS;
    if (threadIdx.x < 16 * GROUPS) {
        const gq_out d = gq_find(o, NM_MIN(row0 + (int)threadIdx.x, o.n_rows - 1));
        src_row[threadIdx.x] = d.w + (size_t)d.row * row_bytes;
    }
    __syncthreads();
    const int chunks = (units + MQ_CU - 1) / MQ_CU, per_warp = (chunks + WPG - 1) / WPG;
    const int c_first = warp % WPG * per_warp, n_items = NM_MAX(0, NM_MIN(chunks, c_first + per_warp) - c_first);
    const uint8_t *const *my_rows = src_row + warp / WPG * 16; /* this warp's group of 16 rows */
    uint8_t *buf = mq_stage + (size_t)warp * MQ_DEPTH * 16 * chunk_bytes;
    constexpr int FULL = MQ_CU / Q::UPB * Q::BB; /* bytes of a whole chunk of one row */
    auto fetch = [&](int it) {
        if (it < n_items) {
            const int c = c_first + it, nu = NM_MIN(MQ_CU, units - c * MQ_CU);
            const int nbytes = (nu + Q::UPB - 1) / Q::UPB * Q::BB, v = nbytes % vec == 0 ? vec : 2;
            uint8_t *dst = buf + (it % MQ_DEPTH) * 16 * chunk_bytes;
            /* a whole chunk in 16-byte pieces: a constant divisor (job 1 of session 21, H200, an 8B
             * layer at 16 rows: Q4_0 101.5 -> 91.7 us, Q4_K 116.3 -> 105.8 against p / per_row) */
            if (nbytes == FULL && v == 16) {
                constexpr int PR = FULL / 16;
#pragma unroll
                for (int p = lane; p < 16 * PR; p += 32) {
                    const int r = p / PR, off = (p % PR) * 16;
                    cp_async(dst + r * chunk_bytes + off, my_rows[r] + (size_t)c * FULL + off, 16);
                }
            } else { /* the last chunk of a row, or a row start that allows only narrower loads */
                const int per_row = nbytes / v;
                for (int p = lane; p < 16 * per_row; p += 32) {
                    const int r = p / per_row, off = (p % per_row) * v;
                    const uint8_t *src = my_rows[r] + (size_t)c * FULL + off;
                    if (v >= 4) cp_async(dst + r * chunk_bytes + off, src, v);
                    else *(uint16_t *)(dst + r * chunk_bytes + off) = __ldg((const uint16_t *)src);
                }
            }
        }
        cp_async_commit();
    };
    cuk_grid_release();
#pragma unroll
    for (int i = 0; i < MQ_DEPTH - 1; i++) fetch(i);
    cuk_grid_wait();
    float acc[NT][4] = {};
    for (int it = 0; it < n_items; it++) {
        fetch(it + MQ_DEPTH - 1);
        cp_async_wait<MQ_DEPTH - 1>();
        __syncwarp();
        const uint8_t *st = buf + (it % MQ_DEPTH) * 16 * chunk_bytes;
        const uint8_t *rg = st + g * chunk_bytes, *rg8 = st + (g + 8) * chunk_bytes;
        const int u0 = (c_first + it) * MQ_CU, nu = NM_MIN(MQ_CU, units - u0);
        auto unit_step = [&](int ui) {
            int a[4];
            Q::words(rg, ui, t, &a[0], &a[2]);
            Q::words(rg8, ui, t, &a[1], &a[3]);
            const auto sg = Q::scal(rg, ui), sg8 = Q::scal(rg8, ui);
            const int64_t uR = (int64_t)(u0 + ui) * R; /* unit u0 + ui's rows in tq and ts */
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                /* fragment rows past m (up to R) are allocated and read as they are: they only
                 * reach the columns of rows past m, which are never stored */
                const int2 b = *(const int2 *)(tq + (uR + nt * 8 + g) * 32 + 8 * t);
                int c[4] = {0, 0, 0, 0};
                mma_s8(c, a, b.x, b.y);
                /* rows 2t and 2t + 1 in one load (job 3 of session 21, an 8B layer at 16 rows: Q4_0
                 * 91.6 -> 88.3 us, Q4_K 106.4 -> 99.2 against two clamped 8-byte loads) */
                const float4 s4 = *(const float4 *)(ts + uR + nt * 8 + 2 * t);
                const cuk_q8s sa{s4.x, __float_as_int(s4.y)}, sb{s4.z, __float_as_int(s4.w)};
                acc[nt][0] += Q::step(sg, c[0], sa);
                acc[nt][1] += Q::step(sg, c[1], sb);
                acc[nt][2] += Q::step(sg8, c[2], sa);
                acc[nt][3] += Q::step(sg8, c[3], sb);
            }
        };
        if (nu == MQ_CU) { /* a whole chunk: no exit in the unrolled loop, so loads can be issued early */
#pragma unroll MQ_UNROLL
            for (int ui = 0; ui < MQ_CU; ui++) unit_step(ui);
        } else {
            for (int ui = 0; ui < nu; ui++) unit_step(ui);
        }
        __syncwarp(); /* every lane is done with this buffer before it is refilled */
    }
    cp_async_wait<0>();
    /* the stages are free: the warps' sums go there, [MQ_WARPS][16][LR] (rows padded by one
     * value, so that the 16 rows of a column read below fall in distinct banks) */
    constexpr int LR = 8 * NT + 1;
    __syncthreads();
    float *red = (float *)mq_stage;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        float *rw = red + (size_t)warp * 16 * LR + nt * 8 + 2 * t;
        rw[g * LR] = acc[nt][0];
        rw[g * LR + 1] = acc[nt][1];
        rw[(g + 8) * LR] = acc[nt][2];
        rw[(g + 8) * LR + 1] = acc[nt][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < GROUPS * 16 * m; i += MQ_WARPS * 32) {
        const int gr = GROUPS == 1 ? 0 : i / (16 * m), r = i % 16, col = GROUPS == 1 ? i / 16 : i / 16 % m;
        const int row = row0 + gr * 16 + r;
        if (row >= o.n_rows) continue;
        const float *rs = red + (size_t)gr * WPG * 16 * LR + r * LR + col; /* the group's first warp */
        float v = rs[0];
#pragma unroll
        for (int w = 1; w < WPG; w++) v += rs[(size_t)w * 16 * LR];
        const gq_out d = gq_find(o, row);
        float *y = d.y + (int64_t)col * d.ldy + d.row;
        const float b = d.bias ? v + d.bias[d.row] : v;
        *y = d.accumulate ? *y + b : b;
    }
}

/* ---- the types of the block decoder interface (kernels/blocks/block.h) ----------------------
 * QB<D> and the decoders D (cuk_blocks.cuh); here their geometry and the dispatch tables. */

/* Whether t is a type of the block decoder interface; then *upb and *bb are its sub-blocks and
 * bytes per block (from its codec's row in the type table). */
bool qb_geom(enum dtype t, int *upb, int *bb) {
    switch (t) {
#define QB_IS(T, t) case DTYPE_##T:
        BLOCK_TYPES(QB_IS)
#undef QB_IS
        break;
    default: return false;
    }
    const struct dtype_info *i = dtype_get((uint32_t)t);
    /* whole sub-blocks, whole blocks per GEMV stage, and 2-byte aligned blocks (the stage copy) */
    NM_ASSERT(i && i->blck_size % QB_UNIT == 0 && GQ_STAGE % (i->blck_size / QB_UNIT) == 0 && i->type_size % 2 == 0);
    *upb = i->blck_size / QB_UNIT;
    *bb = i->type_size;
    return true;
}

template <class D> QB<D> qb_make(enum dtype t) {
    QB<D> q;
    const bool known = qb_geom(t, &q.UPB, &q.BB);
    NM_ASSERT(known);
    return q;
}

/* One case of with_qt / with_qv per type of the block decoder interface: its QB decoder. */
#define QB_CASE(T, t)                  \
    case DTYPE_##T:                    \
        f(qb_make<dec_##t>(DTYPE_##T)); \
        break;

/* f(q) with q the value decoder (QT) of type t: the written-out types, then every type of the
 * block decoder interface. Fatal for a type without one (callers check
 * cuk_matmul_type_supported). */
template <class F> void with_qt(enum dtype t, F &&f) {
    switch (t) {
    case DTYPE_Q4_0: f(QT<DTYPE_Q4_0>()); break;
    case DTYPE_Q4_1: f(QT<DTYPE_Q4_1>()); break;
    case DTYPE_Q8_0: f(QT<DTYPE_Q8_0>()); break;
    case DTYPE_Q4_K: f(QT<DTYPE_Q4_K>()); break;
    case DTYPE_Q5_K: f(QT<DTYPE_Q5_K>()); break;
    case DTYPE_Q6_K: f(QT<DTYPE_Q6_K>()); break;
    case DTYPE_F16: f(QT<DTYPE_F16>()); break;
    case DTYPE_BF16: f(QT<DTYPE_BF16>()); break;
    case DTYPE_F32: f(QT<DTYPE_F32>()); break;
        BLOCK_TYPES(QB_CASE)
    default: nm_fatal("cuk: weight type %d has no CUDA kernel", (int)t);
    }
}

/* The integer decoder of block type T (decoder D): the block decoder interface's, but for the
 * types written out here (QV_5). */
template <int T, class D> struct qv_block {
    static QB<D> make() { return qb_make<D>((enum dtype)T); }
};
template <class D> struct qv_block<DTYPE_Q5_0, D> {
    static QV<DTYPE_Q5_0> make() { return {}; }
};
template <class D> struct qv_block<DTYPE_Q5_1, D> {
    static QV<DTYPE_Q5_1> make() { return {}; }
};
#define QV_BLOCK_CASE(T, t)                           \
    case DTYPE_##T:                                   \
        f(qv_block<DTYPE_##T, dec_##t>::make());      \
        break;

/* f(q) with q the integer decoder (QV) of type t, as with_qt. */
template <class F> void with_qv(enum dtype t, F &&f) {
    switch (t) {
    case DTYPE_Q4_0: f(QV<DTYPE_Q4_0>()); break;
    case DTYPE_Q4_1: f(QV<DTYPE_Q4_1>()); break;
    case DTYPE_Q8_0: f(QV<DTYPE_Q8_0>()); break;
    case DTYPE_Q4_K: f(QV<DTYPE_Q4_K>()); break;
    case DTYPE_Q5_K: f(QV<DTYPE_Q5_K>()); break;
    case DTYPE_Q6_K: f(QV<DTYPE_Q6_K>()); break;
        BLOCK_TYPES(QV_BLOCK_CASE)
    default: nm_fatal("cuk_gemv_q8: weight type %d has no int8 GEMV (a caller did not check cuk_gemv_q8_supported)",
                      (int)t);
    }
}

/* f(QV<t>()) for the 32-value QV types (mmq_kernel's); false for any other type. */
template <class F> bool with_qv32(enum dtype t, F &&f) {
    switch (t) {
    case DTYPE_Q4_0: f(QV<DTYPE_Q4_0>()); return true;
    case DTYPE_Q4_1: f(QV<DTYPE_Q4_1>()); return true;
    case DTYPE_Q8_0: f(QV<DTYPE_Q8_0>()); return true;
    case DTYPE_Q4_K: f(QV<DTYPE_Q4_K>()); return true;
    case DTYPE_Q5_K: f(QV<DTYPE_Q5_K>()); return true;
    case DTYPE_Q5_0: f(QV<DTYPE_Q5_0>()); return true;
    case DTYPE_Q5_1: f(QV<DTYPE_Q5_1>()); return true;
    default: return false;
    }
}

/* One warp per 32-value block of x [m][ldx] (k values per row). */
__global__ void quantize_q8_kernel(const float *__restrict__ x, int64_t ldx, int64_t n_blocks, const cuk_q8buf out) {
    cuk_grid_release();
    cuk_grid_wait(); /* launched with cuk_launch */
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;
    const int64_t per_row = out.k / 32, r = b / per_row, u = b % per_row;
    cuk_q8_warp_store(x[r * ldx + u * 32 + (threadIdx.x & 31)], out, r, u);
}

/* Float weights whose rows are not a whole number of units (or unaligned activations): one
 * value at a time. */
__device__ __forceinline__ float f_elem(enum dtype t, const uint8_t *row, int i) {
    if (t == DTYPE_F32) return ((const float *)row)[i];
    const uint16_t h = ((const uint16_t *)row)[i];
    return t == DTYPE_F16 ? h2f(h) : bf2f(h);
}

__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_scalar_kernel(enum dtype t, const uint8_t *__restrict__ w, size_t row_bytes, size_t expert_bytes,
                       const int32_t *__restrict__ ids, int n_rows, int k, const float *__restrict__ x, int64_t ldx,
                       int x_div, float *__restrict__ y, int64_t ldy, int col0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * GEMV_WARPS + warp;
    if (row >= n_rows) return;
    const int col = col0 + blockIdx.y;
    const uint8_t *wr = w + (ids ? (size_t)ids[col] * expert_bytes : 0) + (size_t)row * row_bytes;
    const float *xr = x + (int64_t)(col / x_div) * ldx;
    float acc = 0.0f;
    for (int i = lane; i < k; i += 32) acc += f_elem(t, wr, i) * xr[i];
    acc = cuk_warp_reduce(acc, cuk_op_add());
    if (lane == 0) y[(int64_t)col * ldy + row] = acc;
}

/* dst[r][0..k) = f16 of rows r < n_rows: block (r, s) decodes units [s DQ_UNITS, (s + 1)
 * DQ_UNITS) of row r, one per thread, into shared memory (each unit's groups of 4 values land
 * where they belong), then writes that stretch of the row out in 16-byte stores, so that a
 * warp's stores are 512 contiguous bytes. A stretch of whole units is a stretch of whole blocks
 * of every type (DQ_UNITS is a multiple of each type's units per block), and so of whole values. */
constexpr int DQ_UNITS = 256;
template <class Q>
__global__ void __launch_bounds__(DQ_UNITS)
    dequant_f16_kernel(const Q q, const uint8_t *__restrict__ w, size_t row_bytes, int units, int64_t k,
                       __half *__restrict__ dst) {
    __shared__ __align__(16) __half seg[DQ_UNITS * Q::UV];
    const int64_t row = blockIdx.x;
    const int u0 = blockIdx.y * DQ_UNITS, u = u0 + threadIdx.x;
    const int v0 = u0 * Q::UV; /* the stretch's first value */
    if (u < units) {
        float v[Q::UV];
        int pos[Q::G];
        q.load(w + (size_t)row * row_bytes, u, v, pos);
#pragma unroll
        for (int g = 0; g < Q::G; g++) {
            const __half2 a = __floats2half2_rn(v[4 * g], v[4 * g + 1]), b = __floats2half2_rn(v[4 * g + 2], v[4 * g + 3]);
            *(uint2 *)(seg + pos[g] - v0) = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
        }
    }
    __syncthreads();
    const int n = NM_MIN(units - u0, DQ_UNITS) * Q::UV; /* values in the stretch, a multiple of 8 */
    __half *d = dst + row * k + v0;
    for (int i = threadIdx.x * 8; i < n; i += DQ_UNITS * 8) *(uint4 *)(d + i) = *(const uint4 *)(seg + i);
}

__global__ void dequant_f16_scalar_kernel(enum dtype t, const uint8_t *__restrict__ w, size_t row_bytes, int64_t k,
                                          int n_rows, __half *__restrict__ dst) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n_rows * k) return;
    const int row = (int)(idx / k), i = (int)(idx % k);
    dst[idx] = __float2half_rn(f_elem(t, w + (size_t)row * row_bytes, i));
}

/* y = f16 of x [..][ldx] (k values per row, total values), rounded first as
 * cuk_act_round_q8 when round_q8: then k and total are multiples of 32 and each warp's 32
 * consecutive values are one q8 block of a row. */
__global__ void act_f16_kernel(const float *__restrict__ x, int64_t ldx, int64_t k, int64_t total, bool round_q8,
                               __half *__restrict__ y) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return; /* whole warps when round_q8 */
    const int64_t r = idx / k, i = idx % k;
    float v = x[r * ldx + i];
    if (round_q8) {
        float d;
        v = cuk_q8_warp_quant(v, &d) * d;
    }
    y[idx] = __float2half_rn(v);
}

int type_units(enum dtype t, int64_t k, bool *vec) {
    int uv = 0;
    switch (t) {
    case DTYPE_Q4_0: case DTYPE_Q4_1: case DTYPE_Q8_0: uv = 16; break;
    case DTYPE_Q4_K: case DTYPE_Q5_K: case DTYPE_Q6_K: uv = 32; break;
    case DTYPE_F16: case DTYPE_BF16: uv = 8; break;
    case DTYPE_F32: uv = 4; break;
    default: {
        int upb, bb;
        if (!qb_geom(t, &upb, &bb))
            nm_fatal("cuk: weight type %d has no CUDA kernel (a caller did not check cuk_matmul_type_supported)",
                     (int)t);
        uv = QB_UNIT;
    }
    }
    *vec = k % uv == 0;
    return (int)(k / uv);
}

size_t row_size(enum dtype t, int64_t k) {
    switch (t) {
    case DTYPE_Q4_0: return (size_t)(k / 32) * 18;
    case DTYPE_Q4_1: return (size_t)(k / 32) * 20;
    case DTYPE_Q8_0: return (size_t)(k / 32) * 34;
    case DTYPE_Q4_K: return (size_t)(k / 256) * 144;
    case DTYPE_Q5_K: return (size_t)(k / 256) * 176;
    case DTYPE_Q6_K: return (size_t)(k / 256) * 210;
    case DTYPE_F16: case DTYPE_BF16: return (size_t)k * 2;
    case DTYPE_F32: return (size_t)k * 4;
    default: {
        int upb, bb;
        return qb_geom(t, &upb, &bb) ? (size_t)(k / (QB_UNIT * upb)) * (size_t)bb : 0;
    }
    }
}

bool is_float_type(enum dtype t) { return t == DTYPE_F32 || t == DTYPE_F16 || t == DTYPE_BF16; }

/* The GEMV for columns [0, n_cols) (tokens, or expert pairs with ids). */
void gemv_launch(struct cuk_ctx *c, enum dtype t, const void *w, size_t expert_bytes, const int32_t *ids, int64_t k,
                 int64_t n, const float *x, int64_t ldx, int x_div, int n_cols, float *y, int64_t ldy) {
    bool vec;
    const int units = type_units(t, k, &vec);
    const size_t rb = row_size(t, k);
    if (!is_float_type(t)) {
        NM_ASSERT(vec && "k must be a multiple of the block size");
        NM_ASSERT(ldx % 4 == 0 && ((uintptr_t)x & 15) == 0);
    }
    const bool use_vec = vec && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 15) == 0 &&
                         (rb % 16 == 0 || !is_float_type(t)) && (expert_bytes % 16 == 0 || !is_float_type(t));
    const uint8_t *wb = (const uint8_t *)w;
    for (int col0 = 0; col0 < n_cols; col0 += 65535) {
        const dim3 grid((unsigned)((n + GEMV_WARPS - 1) / GEMV_WARPS), (unsigned)NM_MIN(65535, n_cols - col0));
        if (use_vec) {
            with_qt(t, [&](auto q) {
                gemv_kernel<<<grid, GEMV_WARPS * 32, 0, c->stream>>>(q, wb, rb, expert_bytes, ids, (int)n, units, x,
                                                                     ldx, x_div, y, ldy, col0);
            });
        } else {
            gemv_scalar_kernel<<<grid, GEMV_WARPS * 32, 0, c->stream>>>(t, wb, rb, expert_bytes, ids, (int)n, (int)k,
                                                                        x, ldx, x_div, y, ldy, col0);
        }
        CUK_LAUNCHED("gemv");
    }
}

void dequant_launch(struct cuk_ctx *c, enum dtype t, const uint8_t *w, int64_t k, int n_rows, __half *dst) {
    bool vec;
    const int units = type_units(t, k, &vec);
    const size_t rb = row_size(t, k);
    const bool use_vec = vec && (!is_float_type(t) || (rb % 16 == 0 && ((uintptr_t)w & 15) == 0)) && k % 8 == 0 &&
                         ((uintptr_t)dst & 15) == 0;
    if (use_vec) {
        const dim3 grid((unsigned)n_rows, (unsigned)((units + DQ_UNITS - 1) / DQ_UNITS));
        with_qt(t, [&](auto q) { dequant_f16_kernel<<<grid, DQ_UNITS, 0, c->stream>>>(q, w, rb, units, k, dst); });
    } else {
        const int64_t total = (int64_t)n_rows * k;
        dequant_f16_scalar_kernel<<<(unsigned)((total + 255) / 256), 256, 0, c->stream>>>(t, w, rb, k, n_rows, dst);
    }
    CUK_LAUNCHED("dequantize to f16");
}

} // namespace

extern "C" bool cuk_matmul_type_supported(enum dtype t) { return row_size(t, 256) != 0; }

extern "C" void cuk_gemv(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x,
                         int64_t ldx, int m, float *y, int64_t ldy) {
    gemv_launch(c, t, w, 0, NULL, k, n, x, ldx, 1, m, y, ldy);
}

extern "C" void cuk_gemm_input(struct cuk_ctx *c, const float *x, int64_t ldx, int m, int64_t k, bool round_q8) {
    NM_ASSERT(m >= 1 && m <= c->max_rows && k <= c->max_k && (!round_q8 || k % 32 == 0));
    const int64_t total = (int64_t)m * k;
    act_f16_kernel<<<(unsigned)((total + 255) / 256), 256, 0, c->stream>>>(x, ldx, k, total, round_q8, c->act16);
    CUK_LAUNCHED("matmul input to f16");
}

extern "C" void cuk_dequant_f16(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, void *dst) {
    NM_ASSERT(t != DTYPE_F32 && n >= 1 && n < ((int64_t)1 << 31) && ((uintptr_t)dst & 15) == 0);
    dequant_launch(c, t, (const uint8_t *)w, k, (int)n, (__half *)dst);
}

extern "C" void cuk_gemm_staged(struct cuk_ctx *c, enum dtype t, const void *w, const void *w16, int64_t k, int64_t n,
                                int m, float *y, int64_t ldy) {
    NM_ASSERT(t != DTYPE_F32 && m >= 1 && m <= c->max_rows && k <= c->max_k);
    const float one = 1.0f, zero = 0.0f;
    if (w16) { /* the weight's f16 copy, made once (cuk_dequant_f16): one GEMM */
        NM_ASSERT(n < ((int64_t)1 << 31));
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, m, (int)k, &one, w16, CUDA_R_16F, (int)k,
                                  c->act16, CUDA_R_16F, (int)k, &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     "f16 GEMM of the prompt path");
        return;
    }
    int64_t rows_per_tile = (int64_t)(c->tile_bytes / ((size_t)k * sizeof(__half)));
    if (rows_per_tile > 64) rows_per_tile -= rows_per_tile % 64;
    NM_ASSERT(rows_per_tile >= 1);
    const size_t rb = row_size(t, k);
    for (int64_t r0 = 0; r0 < n; r0 += rows_per_tile) {
        const int nr = (int)NM_MIN(rows_per_tile, n - r0);
        dequant_launch(c, t, (const uint8_t *)w + (size_t)r0 * rb, k, nr, (__half *)c->tile);
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, m, (int)k, &one, c->tile, CUDA_R_16F, (int)k,
                                  c->act16, CUDA_R_16F, (int)k, &zero, y + r0, CUDA_R_32F, (int)ldy,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "f16 GEMM of the prompt path");
    }
}

extern "C" void cuk_gemm(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x,
                         int64_t ldx, int m, float *y, int64_t ldy) {
    NM_ASSERT(m >= 1 && m <= c->max_rows && k <= c->max_k);
    if (t == DTYPE_F32) {
        const float one = 1.0f, zero = 0.0f;
        CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, m, (int)k, &one, (const float *)w, (int)k, x,
                                 (int)ldx, &zero, y, (int)ldy),
                     "f32 GEMM of the prompt path");
        return;
    }
    cuk_gemm_input(c, x, ldx, m, k, false);
    cuk_gemm_staged(c, t, w, NULL, k, n, m, y, ldy);
}

extern "C" void cuk_matmul(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x,
                           int64_t ldx, int m, float *y, int64_t ldy) {
    if (m <= CUK_GEMV_F32_MAX_ROWS || c->max_rows == 0) cuk_gemv(c, t, w, k, n, x, ldx, m, y, ldy);
    else
        for (int done = 0; done < m;) { /* the GEMM scratch holds max_rows activation rows */
            const int rows = NM_MIN(c->max_rows, m - done);
            cuk_gemm(c, t, w, k, n, x + (int64_t)done * ldx, ldx, rows, y + (int64_t)done * ldy, ldy);
            done += rows;
        }
}

extern "C" size_t cuk_q8_bytes(int m, int64_t k) {
    const int R = cuk_q8_tile_rows(m);
    if (!R) return cuk_q8_qbytes(m, k) + cuk_q8_sbytes(m, k);
    return cuk_q8_tile_offset(m, k) + (size_t)R * (size_t)k + cuk_q8_sbytes(R, k);
}

extern "C" void cuk_quantize_q8(struct cuk_ctx *c, void *xq, const float *x, int64_t ldx, int m, int64_t k) {
    NM_ASSERT(k % 32 == 0 && ldx >= k);
    const int64_t nb = (int64_t)m * (k / 32);
    if (nb < 1) return;
    cuk_launch(c, "quantize_q8", quantize_q8_kernel, (unsigned)((nb + 7) / 8), 256, 0, x, ldx, nb, cuk_q8_at(xq, m, k));
}

extern "C" bool cuk_gemv_q8_supported(enum dtype t) {
    int upb, bb;
    switch (t) {
    case DTYPE_Q4_0: case DTYPE_Q4_1: case DTYPE_Q8_0: case DTYPE_Q4_K: case DTYPE_Q5_K: case DTYPE_Q6_K: return true;
    default: return qb_geom(t, &upb, &bb);
    }
}

/* gemv_q8_kernel<QQ, MR> with as many warps as fit on the device at once, each given the same
 * number of rows (the last block's warps may have one fewer), so that no partial wave of blocks
 * trails. */
template <class QQ, int MR>
void gemv_q8_launch(struct cuk_ctx *c, const QQ qv, const gemv_q8_outs &o, size_t rb, int64_t k, int su,
                    int stage_bytes, size_t smem, const int8_t *q, const cuk_q8s *s, int m, int vec) {
    static_assert(MR <= GQ_MAX_ROWS, "MR");
    static int per_sm = 0; /* per type and MR (the stage size is fixed per type), and per process: a
                              GPU rank drives one device, so one kind of device */
    if (!per_sm) {
        CUK_CHECK(cudaFuncSetAttribute(gemv_q8_kernel<QQ, MR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "shared memory of the q8 GEMV");
        CUK_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_q8_kernel<QQ, MR>, GQ_WARPS * 32, smem),
                  "occupancy of the q8 GEMV");
    }
    const int64_t rows = o.n_rows;
    const int64_t max_warps = (int64_t)NM_MAX(per_sm, 1) * c->sm_count * GQ_WARPS;
    const int64_t rows_per_warp = (rows + max_warps - 1) / max_warps;
    const int64_t warps = (rows + rows_per_warp - 1) / rows_per_warp;
    const unsigned blocks = (unsigned)((warps + GQ_WARPS - 1) / GQ_WARPS);
    cuk_launch(c, "gemv_q8", gemv_q8_kernel<QQ, MR>, blocks, GQ_WARPS * 32, smem, qv, o, rb, (int)(k / QQ::UV), su,
               stage_bytes, q, s, k, m, vec);
}

/* mmq_kernel's shared memory for type QQ: the warps' stages */
template <class QQ> constexpr size_t mmq_smem() { return (size_t)MQ_WARPS * MQ_DEPTH * 16 * (MQ_CU / QQ::UPB * QQ::BB); }

extern "C" bool cuk_q8_tensor_cores(const struct cuk_ctx *c, enum dtype t, int m) {
    size_t smem = 0;
    return c->mmq && m >= CUK_MMQ_MIN_ROWS && m <= CUK_MMQ_MAX_ROWS &&
           with_qv32(t, [&](auto qv) { smem = mmq_smem<decltype(qv)>(); }) &&
           smem <= (size_t)c->smem_optin; /* (Q8_0's 104 KiB exceed sm_86/89's 99 KiB) */
}

extern "C" bool cuk_gemv_q8_takes(const struct cuk_ctx *c, enum dtype t, int m) {
    return cuk_gemv_q8_supported(t) && m >= 1 && (m <= CUK_GEMV_MAX_ROWS || cuk_q8_tensor_cores(c, t, m));
}

/* Whether a launch is tall enough to give each group of 16 weight rows one warp, which takes the
 * whole of K, instead of MQ_WARPS warps that take slices of it: at NM_MQ_TALL groups per SM, one
 * warp a group already fills the device, so splitting K only added blocks whose life is a chunk
 * or two and a reduction across warps. A property of the shape alone, so a row's sum order (and
 * its bits) does not depend on the row count. Heads are the launches it takes (qwen2.5-0.5b's
 * 151936 x 896, llama-3-8b's 128256 x 4096). Job 5 of session 23, H200, `bench_gpu rows`, us per
 * head launch at 16 / 48 rows: qwen2.5-0.5b Q4_0 134.0 / 213.9 -> 73.1 / 131.2 (one row's GEMV:
 * 66.5); llama-3-8b Q4_0 164.1 / 334.6 -> 155.9 / 344.4, Q4_K 193.3 / 354.8 -> 181.9 / 367.7. At
 * 4 groups per SM (gate/up too) qwen2.5-0.5b's gate/up at 16 rows went 9.63 -> 10.78 us. */
#ifndef NM_MQ_TALL
#define NM_MQ_TALL 16 /* (a build option for measurements: groups of 16 rows per SM; 0: never) */
#endif
static bool mmq_tall(const struct cuk_ctx *c, int64_t n_rows) {
    return NM_MQ_TALL > 0 && (n_rows + 15) / 16 >= (int64_t)NM_MQ_TALL * c->sm_count;
}

/* mmq_kernel<QQ, NT, WPG> over the outputs' rows in groups of 16. */
template <class QQ, int NT, int WPG>
void mmq_go(struct cuk_ctx *c, const gemv_q8_outs &o, size_t rb, int64_t k, int chunk_bytes, size_t smem,
            const cuk_q8buf &b, int m, int vec) {
    static bool ready = false; /* per instantiation and process (one device per GPU rank) */
    if (!ready) {
        CUK_CHECK(cudaFuncSetAttribute(mmq_kernel<QQ, NT, WPG>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "shared memory of the tensor-core q8 matmul");
        ready = true;
    }
    constexpr int BLOCK_ROWS = 16 * (MQ_WARPS / WPG); /* weight rows per block */
    const unsigned blocks = (unsigned)((o.n_rows + BLOCK_ROWS - 1) / BLOCK_ROWS);
    cuk_launch(c, "mmq", mmq_kernel<QQ, NT, WPG>, blocks, MQ_WARPS * 32, smem, o, rb, (int)(k / QQ::UV), chunk_bytes,
               (const int8_t *)b.tq, (const cuk_q8s *)b.ts, b.R, m, vec);
}

/* mmq_go with the fewest n-tiles of 8 rows that hold m rows (NT: the fewest tried yet). */
template <class QQ, int NT>
void mmq_pick(struct cuk_ctx *c, const gemv_q8_outs &o, size_t rb, int64_t k, int chunk_bytes, size_t smem,
              const cuk_q8buf &b, int m, int vec) {
    if constexpr (NT * 8 < CUK_MMQ_MAX_ROWS) {
        if (m > NT * 8) {
            mmq_pick<QQ, NT + 1>(c, o, rb, k, chunk_bytes, smem, b, m, vec);
            return;
        }
    }
    if (mmq_tall(c, o.n_rows)) mmq_go<QQ, NT, 1>(c, o, rb, k, chunk_bytes, smem, b, m, vec);
    else mmq_go<QQ, NT, MQ_WARPS>(c, o, rb, k, chunk_bytes, smem, b, m, vec);
}

template <class QQ>
void mmq_launch(struct cuk_ctx *c, const gemv_q8_outs &o, size_t rb, int64_t k, const cuk_q8buf &b, int m, int vec) {
    const int chunk_bytes = MQ_CU / QQ::UPB * QQ::BB;
    /* (the kernel reads every fragment row of its n-tiles, up to R, and the scales of two rows
     * as one 16-byte load) */
    NM_ASSERT(MQ_CU % QQ::UPB == 0 && chunk_bytes % 16 == 0 && k % 32 == 0 && b.tq && b.R >= (m + 7) / 8 * 8 &&
              (uintptr_t)b.ts % 16 == 0);
    const size_t smem = mmq_smem<QQ>();
    static_assert(mmq_smem<QQ>() >= (size_t)MQ_WARPS * 16 * (CUK_MMQ_MAX_ROWS + 1) * sizeof(float),
                  "the warps' sums fit the stages");
    static_assert(CUK_MMQ_MAX_ROWS <= 64 && CUK_GEMV_MAX_ROWS <= CUK_MMQ_MAX_ROWS,
                  "mmq_kernel's accumulators are sized for up to 8 n-tiles");
    mmq_pick<QQ, 1>(c, o, rb, k, chunk_bytes, smem, b, m, vec);
}

extern "C" void cuk_gemv_q8(struct cuk_ctx *c, enum dtype t, int64_t k, const void *xq, int m,
                            const struct cuk_gemv_out *outs, int n_outs) {
    NM_ASSERT(cuk_gemv_q8_takes(c, t, m) && k % dtype_get((uint32_t)t)->blck_size == 0);
    NM_ASSERT(n_outs >= 1 && n_outs <= CUK_GEMV_MAX_OUTS);
    gemv_q8_outs o;
    memset(&o, 0, sizeof o);
    int rows = 0;
    for (int i = 0; i < n_outs; i++) {
        o.w[i] = (const uint8_t *)outs[i].w;
        o.y[i] = outs[i].y;
        o.bias[i] = outs[i].bias;
        o.ldy[i] = outs[i].ldy;
        o.accumulate[i] = outs[i].accumulate;
        NM_ASSERT(outs[i].n >= 1 && rows + outs[i].n < (int64_t)1 << 30);
        rows += (int)outs[i].n;
        o.row_end[i] = rows;
    }
    o.n_outs = n_outs;
    o.n_rows = rows;
    const cuk_q8buf b = cuk_q8_at((void *)xq, m, k); /* (its pointers are only read here) */
    const int8_t *q = b.q;
    const cuk_q8s *s = b.s;
    NM_ASSERT(((uintptr_t)q & 15) == 0);
    const size_t rb = row_size(t, k);
    /* widest load that every row start and stage offset keeps aligned */
    uintptr_t al = rb;
    for (int i = 0; i < n_outs; i++) al |= (uintptr_t)outs[i].w;
    const int vec = al % 16 == 0 ? 16 : al % 8 == 0 ? 8 : al % 4 == 0 ? 4 : 2;
    if (cuk_q8_tensor_cores(c, t, m)) {
        NM_ASSERT(with_qv32(t, [&](auto qv) { mmq_launch<decltype(qv)>(c, o, rb, k, b, m, vec); }));
        return;
    }
    /* the GEMV, in passes of up to GQ_MAX_ROWS rows */
    for (int r0 = 0; r0 < m; r0 += GQ_MAX_ROWS) {
        const int mr = NM_MIN(GQ_MAX_ROWS, m - r0);
        gemv_q8_outs op = o;
        for (int i = 0; i < n_outs; i++) op.y[i] = o.y[i] + (int64_t)r0 * o.ldy[i];
        const int8_t *qr = q + (int64_t)r0 * k;
        const cuk_q8s *sr = s + (int64_t)r0 * (k / 32);
        with_qv(t, [&](auto qv) {
            using QQ = decltype(qv);
            /* a stage: whole blocks, a multiple of 16 bytes (vec loads) */
            int su = GQ_STAGE;
            if (su / qv.UPB * qv.BB > GQ_STAGE_MAX) su /= 2;
            const int stage_bytes = su / qv.UPB * qv.BB;
            NM_ASSERT(su % qv.UPB == 0 && stage_bytes % 16 == 0 && stage_bytes <= GQ_STAGE_MAX);
            const size_t smem = (size_t)GQ_WARPS * GQ_DEPTH * (size_t)stage_bytes;
            static_assert(GQ_MAX_ROWS == 8, "the instantiations below cover 1 .. GQ_MAX_ROWS rows");
            if (mr == 1) gemv_q8_launch<QQ, 1>(c, qv, op, rb, k, su, stage_bytes, smem, qr, sr, mr, vec);
            else if (mr <= 4) gemv_q8_launch<QQ, 4>(c, qv, op, rb, k, su, stage_bytes, smem, qr, sr, mr, vec);
            else gemv_q8_launch<QQ, 8>(c, qv, op, rb, k, su, stage_bytes, smem, qr, sr, mr, vec);
        });
    }
}

extern "C" void cuk_matmul_id(struct cuk_ctx *c, enum dtype t, const void *w, size_t expert_bytes, int64_t k,
                              int64_t n, const float *x, int64_t ldx, int x_div, const int32_t *ids, int n_pairs,
                              float *y, int64_t ldy) {
    gemv_launch(c, t, w, expert_bytes, ids, k, n, x, ldx, x_div, n_pairs, y, ldy);
}
