/* Devices, contexts, memory and copies of the CUDA layer (see cuda_kernels.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuk_internal.h"
#include <cuda_profiler_api.h>

extern "C" bool cuk_built_with_cuda(void) { return true; }

extern "C" bool cuk_ctx_overlaps_launches(const struct cuk_ctx *c) { return c->pdl; }

extern "C" int cuk_device_count(char *why, size_t whylen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) snprintf(why, whylen, "no CUDA device: %s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* clear the sticky error of a failed driver probe */
        return 0;
    }
    if (n == 0 && why) snprintf(why, whylen, "no CUDA device: cudaGetDeviceCount found none");
    return n;
}

extern "C" int cuk_device_info_get(int dev, struct cuk_device_info *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        if (why) snprintf(why, whylen, "cudaGetDeviceProperties(%d): %s", dev, cudaGetErrorString(e));
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_bytes = p.totalGlobalMem;
    out->bus_width_bits = p.memoryBusWidth;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    int clk = 0;
    if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) == cudaSuccess) out->mem_clock_khz = clk;
    out->bandwidth_gbs = 2.0 * (double)out->mem_clock_khz * 1e3 * (double)out->bus_width_bits / 8.0 / 1e9;
    if (cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, dev) != cudaSuccess)
        snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "unknown");
    for (char *c = out->pci_bus_id; *c; c++)
        if (*c >= 'A' && *c <= 'F') *c = (char)(*c - 'A' + 'a'); /* hwloc prints lower case */
    int cur = 0;
    size_t fr = 0, tot = 0;
    if (cudaGetDevice(&cur) == cudaSuccess && cudaSetDevice(dev) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess)
        out->free_bytes = fr;
    (void)cudaSetDevice(cur);
    (void)cudaGetLastError();
    return 0;
}

extern "C" struct cuk_ctx *cuk_ctx_init(int dev, char *why, size_t whylen) {
    char w[256];
    const int n = cuk_device_count(w, sizeof w);
    if (n == 0) {
        if (why) snprintf(why, whylen, "%s", w);
        return NULL;
    }
    if (dev < 0 || dev >= n) {
        if (why) snprintf(why, whylen, "CUDA device %d does not exist; devices are 0..%d", dev, n - 1);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFree(0); /* create the primary context now: errors show here */
    if (e != cudaSuccess) {
        if (why) snprintf(why, whylen, "CUDA device %d cannot be used: %s", dev, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return NULL;
    }
    struct cuk_ctx *c = (struct cuk_ctx *)calloc(1, sizeof *c);
    NM_ASSERT(c);
    c->dev = dev;
    CUK_CHECK(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
    int cc = 0;
    CUK_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev), "compute capability");
    const char *pe = getenv("NM_GPU_PDL");
    c->pdl = cc >= 9 && !(pe && strcmp(pe, "0") == 0);
    c->mma = cc >= 8;
    const char *pq = getenv("NM_GPU_MMQ");
    c->mmq = cc >= 8 && !(pq && strcmp(pq, "0") == 0);
    CUK_CHECK(cudaDeviceGetAttribute(&c->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
              "shared memory per block");
    CUK_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating the GPU rank's stream");
    CUBLAS_CHECK(cublasCreate(&c->blas), "cuBLAS initialization; is libcublas the toolkit's version?");
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream), "cuBLAS stream");
    CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cuBLAS math mode (no TF32: f32 stays f32)");
    CUK_CHECK(cudaMallocHost((void **)&c->pin_ids, CUK_TOPK_ROWS * CUK_TOPK_MAX * sizeof(int32_t)), "pinned host memory");
    CUK_CHECK(cudaMallocHost((void **)&c->pin_vals, CUK_TOPK_ROWS * CUK_TOPK_MAX * sizeof(float)), "pinned host memory");
    CUK_CHECK(cudaMalloc((void **)&c->dev_pen, CUK_TOPK_MAX * sizeof(int32_t)), "device memory for penalty ids");
    return c;
}

extern "C" void cuk_ctx_free(struct cuk_ctx *c) {
    if (!c) return;
    (void)cudaSetDevice(c->dev);
    cudaStreamSynchronize(c->stream);
    cudaFree(c->act16);
    cudaFree(c->tile);
    cudaFree(c->att_scratch);
    cudaFree(c->att_cnt);
    cudaFree(c->dev_pen);
    cudaFreeHost(c->pin_ids);
    cudaFreeHost(c->pin_vals);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" void cuk_mem_info(struct cuk_ctx *c, uint64_t *free_bytes, uint64_t *total_bytes) {
    size_t fr = 0, tot = 0;
    CUK_CHECK(cudaMemGetInfo(&fr, &tot), "querying device memory");
    *free_bytes = fr;
    *total_bytes = tot;
}

extern "C" void *cuk_malloc(struct cuk_ctx *c, size_t bytes, const char *what, char *why, size_t whylen) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        (void)cudaMemGetInfo(&fr, &tot);
        if (why)
            snprintf(why, whylen, "cudaMalloc of %zu bytes (%.1f MiB) for %s failed: %s; the device has %.1f of %.1f MiB free",
                     bytes, (double)bytes / (1 << 20), what, cudaGetErrorString(e), (double)fr / (1 << 20),
                     (double)tot / (1 << 20));
        return NULL;
    }
    CUK_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream), "clearing new device memory");
    return p;
}

extern "C" void cuk_free(void *p) {
    if (p) CUK_CHECK(cudaFree(p), "freeing device memory");
}

extern "C" void *cuk_host_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        nm_fatal("cudaMallocHost of %zu bytes for %s failed: %s (page-locked memory is limited by ulimit -l)", bytes,
                 what, cudaGetErrorString(e));
    memset(p, 0, bytes);
    return p;
}

extern "C" void cuk_host_free(void *p) {
    if (p) CUK_CHECK(cudaFreeHost(p), "freeing page-locked memory");
}

extern "C" bool cuk_host_pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* (not an error to keep) */
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

extern "C" void cuk_h2d(struct cuk_ctx *c, void *dst, const void *src, size_t bytes) {
    if (bytes) CUK_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "host to device copy");
}

extern "C" void cuk_d2h(struct cuk_ctx *c, void *dst, const void *src, size_t bytes) {
    if (bytes) CUK_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "device to host copy");
    CUK_CHECK(cudaStreamSynchronize(c->stream), "waiting for a device to host copy (a kernel before it failed?)");
}

extern "C" void cuk_d2d(struct cuk_ctx *c, void *dst, const void *src, size_t bytes) {
    if (bytes) CUK_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "device copy");
}

extern "C" void cuk_sync(struct cuk_ctx *c) {
    CUK_CHECK(cudaStreamSynchronize(c->stream), "waiting for the GPU stream (a kernel failed: run with "
                                                "CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to see which)");
}

extern "C" void cuk_profile(bool on) {
    CUK_CHECK(on ? cudaProfilerStart() : cudaProfilerStop(), "profiler range");
}

extern "C" int cuk_ctx_reserve_gemm(struct cuk_ctx *c, int max_rows, int64_t max_k, size_t tile_bytes, char *why,
                                    size_t whylen) {
    cudaFree(c->act16);
    cudaFree(c->tile);
    c->act16 = NULL;
    c->tile = NULL;
    c->max_rows = 0;
    c->max_k = 0;
    c->tile_bytes = 0;
    const size_t act_bytes = (size_t)max_rows * (size_t)max_k * sizeof(__half);
    c->act16 = (__half *)cuk_malloc(c, act_bytes, "f16 activations of the prompt GEMM", why, whylen);
    if (!c->act16) return -1;
    c->tile = cuk_malloc(c, tile_bytes, "the dequantized weight tile of the prompt GEMM", why, whylen);
    if (!c->tile) return -1;
    c->max_rows = max_rows;
    c->max_k = max_k;
    c->tile_bytes = tile_bytes;
    return 0;
}

/* ---- CUDA graphs ----------------------------------------------------------------------------- */

struct cuk_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" void cuk_capture_begin(struct cuk_ctx *c) {
    CUK_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
              "starting a graph capture on the GPU rank's stream (is another capture running?)");
}

extern "C" struct cuk_graph *cuk_capture_end(struct cuk_ctx *c) {
    struct cuk_graph *g = (struct cuk_graph *)calloc(1, sizeof *g);
    NM_ASSERT(g);
    CUK_CHECK(cudaStreamEndCapture(c->stream, &g->graph),
              "ending a graph capture (a call in it synchronized or used another stream: a bug)");
    CUK_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0), "instantiating the captured graph");
    return g;
}

extern "C" void cuk_graph_launch(struct cuk_ctx *c, struct cuk_graph *g) {
    CUK_CHECK(cudaGraphLaunch(g->exec, c->stream), "launching a captured graph");
}

extern "C" void cuk_graph_free(struct cuk_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}
