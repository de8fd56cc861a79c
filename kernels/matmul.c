/* Matrix multiplication of a ROWS-layout weight by a batch of activations (see matmul.h).
 *
 * kern_matmul runs two pool jobs: the q8x quantization of the input (only when the weight type
 * needs it and the input's q8 copy is stale), then the product. The product splits the output
 * features n across threads (contiguous row ranges, so each thread streams its own part of the
 * weight once for m = 1). For m > 1 a thread hands its rows to the ISA's gemm kernel one block
 * of activation rows at a time (sized so the block stays in L2); the kernel walks its weight
 * rows in L2-sized blocks and, inside, keeps register tiles of weight rows x activation rows,
 * so a weight byte read from memory serves every token of the block while it stays in cache. */
#include "matmul.h"

#include <string.h>

#include "base.h"
#include "cpu.h"
#include "matmul_internal.h"

/* Activation rows per block: as many as fit in about MM_X_BLOCK_BYTES of q8x (the kernel's
 * packed copy is as big), between 4 and 64 and a multiple of 4. */
#define MM_X_BLOCK_BYTES (256 * 1024)
/* Output rows per thread range are multiples of this: whole cache lines of y per thread and
 * whole register tiles. */
#define MM_ROW_ALIGN 16
/* Inputs smaller than this (m * k values) are quantized by the caller alone: a pool wake-up
 * costs more than the work. */
#define MM_QUANT_INLINE_VALUES (32 * 1024)

const char *weight_layout_name(enum weight_layout l) {
    switch (l) {
    case WEIGHT_LAYOUT_NONE: return "none";
    case WEIGHT_LAYOUT_ROWS: return "rows";
    case WEIGHT_LAYOUT_Q_TILE16: return "q_tile16";
    case WEIGHT_LAYOUT_F_PAIR16: return "f_pair16";
    }
    return "unknown";
}

struct weight weight_rows(enum dtype type, int64_t k, int64_t n, const void *data) {
    const struct dtype_info *info = dtype_get((uint32_t)type);
    NM_ASSERT(info != NULL);
    NM_ASSERT(k > 0 && k % info->blck_size == 0 && n >= 0);
    return (struct weight){
        .layout = WEIGHT_LAYOUT_ROWS,
        .type = type,
        .k = k,
        .n = n,
        .row_bytes = dtype_row_size(type, k),
        .bytes = dtype_row_size(type, k) * (size_t)n,
        .data = data,
    };
}

size_t act_q8_bytes(int m, int64_t k) {
    NM_ASSERT(m >= 0 && k >= 0);
    return (size_t)m * (size_t)((k + QK8X - 1) / QK8X) * sizeof(block_q8x);
}

/* Checks shared by both entry points (tier 1: a mismatch is a bug of the caller). */
static void mm_check(const struct weight *w, const struct act *x, const float *y, int64_t ldy) {
    NM_ASSERT(w != NULL && x != NULL);
    NM_ASSERT(w->layout == WEIGHT_LAYOUT_ROWS);
    const struct dtype_info *info = dtype_get((uint32_t)w->type);
    NM_ASSERT(info != NULL);
    NM_ASSERT(x->k == w->k);
    NM_ASSERT(w->k > 0 && w->k % info->blck_size == 0);
    NM_ASSERT(w->row_bytes == dtype_row_size(w->type, w->k));
    NM_ASSERT(x->m >= 0 && w->n >= 0);
    NM_ASSERT(ldy >= w->n);
    NM_ASSERT(x->m == 0 || (y != NULL && x->f32 != NULL));
    if (dtype_uses_q8x(w->type)) NM_ASSERT(w->k % QK8X == 0 && (x->m == 0 || x->q8 != NULL));
}

struct mm_job {
    const struct kern_isa *isa;
    const struct weight *w;
    const struct act *x;
    const void *xa;  /* activation rows as the kernel reads them: q8 or f32 */
    size_t xs;       /* bytes between activation rows */
    float *y;
    int64_t ldy;
    struct pool_claims rows; /* m > 1: the weight rows, claimed */
};

/* Quantize blocks [lo, hi) of the flattened [m][k/32] q8x array. */
static void mm_quant_range(const struct mm_job *j, long lo, long hi) {
    const int64_t nb = j->x->k / QK8X;
    while (lo < hi) {
        const long row = lo / nb, b = lo % nb;
        const long end = NM_MIN(hi, (row + 1) * nb);
        j->isa->quantize_act_q8x(j->x->f32 + row * j->x->k + b * QK8X, j->x->q8 + lo,
                                 (int64_t)(end - lo) * QK8X);
        lo = end;
    }
}

static void mm_quant_job(void *ctx, int ith, int nth) {
    const struct mm_job *j = ctx;
    long lo, hi;
    pool_split((long)j->x->m * (long)(j->x->k / QK8X), 1, ith, nth, &lo, &hi);
    mm_quant_range(j, lo, hi);
}

void kern_act_quantize(struct pool *pool, struct act *x) {
    if (x->q8_ready || x->m == 0) return;
    NM_ASSERT(x->k % QK8X == 0 && x->q8 != NULL);
    struct mm_job j = {.isa = kern_isa_get(), .x = x};
    if (pool == NULL || (int64_t)x->m * x->k < MM_QUANT_INLINE_VALUES)
        mm_quant_range(&j, 0, (long)x->m * (long)(x->k / QK8X));
    else
        pool_run(pool, mm_quant_job, &j);
    x->q8_ready = true;
}

static void mm_rows(const struct mm_job *j, long lo, long hi) {
    const struct weight *w = j->w;
    const int m = j->x->m;
    const uint8_t *wd = w->data;
    const uint8_t *xa = j->xa;
    void (*gemm)(int64_t, const void *, size_t, int, const void *, size_t, int, float *, int64_t) =
        j->isa->gemm[w->type];
    if (m == 1) {
        gemm(w->k, wd + (size_t)lo * w->row_bytes, w->row_bytes, (int)(hi - lo), xa, j->xs, 1,
             j->y + lo, j->ldy);
        return;
    }
    const size_t act_bytes = (size_t)w->k * 5 / 4 + 1; /* q8x: 40 bytes per 32 values */
    const int xblock = (int)NM_MAX(4, NM_MIN(64, MM_X_BLOCK_BYTES / act_bytes / 4 * 4));
    for (int c0 = 0; c0 < m; c0 += xblock) {
        const int nc = NM_MIN(xblock, m - c0);
        gemm(w->k, wd + (size_t)lo * w->row_bytes, w->row_bytes, (int)(hi - lo),
             xa + (size_t)c0 * j->xs, j->xs, nc, j->y + (int64_t)c0 * j->ldy + lo, j->ldy);
    }
}

/* The GEMV splits the rows evenly once (each thread streams its own); larger m claims them, a
 * quarter of a thread's share at a time, shrinking at the end (pool_claim). */
static void mm_job_run(void *ctx, int ith, int nth) {
    struct mm_job *j = ctx;
    long lo, hi;
    if (j->x->m == 1) {
        pool_split((long)j->w->n, MM_ROW_ALIGN, ith, nth, &lo, &hi);
        if (lo < hi) mm_rows(j, lo, hi);
        return;
    }
    while (pool_claim(&j->rows, &lo, &hi)) mm_rows(j, lo, hi);
}

void kern_matmul(struct pool *pool, const struct weight *w, struct act *x, float *y, int64_t ldy) {
    if (w != NULL && (w->layout != WEIGHT_LAYOUT_ROWS || pk_takes_rows(w, x->m))) {
        pk_matmul(pool, w, x, NULL, 0, y, NULL, ldy);
        return;
    }
    mm_check(w, x, y, ldy);
    if (x->m == 0 || w->n == 0) return;
    struct mm_job j = {.isa = kern_isa_get(), .w = w, .x = x, .y = y, .ldy = ldy};
    if (dtype_uses_q8x(w->type)) {
        kern_act_quantize(pool, x);
        j.xa = x->q8;
        j.xs = (size_t)(x->k / QK8X) * sizeof(block_q8x);
    } else {
        j.xa = x->f32;
        j.xs = (size_t)x->k * sizeof(float);
    }
    const int nth = pool ? pool_size(pool) : 1;
    pool_claims_init(&j.rows, (long)w->n, (long)w->n / (4L * nth), MM_ROW_ALIGN, nth);
    if (pool == NULL)
        mm_job_run(&j, 0, 1);
    else
        pool_run(pool, mm_job_run, &j);
}

void kern_matmul_ref(const struct weight *w, struct act *x, float *y, int64_t ldy) {
    mm_check(w, x, y, ldy);
    if (x->m == 0 || w->n == 0) return;
    const int64_t k = w->k;
    const uint8_t *wd = w->data;
    const bool q8 = dtype_uses_q8x(w->type);
    if (q8 && !x->q8_ready) {
        for (int i = 0; i < x->m; i++)
            quantize_act_q8x_ref(x->f32 + (int64_t)i * k, x->q8 + (int64_t)i * (k / QK8X), k);
        x->q8_ready = true;
    }
    for (int i = 0; i < x->m; i++) {
        const void *a = q8 ? (const void *)(x->q8 + (int64_t)i * (k / QK8X))
                           : (const void *)(x->f32 + (int64_t)i * k);
        for (int64_t r = 0; r < w->n; r++)
            y[(int64_t)i * ldy + r] = vec_dot_ref(w->type, k, wd + (size_t)r * w->row_bytes, a);
    }
}

void kern_matmul_multi(struct pool *pool, int nw, const struct weight *const *w, struct act *x, float *const *y) {
    for (int i = 0; i < nw;) {
        int e = i + 1;
        while (e < nw && e - i < PK_MULTI_MAX && pk_multi_fits(w[i], w[e])) e++;
        if (e - i > 1) pk_matmul_multi(pool, e - i, w + i, x, y + i);
        else kern_matmul(pool, w[i], x, y[i], w[i]->n);
        i = e;
    }
}
