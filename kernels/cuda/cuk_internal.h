/* Shared by the .cu files of kernels/cuda: the check wrappers and the context's layout. C++
 * (nvcc) only; the public contract is cuda_kernels.h. */
#ifndef NM_CUK_INTERNAL_H
#define NM_CUK_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#define _Noreturn __attribute__((noreturn)) /* base.h is C11; nvcc's host compiler is C++ */
#include "base.h"
#include "types.h" /* dtype_get: the geometry of the block decoder interface's types */
#undef _Noreturn
}
#include "cuda_kernels.h"

/* Tier 2 of STYLE.md: a CUDA call that should not fail. Prints the call, the error string and a
 * hint, then ends the job through nm_fatal (MPI_Abort on a rank). */
#define CUK_CHECK(call, hint)                                                                    \
    do {                                                                                         \
        cudaError_t cuk_e_ = (call);                                                             \
        if (cuk_e_ != cudaSuccess)                                                               \
            nm_fatal("%s failed: %s (%s) [%s:%d]", #call, cudaGetErrorString(cuk_e_), hint, __FILE__, \
                     __LINE__);                                                                  \
    } while (0)
#define CUBLAS_CHECK(call, hint)                                                                 \
    do {                                                                                         \
        cublasStatus_t cuk_s_ = (call);                                                          \
        if (cuk_s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            nm_fatal("%s failed: %s (%s) [%s:%d]", #call, cublasGetStatusString(cuk_s_), hint,   \
                     __FILE__, __LINE__);                                                        \
    } while (0)
/* After a kernel launch: a bad configuration shows up here, a fault at the next sync. */
#define CUK_LAUNCHED(name) CUK_CHECK(cudaGetLastError(), "launch of " name "; a bug in its grid/block sizes")

struct cuk_ctx {
    int dev;
    int sm_count; /* multiprocessors: grids sized to fill the device once */
    bool pdl;     /* cuk_launch lets kernels overlap (sm_90 and not NM_GPU_PDL=0) */
    bool mma;     /* the device has f16 tensor-core instructions (mma.sync m16n8k16: sm_80 and up) */
    bool mmq;     /* q8 matmuls of several rows on int8 tensor cores (cuk_q8_tensor_cores; sm_80 and up, not NM_GPU_MMQ=0) */
    int smem_optin; /* the most shared memory one block may ask for, bytes */
    cudaStream_t stream;
    cublasHandle_t blas;
    /* GEMM scratch (cuk_ctx_reserve_gemm). */
    __half *act16;     /* [max_rows][max_k] */
    int max_rows;
    int64_t max_k;
    void *tile;        /* dequantized weight rows, f16 */
    size_t tile_bytes;
    /* Decode attention over spans of positions (cuk_ctx_reserve_attention): partial results of
     * up to att_rows rows x att_heads heads x att_splits spans of head_dim_v <= att_hdv, and a
     * count per (row, head). */
    float *att_scratch;
    int *att_cnt;
    int att_rows, att_heads, att_splits;
    int64_t att_hdv;
    /* Pinned staging for cuk_topk: CUK_TOPK_ROWS rows of CUK_TOPK_MAX candidates, and penalty
     * ids (pin_ids' first CUK_TOPK_MAX, to dev_pen). */
    int32_t *pin_ids;
    float *pin_vals;
    int32_t *dev_pen;  /* [CUK_TOPK_MAX] penalty ids */
};

/* ---- programmatic dependent launch (sm_90) -------------------------------------------------
 * The decode kernels are launched through cuk_launch, which lets each one start while the kernel
 * before it on the stream is finishing: its blocks come up as the other's leave, and a GEMV
 * streams its first weights in meanwhile. The contract of such a kernel: every thread calls
 * cuk_grid_wait() before it reads anything an earlier kernel wrote or writes anything an earlier
 * kernel reads (it returns once the kernel before has completed and its writes are visible; that
 * one waited for its own predecessor, so the order holds down the stream), and
 * cuk_grid_release() lets the next kernel come up. Kernels launched with <<<>>> serialize as
 * always, and both calls are no-ops in them. */
__device__ __forceinline__ void cuk_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cuk_grid_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}
template <typename... KArgs, typename... Args>
void cuk_launch(struct cuk_ctx *c, const char *name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                Args... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = c->pdl ? 1 : 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
    if (e != cudaSuccess)
        nm_fatal("launch of %s failed: %s (a bug in its grid/block sizes; NM_GPU_PDL=0 launches without overlap)", name,
                 cudaGetErrorString(e));
}

/* One block of 32 int8 activations as the CPU ranks quantize a matmul input (kernels/quant.h
 * block_q8x): x[i] ~= d * q[i], isum = sum of q[i]. */
struct __align__(8) cuk_q8s {
    float d;
    int isum;
};

/* The device q8 buffer of m rows of k values (cuk_q8_bytes; cuda_kernels.h has the layout):
 * the rows q, s as the GEMV reads them, and for m >= CUK_MMQ_MIN_ROWS the same blocks again as
 * mmq_kernel's fragments take them, tq and ts: lane t of an mma takes words t and 4 + t of a
 * block in one 8-byte load, and the 8 rows of an n-tile are 256 contiguous bytes (two L1
 * wavefronts, where rows k bytes apart cost eight). */
struct cuk_q8buf {
    int8_t *q;   /* [m][k] */
    cuk_q8s *s;  /* [m][k/32] */
    int8_t *tq;  /* [k/32][R][32], words permuted; NULL when m < CUK_MMQ_MIN_ROWS */
    cuk_q8s *ts; /* [k/32][R] */
    int64_t k;
    int R;       /* m rounded up to 8 (0: no tq, ts) */
};
static inline size_t cuk_q8_qbytes(int m, int64_t k) { return ((size_t)m * (size_t)k + 15) / 16 * 16; }
static inline int cuk_q8_tile_rows(int m) { return m >= CUK_MMQ_MIN_ROWS ? (m + 7) / 8 * 8 : 0; }
/* bytes of n rows' scales */
static inline size_t cuk_q8_sbytes(int n, int64_t k) { return (size_t)n * (size_t)(k / 32) * sizeof(cuk_q8s); }
/* where tq starts, past q and s */
static inline size_t cuk_q8_tile_offset(int m, int64_t k) {
    return (cuk_q8_qbytes(m, k) + cuk_q8_sbytes(m, k) + 127) / 128 * 128;
}
/* The buffer at xq (all NULL for xq NULL: no q8 wanted). */
static inline cuk_q8buf cuk_q8_at(void *xq, int m, int64_t k) {
    cuk_q8buf b = {NULL, NULL, NULL, NULL, k, 0};
    if (!xq) return b;
    b.q = (int8_t *)xq;
    b.s = (cuk_q8s *)(b.q + cuk_q8_qbytes(m, k));
    b.R = cuk_q8_tile_rows(m);
    b.tq = b.R ? b.q + cuk_q8_tile_offset(m, k) : NULL;
    b.ts = b.R ? (cuk_q8s *)(b.tq + (size_t)b.R * (size_t)k) : NULL;
    return b;
}

/* Warp reductions: every lane gets op over the warp's 32 values (a butterfly: op(own, other)). */
struct cuk_op_add {
    template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct cuk_op_max {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
template <typename V, typename Op> __device__ __forceinline__ V cuk_warp_reduce(V v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The calling warp's 32 values v (lane i holds position i of the block) rounded as
 * quantize_act_q8x_ref: d = max|v| / 127, q = rint(v / d) (as v * (1/d)). Returns q; *d_out = d. */
__device__ __forceinline__ float cuk_q8_warp_quant(float v, float *d_out) {
    const float amax = cuk_warp_reduce(fabsf(v), cuk_op_max());
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (isinf(id)) d = id = 0.0f;
    *d_out = d;
    return rintf(v * id);
}

/* The same, stored as block u of row r of b, in both of its layouts. Returns the rounded value
 * q * d (what cuk_act_round_q8 gives). */
__device__ __forceinline__ float cuk_q8_warp_store(float v, const cuk_q8buf &b, int64_t r, int64_t u) {
    const int lane = threadIdx.x & 31;
    float d;
    const float x = cuk_q8_warp_quant(v, &d);
    const int qi = (int)x;
    b.q[r * b.k + u * 32 + lane] = (int8_t)qi;
    const int isum = cuk_warp_reduce(qi, cuk_op_add());
    if (lane == 0) b.s[r * (b.k / 32) + u] = cuk_q8s{d, isum};
    if (b.tq) {
        const int w = lane >> 2, slot = w < 4 ? 2 * w : 2 * (w - 4) + 1; /* words 0 4 1 5 2 6 3 7 */
        b.tq[(u * b.R + r) * 32 + slot * 4 + (lane & 3)] = (int8_t)qi;
        if (lane == 0) b.ts[u * b.R + r] = cuk_q8s{d, isum};
    }
    return x * d;
}

#endif
