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
};
const char *weight_layout_name(enum weight_layout l);

struct weight {
    enum weight_layout layout;
    enum dtype type;
    int64_t k;        /* input features: ne0, the row length */
    int64_t n;        /* output features: ne1, the number of rows */
    size_t row_bytes; /* bytes of one row in this layout */
    const void *data; /* n * row_bytes bytes */
};

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
 * mismatch. */
void kern_matmul(struct pool *pool, const struct weight *w, struct act *x, float *y, int64_t ldy);

/* A canonical chunk of a row-parallel matmul's input columns (see rank/shard.h, "Exactness"):
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

/* The plain-C reference: same contract, single-threaded, through vec_dot_ref. */
void kern_matmul_ref(const struct weight *w, struct act *x, float *y, int64_t ldy);

#endif
