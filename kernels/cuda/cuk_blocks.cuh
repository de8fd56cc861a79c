/* The CUDA kernels' unit over the block decoder interface (kernels/blocks/block.h): QB<D>, the
 * value decoder (load, as matmul.cu's QT) and the integer dot (dot, as its QV) of a type whose
 * decoder is D::decode (its <type>_decode32), and one D per type of BLOCK_TYPES. A unit is one
 * 32-value sub-block: sub-block u % UPB of block u / UPB; UPB (sub-blocks per block) and BB
 * (bytes per block) come from the type's codec at launch (matmul.cu's qb_geom), so that nothing
 * here is written per type.
 *
 * Everything here is __host__ __device__, with the three intrinsics it needs (dp4a, f32 multiply
 * and add without contraction) given a host twin: the device code itself runs on the host in
 * tests/gpu/test_gpu_blocks_host.cu (bit-exact with block_vec_dot_ref and dequantize_row_ref,
 * without a GPU). The decoders read their codebooks from the copy of the side they run on
 * (BLK_TABLE). C++ for nvcc only. */
#ifndef NM_CUK_BLOCKS_CUH
#define NM_CUK_BLOCKS_CUH

#include <stdint.h>
#include <string.h>

#include "blocks/blocks_all.h"
#include "cuk_internal.h" /* struct cuk_q8s */

/* #pragma unroll for the device pass only (the host compiler does not know it). */
#ifdef __CUDA_ARCH__
#define CUK_UNROLL _Pragma("unroll")
#else
#define CUK_UNROLL
#endif

/* sum of the 4 signed byte products of a and b, plus c (__dp4a). */
__host__ __device__ __forceinline__ int cuk_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}
/* a * b and a + b rounded once each, never fused into a multiply-add (nvcc contracts a * b + c;
 * the host build has no FMA to contract into). */
__host__ __device__ __forceinline__ float cuk_fmul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ __forceinline__ float cuk_fadd(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

constexpr int QB_UNIT = BLK_SUB; /* values per unit of every QB: one decoded sub-block */
template <class D> struct QB {
    static constexpr int UV = QB_UNIT, G = QB_UNIT / 4; /* values per unit; groups of 4 (as QT) */
    int UPB, BB;
    /* The unit's 32 values as the reference dequantizes them: d * q + m, one rounding each (no
     * fused multiply-add, which would round once and could differ from ggml's float). */
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int u, float *v, int *pos) const {
        struct block_sub32 s;
        D::decode(row + (size_t)(u / UPB) * BB, u % UPB, &s);
CUK_UNROLL
        for (int l = 0; l < 32; l++) v[l] = cuk_fadd(cuk_fmul(s.d[l / 16], (float)s.q[l]), s.m[l / 16]);
CUK_UNROLL
        for (int g = 0; g < G; g++) pos[g] = u * 32 + 4 * g;
    }
    /* The GEMV's two steps (as matmul.cu's QV): unit(row, u) decodes unit u once for every
     * activation row; dot(w, u, aq, as) is block_vec_dot_ref's sum for it and one q8 row: exact
     * integer sums of q * a per 16-value half (dp4a) and of a per half, then
     * a.d * ((d0 s0 + d1 s1) + (m0 t0 + m1 t1)) in the reference's order and roundings. The unit
     * is q8 activation block u. */
    typedef struct block_sub32 W;
    __host__ __device__ __forceinline__ W unit(const uint8_t *__restrict__ row, int u) const {
        struct block_sub32 s;
        D::decode(row + (size_t)(u / UPB) * BB, u % UPB, &s);
        return s;
    }
    __host__ __device__ __forceinline__ float dot(const W &s, int u, const int8_t *__restrict__ aq,
                                                  const cuk_q8s *__restrict__ as) const {
        const int4 a0 = *(const int4 *)(aq + u * 32), a1 = *(const int4 *)(aq + u * 32 + 16);
        const cuk_q8s sa = as[u];
        const int av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        int sq[2] = {0, 0};
CUK_UNROLL
        for (int i = 0; i < 8; i++) {
            int w; /* 4 codes as one word (little-endian, as dp4a reads them): no byte repacking */
            memcpy(&w, s.q + 4 * i, 4);
            sq[i / 4] = cuk_dp4a(w, av[i], sq[i / 4]);
        }
        int t0 = cuk_dp4a(0x01010101, a0.x, 0);
        t0 = cuk_dp4a(0x01010101, a0.y, t0);
        t0 = cuk_dp4a(0x01010101, a0.z, t0);
        t0 = cuk_dp4a(0x01010101, a0.w, t0);
        const int t1 = sa.isum - t0;
        const float sd = cuk_fadd(cuk_fmul(s.d[0], (float)sq[0]), cuk_fmul(s.d[1], (float)sq[1]));
        const float sm = cuk_fadd(cuk_fmul(s.m[0], (float)t0), cuk_fmul(s.m[1], (float)t1));
        return cuk_fmul(sa.d, cuk_fadd(sd, sm));
    }
    __host__ __device__ __forceinline__ float dot1(const uint8_t *__restrict__ row, int u, const int8_t *__restrict__ aq,
                                                   const cuk_q8s *__restrict__ as) const {
        return dot(unit(row, u), u, aq, as);
    }
};

/* D::decode of each type, from BLOCK_TYPES (the decoders come from blocks/blocks_all.h). */
#define QB_DECODER(T, t)                                                                          \
    struct dec_##t {                                                                              \
        static __host__ __device__ __forceinline__ void decode(const void *b, int j,              \
                                                               struct block_sub32 *o) {           \
            t##_decode32(b, j, o);                                                                \
        }                                                                                         \
    };
BLOCK_TYPES(QB_DECODER)
#undef QB_DECODER

#endif
