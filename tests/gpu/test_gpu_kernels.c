/* The CUDA kernels (kernels/cuda) against the plain-C references: matmuls of every supported
 * type through the GEMV and the dequantize+cuBLAS path on odd shapes and strides (guard values
 * around the outputs), expert matmuls, RMSNorm, Q/K norm + RoPE (both pairings, partial
 * rotation, frequency factors), SwiGLU, biases, KV stores, attention (GQA, f16/f32 cache,
 * several tiles), MoE routing and top-k with the repetition penalty; the decode path's int8
 * activations (quantizer bit-exact with quantize_act_q8x_ref, the dp4a GEMV with several
 * outputs, bias and accumulation, the fused rmsnorm/swiglu producers), the fused RoPE + KV
 * store and attention with the position in device memory. "Every supported type" is every type
 * the CPU ranks take (dtype_get): the written-out ones and those of the block decoder interface
 * (blocks/block.h: Q5_0, Q2_K, IQ4_XS, IQ1_M, ...), whose dequantized tiles must also be
 * bit-exact. Exit 77 without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/block.h"
#include "gtest.h"
#include "ktest.h"
#include "ops.h"
#include "quant.h"

static struct cuk_ctx *g_ctx;

static void *dev_from(const void *host, size_t bytes) {
    void *d = cuk_malloc(g_ctx, bytes, "test buffer", NULL, 0);
    NM_ASSERT(d);
    cuk_h2d(g_ctx, d, host, bytes);
    return d;
}
static void to_host(void *host, const void *d, size_t bytes) { cuk_d2h(g_ctx, host, d, bytes); }

/* ---- matmul ------------------------------------------------------------------------------- */

enum path { PATH_GEMV, PATH_GEMM, PATH_ID };

/* W [n][k] of type t times x [m][ldx]; y [m][ldy] with guards in the padding columns. */
static void check_matmul(krng *r, enum dtype t, int64_t k, int64_t n, int m, int64_t ldx, enum path path) {
    const size_t rb = dtype_row_size(t, k);
    const int n_exp = path == PATH_ID ? 5 : 1, x_div = path == PATH_ID ? 2 : 1;
    const int n_x = path == PATH_ID ? (m + x_div - 1) / x_div : m;
    uint8_t *w = malloc(rb * (size_t)n * (size_t)n_exp);
    for (int64_t i = 0; i < n * n_exp; i++) krng_row(r, t, w + (size_t)i * rb, k);
    float *x = calloc((size_t)(n_x * ldx), sizeof(float));
    for (int i = 0; i < n_x; i++) krng_acts(r, x + i * ldx, k);
    int32_t *ids = malloc((size_t)m * sizeof *ids);
    for (int i = 0; i < m; i++) ids[i] = krng_int(r, n_exp);
    const int64_t ldy = n + 3;
    float *y = malloc((size_t)(m * ldy) * sizeof(float));
    kguard_fill(y, m * ldy);

    void *dw = dev_from(w, rb * (size_t)n * (size_t)n_exp);
    float *dx = dev_from(x, (size_t)(n_x * ldx) * sizeof(float));
    float *dy = dev_from(y, (size_t)(m * ldy) * sizeof(float));
    int32_t *dids = dev_from(ids, (size_t)m * sizeof *ids);
    if (path == PATH_GEMV) cuk_gemv(g_ctx, t, dw, k, n, dx, ldx, m, dy, ldy);
    else if (path == PATH_GEMM) cuk_gemm(g_ctx, t, dw, k, n, dx, ldx, m, dy, ldy);
    else cuk_matmul_id(g_ctx, t, dw, rb * (size_t)n, k, n, dx, ldx, x_div, dids, m, dy, ldy);
    to_host(y, dy, (size_t)(m * ldy) * sizeof(float));

    float *wrow = malloc((size_t)k * sizeof(float));
    float *want = calloc((size_t)(m * n), sizeof(float)), *got = calloc((size_t)(m * n), sizeof(float));
    double *mag = calloc((size_t)(m * n), sizeof(double));
    int64_t guards = 0;
    for (int i = 0; i < m; i++) {
        const float *xi = x + (int64_t)(i / x_div) * ldx;
        const uint8_t *we = w + (size_t)(path == PATH_ID ? ids[i] : 0) * rb * (size_t)n;
        for (int64_t j = 0; j < n; j++) {
            dequantize_row_ref(t, we + (size_t)j * rb, wrow, k);
            double s = 0;
            for (int64_t q = 0; q < k; q++) s += (double)wrow[q] * xi[q];
            want[i * n + j] = (float)s;
            got[i * n + j] = y[i * ldy + j];
            mag[i * n + j] = kmag(wrow, xi, k);
        }
        for (int64_t j = n; j < ldy; j++) guards += !kguard_is(y[i * ldy + j]);
    }
    /* GEMV: f32 products, f32 sums. GEMM: weights and activations rounded to f16 (F32 weights
     * stay f32 in cublasSgemm). */
    const double tol = path == PATH_GEMM && t != DTYPE_F32 ? 2e-3 : 2e-5;
    const char *pname = path == PATH_GEMV ? "gemv" : path == PATH_GEMM ? "gemm" : "matmul_id";
    kcheck(got, want, mag, m * n, tol, "%s %s k=%lld n=%lld m=%d ldx=%lld", pname, dtype_get(t)->name, (long long)k,
           (long long)n, m, (long long)ldx);
    if (guards) ktest_fail("%s %s k=%lld n=%lld m=%d: %lld padding values of y overwritten", pname, dtype_get(t)->name,
                           (long long)k, (long long)n, m, (long long)guards);
    cuk_free(dw);
    cuk_free(dx);
    cuk_free(dy);
    cuk_free(dids);
    free(w);
    free(x);
    free(ids);
    free(y);
    free(wrow);
    free(want);
    free(got);
    free(mag);
}

/* Every type the CPU ranks compute with (dtype_get), which the device must take too: the
 * written-out types and every type of the block decoder interface (blocks/block.h). Returns the
 * count; with q8 set, only the types that take q8 activations. */
static int all_types(enum dtype *out, bool q8) {
    int n = 0;
    for (uint32_t id = 0; id < DTYPE_COUNT; id++)
        if (dtype_get(id) && (!q8 || dtype_uses_q8x((enum dtype)id))) out[n++] = (enum dtype)id;
    return n;
}

static void test_matmul(krng *r) {
    enum dtype types[DTYPE_COUNT];
    const int n_types = all_types(types, false);
    const int ms[] = {1, 3, 7, 19};
    for (int ti = 0; ti < n_types; ti++) {
        const enum dtype t = types[ti];
        if (!cuk_matmul_type_supported(t)) {
            ktest_fail("cuk_matmul_type_supported(%s) is false", dtype_get(t)->name);
            continue;
        }
        const int bs = dtype_get(t)->blck_size;
        int64_t ks[3];
        if (bs == 1) { ks[0] = 33; ks[1] = 64; ks[2] = 200; }
        else if (bs == 32) { ks[0] = 32; ks[1] = 96; ks[2] = 800; }
        else { ks[0] = 256; ks[1] = 768; ks[2] = 1280; }
        const int64_t ns[] = {1, 37, 130};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (size_t c = 0; c < NM_ARRAY_LEN(ms); c++) {
                    const int64_t k = ks[a], ldx = (k + 3) / 4 * 4 + (c == 2 ? 4 : 0);
                    check_matmul(r, t, k, ns[b], ms[c], ldx, PATH_GEMV);
                    check_matmul(r, t, k, ns[b], ms[c], ldx, PATH_GEMM);
                    if (b == 1) check_matmul(r, t, k, ns[b], ms[c] * 2, ldx, PATH_ID);
                }
        printf("matmul %s: gemv, gemm, matmul_id checked (worst normalized error so far %.2e)\n", dtype_get(t)->name,
               ktest_worst_err);
    }
}

static void check_close(const float *got, const float *want, int64_t n, double tol, const char *what);

/* The prompt path's dequantized tiles, bit for bit: cuk_gemm with unit vectors as activations
 * (row r of x is e_(i0 + r)) gives y[r][j] = W[j][i0 + r] rounded to f16, exactly (one product by
 * 1, zeros elsewhere, f32 accumulation). For the decoder types (blocks/block.h) that must be
 * f16(dequantize_row_ref) for every value: the device decodes with the same headers and the same
 * d * q + m roundings. The written-out types' loaders may fuse an offset's multiply-add (nvcc
 * contracts), so there one f16 ulp is allowed. n = 130 rows of 512 values span 3 tiles of the
 * 64 KiB scratch; the blocks are random bytes with sane f16 scales (krng_row). The same for the
 * weight's f16 copy (cuk_dequant_f16, then cuk_gemm_staged reading it, as the GPU stage runs its
 * prompts where the copies fit). */
static void test_dequant_tiles(krng *r) {
    enum dtype types[DTYPE_COUNT];
    const int n_types = all_types(types, true);
    const int64_t n = 130;
    for (int ti = 0; ti < n_types; ti++) {
        const enum dtype t = types[ti];
        const int64_t k = dtype_get(t)->blck_size == 32 ? 96 : 512;
        const size_t rb = dtype_row_size(t, k);
        const bool exact = block_codec_get(t) != NULL;
        uint8_t *w = malloc(rb * (size_t)n);
        float *wf = malloc((size_t)(n * k) * sizeof(float)), *x = malloc((size_t)(64 * k) * sizeof(float)),
              *y = malloc((size_t)(64 * n) * sizeof(float));
        for (int64_t j = 0; j < n; j++) {
            krng_row(r, t, w + (size_t)j * rb, k);
            dequantize_row_ref(t, w + (size_t)j * rb, wf + j * k, k);
        }
        void *dw = dev_from(w, rb * (size_t)n);
        float *dx = cuk_malloc(g_ctx, (size_t)(64 * k) * sizeof(float), "x", NULL, 0),
              *dy = cuk_malloc(g_ctx, (size_t)(64 * n) * sizeof(float), "y", NULL, 0);
        void *d16 = cuk_malloc(g_ctx, (size_t)(n * k) * 2, "f16 copy", NULL, 0);
        NM_ASSERT(dx && dy && d16);
        cuk_dequant_f16(g_ctx, t, dw, k, n, d16);
        for (int copy = 0; copy < 2; copy++) {
            int64_t bad = 0, first_j = -1, first_i = -1;
            float first_got = 0, first_want = 0;
            for (int64_t i0 = 0; i0 < k; i0 += 64) {
                const int rows = (int)NM_MIN(64, k - i0);
                memset(x, 0, (size_t)(64 * k) * sizeof(float));
                for (int rr = 0; rr < rows; rr++) x[rr * k + i0 + rr] = 1.0f;
                cuk_h2d(g_ctx, dx, x, (size_t)(rows * k) * sizeof(float));
                if (copy) {
                    cuk_gemm_input(g_ctx, dx, k, rows, k, false);
                    cuk_gemm_staged(g_ctx, t, dw, d16, k, n, rows, dy, n);
                } else {
                    cuk_gemm(g_ctx, t, dw, k, n, dx, k, rows, dy, n);
                }
                to_host(y, dy, (size_t)(rows * n) * sizeof(float));
                for (int rr = 0; rr < rows; rr++)
                    for (int64_t j = 0; j < n; j++) {
                        const float want = fp16_to_fp32(fp32_to_fp16(wf[j * k + i0 + rr])), got = y[rr * n + j];
                        const float slack = exact ? 0.0f : fabsf(want) * (1.0f / 1024.0f) + 6e-8f;
                        if (!(fabsf(got - want) <= slack)) {
                            if (!bad++) first_j = j, first_i = i0 + rr, first_got = got, first_want = want;
                        }
                    }
            }
            if (bad)
                ktest_fail("%s %s k=%lld n=%lld: %lld values differ from f16(dequantize_row_ref)%s; first: row %lld "
                           "value %lld got %.9g want %.9g",
                           copy ? "f16 copy (cuk_dequant_f16)" : "dequantized tile", dtype_get(t)->name, (long long)k,
                           (long long)n, (long long)bad, exact ? "" : " by over 1 ulp", (long long)first_j,
                           (long long)first_i, (double)first_got, (double)first_want);
        }
        cuk_free(d16);
        cuk_free(dw);
        cuk_free(dx);
        cuk_free(dy);
        free(w);
        free(wf);
        free(x);
        free(y);
    }
    printf("dequantized tiles and f16 copies: %d types checked (bit-exact for the decoder types)\n", n_types);
}


/* The q8 activations on the device (cuk_q8_bytes layout: the rows, and from CUK_MMQ_MIN_ROWS
 * rows on the tensor cores' copy) against quantize_act_q8x_ref of the same f32 rows: bit-exact. */
static void check_q8_layout(const void *dxq, const float *x, int m, int64_t k, const char *what) {
    const size_t bytes = cuk_q8_bytes(m, k), qb = ((size_t)m * (size_t)k + 15) / 16 * 16;
    const size_t tb = (qb + (size_t)m * (size_t)(k / 32) * 8 + 127) / 128 * 128; /* the copy's codes */
    const size_t R = m >= CUK_MMQ_MIN_ROWS ? ((size_t)m + 7) / 8 * 8 : 0, ts = tb + R * (size_t)k;
    static const int slot[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* where word w of a block lies in the copy */
    uint8_t *h = malloc(bytes);
    to_host(h, dxq, bytes);
    block_q8x *ref = malloc((size_t)(k / 32) * sizeof *ref);
    int bad = 0;
    for (int i = 0; i < m && !bad; i++) {
        quantize_act_q8x_ref(x + (int64_t)i * k, ref, k);
        for (int64_t b = 0; b < k / 32 && !bad; b++) {
            float d;
            int32_t isum;
            memcpy(&d, h + qb + ((size_t)i * (size_t)(k / 32) + (size_t)b) * 8, 4);
            memcpy(&isum, h + qb + ((size_t)i * (size_t)(k / 32) + (size_t)b) * 8 + 4, 4);
            if (memcmp(&d, &ref[b].d, 4) != 0 || isum != ref[b].isum ||
                memcmp(h + (size_t)i * (size_t)k + (size_t)b * 32, ref[b].qs, 32) != 0) {
                ktest_fail("%s m=%d k=%lld: row %d block %lld differs from quantize_act_q8x_ref (d %.9g vs %.9g, isum %d vs %d)",
                           what, m, (long long)k, i, (long long)b, (double)d, (double)ref[b].d, isum, ref[b].isum);
                bad = 1;
            }
            if (!R || bad) continue;
            const size_t at = (size_t)b * R + (size_t)i;
            bad = memcmp(h + ts + at * 8, &ref[b].d, 4) != 0 || memcmp(h + ts + at * 8 + 4, &ref[b].isum, 4) != 0;
            for (int w = 0; w < 8; w++) bad |= memcmp(h + tb + at * 32 + slot[w] * 4, ref[b].qs + 4 * w, 4) != 0;
            if (bad)
                ktest_fail("%s m=%d k=%lld: row %d block %lld of the tensor cores' copy differs from quantize_act_q8x_ref",
                           what, m, (long long)k, i, (long long)b);
        }
    }
    free(ref);
    free(h);
}

/* cuk_quantize_q8 + cuk_gemv_q8 with three outputs (plain, + bias, accumulated onto y) against
 * the dequantized weights times the CPU-rounded activations in double. */
static void check_gemv_q8(krng *r, enum dtype t, int64_t k, const int64_t *ns, int n_outs, int m) {
    const size_t rb = dtype_row_size(t, k);
    const int64_t ldx = k + 4;
    float *x = calloc((size_t)(m * ldx), sizeof(float)), *xc = malloc((size_t)(m * k) * sizeof(float));
    for (int i = 0; i < m; i++) {
        krng_acts(r, x + i * ldx, k);
        memcpy(xc + i * k, x + i * ldx, (size_t)k * sizeof(float));
    }
    block_q8x *q8 = malloc((size_t)(k / 32) * sizeof *q8);
    float *xr = malloc((size_t)(m * k) * sizeof(float)), *wrow = malloc((size_t)k * sizeof(float));
    for (int i = 0; i < m; i++) {
        quantize_act_q8x_ref(xc + i * k, q8, k);
        kact_values(t, xc + i * k, q8, xr + i * k, k);
    }
    float *dx = dev_from(x, (size_t)(m * ldx) * sizeof(float));
    /* every byte 0xFF first (NaN scales): the tensor cores' copy holds rows past m, up to a
     * multiple of 8, that no producer writes; the kernel reads them, and they must reach no
     * stored output */
    uint8_t *poison = malloc(cuk_q8_bytes(m, k));
    memset(poison, 0xFF, cuk_q8_bytes(m, k));
    void *dxq = dev_from(poison, cuk_q8_bytes(m, k));
    free(poison);
    cuk_quantize_q8(g_ctx, dxq, dx, ldx, m, k);
    check_q8_layout(dxq, xc, m, k, "quantize_q8");
    struct cuk_gemv_out outs[CUK_GEMV_MAX_OUTS];
    uint8_t *w[CUK_GEMV_MAX_OUTS];
    float *y[CUK_GEMV_MAX_OUTS], *b[CUK_GEMV_MAX_OUTS];
    void *dw[CUK_GEMV_MAX_OUTS];
    float *dy[CUK_GEMV_MAX_OUTS], *db[CUK_GEMV_MAX_OUTS];
    for (int o = 0; o < n_outs; o++) {
        const int64_t n = ns[o], ldy = n + 3;
        w[o] = malloc(rb * (size_t)n);
        for (int64_t j = 0; j < n; j++) krng_row(r, t, w[o] + (size_t)j * rb, k);
        y[o] = malloc((size_t)(m * ldy) * sizeof(float));
        kguard_fill(y[o], m * ldy);
        b[o] = malloc((size_t)n * sizeof(float));
        krng_acts(r, b[o], n);
        if (o == 2)
            for (int i = 0; i < m; i++) krng_acts(r, y[o] + i * ldy, n);
        dw[o] = dev_from(w[o], rb * (size_t)n);
        dy[o] = dev_from(y[o], (size_t)(m * ldy) * sizeof(float));
        db[o] = dev_from(b[o], (size_t)n * sizeof(float));
        outs[o] = (struct cuk_gemv_out){.w = dw[o], .n = n, .y = dy[o], .ldy = ldy, .bias = o == 1 ? db[o] : NULL,
                                        .accumulate = o == 2};
    }
    cuk_gemv_q8(g_ctx, t, k, dxq, m, outs, n_outs);
    for (int o = 0; o < n_outs; o++) {
        const int64_t n = ns[o], ldy = n + 3;
        float *got = malloc((size_t)(m * ldy) * sizeof(float));
        to_host(got, dy[o], (size_t)(m * ldy) * sizeof(float));
        float *want = malloc((size_t)(m * n) * sizeof(float)), *g = malloc((size_t)(m * n) * sizeof(float));
        float *cpu = malloc((size_t)(m * n) * sizeof(float));
        double *mag = malloc((size_t)(m * n) * sizeof(double));
        int64_t guards = 0;
        for (int i = 0; i < m; i++) {
            quantize_act_q8x_ref(xc + i * k, q8, k);
            for (int64_t j = 0; j < n; j++) {
                dequantize_row_ref(t, w[o] + (size_t)j * rb, wrow, k);
                double sum = 0;
                for (int64_t q = 0; q < k; q++) sum += (double)wrow[q] * xr[i * k + q];
                double extra = 0;
                if (o == 1) extra = b[o][j];
                if (o == 2) extra = y[o][i * ldy + j];
                want[i * n + j] = (float)(sum + extra);
                /* the CPU ranks' own sum (block_vec_dot_ref for the decoder types), + the epilogue */
                cpu[i * n + j] = (float)((double)vec_dot_ref(t, k, w[o] + (size_t)j * rb, q8) + extra);
                g[i * n + j] = got[i * ldy + j];
                mag[i * n + j] = kmag(wrow, xr + i * k, k) + fabs(extra);
            }
            for (int64_t j = n; j < ldy; j++) guards += !kguard_is(got[i * ldy + j]);
        }
        kcheck(g, want, mag, m * n, 2e-5, "gemv_q8 %s k=%lld output %d n=%lld m=%d", dtype_get(t)->name, (long long)k, o,
               (long long)n, m);
        kcheck(g, cpu, mag, m * n, 2e-5, "gemv_q8 %s k=%lld output %d n=%lld m=%d against vec_dot_ref", dtype_get(t)->name,
               (long long)k, o, (long long)n, m);
        if (guards) ktest_fail("gemv_q8 %s k=%lld n=%lld m=%d: %lld padding values of y overwritten", dtype_get(t)->name,
                               (long long)k, (long long)n, m, (long long)guards);
        free(got);
        free(want);
        free(g);
        free(cpu);
        free(mag);
        free(w[o]);
        free(y[o]);
        free(b[o]);
        cuk_free(dw[o]);
        cuk_free(dy[o]);
        cuk_free(db[o]);
    }
    cuk_free(dx);
    cuk_free(dxq);
    free(x);
    free(xc);
    free(q8);
    free(xr);
    free(wrow);
}

static void test_gemv_q8(krng *r) {
    enum dtype types[DTYPE_COUNT];
    const int n_types = all_types(types, true);
    const int64_t ns[][3] = {{37, 5, 130}, {1, 64, 9}, {300, 31, 2}};
    for (int ti = 0; ti < n_types; ti++) {
        const enum dtype t = types[ti];
        if (!cuk_gemv_q8_supported(t)) {
            ktest_fail("cuk_gemv_q8_supported(%s) is false", dtype_get(t)->name);
            continue;
        }
        const bool kq = dtype_get(t)->blck_size == 256;
        /* the last k spans two of the kernel's 128-unit stages, the second one partly (32-value units) */
        const int64_t ks_small[] = {32, 96, 896, 4096, 4096 + 96}, ks_k[] = {256, 768, 4096, 4096 + 512};
        const int64_t *ks = kq ? ks_k : ks_small;
        const int nk = kq ? 4 : 5;
        /* and the tensor cores' rows past CUK_GEMV_MAX_ROWS (three to eight n-tiles, some partly
         * filled; those past CUK_MMQ_MAX_ROWS are not taken) */
        const int more[] = {17, 23, 32, 41, 64};
        for (int a = 0; a < nk; a++) {
            for (int m = 1; m <= CUK_GEMV_MAX_ROWS; m++) check_gemv_q8(r, t, ks[a], ns[(a + m) % 3], 1 + (a + m) % 3, m);
            for (size_t i = 0; i < NM_ARRAY_LEN(more); i++)
                if (cuk_q8_tensor_cores(g_ctx, t, more[i])) check_gemv_q8(r, t, ks[a], ns[(a + i) % 3], 1 + (a + i) % 3, more[i]);
        }
        if (!cuk_q8_tensor_cores(g_ctx, t, CUK_MMQ_MAX_ROWS))
            printf("gemv_q8 %s: rows past %d not checked (no int8 tensor-core kernel for the type, or none here)\n",
                   dtype_get(t)->name, CUK_GEMV_MAX_ROWS);
        printf("gemv_q8 %s: checked (worst normalized error so far %.2e)\n", dtype_get(t)->name, ktest_worst_err);
    }
    /* more rows than the device holds warps at once, so that each warp takes several rows, each
     * in two stages (the second one partly filled) */
    const int64_t big[3] = {20000, 17, 9000};
    const struct { enum dtype t; int64_t k; } bt[] = {{DTYPE_Q4_0, 4096 + 96}, {DTYPE_Q6_K, 4096 + 512}, {DTYPE_IQ4_XS, 4096 + 512}};
    for (size_t i = 0; i < NM_ARRAY_LEN(bt); i++) check_gemv_q8(r, bt[i].t, bt[i].k, big, 3, 2);
    printf("gemv_q8, several rows per warp: checked\n");
    /* tall launches on the tensor cores: from NM_MQ_TALL groups of 16 weight rows per SM (2112 on
     * an H200: tall's 49017 rows) one warp takes a group's whole K (mmq_tall); big's 29017 rows
     * stay on 8 warps a group */
    const int64_t tall[3] = {40000, 17, 9000};
    const struct { enum dtype t; int64_t k; int m; const int64_t *ns; } tt[] = {
        {DTYPE_Q4_0, 896, 16, tall}, {DTYPE_Q4_0, 4096 + 96, 24, tall}, {DTYPE_Q4_K, 4096 + 512, 16, big}, {DTYPE_Q5_0, 512, 9, tall}};
    for (size_t i = 0; i < NM_ARRAY_LEN(tt); i++)
        if (cuk_q8_tensor_cores(g_ctx, tt[i].t, tt[i].m)) check_gemv_q8(r, tt[i].t, tt[i].k, tt[i].ns, 3, tt[i].m);
    printf("gemv_q8, tall matrices on the tensor cores: checked\n");
    /* the fused producers: rmsnorm_q8 and swiglu_q8 give op_rmsnorm / op_swiglu and the q8 of it */
    const int rows = 6; /* (the q8 buffer holds the tensor cores' copy too) */
    const int64_t n = 896; /* 3.5 of rmsnorm_q8's 256-value blocks */
    float *x = malloc(rows * n * sizeof(float)), *u = malloc(rows * n * sizeof(float)), *wt = malloc(n * sizeof(float)),
          *want = malloc(rows * n * sizeof(float)), *got = malloc(rows * n * sizeof(float));
    krng_acts(r, x, rows * n);
    krng_acts(r, u, rows * n);
    for (int64_t i = 0; i < n; i++) wt[i] = 1.0f + 0.1f * krng_normal(r);
    float *dx = dev_from(x, rows * n * sizeof(float)), *du = dev_from(u, rows * n * sizeof(float)),
          *dw = dev_from(wt, n * sizeof(float)), *dy = cuk_malloc(g_ctx, rows * n * sizeof(float), "y", NULL, 0);
    void *dxq = cuk_malloc(g_ctx, cuk_q8_bytes(rows, n), "q8", NULL, 0);
    for (int i = 0; i < rows; i++) op_rmsnorm(want + i * n, x + i * n, wt, n, 1e-6f);
    cuk_rmsnorm_q8(g_ctx, dy, dxq, dx, dw, rows, n, 1e-6f);
    to_host(got, dy, rows * n * sizeof(float));
    check_close(got, want, rows * n, 1e-6, "rmsnorm_q8");
    check_q8_layout(dxq, got, rows, n, "rmsnorm_q8");
    op_swiglu(want, x, u, rows * n);
    cuk_swiglu_q8(g_ctx, dy, dxq, dx, du, rows, n);
    to_host(got, dy, rows * n * sizeof(float));
    check_close(got, want, rows * n, 1e-6, "swiglu_q8");
    check_q8_layout(dxq, got, rows, n, "swiglu_q8");
    cuk_free(dx);
    cuk_free(du);
    cuk_free(dw);
    cuk_free(dy);
    cuk_free(dxq);
    free(x);
    free(u);
    free(wt);
    free(want);
    free(got);
    printf("rmsnorm_q8, swiglu_q8: checked\n");
}

/* The Q and K norm weights of a head of hd values (around 1), drawn in turn. */
static void qk_norm_weights(krng *r, int64_t hd, float *nw, float *kw) {
    for (int i = 0; i < hd; i++) {
        nw[i] = 1.0f + 0.2f * krng_normal(r);
        kw[i] = 1.0f + 0.2f * krng_normal(r);
    }
}

/* op_rope_cache's rows for positions 0 .. n_ctx - 1 (base 1e4, no scaling), malloc'd. */
static float *rope_table(int64_t n_ctx, int64_t nr) {
    float *table = malloc(n_ctx * nr * sizeof(float));
    for (int64_t p = 0; p < n_ctx; p++) op_rope_cache(table + p * nr, p, nr, 1e4f, 1.0f, NULL);
    return table;
}

/* n activations (krng_acts), malloc'd. */
static float *rand_acts(krng *r, int64_t n) {
    float *x = malloc(n * sizeof(float));
    krng_acts(r, x, n);
    return x;
}

/* cuk_rope_store against op_rmsnorm + op_rope on q and k and op_store_kv of the rotated k and of
 * v at each row's cache row: rows of one sequence (positions 11, 12, 13 from cache row 0), and
 * rows of three (positions 7, 3, 9 of sequences starting at cache rows 0, 10 and 20). */
static void test_rope_store(krng *r) {
    struct { int n_head, n_head_kv; int64_t hd, hdv, n_rot; int neox, norm; enum dtype kv; } cases[] = {
        {14, 2, 64, 64, 64, 1, 0, DTYPE_F16}, {8, 8, 128, 128, 128, 0, 1, DTYPE_F32}, {6, 2, 80, 96, 48, 0, 1, DTYPE_F16},
    };
    const int m = 3;
    const int64_t n_ctx = 30, places[2][3][2] = {{{11, 0}, {12, 0}, {13, 0}}, {{7, 0}, {3, 10}, {9, 20}}};
    for (size_t ci = 0; ci < NM_ARRAY_LEN(cases); ci++)
        for (int pl = 0; pl < 2; pl++) {
            const int64_t(*rows)[2] = places[pl];
            const int nh = cases[ci].n_head, nkv = cases[ci].n_head_kv;
            const int64_t hd = cases[ci].hd, hdv = cases[ci].hdv, nr = cases[ci].n_rot, es = cases[ci].kv == DTYPE_F16 ? 2 : 4;
            const int64_t qd = nh * hd, kd = nkv * hd, vd = nkv * hdv;
            float nw[256], kw[256];
            qk_norm_weights(r, hd, nw, kw);
            float *table = rope_table(n_ctx, nr);
            float *q = rand_acts(r, m * qd), *k = rand_acts(r, m * kd), *v = rand_acts(r, m * vd);
            float *wq = malloc(m * qd * sizeof(float)), *wk = malloc(m * kd * sizeof(float));
            memcpy(wq, q, m * qd * sizeof(float));
            memcpy(wk, k, m * kd * sizeof(float));
            for (int i = 0; i < m; i++) {
                for (int h = 0; h < nh; h++) {
                    float *x = wq + i * qd + h * hd;
                    if (cases[ci].norm) op_rmsnorm(x, x, nw, hd, 1e-6f);
                    op_rope(x, table + rows[i][0] * nr, nr, cases[ci].neox);
                }
                for (int h = 0; h < nkv; h++) {
                    float *x = wk + i * kd + h * hd;
                    if (cases[ci].norm) op_rmsnorm(x, x, kw, hd, 1e-6f);
                    op_rope(x, table + rows[i][0] * nr, nr, cases[ci].neox);
                }
            }
            float *dq = dev_from(q, m * qd * sizeof(float)), *dk = dev_from(k, m * kd * sizeof(float)),
                  *dv = dev_from(v, m * vd * sizeof(float)), *dt = dev_from(table, n_ctx * nr * sizeof(float)),
                  *dn = dev_from(nw, hd * sizeof(float)), *dkn = dev_from(kw, hd * sizeof(float));
            void *kc = cuk_malloc(g_ctx, n_ctx * kd * es, "k cache", NULL, 0), *vc = cuk_malloc(g_ctx, n_ctx * vd * es, "v cache", NULL, 0);
            int64_t *drows = dev_from(rows, sizeof places[pl]);
            const struct cuk_rope rope = {.q_norm = cases[ci].norm ? dn : NULL, .k_norm = cases[ci].norm ? dkn : NULL,
                                          .eps = 1e-6f, .cos_sin = dt, .n_rot = nr, .neox = cases[ci].neox};
            cuk_rope_store(g_ctx, dq, dk, dv, m, nh, nkv, hd, hdv, &rope, kc, vc, cases[ci].kv, drows);
            float *gq = malloc(m * qd * sizeof(float)), *gk = malloc(m * kd * sizeof(float));
            to_host(gq, dq, m * qd * sizeof(float));
            to_host(gk, dk, m * kd * sizeof(float));
            char what[128];
            snprintf(what, sizeof what, "rope_store heads=%d/%d head_dim=%lld/%lld n_rot=%lld %s%s q", nh, nkv, (long long)hd,
                     (long long)hdv, (long long)nr, cases[ci].kv == DTYPE_F16 ? "f16" : "f32", pl ? " 3 sequences" : "");
            check_close(gq, wq, m * qd, 1e-6, what);
            what[strlen(what) - 1] = 'k';
            check_close(gk, wk, m * kd, 1e-6, what);
            uint8_t *hk = malloc(n_ctx * kd * es), *hv = malloc(n_ctx * vd * es), *ek = calloc(n_ctx * kd, es),
                    *ev = calloc(n_ctx * vd, es);
            to_host(hk, kc, n_ctx * kd * es);
            to_host(hv, vc, n_ctx * vd * es);
            for (int i = 0; i < m; i++) {
                const int64_t cr = rows[i][1] + rows[i][0]; /* the row's cache row */
                op_store_kv(ek + cr * kd * es, gk + i * kd, kd, cases[ci].kv);
                op_store_kv(ev + cr * vd * es, v + i * vd, vd, cases[ci].kv);
            }
            if (memcmp(hk, ek, n_ctx * kd * es) != 0) ktest_fail("%s: K cache differs from op_store_kv of the rotated k", what);
            if (memcmp(hv, ev, n_ctx * vd * es) != 0) ktest_fail("%s: V cache differs from op_store_kv of v", what);
            cuk_free(dq); cuk_free(dk); cuk_free(dv); cuk_free(dt); cuk_free(dn); cuk_free(dkn);
            cuk_free(kc); cuk_free(vc); cuk_free(drows);
            free(table); free(q); free(k); free(v); free(wq); free(wk); free(gq); free(gk);
            free(hk); free(hv); free(ek); free(ev);
        }
    printf("rope_store: %zu cases checked\n", NM_ARRAY_LEN(cases));
}

/* ---- element-wise ------------------------------------------------------------------------- */

static void check_close(const float *got, const float *want, int64_t n, double tol, const char *what) {
    double worst = 0, scale = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]) / (scale > 0 ? scale : 1);
        if (!isfinite(got[i])) e = INFINITY;
        if (e > worst) {
            worst = e;
            wi = i;
        }
    }
    if (worst > tol)
        ktest_fail("%s: [%lld] got %.9g want %.9g (error %.3e of the largest value, tolerance %.1e)", what, (long long)wi,
                   (double)got[wi], (double)want[wi], worst, tol);
}

static void test_elementwise(krng *r) {
    const int rows = 6; /* (the q8 buffer holds the tensor cores' copy too) */
    const int64_t n = 896; /* 3.5 of rmsnorm_q8's 256-value blocks */
    float *x = malloc(rows * n * sizeof(float)), *w = malloc(n * sizeof(float)), *want = malloc(rows * n * sizeof(float)),
          *got = malloc(rows * n * sizeof(float)), *u = malloc(rows * n * sizeof(float));
    krng_acts(r, x, rows * n);
    krng_acts(r, u, rows * n);
    for (int64_t i = 0; i < n; i++) w[i] = 1.0f + 0.1f * krng_normal(r);
    float *dx = dev_from(x, rows * n * sizeof(float)), *dw = dev_from(w, n * sizeof(float)),
          *du = dev_from(u, rows * n * sizeof(float));
    /* rmsnorm (in place) */
    for (int i = 0; i < rows; i++) op_rmsnorm(want + i * n, x + i * n, w, n, 1e-6f);
    cuk_rmsnorm(g_ctx, dx, dx, dw, rows, n, 1e-6f);
    to_host(got, dx, rows * n * sizeof(float));
    check_close(got, want, rows * n, 1e-6, "rmsnorm");
    /* swiglu */
    cuk_h2d(g_ctx, dx, x, rows * n * sizeof(float));
    op_swiglu(want, x, u, rows * n);
    cuk_swiglu(g_ctx, dx, dx, du, rows * n);
    to_host(got, dx, rows * n * sizeof(float));
    check_close(got, want, rows * n, 1e-6, "swiglu");
    /* bias, add */
    cuk_h2d(g_ctx, dx, x, rows * n * sizeof(float));
    for (int i = 0; i < rows; i++) {
        memcpy(want + i * n, x + i * n, n * sizeof(float));
        op_add(want + i * n, w, n);
        op_add(want + i * n, u + i * n, n);
    }
    cuk_add_bias(g_ctx, dx, dw, rows, n);
    cuk_add(g_ctx, dx, du, rows * n);
    to_host(got, dx, rows * n * sizeof(float));
    check_close(got, want, rows * n, 0, "add_bias + add");
    /* kv store: f16 rounding bit-exact with op_store_kv */
    uint16_t *c16 = malloc(rows * n * 2), *g16 = malloc((rows + 2) * n * 2);
    void *dc = cuk_malloc(g_ctx, (rows + 2) * n * 2, "cache", NULL, 0);
    cuk_h2d(g_ctx, dx, x, rows * n * sizeof(float));
    cuk_kv_store(g_ctx, dc, DTYPE_F16, dx, rows, n, 2);
    to_host(g16, dc, (rows + 2) * n * 2);
    op_store_kv(c16, x, rows * n, DTYPE_F16);
    if (memcmp(g16 + 2 * n, c16, rows * n * 2) != 0) ktest_fail("kv_store f16: differs from op_store_kv");
    for (int64_t i = 0; i < 2 * n; i++)
        if (g16[i] != 0) {
            ktest_fail("kv_store f16: wrote before position pos0");
            break;
        }
    cuk_free(dc);
    free(c16);
    free(g16);
    cuk_free(dx);
    cuk_free(dw);
    cuk_free(du);
    free(x);
    free(w);
    free(want);
    free(got);
    free(u);
    printf("elementwise: rmsnorm, swiglu, add_bias, add, kv_store checked\n");
}

static void test_norm_rope(krng *r) {
    struct { int64_t head_dim, n_rot; int neox, norm, freqs; } cases[] = {
        {64, 64, 0, 0, 0}, {64, 64, 1, 0, 0}, {128, 128, 1, 1, 0}, {64, 32, 1, 0, 0}, {128, 128, 0, 0, 1}, {80, 48, 0, 1, 1},
    };
    const int m = 5, n_head = 3;
    const int64_t n_ctx = 40, pos0 = 17;
    for (size_t ci = 0; ci < NM_ARRAY_LEN(cases); ci++) {
        const int64_t hd = cases[ci].head_dim, nr = cases[ci].n_rot, stride = n_head * hd + 8;
        float freqs[256], nw[256];
        for (int i = 0; i < nr / 2; i++) freqs[i] = 1.0f + 3.0f * krng_unit(r);
        for (int i = 0; i < hd; i++) nw[i] = 1.0f + 0.2f * krng_normal(r);
        float *table = malloc(n_ctx * nr * sizeof(float));
        for (int64_t p = 0; p < n_ctx; p++)
            op_rope_cache(table + p * nr, p, nr, 1e6f, 0.5f, cases[ci].freqs ? freqs : NULL);
        float *x = malloc(m * stride * sizeof(float)), *want = malloc(m * stride * sizeof(float)),
              *got = malloc(m * stride * sizeof(float));
        krng_acts(r, x, m * stride);
        memcpy(want, x, m * stride * sizeof(float));
        for (int i = 0; i < m; i++)
            for (int h = 0; h < n_head; h++) {
                float *v = want + i * stride + h * hd;
                if (cases[ci].norm) op_rmsnorm(v, v, nw, hd, 1e-6f);
                op_rope(v, table + (pos0 + i) * nr, nr, cases[ci].neox);
            }
        float *dx = dev_from(x, m * stride * sizeof(float)), *dt = dev_from(table, n_ctx * nr * sizeof(float)),
              *dn = dev_from(nw, hd * sizeof(float));
        cuk_norm_rope(g_ctx, dx, m, n_head, hd, stride, cases[ci].norm ? dn : NULL, 1e-6f, dt, pos0, nr, cases[ci].neox);
        to_host(got, dx, m * stride * sizeof(float));
        char what[96];
        snprintf(what, sizeof what, "norm_rope head_dim=%lld n_rot=%lld neox=%d norm=%d freqs=%d", (long long)hd,
                 (long long)nr, cases[ci].neox, cases[ci].norm, cases[ci].freqs);
        check_close(got, want, m * stride, 1e-6, what);
        cuk_free(dx);
        cuk_free(dt);
        cuk_free(dn);
        free(table);
        free(x);
        free(want);
        free(got);
    }
    printf("norm_rope: %zu cases checked\n", NM_ARRAY_LEN(cases));
}

/* Decode rows whose positions are split into spans (cuk_ctx_reserve_attention): rows of one
 * sequence at positions on both sides of the span sizes, in launches of fewer rows than the
 * call's, against the plain-C reference; the q8 output against cuk_quantize_q8's; a second call
 * gives the same bits (the span counts reset themselves, the spans are added in a fixed order). */
static void test_attention_spans(krng *r) {
    const int nh = 8, nkv = 2, m = 7;
    const int64_t hd = 128, hdv = 128, n_kv = 3001, kr = nkv * hd, vr = nkv * hdv, es = 2, ldo = nh * hdv;
    const int64_t pos[7] = {0, 255, 256, 511, 700, 2047, 3000};
    char why[256];
    if (cuk_ctx_reserve_attention(g_ctx, 3, nh, hdv, 4096, why, sizeof why)) {
        ktest_fail("reserving attention spans: %s", why);
        return;
    }
    float *kf = malloc(n_kv * kr * sizeof(float)), *vf = malloc(n_kv * vr * sizeof(float)),
          *q = malloc(m * nh * hd * sizeof(float)), *scratch = malloc(n_kv * sizeof(float));
    krng_acts(r, kf, n_kv * kr);
    krng_acts(r, vf, n_kv * vr);
    krng_acts(r, q, m * nh * hd);
    for (int64_t i = 0; i < m * nh * hd; i++) q[i] *= 0.05f;
    uint8_t *kc = malloc(n_kv * kr * es), *vc = malloc(n_kv * vr * es);
    op_store_kv(kc, kf, n_kv * kr, DTYPE_F16);
    op_store_kv(vc, vf, n_kv * vr, DTYPE_F16);
    float *want = calloc(m * ldo, sizeof(float)), *got = malloc(m * ldo * sizeof(float)),
          *again = malloc(m * ldo * sizeof(float));
    int64_t rows[14];
    for (int i = 0; i < m; i++) {
        rows[2 * i] = pos[i];
        rows[2 * i + 1] = 0;
        for (int h = 0; h < nh; h++)
            op_attention_heads_ref(want + i * ldo + h * hdv, 0, q + (i * nh + h) * hd, 0, 1,
                                   kc + h / (nh / nkv) * hd * es, vc + h / (nh / nkv) * hdv * es, DTYPE_F16, pos[i] + 1,
                                   kr, vr, hd, hdv, 1.0f / sqrtf((float)hd), scratch);
    }
    void *dk = dev_from(kc, n_kv * kr * es), *dv = dev_from(vc, n_kv * vr * es);
    float *dq = dev_from(q, m * nh * hd * sizeof(float)), *dout = dev_from(want, m * ldo * sizeof(float));
    int64_t *drows = dev_from(rows, sizeof rows);
    const size_t q8b = cuk_q8_bytes(m, nh * hdv);
    void *dq8 = cuk_malloc(g_ctx, q8b, "q8", NULL, 0), *dq8ref = cuk_malloc(g_ctx, q8b, "q8", NULL, 0);
    const float scale = 1.0f / sqrtf((float)hd);
    cuk_attention_at(g_ctx, dout, ldo, dq, NULL, NULL, dk, dv, DTYPE_F16, m, drows, nh, nkv, hd, hdv, scale, NULL, dq8);
    to_host(got, dout, m * ldo * sizeof(float));
    check_close(got, want, m * ldo, 5e-5, "attention over spans (positions up to 3000, launches of 3 rows)");
    cuk_quantize_q8(g_ctx, dq8ref, dout, ldo, m, nh * hdv);
    uint8_t *a = malloc(q8b), *b = malloc(q8b);
    to_host(a, dq8, q8b);
    to_host(b, dq8ref, q8b);
    if (memcmp(a, b, q8b) != 0) ktest_fail("attention over spans: its q8 output differs from cuk_quantize_q8");
    cuk_attention_at(g_ctx, dout, ldo, dq, NULL, NULL, dk, dv, DTYPE_F16, m, drows, nh, nkv, hd, hdv, scale, NULL, NULL);
    to_host(again, dout, m * ldo * sizeof(float));
    if (memcmp(again, got, m * ldo * sizeof(float)) != 0) ktest_fail("attention over spans: a second call differs");
    printf("attention over spans: %d rows checked\n", m);
    cuk_ctx_reserve_attention(g_ctx, 0, 0, 0, 0, why, sizeof why); /* back to one block per row */
    free(a);
    free(b);
    cuk_free(dq8);
    cuk_free(dq8ref);
    cuk_free(dk);
    cuk_free(dv);
    cuk_free(dq);
    cuk_free(dout);
    cuk_free(drows);
    free(kf);
    free(vf);
    free(q);
    free(scratch);
    free(kc);
    free(vc);
    free(want);
    free(got);
    free(again);
}

/* cuk_attention_at given q, k and v before RoPE (the decode graph's form) against cuk_rope_store
 * and then cuk_attention_at of the rotated rows: the same output, q8 output and caches, to the
 * bit, and q, k and v left as they were. Rows of five sequences, one of them 5 rows at positions
 * 254..258 (across the border of 256-position spans), two adjacent rows of different sequences
 * at consecutive positions, with one block per row and with spans in launches of 3 rows (a
 * sequence's rows in an earlier launch are in the cache by the next). */
static void test_attention_rope(krng *r) {
    struct { int n_head, n_head_kv; int64_t hd, hdv, n_rot; int neox, norm; enum dtype kv; } cases[] = {
        {32, 8, 128, 128, 128, 0, 0, DTYPE_F16}, {14, 2, 64, 64, 64, 1, 0, DTYPE_F16},
        {16, 4, 128, 128, 128, 1, 1, DTYPE_F16}, {6, 2, 80, 96, 48, 0, 1, DTYPE_F32},
        {3, 1, 66, 66, 64, 1, 1, DTYPE_F32},     {4, 2, 256, 256, 256, 0, 0, DTYPE_F16},
        {2, 1, 512, 512, 512, 1, 1, DTYPE_F16},
    };
    enum { M = 9, N_SEQ = 5 };
    const int64_t n_ctx = 1024; /* positions per sequence */
    const int64_t places[M][2] = {{17, 0}, {40, 2}, {41, 4}, {254, 1}, {255, 1}, {256, 1}, {257, 1}, {258, 1}, {0, 3}};
    int64_t rows[2 * M];
    for (int i = 0; i < M; i++) {
        rows[2 * i] = places[i][0];
        rows[2 * i + 1] = places[i][1] * n_ctx;
    }
    int checked = 0;
    for (size_t ci = 0; ci < NM_ARRAY_LEN(cases); ci++)
        for (int sp = 0; sp < 2; sp++) {
            const int nh = cases[ci].n_head, nkv = cases[ci].n_head_kv;
            const int64_t hd = cases[ci].hd, hdv = cases[ci].hdv, nr = cases[ci].n_rot;
            const int64_t qd = nh * hd, kd = nkv * hd, vd = nkv * hdv, ldo = nh * hdv;
            const size_t es = cases[ci].kv == DTYPE_F16 ? 2 : 4, n_cache = (size_t)(N_SEQ * n_ctx);
            char why[256], what[160];
            snprintf(what, sizeof what, "attention with RoPE heads=%d/%d head_dim=%lld/%lld n_rot=%lld neox=%d norm=%d %s%s",
                     nh, nkv, (long long)hd, (long long)hdv, (long long)nr, cases[ci].neox, cases[ci].norm,
                     cases[ci].kv == DTYPE_F16 ? "f16" : "f32", sp ? " spans" : "");
            if (cuk_ctx_reserve_attention(g_ctx, sp ? 3 : 0, nh, hdv, sp ? n_ctx : 0, why, sizeof why)) {
                ktest_fail("%s: reserving attention spans: %s", what, why);
                continue;
            }
            float nw[512], kw[512];
            qk_norm_weights(r, hd, nw, kw);
            float *table = rope_table(n_ctx, nr);
            float *q = rand_acts(r, M * qd), *k = rand_acts(r, M * kd), *v = rand_acts(r, M * vd);
            for (int64_t i = 0; i < M * qd; i++) q[i] *= 0.05f; /* keep the softmax from being one-hot */
            /* the caches: every sequence's earlier positions (and the rest) hold other values */
            float *fill = rand_acts(r, (int64_t)n_cache * (kd + vd));
            uint8_t *kc = malloc(n_cache * kd * es), *vc = malloc(n_cache * vd * es);
            op_store_kv(kc, fill, (int64_t)n_cache * kd, cases[ci].kv);
            op_store_kv(vc, fill + n_cache * kd, (int64_t)n_cache * vd, cases[ci].kv);
            float *dt = dev_from(table, n_ctx * nr * sizeof(float)), *dn = dev_from(nw, hd * sizeof(float)),
                  *dkn = dev_from(kw, hd * sizeof(float));
            int64_t *drows = dev_from(rows, sizeof rows);
            const struct cuk_rope rope = {.q_norm = cases[ci].norm ? dn : NULL, .k_norm = cases[ci].norm ? dkn : NULL,
                                          .eps = 1e-6f, .cos_sin = dt, .n_rot = nr, .neox = cases[ci].neox};
            const float scale = 1.0f / sqrtf((float)hd);
            const size_t q8b = cuk_q8_bytes(M, ldo), ob = M * ldo * sizeof(float);
            /* [0]: cuk_rope_store, then attention of the rotated rows; [1]: one launch */
            float *dq[2], *dk[2], *dv[2], *dout[2];
            void *dkc[2], *dvc[2], *dq8[2];
            for (int w = 0; w < 2; w++) {
                dq[w] = dev_from(q, M * qd * sizeof(float));
                dk[w] = dev_from(k, M * kd * sizeof(float));
                dv[w] = dev_from(v, M * vd * sizeof(float));
                dkc[w] = dev_from(kc, n_cache * kd * es);
                dvc[w] = dev_from(vc, n_cache * vd * es);
                dout[w] = cuk_malloc(g_ctx, ob, "out", NULL, 0);
                dq8[w] = hdv % 32 == 0 ? cuk_malloc(g_ctx, q8b, "q8", NULL, 0) : NULL;
            }
            cuk_rope_store(g_ctx, dq[0], dk[0], dv[0], M, nh, nkv, hd, hdv, &rope, dkc[0], dvc[0], cases[ci].kv, drows);
            cuk_attention_at(g_ctx, dout[0], ldo, dq[0], NULL, NULL, dkc[0], dvc[0], cases[ci].kv, M, drows, nh, nkv, hd,
                             hdv, scale, NULL, dq8[0]);
            cuk_attention_at(g_ctx, dout[1], ldo, dq[1], dk[1], dv[1], dkc[1], dvc[1], cases[ci].kv, M, drows, nh, nkv,
                             hd, hdv, scale, &rope, dq8[1]);
            const size_t big = NM_MAX(NM_MAX(ob, q8b), NM_MAX(n_cache * NM_MAX(kd, vd) * es, M * qd * sizeof(float)));
            uint8_t *a = malloc(big), *b = malloc(big);
            to_host(a, dout[0], ob);
            to_host(b, dout[1], ob);
            if (memcmp(a, b, ob) != 0) ktest_fail("%s: the output differs from rope_store + attention", what);
            if (dq8[0]) {
                to_host(a, dq8[0], q8b);
                to_host(b, dq8[1], q8b);
                if (memcmp(a, b, q8b) != 0) ktest_fail("%s: the q8 output differs from rope_store + attention", what);
            }
            to_host(a, dkc[0], n_cache * kd * es);
            to_host(b, dkc[1], n_cache * kd * es);
            if (memcmp(a, b, n_cache * kd * es) != 0) ktest_fail("%s: the K cache differs from rope_store's", what);
            to_host(a, dvc[0], n_cache * vd * es);
            to_host(b, dvc[1], n_cache * vd * es);
            if (memcmp(a, b, n_cache * vd * es) != 0) ktest_fail("%s: the V cache differs from rope_store's", what);
            to_host(a, dq[1], M * qd * sizeof(float));
            if (memcmp(a, q, M * qd * sizeof(float)) != 0) ktest_fail("%s: q was changed", what);
            to_host(a, dk[1], M * kd * sizeof(float));
            if (memcmp(a, k, M * kd * sizeof(float)) != 0) ktest_fail("%s: k was changed", what);
            to_host(a, dv[1], M * vd * sizeof(float));
            if (memcmp(a, v, M * vd * sizeof(float)) != 0) ktest_fail("%s: v was changed", what);
            for (int w = 0; w < 2; w++) {
                cuk_free(dq[w]);
                cuk_free(dk[w]);
                cuk_free(dv[w]);
                cuk_free(dkc[w]);
                cuk_free(dvc[w]);
                cuk_free(dout[w]);
                cuk_free(dq8[w]);
            }
            cuk_free(dt);
            cuk_free(dn);
            cuk_free(dkn);
            cuk_free(drows);
            free(table);
            free(q);
            free(k);
            free(v);
            free(fill);
            free(kc);
            free(vc);
            free(a);
            free(b);
            checked++;
        }
    char why[256];
    cuk_ctx_reserve_attention(g_ctx, 0, 0, 0, 0, why, sizeof why); /* back to one block per row */
    printf("attention with RoPE: %d cases checked\n", checked);
}

static void test_attention(krng *r) {
    struct { int n_head, n_head_kv; int64_t hd, hdv; int m; int64_t pos0; enum dtype kv; } cases[] = {
        {4, 2, 64, 64, 1, 0, DTYPE_F16},   {6, 2, 64, 64, 5, 300, DTYPE_F16}, {6, 2, 128, 128, 3, 520, DTYPE_F32},
        {2, 1, 80, 96, 9, 7, DTYPE_F32},   {8, 8, 256, 256, 2, 40, DTYPE_F16}, {14, 2, 64, 64, 16, 0, DTYPE_F16},
        /* decode rows: head dims not a multiple of 4 (scalar loads), a head of one and a half
         * 128-value chunks, K and V of different lengths */
        {3, 1, 66, 66, 2, 260, DTYPE_F16},  {4, 2, 192, 128, 1, 10, DTYPE_F32}, {4, 2, 128, 320, 3, 600, DTYPE_F16},
        /* prompt chunks (tensor cores where the device has them): rows across several blocks of
         * 64 and warps of 16 with a partial last one, positions across several tiles of 64 */
        {8, 2, 128, 128, 100, 37, DTYPE_F16}, {14, 2, 64, 64, 70, 0, DTYPE_F16}, {4, 4, 128, 128, 9, 200, DTYPE_F16},
        {32, 8, 128, 128, 130, 0, DTYPE_F16},
    };
    for (size_t ci = 0; ci < NM_ARRAY_LEN(cases); ci++) {
        const int nh = cases[ci].n_head, nkv = cases[ci].n_head_kv, m = cases[ci].m;
        const int64_t hd = cases[ci].hd, hdv = cases[ci].hdv, pos0 = cases[ci].pos0, n_kv = pos0 + m;
        const int64_t kr = nkv * hd, vr = nkv * hdv, es = cases[ci].kv == DTYPE_F16 ? 2 : 4;
        float *kf = malloc(n_kv * kr * sizeof(float)), *vf = malloc(n_kv * vr * sizeof(float)),
              *q = malloc(m * nh * hd * sizeof(float));
        krng_acts(r, kf, n_kv * kr);
        krng_acts(r, vf, n_kv * vr);
        krng_acts(r, q, m * nh * hd);
        for (int64_t i = 0; i < m * nh * hd; i++) q[i] *= 0.05f; /* keep the softmax from being one-hot */
        uint8_t *kc = malloc(n_kv * kr * es), *vc = malloc(n_kv * vr * es);
        op_store_kv(kc, kf, n_kv * kr, cases[ci].kv);
        op_store_kv(vc, vf, n_kv * vr, cases[ci].kv);
        const float scale = 1.0f / sqrtf((float)hd);
        const int64_t ldo = nh * hdv + 5;
        float *want = calloc(m * ldo, sizeof(float)), *got = malloc(m * ldo * sizeof(float)),
              *scratch = malloc(n_kv * sizeof(float));
        for (int i = 0; i < m; i++)
            for (int h = 0; h < nh; h++) {
                const int hk = h / (nh / nkv);
                op_attention_heads_ref(want + i * ldo + h * hdv, 0, q + (i * nh + h) * hd, 0, 1, kc + hk * hd * es,
                                       vc + hk * hdv * es, cases[ci].kv, pos0 + i + 1, kr, vr, hd, hdv, scale, scratch);
            }
        void *dk = dev_from(kc, n_kv * kr * es), *dv = dev_from(vc, n_kv * vr * es);
        float *dq = dev_from(q, m * nh * hd * sizeof(float)), *dout = dev_from(want, m * ldo * sizeof(float));
        cuk_attention(g_ctx, dout, ldo, dq, dk, dv, cases[ci].kv, m, pos0, nh, nkv, hd, hdv, scale);
        to_host(got, dout, m * ldo * sizeof(float));
        char what[128];
        snprintf(what, sizeof what, "attention heads=%d/%d head_dim=%lld/%lld rows=%d pos0=%lld %s", nh, nkv,
                 (long long)hd, (long long)hdv, m, (long long)pos0, cases[ci].kv == DTYPE_F16 ? "f16" : "f32");
        /* f32 accuracy either way (the tensor-core kernel splits Q and P into two f16 parts);
         * the sums run in other orders than the reference's over up to 330 positions */
        const bool tc = cuk_attention_tensor_cores(g_ctx, cases[ci].kv, m, hd, hdv);
        if (tc) strcat(what, " tensor cores");
        check_close(got, want, m * ldo, 5e-5, what);
        /* The same rows by the kernel of rows in device memory (the decode graph's form, always
         * the f32 kernel), as a sequence whose positions start at cache row 5 of a cache whose
         * rows 0..4 hold another's (large values, which must not leak in): identical to the
         * above, or for tensor-core rows as close to the reference. */
        {
            const int64_t off = 5;
            int64_t *rows = malloc((size_t)m * 2 * sizeof(int64_t));
            for (int i = 0; i < m; i++) {
                rows[2 * i] = pos0 + i;
                rows[2 * i + 1] = off;
            }
            float *big = malloc((off * kr + off * vr) * sizeof(float));
            for (int64_t i = 0; i < off * (kr + vr); i++) big[i] = 300.0f;
            uint8_t *kc2 = malloc((off + n_kv) * kr * es), *vc2 = malloc((off + n_kv) * vr * es);
            op_store_kv(kc2, big, off * kr, cases[ci].kv);
            op_store_kv(vc2, big + off * kr, off * vr, cases[ci].kv);
            memcpy(kc2 + off * kr * es, kc, n_kv * kr * es);
            memcpy(vc2 + off * vr * es, vc, n_kv * vr * es);
            void *dk2 = dev_from(kc2, (off + n_kv) * kr * es), *dv2 = dev_from(vc2, (off + n_kv) * vr * es);
            int64_t *drows = dev_from(rows, (size_t)m * 2 * sizeof(int64_t));
            float *got2 = malloc(m * ldo * sizeof(float));
            /* where a head holds whole q8 blocks, the launch also writes the output's q8: the
             * bytes cuk_quantize_q8 gives from the f32 output */
            const size_t q8b = cuk_q8_bytes(m, nh * hdv);
            void *dq8 = hdv % 32 == 0 ? cuk_malloc(g_ctx, q8b, "q8", NULL, 0) : NULL;
            cuk_attention_at(g_ctx, dout, ldo, dq, NULL, NULL, dk2, dv2, cases[ci].kv, m, drows, nh, nkv, hd, hdv, scale, NULL,
                             dq8);
            to_host(got2, dout, m * ldo * sizeof(float));
            if (tc) check_close(got2, want, m * ldo, 5e-5, what);
            else if (memcmp(got2, got, m * ldo * sizeof(float)) != 0)
                ktest_fail("%s: attention_at differs from attention", what);
            if (dq8) {
                void *dq8ref = cuk_malloc(g_ctx, q8b, "q8", NULL, 0);
                cuk_quantize_q8(g_ctx, dq8ref, dout, ldo, m, nh * hdv);
                uint8_t *a = malloc(q8b), *b = malloc(q8b);
                to_host(a, dq8, q8b);
                to_host(b, dq8ref, q8b);
                if (memcmp(a, b, q8b) != 0) ktest_fail("%s: attention_at's q8 output differs from cuk_quantize_q8", what);
                free(a);
                free(b);
                cuk_free(dq8);
                cuk_free(dq8ref);
            }
            free(got2);
            free(rows);
            free(big);
            free(kc2);
            free(vc2);
            cuk_free(dk2);
            cuk_free(dv2);
            cuk_free(drows);
        }
        cuk_free(dk);
        cuk_free(dv);
        cuk_free(dq);
        cuk_free(dout);
        free(kf);
        free(vf);
        free(q);
        free(kc);
        free(vc);
        free(want);
        free(got);
        free(scratch);
    }
    printf("attention: %zu cases checked\n", NM_ARRAY_LEN(cases));
}

static void test_moe(krng *r) {
    const int m = 7, ne = 60, nu = 4;
    const int64_t n = 130;
    float *l = malloc(m * ne * sizeof(float));
    for (int i = 0; i < m * ne; i++) l[i] = 2.0f * krng_normal(r);
    l[3] = l[5] = 9.0f; /* a tie: the lower id first */
    float *dl = dev_from(l, m * ne * sizeof(float)), *dw = cuk_malloc(g_ctx, m * nu * 4, "w", NULL, 0);
    int32_t *di = cuk_malloc(g_ctx, m * nu * 4, "ids", NULL, 0);
    cuk_moe_route(g_ctx, dl, m, ne, nu, di, dw);
    int32_t ids[7 * 4];
    float w[7 * 4];
    to_host(ids, di, sizeof ids);
    to_host(w, dw, sizeof w);
    for (int i = 0; i < m; i++) {
        double p[60], mx = -INFINITY, s = 0;
        bool taken[60] = {false};
        for (int e = 0; e < ne; e++) mx = fmax(mx, l[i * ne + e]);
        for (int e = 0; e < ne; e++) s += p[e] = exp(l[i * ne + e] - mx);
        int sel[4];
        double ss = 0;
        for (int k = 0; k < nu; k++) {
            int b = -1;
            for (int e = 0; e < ne; e++)
                if (!taken[e] && (b < 0 || p[e] > p[b])) b = e;
            taken[b] = true;
            sel[k] = b;
            ss += p[b];
        }
        for (int k = 0; k < nu; k++) {
            if (ids[i * nu + k] != sel[k]) ktest_fail("moe_route row %d slot %d: expert %d, want %d", i, k, ids[i * nu + k], sel[k]);
            if (fabs(w[i * nu + k] - p[sel[k]] / ss) > 1e-6)
                ktest_fail("moe_route row %d slot %d: weight %.8f, want %.8f", i, k, (double)w[i * nu + k], p[sel[k]] / ss);
        }
        (void)s;
    }
    /* combine */
    float *x = malloc(m * n * 4), *y = malloc(m * nu * n * 4), *want = malloc(m * n * 4), *got = malloc(m * n * 4);
    krng_acts(r, x, m * n);
    krng_acts(r, y, m * nu * n);
    for (int i = 0; i < m; i++)
        for (int64_t d = 0; d < n; d++) {
            float acc = 0;
            for (int k = 0; k < nu; k++) acc += w[i * nu + k] * y[(i * nu + k) * n + d];
            want[i * n + d] = x[i * n + d] + acc;
        }
    float *dx = dev_from(x, m * n * 4), *dy = dev_from(y, m * nu * n * 4);
    cuk_moe_combine(g_ctx, dx, dy, dw, m, nu, n);
    to_host(got, dx, m * n * 4);
    check_close(got, want, m * n, 1e-6, "moe_combine");
    cuk_free(dl);
    cuk_free(dw);
    cuk_free(di);
    cuk_free(dx);
    cuk_free(dy);
    free(l);
    free(x);
    free(y);
    free(want);
    free(got);
    printf("moe: route and combine checked\n");
}

struct cand { int32_t id; float v; };
static int cmp_cand(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->id - y->id;
}

/* cuk_topk over rows of a logits matrix (ld > n: rows apart by more than their length), 20
 * rows (two rounds of CUK_TOPK_ROWS) in one call, each with its own k and penalty, every row
 * against a full sort of its values; then the same with k = 1 for every row (greedy steps: the
 * kernel's reduction instead of its sort). */
static void test_topk(krng *r) {
    const int64_t ns[] = {151936, 1000, 4096};
    enum { R = 20, NPEN = 70 };
    for (size_t ni = 0; ni < 2 * NM_ARRAY_LEN(ns); ni++) {
        const int64_t n = ns[ni % NM_ARRAY_LEN(ns)], ld = n + 3;
        const bool greedy = ni >= NM_ARRAY_LEN(ns);
        float *l = malloc((size_t)(R * ld) * sizeof(float));
        /* many ties; -0.0 among the zeros (equal to them, so ordered by id) and some -inf */
        for (int64_t i = 0; i < R * ld; i++)
            l[i] = i % 97 == 0 ? -0.0f : i % 89 == 0 ? -INFINITY : (float)krng_int(r, 2000) / 100.0f - 10.0f;
        float *dl = dev_from(l, (size_t)(R * ld) * sizeof(float));
        void *scratch = cuk_malloc(g_ctx, cuk_topk_scratch_bytes(n), "topk", NULL, 0);
        int32_t pen[NPEN];
        for (int i = 0; i < NPEN; i++) pen[i] = i < 10 ? 5 : (int32_t)krng_int(r, (int)n); /* repeats count once */
        const int ks[] = {1, 40, 1000};
        struct cuk_topk_row q[R];
        int64_t total = 0;
        for (int i = 0; i < R; i++) {
            /* rows in another order than their places, one row twice */
            const int k = greedy ? 1 : (int)NM_MIN(ks[i % 3], n);
            q[i] = (struct cuk_topk_row){.row = i == R - 1 ? 2 : (i * 7) % (R - 1), .k = k, .n_pen = (i / 3) % 2 ? NPEN : 0,
                                         .pen_ids = pen, .penalty = (i / 3) % 2 ? 1.3f : 1.0f};
            total += k;
        }
        int32_t *ids = malloc((size_t)total * sizeof *ids);
        float *vals = malloc((size_t)total * sizeof *vals);
        cuk_topk(g_ctx, dl, ld, n, q, R, scratch, ids, vals);
        struct cand *c = malloc(n * sizeof *c);
        bool *done = malloc(n);
        for (int i = 0, at = 0; i < R; at += q[i].k, i++) {
            const float *row = l + q[i].row * ld;
            for (int64_t j = 0; j < n; j++) c[j] = (struct cand){(int32_t)j, row[j]};
            memset(done, 0, n);
            for (int j = 0; j < q[i].n_pen; j++) {
                if (done[pen[j]]) continue;
                done[pen[j]] = true;
                c[pen[j]].v = c[pen[j]].v > 0 ? c[pen[j]].v / q[i].penalty : c[pen[j]].v * q[i].penalty;
            }
            qsort(c, n, sizeof *c, cmp_cand);
            for (int j = 0; j < q[i].k; j++)
                if (ids[at + j] != c[j].id || vals[at + j] != c[j].v) {
                    ktest_fail("topk n=%lld%s row %d (request %d) k=%d penalty=%.1f: [%d] got (%d, %g) want (%d, %g)",
                               (long long)n, greedy ? " (every row k=1)" : "", (int)q[i].row, i, q[i].k,
                               (double)q[i].penalty, j, ids[at + j],
                               (double)vals[at + j], c[j].id, (double)c[j].v);
                    break;
                }
        }
        free(c);
        free(done);
        free(ids);
        free(vals);
        /* The device logits are not modified by the penalty. */
        float *back = malloc((size_t)(R * ld) * sizeof(float));
        to_host(back, dl, (size_t)(R * ld) * sizeof(float));
        if (memcmp(back, l, (size_t)(R * ld) * sizeof(float)) != 0) ktest_fail("topk n=%lld: modified the logits", (long long)n);
        free(back);
        cuk_free(dl);
        cuk_free(scratch);
        free(l);
    }
    printf("topk: %d rows a call (k of 1, 40 and 1000, then 1 for every row), checked against a full sort\n", (int)R);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    gtest_require_device("test_gpu_kernels");
    char why[256];
    g_ctx = cuk_ctx_init(0, why, sizeof why);
    if (!g_ctx) {
        printf("test_gpu_kernels: skipped: %s\n", why);
        return 77;
    }
    if (cuk_ctx_reserve_gemm(g_ctx, 64, 4096, 64 << 10, why, sizeof why)) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    krng r = {ktest_seed};
    test_matmul(&r);
    test_dequant_tiles(&r);
    test_gemv_q8(&r);
    test_elementwise(&r);
    test_rope_store(&r);
    test_norm_rope(&r);
    test_attention(&r);
    test_attention_spans(&r);
    test_attention_rope(&r);
    test_moe(&r);
    test_topk(&r);
    cuk_ctx_free(g_ctx);
    return ktest_finish("test_gpu_kernels");
}
