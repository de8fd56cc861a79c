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
    cudaStream_t stream;
    cublasHandle_t blas;
    /* GEMM scratch (cuk_ctx_reserve_gemm). */
    __half *act16;     /* [max_rows][max_k] */
    int max_rows;
    int64_t max_k;
    void *tile;        /* dequantized weight rows, f16 */
    size_t tile_bytes;
    /* Small pinned staging for cuk_topk. */
    int32_t *pin_ids;
    float *pin_vals;
    int32_t *dev_pen;  /* [CUK_TOPK_MAX] penalty ids */
};

#endif
