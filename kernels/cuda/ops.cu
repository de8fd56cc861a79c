/* Element-wise operations, attention, MoE routing and top-k of the GPU rank (see
 * cuda_kernels.h). Each follows the arithmetic of its CPU twin in kernels/ops.c (sums of squares
 * in double, the same operation order) so that the two agree to rounding. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuk_internal.h"

namespace {

constexpr int NT = 256; /* threads of the row kernels */

/* Block-wide reduction (every thread gets the result); red holds 32 values, init is op's
 * identity. */
template <typename V, typename Op> __device__ V block_reduce(V v, V *red, V init, Op op) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = cuk_warp_reduce(v, op);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    V t = init;
    for (int i = 0; i < nw; i++) t = op(t, red[i]);
    return t;
}
__device__ double block_sum_d(double v, double *red) { return block_reduce(v, red, 0.0, cuk_op_add()); }
__device__ float block_sum(float v, float *red) { return block_reduce(v, red, 0.0f, cuk_op_add()); }
__device__ float block_max(float v, float *red) { return block_reduce(v, red, -INFINITY, cuk_op_max()); }

/* 1 / sqrt(mean(x^2) + eps) of the block's row x[n], the sum of squares in double (op_rmsnorm).
 * A thread's loads (16-byte ones where the row allows) are all issued before its sums: the row
 * was just written by the kernel before, and one dependent load at a time made a decode step's
 * norm take as long as a 4096-row GEMV. */
__device__ float row_rms_scale(const float *xr, int64_t n, float eps) {
    __shared__ double red[32];
    double ss = 0;
    if (n % 4 == 0 && ((uintptr_t)xr & 15) == 0) {
        const float4 *x4 = (const float4 *)xr;
        const int64_t n4 = n / 4, bd = blockDim.x;
        int64_t i = threadIdx.x;
        for (; i + 3 * bd < n4; i += 4 * bd) {
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = x4[i + j * bd];
#pragma unroll
            for (int j = 0; j < 4; j++)
                ss += (double)v[j].x * v[j].x + (double)v[j].y * v[j].y + (double)v[j].z * v[j].z +
                      (double)v[j].w * v[j].w;
        }
        for (; i < n4; i += bd) {
            const float4 v = x4[i];
            ss += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * xr[i];
    }
    ss = block_sum_d(ss, red);
    return (float)(1.0 / sqrt(ss / (double)n + eps));
}

__global__ void rmsnorm_kernel(float *y, const float *x, const float *__restrict__ w, int64_t n, float eps) {
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    const float scale = row_rms_scale(xr, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

__global__ void add_kernel(float *x, const float *y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void add_bias_kernel(float *y, const float *b, int64_t n, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] += b[i % n];
}

__global__ void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__device__ __forceinline__ void kv_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void kv_st(__half *p, float v) { *p = __float2half_rn(v); }

/* One head of head_dim values at src, by the whole block: optional RMSNorm (norm_w), then RoPE
 * with the position's cos/sin pairs cs (op_rope), written to dst (f32; may be src; NULL: not
 * written) and to cache_h (a KV cache row, f32 or f16) when it is not NULL. The sum of squares
 * is the first warp's, in a fixed order, so a head's bits do not depend on the block's size
 * (rope_store_kernel and attn_kernel must agree to the bit). */
template <typename KT>
__device__ void norm_rope_head(const float *src, float *dst, int64_t head_dim, const float *__restrict__ norm_w,
                               float eps, const float *__restrict__ cs, int64_t n_rot, int neox, KT *cache_h) {
    __shared__ float buf[1024];
    __shared__ float scale_s;
    __syncthreads(); /* a call before is done with buf */
    for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) buf[d] = src[d];
    __syncthreads();
    if (norm_w) {
        if (threadIdx.x < 32) {
            double ss = 0;
            for (int64_t d = threadIdx.x; d < head_dim; d += 32) ss += (double)buf[d] * buf[d];
            ss = cuk_warp_reduce(ss, cuk_op_add());
            if (threadIdx.x == 0) scale_s = (float)(1.0 / sqrt(ss / (double)head_dim + eps));
        }
        __syncthreads();
        const float scale = scale_s;
        for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) buf[d] = buf[d] * scale * norm_w[d];
        __syncthreads();
    }
    const int64_t half = n_rot / 2;
    for (int64_t p = threadIdx.x; p < half; p += blockDim.x) {
        const int64_t i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
        const float c = cs[2 * p], s = cs[2 * p + 1];
        const float a = buf[i0], b = buf[i1];
        const float r0 = a * c - b * s, r1 = a * s + b * c;
        if (dst) {
            dst[i0] = r0;
            dst[i1] = r1;
        }
        if (cache_h) {
            kv_st(cache_h + i0, r0);
            kv_st(cache_h + i1, r1);
        }
    }
    for (int64_t d = n_rot + threadIdx.x; d < head_dim; d += blockDim.x) {
        if (dst) dst[d] = buf[d];
        if (cache_h) kv_st(cache_h + d, buf[d]);
    }
}

/* One (head, row) per block: optional RMSNorm of the head, then RoPE (op_rope). */
__global__ void norm_rope_kernel(float *x, int64_t head_dim, int64_t row_stride, const float *__restrict__ norm_w,
                                 float eps, const float *__restrict__ cos_sin, int64_t pos0, int64_t n_rot, int neox) {
    const int h = blockIdx.x, i = blockIdx.y;
    float *xh = x + (int64_t)i * row_stride + (int64_t)h * head_dim;
    norm_rope_head<float>(xh, xh, head_dim, norm_w, eps, cos_sin + (pos0 + i) * n_rot, n_rot, neox, NULL);
}

/* Blocks h < n_head: q's head h; the next n_head_kv: k's head (also stored to the K cache) and
 * v's head copied to the V cache. One row per blockIdx.y: row i at position rows[2i] of the
 * sequence whose positions start at cache row rows[2i + 1]. */
template <typename KT>
__global__ void rope_store_kernel(float *q, float *k, const float *__restrict__ v, int n_head, int64_t hd,
                                  int64_t hdv, int64_t k_row, int64_t v_row, cuk_rope r, KT *kc, KT *vc,
                                  const int64_t *__restrict__ rows) {
    cuk_grid_release();
    cuk_grid_wait(); /* launched with cuk_launch */
    const int h = blockIdx.x, i = blockIdx.y;
    const int64_t pos = rows[2 * i], crow = rows[2 * i + 1] + pos; /* its cache row */
    const float *cs = r.cos_sin + pos * r.n_rot;
    if (h < n_head) {
        float *qh = q + (int64_t)i * n_head * hd + (int64_t)h * hd;
        norm_rope_head<KT>(qh, qh, hd, r.q_norm, r.eps, cs, r.n_rot, r.neox, NULL);
        return;
    }
    const int hk = h - n_head;
    float *kh = k + (int64_t)i * k_row + (int64_t)hk * hd;
    norm_rope_head<KT>(kh, kh, hd, r.k_norm, r.eps, cs, r.n_rot, r.neox, kc + crow * k_row + (int64_t)hk * hd);
    const float *vs = v + (int64_t)i * v_row + (int64_t)hk * hdv;
    KT *vd = vc + crow * v_row + (int64_t)hk * hdv;
    for (int64_t d = threadIdx.x; d < hdv; d += blockDim.x) kv_st(vd + d, vs[d]);
}

__global__ void kv_store_f32_kernel(float *cache, const float *src, int64_t n, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) cache[i] = src[i];
}
__global__ void kv_store_f16_kernel(__half *cache, const float *src, int64_t n, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) cache[i] = __float2half_rn(src[i]);
}

constexpr int ATT_T = 256; /* threads and positions per tile */

/* 4 consecutive cache values loaded whole (8 or 16 bytes) apart from their conversion to f32, so
 * that a warp's loads of several rows are all in flight before the first is used. */
__device__ __forceinline__ uint2 kv_raw4(const __half *p) { return *(const uint2 *)p; }
__device__ __forceinline__ float4 kv_raw4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ void kv_f32(uint2 r, float *o) {
    const float2 a = __half22float2(*(const __half2 *)&r.x), b = __half22float2(*(const __half2 *)&r.y);
    o[0] = a.x; o[1] = a.y; o[2] = b.x; o[3] = b.y;
}
__device__ __forceinline__ void kv_f32(float4 r, float *o) { o[0] = r.x; o[1] = r.y; o[2] = r.z; o[3] = r.w; }
/* one value at a time (rows of a head size not a multiple of 4) */
__device__ __forceinline__ float kv_ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float kv_ld(const float *p) { return *p; }

constexpr int ATT_WARPS = ATT_T / 32;

/* The f32 values o[u][c][0..4) of rows j0 + u * ATT_WARPS (< tl) of base (rows of stride
 * values), dimensions c * 128 + lane * 4 + 0..3 (< hd); 0 elsewhere. */
template <typename KT, int DC, bool V4, int U>
__device__ __forceinline__ void kv_rows(const KT *base, int64_t stride, int j0, int tl, int hd, int lane,
                                        float (&o)[U][DC][4]) {
    if constexpr (V4) {
        decltype(kv_raw4(base)) raw[U][DC];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < DC; c++) {
                const int j = j0 + u * ATT_WARPS, d = c * 128 + lane * 4;
                raw[u][c] = {};
                if (j < tl && d < hd) raw[u][c] = kv_raw4(base + (int64_t)j * stride + d);
            }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < DC; c++) kv_f32(raw[u][c], o[u][c]);
    } else {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < DC; c++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = j0 + u * ATT_WARPS, d = c * 128 + lane * 4 + e;
                    o[u][c][e] = j < tl && d < hd ? kv_ld(base + (int64_t)j * stride + d) : 0.0f;
                }
    }
}

/* One (query head, row) per block, or with splits (gridDim.z > 1) a contiguous span of its
 * positions per block. Positions in tiles of ATT_T: warp w takes positions w, w + ATT_WARPS, ... of
 * a tile, 8 / DC at a time (their K rows are loaded together, each lane holding 4 of every 128
 * dimensions, so a row is one coalesced read), and scores them with a shuffle sum; the tile's
 * softmax numerators are rescaled online against the running max; then the same warp adds its
 * positions' V rows into its lanes' output dimensions. At the end the warps' partial outputs are
 * added in warp order (the same bits every run). Row i is at position pos0 + i of a sequence
 * whose positions start at cache row 0, or when rows is not NULL at position rows[2i] of one
 * starting at cache row rows[2i + 1] (read when the kernel runs: a graph replays it).
 * Splits: a row of n_kv positions takes spans of whole tiles, at least one tile each and as many
 * spans (up to gridDim.z) as that allows, so the split depends on the row's position alone; a
 * row of one span is written as without splits. Otherwise each span's block leaves its running
 * max, sum and unnormalized output in scratch and counts itself in cnt; the last of them adds
 * the spans in span order (the same bits whichever finished last) and resets the count.
 * k, v (rows only, with ra): the rows' K and V before RoPE, and q too; the block rotates its q
 * head (norm_rope_head, into shared memory) and stores, before it attends, the K and V rows of
 * its sequence's rows in this launch whose positions fall in its span: the bytes
 * rope_store_kernel stores. Other blocks (the group's other heads, the sequence's later rows)
 * store the same rows at the same time; that is sound only because every block computes them
 * to the same bits (the fixed-order sum in norm_rope_head), so a change that lets them differ
 * (a block-size-dependent reduction, atomics) is a correctness bug, not a rounding change.
 * V4: the rows allow vector loads (head dims multiples of 4, aligned caches). DC: 128-value
 * chunks of the longer head (of K or V). */
template <typename KT, int DC, bool V4>
__global__ void __launch_bounds__(ATT_T)
    attn_kernel(float *out, int64_t ldo, const float *__restrict__ q, const float *__restrict__ k,
                const float *__restrict__ v, KT *kc, KT *vc, int64_t k_row, int64_t v_row, int64_t pos0,
                const int64_t *rows, int n_head, int group, int hd, int hdv, float scale, cuk_rope ra, const cuk_q8buf oq,
                int oq_row0, float *scratch, int *cnt) {
    constexpr int ATT_U = 8 / DC; /* positions a warp loads at once: 8 loads in flight per lane */
    __shared__ float ps[ATT_T];
    __shared__ float red[32];
    __shared__ float part[ATT_WARPS][DC * 128];
    __shared__ int last;
    cuk_grid_release();
    cuk_grid_wait(); /* launched with cuk_launch */
    const int h = blockIdx.x, i = blockIdx.y, hk = h / group, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t pos = rows ? rows[2 * i] : pos0 + i, base = rows ? rows[2 * i + 1] : 0;
    const int64_t n_kv = pos + 1, n_spans = gridDim.z;
    const int64_t per = (n_kv + n_spans - 1) / n_spans;
    const int64_t span = NM_MAX((int64_t)ATT_T, (per + ATT_T - 1) / ATT_T * ATT_T);
    const int n_split = (int)((n_kv + span - 1) / span), z = blockIdx.z;
    if (z >= n_split) return; /* (uniform across the block) */
    const int64_t t_begin = z * span, t_end = NM_MIN(n_kv, t_begin + span);
    const float *qh = q + (int64_t)i * n_head * hd + (int64_t)h * hd;
    if (k) { /* q, k, v before RoPE (rows in device memory) */
        __shared__ float q_rot[DC * 128];
        norm_rope_head<KT>(qh, q_rot, hd, ra.q_norm, ra.eps, ra.cos_sin + pos * ra.n_rot, ra.n_rot, ra.neox,
                           (KT *)NULL);
        /* The K and V of the launch's rows of this sequence up to this one (adjacent, at
         * consecutive positions): no launch before stored them, so each block that reads one in
         * its span stores it first, the bytes rope_store_kernel would (blocks of the other heads
         * of the group, and of the sequence's later rows, store the same bytes). */
        int j0 = i;
        while (j0 > 0 && rows[2 * j0 - 1] == base && rows[2 * j0 - 2] == rows[2 * j0] - 1) j0--;
        for (int j = j0; j <= i; j++) {
            const int64_t p = pos - (i - j);
            if (p < t_begin || p >= t_end) continue; /* (uniform across the block) */
            norm_rope_head<KT>(k + (int64_t)j * k_row + (int64_t)hk * hd, NULL, hd, ra.k_norm, ra.eps,
                               ra.cos_sin + p * ra.n_rot, ra.n_rot, ra.neox, kc + (base + p) * k_row + (int64_t)hk * hd);
            KT *vd = vc + (base + p) * v_row + (int64_t)hk * hdv;
            const float *vs = v + (int64_t)j * v_row + (int64_t)hk * hdv;
            for (int d = threadIdx.x; d < hdv; d += ATT_T) kv_st(vd + d, vs[d]);
        }
        __syncthreads(); /* the stores and q_rot are visible to the whole block */
        qh = q_rot;
    }
    float qv[DC][4], acc[DC][4] = {};
#pragma unroll
    for (int c = 0; c < DC; c++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int d = c * 128 + lane * 4 + j;
            qv[c][j] = d < hd ? qh[d] : 0.0f;
        }
    const KT *k0 = kc + base * k_row + (int64_t)hk * hd, *v0 = vc + base * v_row + (int64_t)hk * hdv;
    float m_run = -INFINITY, l_run = 0.0f;
    for (int64_t t0 = t_begin; t0 < t_end; t0 += ATT_T) {
        const int tl = (int)NM_MIN((int64_t)ATT_T, t_end - t0);
        for (int j0 = warp; j0 < tl; j0 += ATT_WARPS * ATT_U) {
            float kv[ATT_U][DC][4];
            kv_rows<KT, DC, V4>(k0 + t0 * k_row, k_row, j0, tl, hd, lane, kv);
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                float sc = 0.0f;
#pragma unroll
                for (int c = 0; c < DC; c++)
                    sc += qv[c][0] * kv[u][c][0] + qv[c][1] * kv[u][c][1] + qv[c][2] * kv[u][c][2] +
                          qv[c][3] * kv[u][c][3];
                sc = cuk_warp_reduce(sc, cuk_op_add());
                const int j = j0 + u * ATT_WARPS;
                if (lane == 0 && j < tl) ps[j] = sc * scale;
            }
        }
        __syncthreads();
        const float sj = threadIdx.x < tl ? ps[threadIdx.x] : -INFINITY;
        const float m_new = fmaxf(m_run, block_max(sj, red)); /* syncs: every score is read */
        const float corr = expf(m_run - m_new);
        const float p = threadIdx.x < tl ? expf(sj - m_new) : 0.0f;
        const float psum = block_sum(p, red);
        if (threadIdx.x < tl) ps[threadIdx.x] = p;
        l_run = l_run * corr + psum;
        m_run = m_new;
        __syncthreads();
#pragma unroll
        for (int c = 0; c < DC; c++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[c][j] *= corr;
        for (int j0 = warp; j0 < tl; j0 += ATT_WARPS * ATT_U) {
            float vv[ATT_U][DC][4];
            kv_rows<KT, DC, V4>(v0 + t0 * v_row, v_row, j0, tl, hdv, lane, vv);
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                const int j = j0 + u * ATT_WARPS;
                const float pj = j < tl ? ps[j] : 0.0f;
#pragma unroll
                for (int c = 0; c < DC; c++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[c][e] += pj * vv[u][c][e];
            }
        }
        __syncthreads(); /* the next tile rewrites ps */
    }
#pragma unroll
    for (int c = 0; c < DC; c++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int d = c * 128 + lane * 4 + j;
            if (d < hdv) part[warp][d] = acc[c][j];
        }
    __syncthreads();
    for (int d = threadIdx.x; d < hdv; d += ATT_T) { /* the warps' sums, in warp order, into part[0] */
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) sum += part[w][d];
        part[0][d] = sum;
    }
    float inv = 1.0f / l_run;
    if (n_split > 1) {
        const int64_t cell = (int64_t)i * n_head + h, stride = hdv + 2;
        float *mine = scratch + (cell * n_spans + z) * stride;
        for (int d = threadIdx.x; d < hdv; d += ATT_T) mine[2 + d] = part[0][d];
        if (threadIdx.x == 0) {
            mine[0] = m_run;
            mine[1] = l_run;
        }
        __threadfence(); /* the partials are visible before the count says so */
        __syncthreads();
        if (threadIdx.x == 0) {
            last = atomicAdd(&cnt[cell], 1) == n_split - 1;
            if (last) cnt[cell] = 0; /* every span has counted: ready for the next launch */
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        const float *sp = scratch + cell * n_spans * stride;
        float mx = -INFINITY, l = 0.0f;
        for (int zz = 0; zz < n_split; zz++) mx = fmaxf(mx, __ldcg(sp + zz * stride));
        for (int zz = 0; zz < n_split; zz++) { /* each span's factor, once (ps is free by now) */
            const float f = expf(__ldcg(sp + zz * stride) - mx);
            if (threadIdx.x == 0) ps[zz] = f;
            l += __ldcg(sp + zz * stride + 1) * f;
        }
        __syncthreads();
        for (int d = threadIdx.x; d < hdv; d += ATT_T) {
            float a = 0.0f;
            for (int zz = 0; zz < n_split; zz++) a += __ldcg(sp + zz * stride + 2 + d) * ps[zz];
            part[0][d] = a;
        }
        inv = 1.0f / l;
    }
    __syncthreads();
    if (oq.q) { /* a warp per 32 output values, their q8 block as cuk_quantize_q8 writes it */
        for (int d0 = warp * 32; d0 < hdv; d0 += ATT_T) {
            const float o = part[0][d0 + lane] * inv;
            out[(int64_t)i * ldo + (int64_t)h * hdv + d0 + lane] = o;
            cuk_q8_warp_store(o, oq, oq_row0 + i, ((int64_t)h * hdv + d0) / 32);
        }
        return;
    }
    for (int d = threadIdx.x; d < hdv; d += ATT_T) out[(int64_t)i * ldo + (int64_t)h * hdv + d] = part[0][d] * inv;
}

/* ---- prompt attention on tensor cores ------------------------------------------------------
 * Rows of a prompt chunk (m >= ATT_MMA_MIN_ROWS, F16 cache, head_dim = head_dim_v of 64 or 128)
 * run a flash-attention kernel on mma.sync m16n8k16 (f16 inputs, f32 accumulation): a block
 * takes FA_ROWS consecutive query rows of one head, each warp 16 of them; the block walks the
 * KV positions its last row sees in tiles of FA_KEYS, loading each K and V tile once into shared
 * memory for its 4 warps. Per tile a warp forms S = Q K^T, masks the positions after each row's
 * own, updates each row's running max and sum (exp2 of scaled scores, f32) and adds P V.
 * K and V are f16 in the cache already; Q and P are f32, and each is split into two f16 parts
 * (hi = f16(x), lo = f16(x - hi): 22 of f32's 24 bits), each product taken twice, so the kernel
 * keeps f32 accuracy (a lone f16 Q errs by 2^-11 of each score, which large scores turn into a
 * visible change of the softmax). Rows alone (decode) run attn_kernel; the two agree to f32
 * rounding, not to the bit (forward.h's caveat on prompt and decode rows). */
constexpr int FA_WARPS = 4, FA_ROWS = 16 * FA_WARPS, ATT_MMA_MIN_ROWS = 8;

__device__ __forceinline__ uint32_t fa_pack(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b); /* a in the low half: the lower k index */
    return *(const uint32_t *)&h;
}
/* hi = the f16 pair of (a, b), lo = the f16 pair of what hi leaves out */
__device__ __forceinline__ void fa_split(float a, float b, uint32_t *hi, uint32_t *lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 f = __half22float2(h);
    *hi = *(const uint32_t *)&h;
    *lo = fa_pack(a - f.x, b - f.y);
}
__device__ __forceinline__ uint32_t fa_pack(__half a, __half b) {
    const __half2 h = __halves2half2(a, b);
    return *(const uint32_t *)&h;
}

/* d += A B for a 16x16 f16 A (row-major fragment a[4]) and a 16x8 f16 B (b0: k rows 2t, 2t+1 of
 * column g; b1: k rows 2t+8, 2t+9), lane = 4g + t; d[0..1]: row g, columns 2t, 2t+1; d[2..3]:
 * row g + 8. */
__device__ __forceinline__ void fa_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* attention_launch only picks this kernel for code built for sm_80 and up */
#endif
}

template <int HD, int FA_KEYS = HD == 128 ? 32 : 64> /* positions per tile (registers: S is FA_KEYS / 2 per lane) */
__global__ void __launch_bounds__(FA_WARPS * 32)
    attn_mma_kernel(float *out, int64_t ldo, const float *__restrict__ q, const __half *__restrict__ kc,
                    const __half *__restrict__ vc, int64_t k_row, int64_t v_row, int64_t pos0, int m, int n_head,
                    int group, float scale) {
    constexpr int LD = HD + 8; /* padded rows: the fragment loads below hit 32 distinct banks */
    __shared__ __align__(16) __half ks[FA_KEYS * LD], vs[FA_KEYS * LD];
    cuk_grid_release();
    cuk_grid_wait(); /* launched with cuk_launch */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x, hk = h / group;
    const int yb = gridDim.y - 1 - blockIdx.y; /* the longest rows first: they finish last */
    const int i0 = yb * FA_ROWS + warp * 16;   /* this warp's rows i0 .. i0 + 15 */
    const int64_t kv_end = pos0 + NM_MIN(yb * FA_ROWS + FA_ROWS, m); /* positions the block reads */
    const int64_t warp_end = pos0 + NM_MIN(i0 + 16, m);             /* and this warp */

    uint32_t qh[HD / 16][4], ql[HD / 16][4]; /* Q rows i0 + g and i0 + g + 8 as A fragments */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = i0 + g + 8 * r;
        const float *qr = q + ((int64_t)i * n_head + h) * HD + 2 * t;
#pragma unroll
        for (int s = 0; s < HD / 16; s++) {
            const float2 a = i < m ? *(const float2 *)(qr + 16 * s) : make_float2(0.f, 0.f);
            const float2 b = i < m ? *(const float2 *)(qr + 16 * s + 8) : make_float2(0.f, 0.f);
            fa_split(a.x, a.y, &qh[s][r], &ql[s][r]);
            fa_split(b.x, b.y, &qh[s][2 + r], &ql[s][2 + r]);
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float mx[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float sl = scale * 1.4426950408889634f; /* scores in log2 units: exp2 below */

    for (int64_t t0 = 0; t0 < kv_end; t0 += FA_KEYS) {
        __syncthreads(); /* the previous tile's reads are done */
        for (int c = threadIdx.x; c < FA_KEYS * (HD / 8); c += FA_WARPS * 32) {
            const int r = c / (HD / 8), cc = c % (HD / 8);
            const int64_t pos = t0 + r;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv; /* zeros past the end: 0 * P stays 0 */
            if (pos < kv_end) {
                kv = *(const uint4 *)(kc + pos * k_row + (int64_t)hk * HD + cc * 8);
                vv = *(const uint4 *)(vc + pos * v_row + (int64_t)hk * HD + cc * 8);
            }
            *(uint4 *)(ks + r * LD + cc * 8) = kv;
            *(uint4 *)(vs + r * LD + cc * 8) = vv;
        }
        __syncthreads();
        if (t0 >= warp_end) continue; /* none of this tile is visible to this warp's rows */

        float s[FA_KEYS / 8][4]; /* S for keys t0 + 8n + 2t (+1), rows g and g + 8 */
#pragma unroll
        for (int n = 0; n < FA_KEYS / 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            const __half *kr = ks + (8 * n + g) * LD + 2 * t;
#pragma unroll
            for (int k = 0; k < HD / 16; k++) {
                const uint32_t b0 = *(const uint32_t *)(kr + 16 * k), b1 = *(const uint32_t *)(kr + 16 * k + 8);
                fa_mma(s[n], ql[k], b0, b1);
                fa_mma(s[n], qh[k], b0, b1);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = i0 + g + 8 * r;
            const int64_t last = i < m ? pos0 + i : -1; /* the last position row i sees */
            float tmax = -INFINITY;
#pragma unroll
            for (int n = 0; n < FA_KEYS / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int64_t key = t0 + 8 * n + 2 * t + e;
                    const float v = key <= last ? s[n][2 * r + e] * sl : -INFINITY;
                    s[n][2 * r + e] = v;
                    tmax = fmaxf(tmax, v);
                }
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            const float mnew = fmaxf(mx[r], tmax);
            const float mref = mnew == -INFINITY ? 0.f : mnew; /* a row that sees nothing yet */
            const float corr = exp2f(mx[r] - mref);
            mx[r] = mnew;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < FA_KEYS / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = exp2f(s[n][2 * r + e] - mref);
                    s[n][2 * r + e] = p;
                    sum += p;
                }
            l[r] = l[r] * corr + sum; /* this lane's share; the quad's lanes are summed at the end */
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                o[n][2 * r] *= corr;
                o[n][2 * r + 1] *= corr;
            }
        }
#pragma unroll
        for (int k = 0; k < FA_KEYS / 16; k++) {
            /* S's accumulator layout of key blocks 2k and 2k + 1 is P's A fragment */
            uint32_t ph[4], pl[4];
            fa_split(s[2 * k][0], s[2 * k][1], &ph[0], &pl[0]);
            fa_split(s[2 * k][2], s[2 * k][3], &ph[1], &pl[1]);
            fa_split(s[2 * k + 1][0], s[2 * k + 1][1], &ph[2], &pl[2]);
            fa_split(s[2 * k + 1][2], s[2 * k + 1][3], &ph[3], &pl[3]);
            const __half *vr = vs + (16 * k + 2 * t) * LD + g;
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                const __half *v = vr + 8 * n;
                const uint32_t b0 = fa_pack(v[0], v[LD]), b1 = fa_pack(v[8 * LD], v[9 * LD]);
                fa_mma(o[n], pl, b0, b1);
                fa_mma(o[n], ph, b0, b1);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lr = l[r];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        const int i = i0 + g + 8 * r;
        if (i >= m) continue;
        const float inv = 1.0f / lr;
        float *orow = out + (int64_t)i * ldo + (int64_t)h * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            orow[8 * n] = o[n][2 * r] * inv;
            orow[8 * n + 1] = o[n][2 * r + 1] * inv;
        }
    }
}

/* rmsnorm_kernel's rows and the q8 of each (n a multiple of 32: each warp's 32 consecutive
 * values are one block). Block (b, r) writes values [b * NT, (b + 1) * NT) of row r; each block
 * computes the row's scale itself, as rmsnorm_kernel does (same threads, same order, so the
 * same bits): a second pass over a row in L2 costs less than one block doing the whole row.
 * So y must not be x (other blocks are still reading it). */
__global__ void rmsnorm_q8_kernel(float *y, const cuk_q8buf q, const float *x, const float *__restrict__ w, int64_t n,
                                  float eps) {
    cuk_grid_release();
    cuk_grid_wait(); /* launched with cuk_launch */
    const float *xr = x + (int64_t)blockIdx.y * n;
    float *yr = y + (int64_t)blockIdx.y * n;
    const float scale = row_rms_scale(xr, n, eps);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t i0 = (int64_t)blockIdx.x * blockDim.x + warp * 32;
    if (i0 >= n) return;
    const int64_t i = i0 + lane;
    const float v = xr[i] * scale * w[i];
    yr[i] = v;
    cuk_q8_warp_store(v, q, blockIdx.y, i0 / 32);
}

/* swiglu over n_blocks blocks of 32 values, one warp each, with their q8. */
__global__ void swiglu_q8_kernel(float *out, const cuk_q8buf q, const float *gate, const float *up, int64_t n_blocks) {
    cuk_grid_release();
    cuk_grid_wait(); /* launched with cuk_launch */
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;
    const int64_t i = b * 32 + (threadIdx.x & 31);
    const float g = gate[i];
    const float o = g / (1.0f + expf(-g)) * up[i];
    out[i] = o;
    cuk_q8_warp_store(o, q, b / (q.k / 32), b % (q.k / 32));
}

/* One row per block: softmax of the router logits, the n_used best (ties: lower id),
 * renormalized. */
__global__ void moe_route_kernel(const float *logits, int n_expert, int n_used, int32_t *ids, float *w) {
    extern __shared__ float probs[];
    __shared__ float red[32];
    __shared__ int redi[32];
    __shared__ float selv[64];
    __shared__ int seli[64];
    const float *l = logits + (int64_t)blockIdx.x * n_expert;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) mx = fmaxf(mx, l[e]);
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
        probs[e] = expf(l[e] - mx);
        s += probs[e];
    }
    s = block_sum(s, red);
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) probs[e] /= s;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int k = 0; k < n_used; k++) {
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
            if (probs[e] > bv || (probs[e] == bv && e < bi)) {
                bv = probs[e];
                bi = e;
            }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        __syncthreads();
        if (lane == 0) {
            red[warp] = bv;
            redi[warp] = bi;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int j = 1; j < nw; j++)
                if (red[j] > bv || (red[j] == bv && redi[j] < bi)) {
                    bv = red[j];
                    bi = redi[j];
                }
            selv[k] = bv;
            seli[k] = bi;
            probs[bi] = -1.0f; /* taken */
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int k = 0; k < n_used; k++) sum += selv[k];
        for (int k = 0; k < n_used; k++) {
            ids[(int64_t)blockIdx.x * n_used + k] = seli[k];
            w[(int64_t)blockIdx.x * n_used + k] = selv[k] / sum;
        }
    }
}

__global__ void moe_combine_kernel(float *x, const float *y, const float *w, int n_used, int64_t n, int64_t total) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int64_t i = idx / n, d = idx % n;
    float acc = 0.0f;
    for (int s = 0; s < n_used; s++) acc += w[i * n_used + s] * y[(i * n_used + s) * n + d];
    x[idx] += acc;
}

/* ---- top-k: bitonic sort of 2048-value chunks in shared memory, best k of each kept, repeated
 * until one chunk is left; the rows of a round side by side (blockIdx.y). Order: larger value
 * first, ties the lower id first. k = 1 (greedy) takes each chunk's best by a reduction instead
 * of the sort: the same candidate, without the sort's 66 synchronized passes per chunk (job 1 of
 * session 22, H200, qwen2.5-0.5b's 151936 logits: a step's sampling took 0.20 ms for 16 rows
 * and 0.06 ms for one, the first pass's 75 chunks a row filling 4.5 waves of blocks at 16 rows). */
constexpr int TK_CHUNK = 2048;

/* where each row of a round reads in the first pass: its logits, or its penalized copy */
struct tk_src {
    const float *p[CUK_TOPK_ROWS];
};

__device__ __forceinline__ bool tk_before(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && ia < ib);
}

/* Row y = blockIdx.y of n values: src.p[y] with ids their indices (vin NULL: the first pass),
 * else vin + y * ld with ids iin + y * ld; its chunk's best k go to vout, iout + y * ld. */
__global__ void __launch_bounds__(TK_CHUNK / 2)
    topk_chunk_kernel(tk_src src, const float *vin, const int32_t *iin, int64_t n, int64_t ld, int k, float *vout,
                      int32_t *iout) {
    __shared__ float sv[TK_CHUNK];
    __shared__ int si[TK_CHUNK];
    const int64_t base = (int64_t)blockIdx.x * TK_CHUNK, y = blockIdx.y;
    const float *vr = vin ? vin + y * ld : src.p[y];
    const int32_t *ir = vin ? iin + y * ld : NULL;
    vout += y * ld;
    iout += y * ld;
    for (int e = threadIdx.x; e < TK_CHUNK; e += blockDim.x) {
        const int64_t idx = base + e;
        float v = -INFINITY;
        int id = INT_MAX;
        if (idx < n) {
            v = vr[idx];
            if (isnan(v)) v = -INFINITY;
            id = ir ? ir[idx] : (int)idx;
        }
        sv[e] = v;
        si[e] = id;
    }
    __syncthreads();
    if (k == 1) { /* (uniform across the grid) */
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int e = threadIdx.x; e < TK_CHUNK; e += blockDim.x)
            if (tk_before(sv[e], si[e], bv, bi)) bv = sv[e], bi = si[e];
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (tk_before(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        __shared__ float wv[32];
        __shared__ int wi[32];
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (int)(blockDim.x + 31) >> 5;
        if (lane == 0) wv[warp] = bv, wi[warp] = bi;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < nw; w++)
                if (tk_before(wv[w], wi[w], bv, bi)) bv = wv[w], bi = wi[w];
            vout[blockIdx.x] = bv;
            iout[blockIdx.x] = bi;
        }
        return;
    }
    for (int size = 2; size <= TK_CHUNK; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const int t = threadIdx.x;
            const int pos = 2 * t - (t & (stride - 1)), partner = pos + stride;
            const bool first = (pos & size) == 0;
            const float a = sv[pos], b = sv[partner];
            const int ia = si[pos], ib = si[partner];
            const bool swap = first ? tk_before(b, ib, a, ia) : tk_before(a, ia, b, ib);
            if (swap) {
                sv[pos] = b;
                sv[partner] = a;
                si[pos] = ib;
                si[partner] = ia;
            }
            __syncthreads();
        }
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        vout[(int64_t)blockIdx.x * k + j] = sv[j];
        iout[(int64_t)blockIdx.x * k + j] = si[j];
    }
}

__global__ void penalty_kernel(float *v, const int32_t *ids, int n, float penalty) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float x = v[ids[i]];
        v[ids[i]] = x > 0 ? x / penalty : x * penalty;
    }
}

unsigned blocks_for(int64_t n) { return (unsigned)((n + NT - 1) / NT); }

int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

} // namespace

extern "C" void cuk_rmsnorm(struct cuk_ctx *c, float *y, const float *x, const float *w, int rows, int64_t n, float eps) {
    if (rows < 1) return;
    rmsnorm_kernel<<<rows, NT, 0, c->stream>>>(y, x, w, n, eps);
    CUK_LAUNCHED("rmsnorm");
}

extern "C" void cuk_add(struct cuk_ctx *c, float *x, const float *y, int64_t n) {
    if (n < 1) return;
    add_kernel<<<blocks_for(n), NT, 0, c->stream>>>(x, y, n);
    CUK_LAUNCHED("add");
}

extern "C" void cuk_add_bias(struct cuk_ctx *c, float *y, const float *b, int rows, int64_t n) {
    const int64_t total = (int64_t)rows * n;
    if (total < 1) return;
    add_bias_kernel<<<blocks_for(total), NT, 0, c->stream>>>(y, b, n, total);
    CUK_LAUNCHED("add_bias");
}

/* One warp per block of 32 values: the CPU's q8x rounding (quantize_act_q8x_ref), dequantized. */
__global__ void act_round_q8_kernel(float *y, const float *x, int64_t n_blocks) {
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;
    const int lane = threadIdx.x % 32;
    const float v = x[b * 32 + lane];
    float d;
    y[b * 32 + lane] = cuk_q8_warp_quant(v, &d) * d;
}

extern "C" void cuk_act_round_q8(struct cuk_ctx *c, float *y, const float *x, int64_t n) {
    NM_ASSERT(n % 32 == 0);
    if (n < 1) return;
    const int64_t nb = n / 32, per = NT / 32;
    act_round_q8_kernel<<<(unsigned)((nb + per - 1) / per), NT, 0, c->stream>>>(y, x, nb);
    CUK_LAUNCHED("act_round_q8");
}

extern "C" void cuk_swiglu(struct cuk_ctx *c, float *out, const float *gate, const float *up, int64_t n) {
    if (n < 1) return;
    swiglu_kernel<<<blocks_for(n), NT, 0, c->stream>>>(out, gate, up, n);
    CUK_LAUNCHED("swiglu");
}

extern "C" void cuk_norm_rope(struct cuk_ctx *c, float *x, int m, int n_head, int64_t head_dim, int64_t row_stride,
                              const float *norm_w, float eps, const float *cos_sin, int64_t pos0, int64_t n_rot,
                              int neox) {
    NM_ASSERT(head_dim <= 1024 && n_rot <= head_dim && n_rot % 2 == 0);
    if (m < 1 || n_head < 1) return;
    norm_rope_kernel<<<dim3((unsigned)n_head, (unsigned)m), 128, 0, c->stream>>>(x, head_dim, row_stride, norm_w, eps,
                                                                                  cos_sin, pos0, n_rot, neox);
    CUK_LAUNCHED("norm_rope");
}

extern "C" void cuk_kv_store(struct cuk_ctx *c, void *cache, enum dtype kv_type, const float *src, int m, int64_t n,
                             int64_t pos0) {
    const int64_t total = (int64_t)m * n;
    if (total < 1) return;
    if (kv_type == DTYPE_F32)
        kv_store_f32_kernel<<<blocks_for(total), NT, 0, c->stream>>>((float *)cache + pos0 * n, src, n, total);
    else {
        NM_ASSERT(kv_type == DTYPE_F16);
        kv_store_f16_kernel<<<blocks_for(total), NT, 0, c->stream>>>((__half *)cache + pos0 * n, src, n, total);
    }
    CUK_LAUNCHED("kv_store");
}

extern "C" bool cuk_attention_tensor_cores(struct cuk_ctx *c, enum dtype kv_type, int m, int64_t head_dim,
                                           int64_t head_dim_v) {
    /* the device has the instructions and this build holds code for them (a build for an older
     * architecture JIT-compiles its PTX without them) */
    static int built = -1; /* the architecture the kernel was built for, per process */
    if (built < 0) {
        cudaFuncAttributes fa;
        CUK_CHECK(cudaFuncGetAttributes(&fa, attn_mma_kernel<128>), "attributes of the attention kernel");
        built = NM_MIN(fa.binaryVersion, fa.ptxVersion);
    }
    return c->mma && built >= 80 && m >= ATT_MMA_MIN_ROWS && kv_type == DTYPE_F16 && head_dim == head_dim_v &&
           (head_dim == 64 || head_dim == 128);
}

/* attn_kernel with the fewest 128-value chunks that hold a head (dc of them), for m rows in
 * launches of at most rows_per rows, each row's positions in up to `splits` spans */
template <typename KT>
static void attn_rows_launch(struct cuk_ctx *c, int dc, bool v4, int m, int rows_per, int splits, float *out,
                             int64_t ldo, const float *q, const float *k, const float *v, KT *k_cache, KT *v_cache,
                             int64_t k_row, int64_t v_row, int64_t pos0, const int64_t *rows, int n_head, int group,
                             int hd, int hdv, float scale, cuk_rope ra, void *out_q8) {
    auto kern = v4 ? (dc == 1 ? attn_kernel<KT, 1, true> : dc == 2 ? attn_kernel<KT, 2, true> : attn_kernel<KT, 4, true>)
                   : (dc == 1 ? attn_kernel<KT, 1, false> : dc == 2 ? attn_kernel<KT, 2, false> : attn_kernel<KT, 4, false>);
    const int64_t kq = (int64_t)n_head * hdv;
    const cuk_q8buf oq = cuk_q8_at(out_q8, m, kq); /* (oq.q NULL: no q8 wanted) */
    for (int r0 = 0; r0 < m; r0 += rows_per) {
        const int mr = NM_MIN(rows_per, m - r0);
        const dim3 grid((unsigned)n_head, (unsigned)mr, (unsigned)splits);
        cuk_launch(c, "attention", kern, grid, ATT_T, 0, out + r0 * ldo, ldo, q + (int64_t)r0 * n_head * hd,
                   k ? k + r0 * k_row : k, v ? v + r0 * v_row : v, k_cache, v_cache, k_row, v_row, pos0 + r0,
                   rows ? rows + 2 * r0 : NULL, n_head, group, hd, hdv, scale, ra, oq, r0, c->att_scratch, c->att_cnt);
    }
}

/* rope: NULL, or (rows only) q, k, v before RoPE for attn_kernel to finish */
static void attention_launch(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const float *k,
                             const float *v, void *k_cache, void *v_cache, enum dtype kv_type, int m, int64_t pos0,
                             const int64_t *rows, int n_head, int n_head_kv, int64_t head_dim, int64_t head_dim_v,
                             float scale, const struct cuk_rope *rope, void *out_q8) {
    NM_ASSERT(head_dim <= 512 && head_dim_v <= 512 && n_head % n_head_kv == 0);
    NM_ASSERT(!out_q8 || (rows && head_dim_v % 32 == 0));
    NM_ASSERT(!rope || (rows && k && v && rope->n_rot <= head_dim && rope->n_rot % 2 == 0));
    if (m < 1) return;
    const int64_t k_row = (int64_t)n_head_kv * head_dim, v_row = (int64_t)n_head_kv * head_dim_v;
    const int group = n_head / n_head_kv;
    if (!rows && cuk_attention_tensor_cores(c, kv_type, m, head_dim, head_dim_v)) {
        NM_ASSERT(((uintptr_t)k_cache & 15) == 0 && ((uintptr_t)v_cache & 15) == 0 && ((uintptr_t)q & 7) == 0);
        const dim3 fgrid((unsigned)n_head, (unsigned)((m + FA_ROWS - 1) / FA_ROWS));
        auto kern = head_dim == 64 ? attn_mma_kernel<64> : attn_mma_kernel<128>;
        cuk_launch(c, "attention (tensor cores)", kern, fgrid, FA_WARPS * 32, 0, out, ldo, q, (const __half *)k_cache,
                   (const __half *)v_cache, k_row, v_row, pos0, m, n_head, group, scale);
        return;
    }
    /* rows in device memory (decode) take spans of positions where the context has room for them */
    const bool split = rows && c->att_splits > 1 && n_head <= c->att_heads && head_dim_v <= c->att_hdv;
    const int rows_per = split ? c->att_rows : m, splits = split ? c->att_splits : 1;
    const bool v4 = head_dim % 4 == 0 && head_dim_v % 4 == 0 && ((uintptr_t)k_cache & 15) == 0 &&
                   ((uintptr_t)v_cache & 15) == 0;
    const int dc = (int)(NM_MAX(head_dim, head_dim_v) + 127) / 128;
    const cuk_rope ra = rope ? *rope : cuk_rope{}; /* (k == NULL in the kernel: no RoPE) */
    if (!rope) k = v = NULL;
    if (kv_type == DTYPE_F32)
        attn_rows_launch(c, dc, v4, m, rows_per, splits, out, ldo, q, k, v, (float *)k_cache, (float *)v_cache, k_row,
                         v_row, pos0, rows, n_head, group, (int)head_dim, (int)head_dim_v, scale, ra, out_q8);
    else
        attn_rows_launch(c, dc, v4, m, rows_per, splits, out, ldo, q, k, v, (__half *)k_cache, (__half *)v_cache,
                         k_row, v_row, pos0, rows, n_head, group, (int)head_dim, (int)head_dim_v, scale, ra, out_q8);
}

/* spans a row of a context of n_ctx positions may take */
static int att_splits(int64_t n_ctx) { return (int)NM_MIN((int64_t)CUK_ATT_MAX_SPLITS, (n_ctx + ATT_T - 1) / ATT_T); }

extern "C" size_t cuk_attention_scratch_bytes(int max_rows, int n_head, int64_t head_dim_v, int64_t n_ctx) {
    const int splits = att_splits(n_ctx);
    if (splits < 2 || max_rows < 1) return 0;
    const size_t cells = (size_t)max_rows * (size_t)n_head;
    return cells * splits * (size_t)(head_dim_v + 2) * sizeof(float) + cells * sizeof(int);
}

extern "C" int cuk_ctx_reserve_attention(struct cuk_ctx *c, int max_rows, int n_head, int64_t head_dim_v,
                                         int64_t n_ctx, char *why, size_t whylen) {
    cudaFree(c->att_scratch);
    cudaFree(c->att_cnt);
    c->att_scratch = NULL;
    c->att_cnt = NULL;
    c->att_rows = c->att_heads = c->att_splits = 0;
    c->att_hdv = 0;
    const int splits = att_splits(n_ctx);
    if (!cuk_attention_scratch_bytes(max_rows, n_head, head_dim_v, n_ctx)) return 0;
    const size_t cells = (size_t)max_rows * (size_t)n_head;
    c->att_scratch = (float *)cuk_malloc(c, cells * splits * (size_t)(head_dim_v + 2) * sizeof(float),
                                         "attention spans scratch", why, whylen);
    if (!c->att_scratch) return -1;
    c->att_cnt = (int *)cuk_malloc(c, cells * sizeof(int), "attention spans counters", why, whylen);
    if (!c->att_cnt) return -1;
    CUK_CHECK(cudaMemset(c->att_cnt, 0, cells * sizeof(int)), "clearing the attention span counters");
    c->att_rows = max_rows;
    c->att_heads = n_head;
    c->att_hdv = head_dim_v;
    c->att_splits = splits;
    return 0;
}

extern "C" void cuk_attention(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const void *k_cache,
                              const void *v_cache, enum dtype kv_type, int m, int64_t pos0, int n_head, int n_head_kv,
                              int64_t head_dim, int64_t head_dim_v, float scale) {
    attention_launch(c, out, ldo, q, NULL, NULL, (void *)k_cache, (void *)v_cache, kv_type, m, pos0, NULL, n_head,
                     n_head_kv, head_dim, head_dim_v, scale, NULL, NULL);
}

extern "C" void cuk_attention_at(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const float *k,
                                 const float *v, void *k_cache, void *v_cache, enum dtype kv_type, int m,
                                 const int64_t *rows, int n_head, int n_head_kv, int64_t head_dim, int64_t head_dim_v,
                                 float scale, const struct cuk_rope *rope, void *out_q8) {
    NM_ASSERT(rows);
    attention_launch(c, out, ldo, q, k, v, k_cache, v_cache, kv_type, m, 0, rows, n_head, n_head_kv, head_dim,
                     head_dim_v, scale, rope, out_q8);
}

extern "C" void cuk_rope_store(struct cuk_ctx *c, float *q, float *k, const float *v, int m, int n_head, int n_head_kv,
                               int64_t head_dim, int64_t head_dim_v, const struct cuk_rope *rope, void *k_cache,
                               void *v_cache, enum dtype kv_type, const int64_t *rows) {
    NM_ASSERT(rope && head_dim <= 1024 && rope->n_rot <= head_dim && rope->n_rot % 2 == 0);
    if (m < 1) return;
    const dim3 grid((unsigned)(n_head + n_head_kv), (unsigned)m);
    const int64_t k_row = (int64_t)n_head_kv * head_dim, v_row = (int64_t)n_head_kv * head_dim_v;
    const cuk_rope ra = *rope;
    if (kv_type == DTYPE_F32)
        cuk_launch(c, "rope_store", rope_store_kernel<float>, grid, 128, 0, q, k, v, n_head, head_dim, head_dim_v,
                   k_row, v_row, ra, (float *)k_cache, (float *)v_cache, rows);
    else {
        NM_ASSERT(kv_type == DTYPE_F16);
        cuk_launch(c, "rope_store", rope_store_kernel<__half>, grid, 128, 0, q, k, v, n_head, head_dim, head_dim_v,
                   k_row, v_row, ra, (__half *)k_cache, (__half *)v_cache, rows);
    }
}

extern "C" void cuk_rmsnorm_q8(struct cuk_ctx *c, float *y, void *xq, const float *x, const float *w, int rows,
                               int64_t n, float eps) {
    if (rows < 1) return;
    if (!xq) {
        cuk_rmsnorm(c, y, x, w, rows, n, eps);
        return;
    }
    NM_ASSERT(n % 32 == 0 && y != x);
    cuk_launch(c, "rmsnorm_q8", rmsnorm_q8_kernel, dim3((unsigned)((n + NT - 1) / NT), (unsigned)rows), NT, 0, y,
               cuk_q8_at(xq, rows, n), x, w, n, eps);
}

extern "C" void cuk_swiglu_q8(struct cuk_ctx *c, float *out, void *xq, const float *gate, const float *up, int rows,
                              int64_t n) {
    if (!xq) {
        cuk_swiglu(c, out, gate, up, (int64_t)rows * n);
        return;
    }
    NM_ASSERT(n % 32 == 0);
    const int64_t nb = (int64_t)rows * n / 32;
    if (nb < 1) return;
    cuk_launch(c, "swiglu_q8", swiglu_q8_kernel, (unsigned)((nb + 7) / 8), 256, 0, out, cuk_q8_at(xq, rows, n), gate, up,
               nb);
}

extern "C" void cuk_moe_route(struct cuk_ctx *c, const float *logits, int m, int n_expert, int n_used, int32_t *ids,
                              float *w) {
    NM_ASSERT(n_expert >= 1 && n_expert <= 4096 && n_used >= 1 && n_used <= 64 && n_used <= n_expert);
    if (m < 1) return;
    moe_route_kernel<<<m, NT, (size_t)n_expert * sizeof(float), c->stream>>>(logits, n_expert, n_used, ids, w);
    CUK_LAUNCHED("moe_route");
}

extern "C" void cuk_moe_combine(struct cuk_ctx *c, float *x, const float *y, const float *w, int m, int n_used,
                                int64_t n) {
    const int64_t total = (int64_t)m * n;
    if (total < 1) return;
    moe_combine_kernel<<<blocks_for(total), NT, 0, c->stream>>>(x, y, w, n_used, n, total);
    CUK_LAUNCHED("moe_combine");
}

/* entries of one row's candidates buffer: the first pass's output, the largest */
static int64_t tk_cap(int64_t n) { return (n + TK_CHUNK - 1) / TK_CHUNK * CUK_TOPK_MAX; }

/* scratch: [CUK_TOPK_ROWS][n] penalized copies, then two candidate buffers (values, then ids)
 * of [CUK_TOPK_ROWS][tk_cap] */
extern "C" size_t cuk_topk_scratch_bytes(int64_t n) {
    return (size_t)CUK_TOPK_ROWS * ((size_t)n * sizeof(float) + 2 * (size_t)tk_cap(n) * (sizeof(float) + sizeof(int32_t)));
}

extern "C" void cuk_topk(struct cuk_ctx *c, const float *logits, int64_t ld, int64_t n, const struct cuk_topk_row *rows,
                         int n_rows, void *scratch, int32_t *ids, float *vals) {
    const int64_t cap = tk_cap(n);
    float *copies = (float *)scratch;
    float *vb[2] = {copies + CUK_TOPK_ROWS * n, copies + CUK_TOPK_ROWS * n + CUK_TOPK_ROWS * cap};
    int32_t *ib[2] = {(int32_t *)(vb[1] + CUK_TOPK_ROWS * cap), (int32_t *)(vb[1] + CUK_TOPK_ROWS * cap) + CUK_TOPK_ROWS * cap};
    int64_t at = 0; /* where the next row's candidates go in ids, vals */
    for (int r0 = 0; r0 < n_rows; r0 += CUK_TOPK_ROWS) {
        const int nr = NM_MIN(CUK_TOPK_ROWS, n_rows - r0);
        int K = 1; /* every row of the round keeps the largest k: its own k are the first of them */
        tk_src src = {};
        bool staged = false; /* pin_ids holds penalty ids a queued copy may still read */
        for (int i = 0; i < nr; i++) {
            const struct cuk_topk_row *q = &rows[r0 + i];
            NM_ASSERT(q->k >= 1 && q->k <= CUK_TOPK_MAX && q->k <= n && q->row >= 0);
            K = NM_MAX(K, q->k);
            src.p[i] = logits + q->row * ld;
            if (q->n_pen < 1 || q->penalty == 1.0f) continue;
            /* Distinct ids inside the vocabulary, each penalized once (as the CPU sampler), on a
             * copy of the row, sent in pieces of CUK_TOPK_MAX through the pinned buffer (waiting
             * before it is refilled). */
            int32_t *tmp = (int32_t *)malloc((size_t)q->n_pen * sizeof *tmp);
            NM_ASSERT(tmp);
            memcpy(tmp, q->pen_ids, (size_t)q->n_pen * sizeof *tmp);
            qsort(tmp, (size_t)q->n_pen, sizeof *tmp, cmp_i32);
            int nu = 0;
            for (int j = 0; j < q->n_pen; j++)
                if (tmp[j] >= 0 && tmp[j] < n && (nu == 0 || tmp[nu - 1] != tmp[j])) tmp[nu++] = tmp[j];
            float *copy = copies + (int64_t)i * n;
            cuk_d2d(c, copy, src.p[i], (size_t)n * sizeof(float));
            for (int done = 0; done < nu; done += CUK_TOPK_MAX) {
                const int cnt = NM_MIN(CUK_TOPK_MAX, nu - done);
                if (staged) cuk_sync(c);
                memcpy(c->pin_ids, tmp + done, (size_t)cnt * sizeof(int32_t));
                cuk_h2d(c, c->dev_pen, c->pin_ids, (size_t)cnt * sizeof(int32_t));
                penalty_kernel<<<(cnt + 127) / 128, 128, 0, c->stream>>>(copy, c->dev_pen, cnt, q->penalty);
                CUK_LAUNCHED("repetition penalty");
                staged = true;
            }
            free(tmp);
            src.p[i] = copy;
        }
        const float *vin = NULL;
        const int32_t *iin = NULL;
        int cur = 0;
        for (int64_t cn = n;;) {
            const int64_t chunks = (cn + TK_CHUNK - 1) / TK_CHUNK;
            const dim3 grid((unsigned)chunks, (unsigned)nr);
            topk_chunk_kernel<<<grid, TK_CHUNK / 2, 0, c->stream>>>(src, vin, iin, cn, cap, K, vb[cur], ib[cur]);
            CUK_LAUNCHED("top-k");
            vin = vb[cur];
            iin = ib[cur];
            cur ^= 1;
            if (chunks == 1) break;
            cn = chunks * K;
        }
        /* each row's K best, in order, at the start of its row of vin / iin */
        CUK_CHECK(cudaMemcpy2DAsync(c->pin_vals, (size_t)K * sizeof(float), vin, (size_t)cap * sizeof(float),
                                    (size_t)K * sizeof(float), (size_t)nr, cudaMemcpyDeviceToHost, c->stream),
                  "top-k values");
        CUK_CHECK(cudaMemcpy2DAsync(c->pin_ids, (size_t)K * sizeof(int32_t), iin, (size_t)cap * sizeof(int32_t),
                                    (size_t)K * sizeof(int32_t), (size_t)nr, cudaMemcpyDeviceToHost, c->stream),
                  "top-k ids");
        cuk_sync(c);
        for (int i = 0; i < nr; i++) {
            const int k = rows[r0 + i].k;
            memcpy(vals + at, c->pin_vals + (int64_t)i * K, (size_t)k * sizeof(float));
            memcpy(ids + at, c->pin_ids + (int64_t)i * K, (size_t)k * sizeof(int32_t));
            at += k;
        }
    }
}
