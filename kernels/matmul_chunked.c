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

/* Consecutive chunks over the same weight columns [w0, w1) (heads inside one wider block) form a
 * group: their activations, each chunk's masked copy, are stacked as n x m rows, so that one gemm
 * call decodes the group's weight blocks once for all of them. A row's result does not depend on
 * the other rows of a call (every kernel's contract), so each chunk gets the bits of a call of
 * its own. */
struct chunk_group {
    int c0, n;                /* chunks c0 .. c0 + n - 1 */
    const uint8_t *act;       /* activation row i of chunk c0 + g: row g * m + i */
    size_t act_stride;        /* bytes between those rows */
};

struct chunked_job {
    const struct kern_isa *isa;
    const struct weight *w;
    int m;
    const struct kern_chunk *chunks;
    const struct chunk_group *groups;
    int n_groups, max_group;
    double *y;
    int64_t ldy;
    struct pool_claims rows; /* m > 1: the weight rows, claimed */
};

static size_t act_bytes(bool q8, int64_t cols) { return q8 ? (size_t)(cols / QK8X) * sizeof(block_q8x) : (size_t)cols * 4; }

/* Weight rows [lo, hi) (whole blocks but at the end); tmp: max_group * m * CHUNKED_ROW_BLOCK floats. */
static void chunked_rows(const struct chunked_job *j, long lo, long hi, float *tmp) {
    const struct weight *w = j->w;
    for (long r0 = lo; r0 < hi; r0 += CHUNKED_ROW_BLOCK) {
        const int nr = (int)NM_MIN((long)CHUNKED_ROW_BLOCK, hi - r0);
        for (int i = 0; i < j->m; i++) memset(j->y + i * j->ldy + r0, 0, (size_t)nr * sizeof(double));
        for (int gi = 0; gi < j->n_groups; gi++) {
            const struct chunk_group *g = &j->groups[gi];
            const struct kern_chunk *ch = &j->chunks[g->c0];
            const uint8_t *wp = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes + dtype_row_size(w->type, ch->w0);
            j->isa->gemm[w->type](ch->w1 - ch->w0, wp, w->row_bytes, nr, g->act, g->act_stride, g->n * j->m, tmp, nr);
            for (int c = 0; c < g->n; c++) /* in chunk order */
                for (int i = 0; i < j->m; i++)
                    for (int r = 0; r < nr; r++) j->y[i * j->ldy + r0 + r] += (double)tmp[((size_t)c * j->m + i) * nr + r];
        }
    }
}

/* One row (decode): the rows split evenly once, each thread streaming its own. More: claimed
 * (pool_claim), a quarter of a thread's share at a time, shrinking at the end. */
static void chunked_worker(void *ctx, int ith, int nth) {
    struct chunked_job *j = ctx;
    long lo, hi;
    bool more;
    if (j->m == 1) {
        pool_split((long)j->w->n, CHUNKED_ROW_BLOCK, ith, nth, &lo, &hi);
        more = lo < hi;
    } else {
        more = pool_claim(&j->rows, &lo, &hi);
    }
    if (!more) return;
    float *tmp = malloc((size_t)j->max_group * (size_t)j->m * CHUNKED_ROW_BLOCK * sizeof(float));
    NM_ASSERT(tmp);
    do chunked_rows(j, lo, hi, tmp);
    while (j->m > 1 && pool_claim(&j->rows, &lo, &hi));
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
    struct chunk_group *groups = calloc((size_t)n_chunks + 1, sizeof *groups);
    uint8_t **masked = calloc((size_t)n_chunks + 1, sizeof *masked);
    NM_ASSERT(groups && masked);
    int n_groups = 0, max_group = 1;
    for (int c = 0; c < n_chunks; c++) {
        const struct kern_chunk *ch = &chunks[c];
        NM_ASSERT(0 <= ch->w0 && ch->w0 <= ch->a0 && ch->a0 < ch->a1 && ch->a1 <= ch->w1 && ch->w1 <= w->k);
        NM_ASSERT(ch->w0 % ti->blck_size == 0 && (ch->w1 % ti->blck_size == 0 || ch->w1 == w->k));
        if (c > 0 && ch->w0 == chunks[c - 1].w0 && ch->w1 == chunks[c - 1].w1) {
            groups[n_groups - 1].n++;
            max_group = NM_MAX(max_group, groups[n_groups - 1].n);
        } else {
            groups[n_groups++] = (struct chunk_group){.c0 = c, .n = 1};
        }
    }
    for (int gi = 0; gi < n_groups; gi++) {
        struct chunk_group *g = &groups[gi];
        const struct kern_chunk *ch = &chunks[g->c0];
        if (g->n == 1 && ch->a0 == ch->w0 && ch->a1 == ch->w1) {
            g->act = base + act_bytes(q8, ch->w0);
            g->act_stride = row_stride;
            continue;
        }
        /* Masked chunks (heads inside a wider block): copies of their activation columns with
         * zeros outside [a0, a1), stacked chunk by chunk. Zero q8x blocks (d = 0, isum = 0)
         * contribute exactly 0. */
        const size_t cs = act_bytes(q8, ch->w1 - ch->w0);
        masked[gi] = nm_alloc(cs * (size_t)x->m * (size_t)g->n, 64, "masked chunk activations");
        for (int c = 0; c < g->n; c++) {
            const struct kern_chunk *cc = &chunks[g->c0 + c];
            NM_ASSERT(!q8 || (cc->a0 % QK8X == 0 && cc->a1 % QK8X == 0));
            const size_t skip = act_bytes(q8, cc->a0 - cc->w0), keep = act_bytes(q8, cc->a1 - cc->a0);
            for (int i = 0; i < x->m; i++) {
                uint8_t *row = masked[gi] + ((size_t)c * x->m + i) * cs;
                memcpy(row + skip, base + (size_t)i * row_stride + act_bytes(q8, cc->a0), keep);
            }
        }
        g->act = masked[gi];
        g->act_stride = cs;
    }
    struct chunked_job j = {.isa = isa, .w = w, .m = x->m, .chunks = chunks, .groups = groups, .n_groups = n_groups,
                            .max_group = max_group, .y = y, .ldy = ldy};
    const int nth = pool ? pool_size(pool) : 1;
    pool_claims_init(&j.rows, (long)w->n, (long)w->n / (4L * nth), CHUNKED_ROW_BLOCK, nth);
    if (pool) pool_run(pool, chunked_worker, &j);
    else chunked_worker(&j, 0, 1);
    for (int gi = 0; gi < n_groups; gi++) nm_free(masked[gi]);
    free(masked);
    free(groups);
}
