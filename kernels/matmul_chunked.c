/* Row-parallel matmul summed over canonical chunks in double (see matmul.h). Each worker takes
 * a range of weight rows, in blocks small enough to stay in cache while every chunk's columns of
 * the block are multiplied (so the weights still stream from memory once), and adds each chunk's
 * f32 partial into the double output. */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cpu.h"
#include "matmul.h"
#include "matmul_internal.h"

#define CHUNKED_ROW_BLOCK 32

struct chunked_job {
    const struct kern_isa *isa;
    const struct weight *w;
    int m;
    const struct kern_chunk *chunks;
    int n_chunks;
    const uint8_t **act;  /* per chunk: the first activation row's bytes for column w0 */
    const size_t *act_stride; /* per chunk: bytes between activation rows */
    double *y;
    int64_t ldy;
};

static size_t act_bytes(bool q8, int64_t cols) { return q8 ? (size_t)(cols / QK8X) * sizeof(block_q8x) : (size_t)cols * 4; }

static void chunked_worker(void *ctx, int ith, int nth) {
    const struct chunked_job *j = ctx;
    const struct weight *w = j->w;
    long lo, hi;
    pool_split((long)w->n, CHUNKED_ROW_BLOCK, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    float *tmp = malloc((size_t)j->m * CHUNKED_ROW_BLOCK * sizeof(float));
    NM_ASSERT(tmp);
    for (long r0 = lo; r0 < hi; r0 += CHUNKED_ROW_BLOCK) {
        const int nr = (int)NM_MIN((long)CHUNKED_ROW_BLOCK, hi - r0);
        for (int i = 0; i < j->m; i++) memset(j->y + i * j->ldy + r0, 0, (size_t)nr * sizeof(double));
        for (int c = 0; c < j->n_chunks; c++) {
            const struct kern_chunk *ch = &j->chunks[c];
            const uint8_t *wp = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes + dtype_row_size(w->type, ch->w0);
            j->isa->gemm[w->type](ch->w1 - ch->w0, wp, w->row_bytes, nr, j->act[c], j->act_stride[c], j->m, tmp, nr);
            for (int i = 0; i < j->m; i++)
                for (int r = 0; r < nr; r++) j->y[i * j->ldy + r0 + r] += (double)tmp[i * nr + r];
        }
    }
    free(tmp);
}

void kern_matmul_chunked_f64(struct pool *pool, const struct weight *w, struct act *x, const struct kern_chunk *chunks,
                             int n_chunks, double *y, int64_t ldy) {
    if (w->layout != WEIGHT_LAYOUT_ROWS || pk_takes_rows(w, x->m)) {
        pk_matmul(pool, w, x, chunks, n_chunks, NULL, y, ldy);
        return;
    }
    NM_ASSERT(w->layout == WEIGHT_LAYOUT_ROWS && x->k == w->k && ldy >= w->n && n_chunks >= 0);
    const struct dtype_info *ti = dtype_get(w->type);
    const bool q8 = dtype_uses_q8x(w->type);
    if (x->m == 0 || w->n == 0) return;
    const struct kern_isa *isa = kern_isa_get();
    if (q8) kern_act_quantize(pool, x);
    const uint8_t *base = q8 ? (const uint8_t *)x->q8 : (const uint8_t *)x->f32;
    const size_t row_stride = act_bytes(q8, x->k);
    const uint8_t **act = calloc((size_t)n_chunks + 1, sizeof *act);
    size_t *stride = calloc((size_t)n_chunks + 1, sizeof *stride);
    uint8_t **masked = calloc((size_t)n_chunks + 1, sizeof *masked);
    NM_ASSERT(act && stride && masked);
    for (int c = 0; c < n_chunks; c++) {
        const struct kern_chunk *ch = &chunks[c];
        NM_ASSERT(0 <= ch->w0 && ch->w0 <= ch->a0 && ch->a0 < ch->a1 && ch->a1 <= ch->w1 && ch->w1 <= w->k);
        NM_ASSERT(ch->w0 % ti->blck_size == 0 && (ch->w1 % ti->blck_size == 0 || ch->w1 == w->k));
        if (ch->a0 == ch->w0 && ch->a1 == ch->w1) {
            act[c] = base + act_bytes(q8, ch->w0);
            stride[c] = row_stride;
            continue;
        }
        /* A masked chunk (a head inside a wider block): a copy of its activation columns with
         * zeros outside [a0, a1). Zero q8x blocks (d = 0, isum = 0) contribute exactly 0. */
        NM_ASSERT(!q8 || (ch->a0 % QK8X == 0 && ch->a1 % QK8X == 0));
        const size_t cs = act_bytes(q8, ch->w1 - ch->w0);
        masked[c] = nm_alloc(cs * (size_t)x->m, 64, "masked chunk activations");
        const size_t skip = act_bytes(q8, ch->a0 - ch->w0), keep = act_bytes(q8, ch->a1 - ch->a0);
        for (int i = 0; i < x->m; i++)
            memcpy(masked[c] + (size_t)i * cs + skip, base + (size_t)i * row_stride + act_bytes(q8, ch->a0), keep);
        act[c] = masked[c];
        stride[c] = cs;
    }
    struct chunked_job j = {.isa = isa, .w = w, .m = x->m, .chunks = chunks, .n_chunks = n_chunks, .act = act,
                            .act_stride = stride, .y = y, .ldy = ldy};
    if (pool) pool_run(pool, chunked_worker, &j);
    else chunked_worker(&j, 0, 1);
    for (int c = 0; c < n_chunks; c++) nm_free(masked[c]);
    free(masked);
    free(act);
    free(stride);
}
