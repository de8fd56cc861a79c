/* Matrix multiplication of a weight by a batch of activations, on the pool's threads.
 *
 * A weight carries a layout tag (DESIGN lesson 2): only kernels for that layout read it, and
 * every entry point checks the tag. WEIGHT_LAYOUT_ROWS is the GGUF layout itself (row n holds
 * the K input weights of output n, in the tensor's ggml blocks), read straight from the mapped
 * file. Packed layouts (AMX tiles, VNNI pairs) join this enum; only the repack step produces
 * them, and there is no function that reads packed bytes back as plain rows. */
#ifndef NM_MATMUL_H
#define NM_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"
#include "quant.h"
#include "types.h"

enum weight_layout {
    WEIGHT_LAYOUT_NONE = 0, /* not initialized: every kernel rejects it */
    WEIGHT_LAYOUT_ROWS = 1, /* GGUF rows as stored in the file */
    /* Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K: rows in groups of 16, codes in int8 VNNI quads
     * (nibbles kept as nibbles), every per-block scale kept exactly (f16 / 6-bit / int8 as in
     * the file). One layout for the AVX-512 VNNI GEMV (lane = row) and the AMX int8 tiles (one
     * 64-byte line = one B-tile row). Byte format: packed.h. */
    WEIGHT_LAYOUT_Q_TILE16 = 2,
    /* F16, BF16: rows in groups of 16, column pairs (the bf16 VNNI pair order of AMX B tiles and
     * vdpbf16ps), values unchanged (F16 stays F16). Byte format: packed.h. */
    WEIGHT_LAYOUT_F_PAIR16 = 3,
};
const char *weight_layout_name(enum weight_layout l);

struct weight {
    enum weight_layout layout;
    enum dtype type;
    int64_t k;        /* input features: ne0, the row length */
    int64_t n;        /* output features: ne1, the number of rows */
    size_t row_bytes; /* ROWS: bytes of one row; packed layouts: 0 (there are no rows) */
    size_t bytes;     /* bytes at data: n * row_bytes (ROWS) or weight_packed_bytes (packed) */
    const void *data; /* the weight's bytes in its layout */
};

/* Whether `layout` exists for `type` (ROWS: every supported type; Q_TILE16: the six
 * block-quantized types; F_PAIR16: F16 and BF16). */
bool weight_layout_supports(enum weight_layout layout, enum dtype type);

/* Bytes of a k x n weight of `type` in a packed layout (a multiple of 64; rows padded to groups
 * of 16, float K padded to 32). Aborts (bug) when the layout does not support the type or k is
 * not a multiple of the type's block size. */
size_t weight_packed_bytes(enum weight_layout layout, enum dtype type, int64_t k, int64_t n);

/* The repack step, the only producer of packed layouts. src holds n GGUF rows of k values of
 * `type` (k a multiple of the block size), src_stride bytes apart (>= dtype_row_size(type, k);
 * a rank's row-parallel slice is a column sub-range of each file row, so the stride is the file
 * row's size). dst: weight_packed_bytes(layout, type, k, n) bytes, 64-byte aligned, owned by
 * the caller (NUMA-local memory), written completely (padding zeroed). Runs on the pool's
 * threads (pool may be NULL). *out describes the packed weight over dst (not owned). Aborts
 * (bug) on an unsupported layout/type or a misaligned dst. */
void weight_pack(struct pool *pool, enum weight_layout layout, enum dtype type, int64_t k, int64_t n,
                 const void *src, size_t src_stride, void *dst, struct weight *out);

/* A weight in the ROWS layout over existing bytes (not copied, not owned). */
struct weight weight_rows(enum dtype type, int64_t k, int64_t n, const void *data);

/* A batch of m activation rows of length k, with its q8x quantization made on demand once and
 * shared by every matmul that reads this input (Q, K and V; gate and up). */
struct act {
    int m;
    int64_t k;
    const float *f32;  /* [m][k], row-major, caller-owned */
    block_q8x *q8;     /* [m][k/32], caller-owned scratch of act_q8_bytes(m, k) bytes */
    bool q8_ready;     /* set by kern_matmul once q8 holds f32's quantization */
};
size_t act_q8_bytes(int m, int64_t k);
/* Call after writing new values into f32: the q8 copy is stale. */
static inline void act_invalidate(struct act *a) { a->q8_ready = false; }

/* Fill x->q8 from x->f32 (per 32 values, on the pool's threads) unless x->q8_ready; sets it.
 * Every matmul that reads q8x activations calls this, so each input is quantized once. */
void kern_act_quantize(struct pool *pool, struct act *x);

/* y[i][j] = sum_k w[j][k] * x[i][k] for i < x->m, j < w->n; y is [m][n] row-major (row stride
 * ldy floats, ldy >= w->n). Uses every thread of the pool. Aborts (bug) on a layout or shape
 * mismatch.
 *
 * Packed layouts. Q_TILE16 computes exactly the integer block products of vec_dot_ref (q8x
 * activations) and applies the per-block scales in f32, one fma per block per row, in K order:
 * lanes are rows, so output row j's bits depend only on row j's bytes and the input, never on n,
 * on j's position in the slice or on the threads. m < kern_matmul_amx_min_m(type) (and any m
 * without AMX) runs the AVX-512 VNNI kernel, whose results for a row are the same bits for every m;
 * larger m with AMX-INT8 runs int8 tiles (TDPBSSD on signed codes: the same integer block sums)
 * with the same per-block f32 arithmetic (in the same order, so the same bits). F_PAIR16 with the VNNI path widens f16/bf16
 * exactly to f32 and uses f32 FMA with f32 activations (as exact as the ROWS kernels); with
 * AMX-BF16 (m >= kern_matmul_amx_min_m) weights and activations are rounded to bf16 (F16 weights
 * lose 3 mantissa bits, activations 16) and products summed in f32 by TDPBF16PS: relative error
 * ~2^-8 per product, well inside the model tolerance of F16/BF16 (3e-2 logits). The switch
 * depends on m only, so every rank of a tensor-parallel job takes the same path. */
void kern_matmul(struct pool *pool, const struct weight *w, struct act *x, float *y, int64_t ldy);

/* kern_matmul of nw weights that take the same activations (y[i] = W[i] x, ldy w[i]->n: the
 * q, k and v projections; gate and up), each row the bits kern_matmul gives it. Packed weights
 * of one layout, type and row length next to each other run in one pool run, their row groups
 * shared out together, the activations prepared once: fewer waits for the pool (a decode step of
 * a small model pays one per call) and no threads idle on a matrix of few row groups (k, v). */
void kern_matmul_multi(struct pool *pool, int nw, const struct weight *const *w, struct act *x, float *const *y);

/* A canonical chunk of a row-parallel matmul's input columns (see rank/model/shard.h, "Exactness"):
 * the weight columns [w0, w1) it reads (whole blocks of the weight's type) and the activation
 * columns [a0, a1) it keeps (w0 <= a0 < a1 <= w1; the others count as zero; multiples of 32). */
struct kern_chunk {
    int64_t w0, w1;
    int64_t a0, a1;
};

/* y[i][j] = sum over chunks c, in order, in double, of the f32 dot product of row j of w with
 * row i of x over chunk c's columns (activations outside [a0, a1) taken as zero). A chunk's f32
 * partial depends only on its own weight and activation bytes, so whichever rank computes a chunk
 * gets the same number, and the double sums are exact for all practical purposes. The chunks
 * must lie inside [0, w->k); together they are the columns that count. Uses every thread of the
 * pool; quantizes x once (x->q8) as kern_matmul does. */
void kern_matmul_chunked_f64(struct pool *pool, const struct weight *w, struct act *x, const struct kern_chunk *chunks,
                             int n_chunks, double *y, int64_t ldy);

/* The plain-C reference: same contract, single-threaded, through vec_dot_ref. ROWS layout only
 * (tests pack the same rows and compare). */
void kern_matmul_ref(const struct weight *w, struct act *x, float *y, int64_t ldy);

/* Smallest m that takes the AMX tile path for a packed weight of `type` (when the CPU has AMX
 * and the OS granted it), or INT_MAX for types without tiles. Measured on the device Xeon
 * (tests/bench/RESULTS.md; 4096x14336): the m from which the tiles won at every larger m: BF16
 * 6, F16 12 (2 threads), every int8 type 12 (16 threads, the one-tile path of batched decode,
 * weights from cache or DRAM). NM_AMX_MIN_M (environment) forces one value for every type, for
 * measurements. */
int kern_matmul_amx_min_m(enum dtype type);

/* Which kernel family kern_matmul / kern_matmul_chunked_f64 use for packed layouts. AUTO is
 * the production choice (by m and the CPU, above); the others force one family, for tests and
 * benchmarks: VNNI (AVX-512 VNNI/FMA kernel, any m), AVX2 (the AVX2/FMA kernel of CPUs without
 * AVX-512, any m), AMX (tiles for any m > 0; aborts without AMX), AMX_EMU (the AMX kernel's code over a plain-C emulation of the tile instructions: tests
 * the tile algorithm on machines without AMX; slow), REF (plain C). Not thread-safe: set it
 * before starting the matmuls. */
enum kern_path { KERN_PATH_AUTO, KERN_PATH_VNNI, KERN_PATH_AVX2, KERN_PATH_AMX, KERN_PATH_AMX_EMU, KERN_PATH_REF };
void kern_matmul_force_path(enum kern_path path);
/* Quantized packed weights may take the AMX bf16 tiles from kern_matmul_bf16_min_m(type) rows
 * on (off by default). Their activations are then rounded to bf16 instead of the q8x blocks of
 * the int8 kernels and the f32 sum runs in the tiles: ~3x faster prompts, but a row's bits then
 * depend on how many rows share the call (never on the split over threads or ranks). The
 * single-sequence engine turns it on; the batched engine (the server, batch invariance) keeps it
 * off. Not thread-safe, like kern_matmul_force_path. */
void kern_matmul_allow_bf16_tiles(bool on);
bool kern_matmul_bf16_tiles_allowed(void);
/* The m from which an allowed quantized type takes the bf16 tiles: 64 (NM_AMX_BF16_MIN_M forces
 * another, for measurements). F16/BF16 take them from kern_matmul_amx_min_m. */
int kern_matmul_bf16_min_m(enum dtype type);
/* Whether this process may run AMX tiles (CPUID AMX-TILE/INT8/BF16, the avx512 path, and the
 * OS's permission; see cpu.h). */
bool kern_amx_available(void);

#endif
