/* kern_matmul (the ISA chosen by kern_isa_get, on a pool of 1 and 2 threads) against
 * kern_matmul_ref for every supported type and m in {1, 2, 3, 7, 16, 33, 70}: odd n around the
 * register tiles and thread split, K of one block, odd block counts and long rows that cross
 * the cache blocks of the weight. y has ldy > n and guard values before, after and in the
 * padding columns; all must stay untouched. Also the shared q8 copy of the input: q8_ready is
 * set, a ready copy is reused, and act_invalidate makes the next call requantize. (The shape
 * and layout asserts abort, so they are not exercised here.)
 *
 * Options: --seed N, --type NAME. */
#include "cpu.h"
#include "ktest.h"
#include "matmul.h"
#include "pool.h"

/* Same tolerances and reasoning as test_fast.c: identical integer block products, different
 * float summation order; rows here are at most 4096 values (<= 128 blocks). */
#define TOL_FLOAT 2e-5
#define TOL_Q4 4e-5
#define TOL_Q8_0 2e-4

static const struct { enum dtype t; double tol; } k_types[] = {
    {DTYPE_Q4_0, TOL_Q4}, {DTYPE_Q8_0, TOL_Q8_0}, {DTYPE_Q4_K, TOL_Q4}, {DTYPE_Q6_K, TOL_Q4},
    {DTYPE_F16, TOL_FLOAT}, {DTYPE_BF16, TOL_FLOAT}, {DTYPE_F32, TOL_FLOAT},
    {DTYPE_Q4_1, TOL_Q4}, {DTYPE_Q5_K, TOL_Q4},
};
static const int k_m[] = {1, 2, 3, 7, 16, 33, 70};

static void test_shape(krng *r, struct pool *pool, enum dtype t, double tol, int64_t k, int64_t n,
                       int m) {
    const size_t row_bytes = dtype_row_size(t, k);
    uint8_t *wdata = malloc(row_bytes * n);
    float *tmp = malloc((size_t)k * 4);
    /* even rows: random bytes (every code pattern); odd rows: quantized normal data */
    for (int64_t i = 0; i < n; i++) {
        if (i % 2 == 0) {
            krng_row(r, t, wdata + row_bytes * i, k);
        } else {
            for (int64_t j = 0; j < k; j++) tmp[j] = krng_normal(r);
            quantize_row_ref(t, tmp, wdata + row_bytes * i, k);
        }
    }
    const struct weight w = weight_rows(t, k, n, wdata);
    float *x = malloc((size_t)m * k * 4);
    for (int i = 0; i < m; i++) krng_acts(r, x + (size_t)i * k, k);
    block_q8x *q8a = malloc(act_q8_bytes(m, k) + 1), *q8b = malloc(act_q8_bytes(m, k) + 1);
    struct act xa = {.m = m, .k = k, .f32 = x, .q8 = q8a, .q8_ready = false};
    struct act xb = {.m = m, .k = k, .f32 = x, .q8 = q8b, .q8_ready = false};

    const int64_t ldy = n + 5, guard = 37, ytot = m * ldy + 2 * guard;
    float *ya = malloc(ytot * 4), *yb = malloc(ytot * 4);
    kguard_fill(ya, ytot);
    kguard_fill(yb, ytot);
    kern_matmul(pool, &w, &xa, ya + guard, ldy);
    kern_matmul_ref(&w, &xb, yb + guard, ldy);
    if (dtype_uses_q8x(t) && !(xa.q8_ready && xb.q8_ready))
        ktest_fail("matmul %s: q8_ready not set after quantizing", dtype_get(t)->name);

    /* magnitudes */
    double *mag = malloc((size_t)m * n * sizeof(double));
    float *got = malloc((size_t)m * n * 4), *want = malloc((size_t)m * n * 4);
    float *wf = malloc((size_t)k * 4), *af = malloc((size_t)k * 4);
    for (int i = 0; i < m; i++) {
        kact_values(t, x + (size_t)i * k, q8b + (size_t)i * (k / 32), af, k);
        for (int64_t j = 0; j < n; j++) {
            dequantize_row_ref(t, wdata + row_bytes * j, wf, k);
            mag[i * n + j] = kmag(wf, af, k);
            got[i * n + j] = ya[guard + i * ldy + j];
            want[i * n + j] = yb[guard + i * ldy + j];
        }
    }
    kcheck(got, want, mag, (int64_t)m * n, tol, "kern_matmul %s k=%" PRId64 " n=%" PRId64 " m=%d threads=%d",
           dtype_get(t)->name, k, n, m, pool_size(pool));
    int64_t bad = kguard_count_bad(ya, guard) + kguard_count_bad(ya + guard + m * ldy, guard);
    for (int i = 0; i < m; i++) bad += kguard_count_bad(ya + guard + i * ldy + n, ldy - n);
    if (bad)
        ktest_fail("kern_matmul %s k=%" PRId64 " n=%" PRId64 " m=%d threads=%d: %" PRId64
                   " guard values overwritten", dtype_get(t)->name, k, n, m, pool_size(pool), bad);

    /* the q8 copy is reused until invalidated: change x, call again without invalidating, and
     * the result must not change; after act_invalidate it must follow x */
    if (dtype_uses_q8x(t) && m <= 3) {
        for (int64_t j = 0; j < k; j++) x[j] *= 2.0f;
        float *y2 = malloc((size_t)m * ldy * 4);
        kern_matmul(pool, &w, &xa, y2, ldy);
        for (int64_t j = 0; j < n; j++)
            if (memcmp(&y2[j], &ya[guard + j], 4) != 0) {
                ktest_fail("kern_matmul %s: a ready q8 copy was not reused", dtype_get(t)->name);
                break;
            }
        act_invalidate(&xa);
        kern_matmul(pool, &w, &xa, y2, ldy);
        for (int64_t j = 0; j < n; j++) {
            const double err = fabs((double)y2[j] - 2.0 * (double)ya[guard + j]) / mag[j];
            if (!(err < 1e-2)) { /* requantized input: within q8 rounding of 2x */
                ktest_fail("kern_matmul %s: act_invalidate did not requantize (y %g vs 2 * %g)",
                           dtype_get(t)->name, y2[j], ya[guard + j]);
                break;
            }
        }
        free(y2);
    }
    free(wdata);
    free(tmp);
    free(x);
    free(q8a);
    free(q8b);
    free(ya);
    free(yb);
    free(mag);
    free(got);
    free(want);
    free(wf);
    free(af);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--type") == 0) only = argv[i + 1];
    const struct kern_isa *isa = kern_isa_get();
    printf("test_matmul: ISA %s\n", isa->name);
    krng r = {ktest_seed};
    for (int nth = 1; nth <= 2; nth++) {
        struct pool *pool = pool_init(nth, NULL);
        for (size_t ti = 0; ti < NM_ARRAY_LEN(k_types); ti++) {
            const enum dtype t = k_types[ti].t;
            if (only && strcasecmp(only, dtype_get(t)->name) != 0) continue;
            const int blk = dtype_get(t)->blck_size;
            ktest_worst_err = 0.0;
            /* k: one block, an odd count, a long row; float types also odd lengths */
            const int64_t ks[3] = {blk == 1 ? 37 : blk, blk == 1 ? 100 : blk * (blk == 32 ? 19 : 3),
                                   blk == 1 ? 4096 : blk * (4096 / blk)};
            for (size_t mi = 0; mi < NM_ARRAY_LEN(k_m); mi++) {
                for (int ki = 0; ki < 3; ki++) {
                    const int m = k_m[mi];
                    /* n: odd sizes around the 4-row tiles and the 16-row thread split; the long
                     * rows get n = 67, enough for several weight cache blocks of f32 */
                    const int64_t n = ki == 2 ? 67 : 1 + krng_int(&r, 40);
                    if (ki == 2 && m > 16 && blk == 1 && t != DTYPE_F32) continue; /* time */
                    test_shape(&r, pool, t, k_types[ti].tol, ks[ki], n, m);
                    if (ktest_failures > 20) goto done;
                }
            }
            printf("  %-5s threads=%d: worst normalized error %.2e (tolerance %.0e)\n",
                   dtype_get(t)->name, nth, ktest_worst_err, k_types[ti].tol);
        }
    done:
        pool_free(pool);
    }
    return ktest_finish("test_matmul");
}
