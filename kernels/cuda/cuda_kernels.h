/* The CUDA device layer of the GPU rank, as a plain C API (rank/engine/gpu_stage.c is C11 and never
 * includes a CUDA header). One struct cuk_ctx per device: its stream, cuBLAS handle and the
 * scratch the prompt-path GEMM needs. Every call is asynchronous on the context's stream unless
 * it says otherwise; cuk_sync waits.
 *
 * Weights stay in their GGUF block form on the device (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, F16,
 * BF16, F32, and every type of the block decoder interface, kernels/blocks/block.h: Q5_0, Q5_1,
 * Q2_K, Q3_K, IQ4_NL, IQ4_XS and the IQ1/IQ2/IQ3 grid types, decoded on the device by the same
 * headers as on the CPU: every type the CPU ranks compute with). A matmul with few activation rows runs a
 * GEMV: on int8 activations (cuk_gemv_q8, dp4a, the decode path of the GPU stage) for the
 * block-quantized types, or decoding the blocks in registers against f32 activations
 * (cuk_gemv, every type); from CUK_MMQ_MIN_ROWS to CUK_MMQ_MAX_ROWS rows of the types
 * with an int8 tensor-core kernel, that kernel (cuk_gemv_q8); with more rows the weights are
 * dequantized tile by tile into an f16 scratch and multiplied by cuBLAS (f16 inputs, f32
 * accumulation; F32 weights go to cublasSgemm as they are). Nothing here reorders
 * or repacks a weight.
 *
 * Built without CUDA (no nvcc), kernels/cuda/none.c provides the same functions:
 * cuk_device_count returns 0 with "built without CUDA" and everything else is unreachable.
 *
 * Environment failures (a CUDA call that should not fail) go through CUK_CHECK, which prints the
 * call, cudaGetErrorString and a hint, then nm_fatal. Expected failures (no device, not enough
 * memory) return nm_status with a message. */
#ifndef NM_CUDA_KERNELS_H
#define NM_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices ------------------------------------------------------------------------------ */

struct cuk_device_info {
    char name[256];
    uint64_t total_bytes, free_bytes;
    int bus_width_bits;
    int mem_clock_khz;
    double bandwidth_gbs; /* theoretical: 2 (DDR) x memory clock x bus width / 8 */
    char pci_bus_id[32];  /* "0000:1b:00.0" form, for hwloc placement */
    int cc_major, cc_minor;
    int sm_count;
};

/* True in a build with CUDA (not a statement about the machine). */
bool cuk_built_with_cuda(void);
/* Number of usable CUDA devices; 0 with a reason in why ("no CUDA device: <error string>",
 * "built without CUDA") when there are none. */
int cuk_device_count(char *why, size_t whylen);
/* Facts about device dev; returns 0, or -1 with a message in why. */
int cuk_device_info_get(int dev, struct cuk_device_info *out, char *why, size_t whylen);

/* ---- context, memory, copies -------------------------------------------------------------- */

struct cuk_ctx;
/* Select device dev, create a stream and a cuBLAS handle. Returns NULL with a message in why. */
struct cuk_ctx *cuk_ctx_init(int dev, char *why, size_t whylen);
/* Whether the decode kernels start while the one before them finishes (programmatic dependent
 * launch: compute capability 9.0 and up, unless NM_GPU_PDL=0). */
bool cuk_ctx_overlaps_launches(const struct cuk_ctx *c);
void cuk_ctx_free(struct cuk_ctx *c);
/* Allocate the GEMM scratch: activations of up to max_rows x max_k in f16 and a dequantization
 * tile of tile_bytes. Returns 0, or -1 with a message naming the size when memory is short. */
int cuk_ctx_reserve_gemm(struct cuk_ctx *c, int max_rows, int64_t max_k, size_t tile_bytes, char *why,
                         size_t whylen);
/* Let cuk_attention_at split a row's positions into spans taken by several blocks (up to
 * CUK_ATT_MAX_SPLITS, each at least 256 positions: a context of n_ctx positions decides how many)
 * for up to max_rows rows per launch of n_head heads of head_dim_v: the scratch for their partial
 * results. Without it (or n_ctx <= 256) one block takes all of a row's positions. Returns 0, or
 * -1 with a message when memory is short. */
#define CUK_ATT_MAX_SPLITS 16
int cuk_ctx_reserve_attention(struct cuk_ctx *c, int max_rows, int n_head, int64_t head_dim_v, int64_t n_ctx,
                              char *why, size_t whylen);
/* The device bytes that reservation takes (0: none, one block per row). */
size_t cuk_attention_scratch_bytes(int max_rows, int n_head, int64_t head_dim_v, int64_t n_ctx);
/* Device bytes free and total right now. */
void cuk_mem_info(struct cuk_ctx *c, uint64_t *free_bytes, uint64_t *total_bytes);

/* Device allocation; NULL with "cudaMalloc of N bytes (X MiB) for <what>: <error>; free X of
 * Y MiB" in why when it fails. The memory is zeroed. */
void *cuk_malloc(struct cuk_ctx *c, size_t bytes, const char *what, char *why, size_t whylen);
void cuk_free(void *p);
/* Page-locked host memory (fatal on failure, naming the size). */
void *cuk_host_alloc(size_t bytes, const char *what);
void cuk_host_free(void *p);
/* p lies in page-locked memory (cuk_host_alloc's): a device to host copy lands there directly. */
bool cuk_host_pinned(const void *p);

/* Copies on the context's stream. h2d from pageable memory returns once src may be reused;
 * d2h into pageable memory returns when the data is there. */
void cuk_h2d(struct cuk_ctx *c, void *dst, const void *src, size_t bytes);
void cuk_d2h(struct cuk_ctx *c, void *dst, const void *src, size_t bytes);
void cuk_d2d(struct cuk_ctx *c, void *dst, const void *src, size_t bytes);
void cuk_sync(struct cuk_ctx *c);
/* Marks what a profiler that starts collection off (ncu --profile-from-start off) records:
 * on = true starts, false stops (cudaProfilerStart / Stop); nothing without one. */
void cuk_profile(bool on);

/* ---- matmul ------------------------------------------------------------------------------- */

/* Whether type t can be a matmul weight on the device. */
bool cuk_matmul_type_supported(enum dtype t);

/* cuk_matmul: rows at most this count go through the GEMV on f32 activations (which reads the
 * weight once per row), larger ones through dequantized tiles + cuBLAS. */
#define CUK_GEMV_F32_MAX_ROWS 8

/* y[i][0..n) = W x[i] for i < m: W is n rows of k values of type t (ggml blocks, rows of
 * dtype_row_size(t, k) bytes, device memory), x is [m][ldx] f32, y is [m][ldy] f32. k must be
 * a multiple of t's block size. m > CUK_GEMV_F32_MAX_ROWS needs cuk_ctx_reserve_gemm with
 * max_rows >= m and max_k >= k. */
void cuk_matmul(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x, int64_t ldx,
                int m, float *y, int64_t ldy);
/* The same, always through the GEMV (tests compare both paths). */
void cuk_gemv(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x, int64_t ldx,
              int m, float *y, int64_t ldy);
/* The same, always through dequantized tiles and cuBLAS. */
void cuk_gemm(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x, int64_t ldx,
              int m, float *y, int64_t ldy);

/* cuk_gemm in two steps, for several weights multiplied with one input: cuk_gemm_input stages x
 * [m][ldx] (k values per row, m <= the reserved max_rows) as the GEMM's f16 operand, first
 * rounded as cuk_act_round_q8 rounds it when round_q8 (k a multiple of 32), in one kernel;
 * each cuk_gemm_staged after it multiplies a weight of k-value rows (not F32) with that operand
 * (m rows, y [m][ldy]): with w16 NULL the weight is dequantized to f16 in tiles of the reserved
 * size, each followed by its GEMM; with w16 (the weight's f16 copy, cuk_dequant_f16) one GEMM
 * reads that copy. */
void cuk_gemm_input(struct cuk_ctx *c, const float *x, int64_t ldx, int m, int64_t k, bool round_q8);
void cuk_gemm_staged(struct cuk_ctx *c, enum dtype t, const void *w, const void *w16, int64_t k, int64_t n, int m,
                     float *y, int64_t ldy);
/* dst [n][k] f16 (16-byte aligned) = the values of w, n rows of k values of type t (not F32),
 * rounded to nearest as the prompt path's tiles round them: the f16 copy cuk_gemm_staged takes. */
void cuk_dequant_f16(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, void *dst);

/* Expert matmul (MoE, ggml's mul_mat_id): for each pair p < n_pairs, with e = ids[p] (device
 * int32), y[p][0..n) = W_e x[p / x_div], where W_e is the e-th [n x k] matrix of w, starting
 * e * expert_bytes into it. x is [..][ldx], y is [n_pairs][ldy]. */
void cuk_matmul_id(struct cuk_ctx *c, enum dtype t, const void *w, size_t expert_bytes, int64_t k, int64_t n,
                   const float *x, int64_t ldx, int x_div, const int32_t *ids, int n_pairs, float *y, int64_t ldy);

/* ---- decode: int8 activations ------------------------------------------------------------ */

/* A matmul input of m rows of k values (k a multiple of 32) quantized as the CPU ranks quantize
 * it (kernels/quant.h q8x: per 32 values d = max|x| / 127, q = rint(x / d), and the sum of the
 * q), in device memory of cuk_q8_bytes(m, k) bytes. Produced by cuk_quantize_q8,
 * cuk_rmsnorm_q8, cuk_swiglu_q8 or cuk_attention_at; read by cuk_gemv_q8, which multiplies
 * block-quantized weights with it in integers as the CPU does: per block d_w * d_a * sum(q_w *
 * q_a). The layout: the codes q [m][k] int8, at the next 16-byte boundary the scales [m][k/32]
 * (d f32, the sum int32); and for m >= CUK_MMQ_MIN_ROWS, at the next 128-byte boundary, the
 * same blocks again for the tensor cores: block b of row r at 32 (b R + r) bytes, R = m rounded
 * up to 8, its words (4 codes each) in the order 0 4 1 5 2 6 3 7, then its scale at 8 (b R + r)
 * bytes past the R k codes. Rows m .. R-1 are never written (the tensor-core kernel reads them
 * as they are: they reach only output rows past m, which it does not store). */
size_t cuk_q8_bytes(int m, int64_t k);
/* xq = q8 of x [m][ldx] (k values per row). */
void cuk_quantize_q8(struct cuk_ctx *c, void *xq, const float *x, int64_t ldx, int m, int64_t k);
/* cuk_rmsnorm, and xq = q8 of y when xq is not NULL (n a multiple of 32; y must not be x then):
 * one kernel for a norm and the quantized input of the matmuls after it. */
void cuk_rmsnorm_q8(struct cuk_ctx *c, float *y, void *xq, const float *x, const float *w, int rows, int64_t n,
                    float eps);
/* cuk_swiglu over rows x n (out may equal gate), and xq = q8 of out when xq is not NULL (n a
 * multiple of 32). */
void cuk_swiglu_q8(struct cuk_ctx *c, float *out, void *xq, const float *gate, const float *up, int rows, int64_t n);

/* Whether cuk_gemv_q8 takes weights of type t (the block-quantized types). */
bool cuk_gemv_q8_supported(enum dtype t);

/* One output of cuk_gemv_q8: W (n rows of k values of the call's type, device) times each
 * activation row i < m: y[i][j] = W_j . x_i, then + bias[j] when bias is not NULL, then added to
 * the old y[i][j] when accumulate (a residual add: y + (W x + b), the CPU's order). */
struct cuk_gemv_out {
    const void *w;
    int64_t n;
    float *y;
    int64_t ldy;
    const float *bias; /* [n] f32 or NULL */
    bool accumulate;
};
#define CUK_GEMV_MAX_OUTS 3
/* The most activation rows of cuk_gemv_q8 for every type (the dp4a GEMV): a batched decode step
 * of up to 16 sequences. */
#define CUK_GEMV_MAX_ROWS 16
/* The most rows of cuk_gemv_q8 on int8 tensor cores (where cuk_q8_tensor_cores says so): the
 * prompt path's matmuls of up to this many rows run there too, and a GPU stage whose matmuls all
 * run there takes steps of up to this many rows through its decode path (gpu_stage.c,
 * decode_rows_of). bench_gpu rows, H200, session 22, us per llama-3-8b layer, the tensor cores
 * against cuBLAS on f16 copies: 32 rows Q4_0 129.2 / 161.2, Q4_K 130.2 / 165.1; 48 rows 165.7 /
 * 168.4, 169.2 / 169.5; 64 rows 191.0 / 172.0, 210.5 / 172.5: 48, the rows of a server's step of
 * 16 decode rows and a 32-token piece of a new prompt. */
#ifndef CUK_MMQ_MAX_ROWS
#define CUK_MMQ_MAX_ROWS 48 /* (a build option for measurements, up to 64: -DCUK_MMQ_MAX_ROWS=64 in both C and
                               CUDA flags; bench_gpu rows shows 48 and 64 rows against cuBLAS) */
#endif
/* Up to CUK_GEMV_MAX_OUTS matmuls of one type and input (Q, K and V; gate and up) in one
 * launch, on the q8 activations xq of m rows of k values: m <= CUK_GEMV_MAX_ROWS, or up to
 * CUK_MMQ_MAX_ROWS where cuk_q8_tensor_cores says so. The y of one output must not overlap
 * another's or the input. Where cuk_q8_tensor_cores says so the rows run on int8 tensor cores,
 * each weight byte read once for all of them; else the GEMV (dp4a) runs, in passes of up to 8
 * rows. */
void cuk_gemv_q8(struct cuk_ctx *c, enum dtype t, int64_t k, const void *xq, int m, const struct cuk_gemv_out *outs,
                 int n_outs);
/* Whether cuk_gemv_q8 takes m rows of type t: a type it supports, and m <= CUK_GEMV_MAX_ROWS or
 * rows the int8 tensor cores take (cuk_q8_tensor_cores). */
bool cuk_gemv_q8_takes(const struct cuk_ctx *c, enum dtype t, int m);
/* From this many rows on, cuk_gemv_q8 may run on int8 tensor cores, and the q8 buffer holds their
 * layout (bench_gpu rows, H100, session 19, us per llama-3-8b layer, the GEMV against the tensor
 * cores: 2 rows Q4_0 86.6 / 80.0, Q4_K 82.5 / 87.5, Q8_0 127.9 / 109.1; 3 rows 103.7 / 81.2,
 * 97.2 / 87.8, 159.2 / 109.6; 4 rows 125.2 / 81.1, 115.2 / 87.8, 192.8 / 111.2). */
#ifndef CUK_MMQ_MIN_ROWS
#define CUK_MMQ_MIN_ROWS 3 /* (a build option for measurements: -DCUK_MMQ_MIN_ROWS=2 in both C and CUDA flags) */
#endif
/* Whether cuk_gemv_q8 of m rows of type t runs on int8 tensor cores: CUK_MMQ_MIN_ROWS ..
 * CUK_MMQ_MAX_ROWS rows of Q4_0, Q4_1, Q8_0, Q4_K or Q5_K on a device of sm_80 and up, unless
 * NM_GPU_MMQ=0 was set when the context was made. */
bool cuk_q8_tensor_cores(const struct cuk_ctx *c, enum dtype t, int m);

/* ---- decode: rows in device memory, CUDA graphs ------------------------------------------
 * The decode kernels take their rows' places from device memory, read when the kernel runs, so
 * that a captured graph serves every step: rows [m][2] (int64), row i at position rows[2i] of a
 * sequence whose positions start at cache row rows[2i + 1] (its region of the cache: position p
 * is cache row rows[2i + 1] + p). One kernel may take rows of several sequences. */

/* How the decode kernels rotate a step's rows: per head of q and of k an RMSNorm with q_norm or
 * k_norm [head_dim] when not NULL (qwen3's Q/K norms), then RoPE with the cos/sin pairs of the
 * row's position from cos_sin[pos][n_rot] (op_rope_cache's layout) and op_rope's pairing (neox or
 * adjacent). */
struct cuk_rope {
    const float *q_norm, *k_norm;
    float eps;
    const float *cos_sin;
    int64_t n_rot;
    int neox;
};
/* The rotation of q's n_head heads and k's n_head_kv heads in place, then k's rotated rows and
 * v's rows stored to the caches at each row's cache row (as cuk_kv_store), in one kernel. q is
 * [m][n_head * head_dim], k [m][n_head_kv * head_dim], v [m][n_head_kv * head_dim_v]. */
void cuk_rope_store(struct cuk_ctx *c, float *q, float *k, const float *v, int m, int n_head, int n_head_kv,
                    int64_t head_dim, int64_t head_dim_v, const struct cuk_rope *rope, void *k_cache, void *v_cache,
                    enum dtype kv_type, const int64_t *rows);
/* cuk_attention of m rows, each over its own sequence's positions 0 .. its position (rows as
 * above). rope NULL: q is rotated and every row's K and V are in the caches (cuk_rope_store);
 * k and v are not read. Otherwise q, k and v are the rows before RoPE, as cuk_rope_store takes
 * them, and the launch does what cuk_rope_store would (the same bytes in the caches; q, k and v
 * left as they are) before it attends: one kernel instead of two. Several of its blocks store
 * each new K and V row, the same bytes (ops.cu's attn_kernel says why that holds). The rows of
 * a sequence must then be adjacent at consecutive positions (kv_batch_check's rule). out_q8, when not NULL (head_dim_v a
 * multiple of 32, ldo = n_head * head_dim_v): the output rows' q8 too, as cuk_quantize_q8 writes
 * it (the next matmul's input, in the same launch). */
void cuk_attention_at(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const float *k, const float *v,
                      void *k_cache, void *v_cache, enum dtype kv_type, int m, const int64_t *rows, int n_head,
                      int n_head_kv, int64_t head_dim, int64_t head_dim_v, float scale, const struct cuk_rope *rope,
                      void *out_q8);

/* A recorded sequence of the context's stream work (a CUDA graph), replayed with one launch.
 * Between cuk_capture_begin and cuk_capture_end the calls on c are recorded, not run; nothing in
 * between may synchronize (no cuk_d2h, cuk_sync, cuk_topk, cuBLAS prompt GEMMs). Copies from
 * page-locked memory (cuk_host_alloc) read it when the graph runs. */
struct cuk_graph;
void cuk_capture_begin(struct cuk_ctx *c);
/* The recorded graph, ready to launch (fatal, naming the CUDA error, when it cannot be built). */
struct cuk_graph *cuk_capture_end(struct cuk_ctx *c);
void cuk_graph_launch(struct cuk_ctx *c, struct cuk_graph *g);
void cuk_graph_free(struct cuk_graph *g);

/* ---- element-wise and attention ----------------------------------------------------------- */
/* y[r] = rmsnorm(x[r]) * w for rows r < rows of n values (row stride n); sums of squares in
 * double as op_rmsnorm. y may equal x. */
void cuk_rmsnorm(struct cuk_ctx *c, float *y, const float *x, const float *w, int rows, int64_t n, float eps);
/* x[i] += y[i] */
void cuk_add(struct cuk_ctx *c, float *x, const float *y, int64_t n);
/* y[r][i] += b[i] for r < rows, i < n (row stride n). */
void cuk_add_bias(struct cuk_ctx *c, float *y, const float *b, int rows, int64_t n);
/* out[i] = silu(gate[i]) * up[i]; out may equal gate. */
void cuk_swiglu(struct cuk_ctx *c, float *out, const float *gate, const float *up, int64_t n);
/* y = x rounded as the CPU ranks quantize a matmul's input for block-quantized weights: per 32
 * values, d = max|x| / 127, y = round(x / d) * d (kernels/quant.h q8x). n a multiple of 32; y
 * may equal x. The GPU stage feeds its quantized-weight matmuls this, so a layer gives the same
 * numbers (up to f32 summation order) on either side of the pipeline. */
void cuk_act_round_q8(struct cuk_ctx *c, float *y, const float *x, int64_t n);
/* Per head of x[m][row_stride] (n_head heads of head_dim values, head h at h * head_dim): an
 * RMSNorm with norm_w[head_dim] when norm_w is not NULL (qwen3's Q/K norms), then RoPE at
 * position pos0 + i for row i, with cos/sin pairs from cos_sin[pos][n_rot] (op_rope_cache's
 * layout, one row per position) and the pairing of op_rope (neox or adjacent). */
void cuk_norm_rope(struct cuk_ctx *c, float *x, int m, int n_head, int64_t head_dim, int64_t row_stride,
                   const float *norm_w, float eps, const float *cos_sin, int64_t pos0, int64_t n_rot, int neox);
/* cache row pos0 + i = src[i] (n values, row stride n) for i < m, as F32 or F16 (rounded to
 * nearest even, as op_store_kv). */
void cuk_kv_store(struct cuk_ctx *c, void *cache, enum dtype kv_type, const float *src, int m, int64_t n,
                  int64_t pos0);
/* Causal attention of m query rows at positions pos0 .. pos0+m-1 over the cache (K rows of
 * n_head_kv * head_dim, V rows of n_head_kv * head_dim_v values, kv_type F32 or F16; positions
 * 0 .. pos0+i are read for row i): out[i][h * head_dim_v ..] for query head h, which uses KV
 * head h / (n_head / n_head_kv). q is [m][n_head * head_dim]; out's row stride is ldo.
 * head_dim, head_dim_v <= 512. */
void cuk_attention(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const void *k_cache,
                   const void *v_cache, enum dtype kv_type, int m, int64_t pos0, int n_head, int n_head_kv,
                   int64_t head_dim, int64_t head_dim_v, float scale);
/* Whether cuk_attention runs m rows of these shapes on tensor cores (a prompt chunk of at least 8
 * rows over an F16 cache, head_dim = head_dim_v of 64 or 128, on sm_80 and up). Its products
 * keep f32 accuracy (Q and the softmax numerators split into two f16 parts each), but its sums
 * run in another order: such rows agree with the kernel of single rows (and cuk_attention_at)
 * to f32 rounding, not to the bit. */
bool cuk_attention_tensor_cores(struct cuk_ctx *c, enum dtype kv_type, int m, int64_t head_dim, int64_t head_dim_v);

/* MoE routing for m rows of router logits [m][n_expert]: softmax, the n_used largest
 * probabilities (ties: the lower expert id), their weights renormalized to sum 1. ids and w
 * are [m][n_used]. n_expert <= 4096, n_used <= 64. */
void cuk_moe_route(struct cuk_ctx *c, const float *logits, int m, int n_expert, int n_used, int32_t *ids, float *w);
/* x[i] += sum_s w[i][s] * y[i * n_used + s] (rows of n values), s in slot order. */
void cuk_moe_combine(struct cuk_ctx *c, float *x, const float *y, const float *w, int m, int n_used, int64_t n);

/* ---- sampling ----------------------------------------------------------------------------- */

#define CUK_TOPK_MAX 1024
#define CUK_TOPK_ROWS 16 /* rows cuk_topk takes in one round of kernels (its scratch holds them) */
/* One row for cuk_topk: row `row` of the logits, its k (1 .. CUK_TOPK_MAX, at most n), and
 * llama.cpp's repetition penalty on the distinct ids of pen_ids[n_pen] (host): a positive logit
 * divided by penalty, a negative one multiplied (n_pen 0 or penalty 1: none). */
struct cuk_topk_row {
    int64_t row;
    int k, n_pen;
    const int32_t *pen_ids;
    float penalty;
};
/* Device scratch bytes cuk_topk needs for rows of n logits. */
size_t cuk_topk_scratch_bytes(int64_t n);
/* For each of the n_rows requests, the k best of its row of logits (device, rows ld apart, n
 * values each) after its penalty, in descending order (ties: the lower id first), written to the
 * host arrays ids and vals: row i's after the k of the rows before it. All the rows' candidates
 * come back in one copy per CUK_TOPK_ROWS rows; synchronous. The device logits are not
 * modified. */
void cuk_topk(struct cuk_ctx *c, const float *logits, int64_t ld, int64_t n, const struct cuk_topk_row *rows,
              int n_rows, void *scratch, int32_t *ids, float *vals);

#ifdef __cplusplus
}
#endif

#endif
