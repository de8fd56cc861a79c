/* The packed layouts (matmul.h, packed.h) and their kernels:
 *  1. unpack: this test's own unpacker (written from packed.h, no library code reads the packed
 *     bytes here) turns every packed layout back into values, which must equal the GGUF source
 *     dequantized by dequantize_row_ref, bit for bit, for sources that are column sub-ranges of
 *     wider rows (src_stride) and n not a multiple of 16; padding rows must be zero bytes;
 *  2. kern_matmul on packed weights, paths VNNI, REF, AMX_EMU (the AMX code over emulated tiles)
 *     and AMX (when the CPU has it; otherwise said and skipped), against kern_matmul_ref on the
 *     ROWS layout, m in 1..67 with odd n and k, threads 1 and 2, guard values around y and in
 *     its padding columns, NaN/inf checks, a named tolerance per type;
 *  3. exactness: for quantized types the VNNI, REF and AMX(_EMU) results are the same bits, and
 *     a row's bits do not depend on the slice it is packed in (rows [r0, r1) packed alone), on m
 *     or on the thread count;
 *  4. kern_matmul_chunked_f64 on packed weights: against the ROWS chunked result (tolerance),
 *     with masked chunks, the AMX_EMU (and AMX) paths giving the auto path's bits for quantized
 *     types, and each chunk's partial equal to the same chunk computed from a weight packed from
 *     only that chunk's columns (src_stride), bit for bit.
 *
 * Options: --seed N, --type NAME, --amx-only (only the AMX checks; exit 77 without AMX). */
#include "blocks/block.h"
#include "cpu.h"
#include "ktest.h"
#include "matmul.h"
#include "matmul_internal.h"
#include "packed.h"
#include "pool.h"

/* Tolerances on |got - want| / sum|w a| (ktest.h). Q types and the VNNI float path: as
 * test_matmul (same integer block sums, f32 summation order differs). AMX bf16: activations and
 * F16 weights are rounded to bf16 (relative 2^-9 each), so one product is off by <= 2^-8 of its
 * magnitude: 4e-3, plus summation; 8e-3. */
#define TOL_FLOAT 2e-5
#define TOL_Q4 4e-5
#define TOL_Q8_0 2e-4
#define TOL_BF16_TILES 8e-3

static const struct { enum dtype t; double tol; } k_types[] = {
    {DTYPE_Q4_0, TOL_Q4}, {DTYPE_Q4_1, TOL_Q4}, {DTYPE_Q8_0, TOL_Q8_0}, {DTYPE_Q4_K, TOL_Q4},
    {DTYPE_Q5_K, TOL_Q4}, {DTYPE_Q6_K, TOL_Q4}, {DTYPE_Q2_K, TOL_Q4}, {DTYPE_Q3_K, TOL_Q4},
    {DTYPE_IQ4_XS, TOL_Q4}, {DTYPE_Q5_0, TOL_Q4}, {DTYPE_Q5_1, TOL_Q4}, {DTYPE_IQ4_NL, TOL_Q4},
    {DTYPE_F16, TOL_FLOAT}, {DTYPE_BF16, TOL_FLOAT},
};

static enum weight_layout layout_of(enum dtype t) {
    return (t == DTYPE_F16 || t == DTYPE_BF16) ? WEIGHT_LAYOUT_F_PAIR16 : WEIGHT_LAYOUT_Q_TILE16;
}

/* ---- the test's own unpacker (from packed.h's description) ------------------------------ */

static float u_h(const uint8_t *p, int i) {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return fp16_to_fp32(v);
}
static unsigned u_nib(const uint8_t *sub, int r, int c) {
    const int q = c / 4;
    const uint8_t b = sub[64 * (q / 2) + 4 * r + c % 4];
    return q % 2 ? b >> 4 : b & 0xF;
}

/* The 2-bit code of row r, column c of a crumb sub-block, and its high-bit mask bit. */
static int u_crumb(const uint8_t *sub, int r, int c) {
    const int q = c / 4;
    return (sub[64 * (q / 4) + 4 * r + c % 4] >> (2 * (q % 4))) & 3;
}
static int u_hibit(const uint8_t *hi, int r, int c) {
    uint64_t m;
    memcpy(&m, hi + 8 * (c / 4), 8);
    return (int)((m >> (4 * r + c % 4)) & 1);
}
/* The 16 values of ggml's kvalues_iq4nl, written out again here. */
static const int k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Value of row r (in its group), column c (in its unit) of unit u of type t. */
static float unpack_value(enum dtype t, const uint8_t *u, int r, int c) {
    switch (t) {
    case DTYPE_Q4_0: return (float)((int)u_nib(u, r, c) - 8) * u_h(u + 256, r);
    case DTYPE_Q4_1: return (float)u_nib(u, r, c) * u_h(u + 256, r) + u_h(u + 288, r);
    case DTYPE_Q8_0: return (float)((int)u[64 * (c / 4) + 4 * r + c % 4] - 128) * u_h(u + 512, r);
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const int five = t == DTYPE_Q5_K, s = c / 32, cc = c % 32;
        int q = (int)u_nib(u + 256 * s, r, cc);
        if (five) {
            uint64_t hi;
            memcpy(&hi, u + 2048 + 64 * s + 8 * (cc / 4), 8);
            q += (int)((hi >> (4 * r + cc % 4)) & 1) * 16;
        }
        const int off = five ? 512 : 0;
        const float d = u_h(u + 2304 + off, r), dmin = u_h(u + 2336 + off, r);
        const float d1 = d * (float)u[2048 + off + 16 * s + r], m1 = dmin * (float)u[2176 + off + 16 * s + r];
        return d1 * (float)q - m1;
    }
    case DTYPE_Q6_K: {
        const int s = c / 32, cc = c % 32, qd = cc / 4, pos = 4 * r + cc % 4;
        const uint8_t *sub = u + 384 * s;
        const uint8_t hb = sub[256 + 32 * (qd / 2) + pos % 32];
        const unsigned nb = pos >= 32 ? hb >> 4 : hb & 0xF;
        const int q = (int)(u_nib(sub, r, cc) | (((nb >> (2 * (qd % 2))) & 3) << 4)) - 32;
        return u_h(u + 3328, r) * (float)(int8_t)u[3072 + 16 * (c / 16) + r] * (float)q;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        const int q = (int)u_nib(u, r, c) + 16 * u_hibit(u + 256, r, c);
        if (t == DTYPE_Q5_1) return u_h(u + 320, r) * (float)q + u_h(u + 352, r);
        return (float)(q - 16) * u_h(u + 320, r);
    }
    case DTYPE_IQ4_NL: return (float)k_iq4nl[u_nib(u, r, c)] * u_h(u + 256, r);
    case DTYPE_Q2_K: {
        const int s = c / 32, cc = c % 32, sc = u[1024 + 16 * (c / 16) + r];
        const float d1 = u_h(u + 1280, r) * (float)(sc & 15), m1 = u_h(u + 1312, r) * (float)(sc >> 4);
        return d1 * (float)u_crumb(u + 128 * s, r, cc) - m1;
    }
    case DTYPE_Q3_K: {
        const int s = c / 32, cc = c % 32;
        const int q = u_crumb(u + 128 * s, r, cc) + 4 * u_hibit(u + 1024 + 64 * s, r, cc) - 4;
        return u_h(u + 1792, r) * (float)(int8_t)u[1536 + 16 * (c / 16) + r] * (float)q;
    }
    case DTYPE_IQ4_XS: {
        const int s = c / 32, cc = c % 32;
        return u_h(u + 2176, r) * (float)(int8_t)u[2048 + 16 * s + r] * (float)k_iq4nl[u_nib(u + 256 * s, r, cc)];
    }
    case DTYPE_F16:
    case DTYPE_BF16: {
        uint16_t v;
        memcpy(&v, u + 64 * (c / 2) + 4 * r + 2 * (c % 2), 2);
        return t == DTYPE_F16 ? fp16_to_fp32(v) : bf16_to_fp32(v);
    }
    default: return NAN;
    }
}

static void random_rows(krng *r, enum dtype t, uint8_t *w, size_t stride, int64_t k, int64_t n) {
    float *tmp = malloc((size_t)k * 4);
    for (int64_t i = 0; i < n; i++) {
        if (i % 2 == 0) {
            krng_row(r, t, w + stride * i, k);
        } else {
            for (int64_t j = 0; j < k; j++) tmp[j] = krng_normal(r);
            quantize_row_ref(t, tmp, w + stride * i, k);
        }
    }
    free(tmp);
}

static void *alloc64(size_t bytes) {
    void *p = nm_alloc(bytes ? bytes : 64, 64, "test");
    return p;
}

static void test_unpack(krng *r, enum dtype t) {
    const int blk = dtype_get(t)->blck_size, ucols = pk_unit_cols(t);
    for (int trial = 0; trial < 6; trial++) {
        const int64_t k = blk == 1 ? 1 + krng_int(r, 150) : (int64_t)blk * (1 + krng_int(r, blk == 32 ? 20 : 3));
        const int64_t extra = blk == 1 ? krng_int(r, 40) : (int64_t)blk * krng_int(r, 3);
        const int64_t n = 1 + krng_int(r, 50);
        const int64_t kw = k + 2 * extra; /* the file row: our k columns start at column `extra` */
        const size_t fstride = dtype_row_size(t, kw);
        uint8_t *file = malloc(fstride * (size_t)n);
        random_rows(r, t, file, fstride, kw, n);
        const size_t bytes = weight_packed_bytes(layout_of(t), t, k, n);
        uint8_t *dst = alloc64(bytes);
        memset(dst, 0xAB, bytes);
        struct weight w;
        weight_pack(NULL, layout_of(t), t, k, n, file + dtype_row_size(t, extra), fstride, dst, &w);
        if (w.layout != layout_of(t) || w.bytes != bytes || w.k != k || w.n != n || w.data != dst)
            ktest_fail("weight_pack %s: wrong struct weight", dtype_get(t)->name);
        float *want = malloc((size_t)kw * 4);
        const int64_t nu = pk_units(t, k);
        const size_t ub = pk_unit_bytes(t);
        int64_t bad = 0;
        for (int64_t row = 0; row < pk_groups(n) * 16; row++) {
            const uint8_t *g = dst + (size_t)(row / 16) * nu * ub;
            if (row >= n) { /* padding row: every value reads as +0 (all its bytes zero) */
                for (int64_t c = 0; c < nu * ucols; c++) {
                    const float v = unpack_value(t, g + (size_t)(c / ucols) * ub, (int)(row % 16), (int)(c % ucols));
                    uint32_t bits;
                    memcpy(&bits, &v, 4);
                    bad += bits != 0 && !(t == DTYPE_Q4_0 || t == DTYPE_Q8_0 || t == DTYPE_Q6_K || t == DTYPE_Q3_K ||
                                                  t == DTYPE_IQ4_XS || t == DTYPE_Q5_0 || t == DTYPE_IQ4_NL); /* 0 * (a negative code): -0 */
                    bad += v != 0.0f;
                }
                continue;
            }
            dequantize_row_ref(t, file + fstride * row, want, kw);
            for (int64_t c = 0; c < nu * ucols; c++) {
                const float v = unpack_value(t, g + (size_t)(c / ucols) * ub, (int)(row % 16), (int)(c % ucols));
                const float e = c < k ? want[extra + c] : 0.0f;
                if (memcmp(&v, &e, 4) != 0 && !(v == 0.0f && e == 0.0f) && !(isnan(v) && isnan(e))) {
                    if (bad < 3)
                        ktest_fail("unpack %s k=%" PRId64 " n=%" PRId64 " row %" PRId64 " col %" PRId64 ": %.9g, source %.9g",
                                   dtype_get(t)->name, k, n, row, c, v, e);
                    bad++;
                }
            }
        }
        if (bad) ktest_fail("unpack %s k=%" PRId64 " n=%" PRId64 ": %" PRId64 " wrong values", dtype_get(t)->name, k, n, bad);
        nm_free(dst);
        free(file);
        free(want);
    }
}

/* ---- matmul ------------------------------------------------------------------------------ */

static const char *path_name(enum kern_path p) {
    switch (p) {
    case KERN_PATH_AUTO: return "auto";
    case KERN_PATH_VNNI: return "vnni";
    case KERN_PATH_AVX2: return "avx2";
    case KERN_PATH_AMX: return "amx";
    case KERN_PATH_AMX_EMU: return "amx-emu";
    case KERN_PATH_REF: return "ref";
    }
    return "?";
}

static bool g_have_vnni, g_have_avx2, g_have_amx;

/* y = W x on the packed layout with `path`; returns y (m x ldy, guard-checked) */
static float *run_packed(struct pool *pool, enum kern_path path, const struct weight *w, const float *x, int m,
                         int64_t ldy, const char *label) {
    const int64_t guard = 23, ytot = (int64_t)m * ldy + 2 * guard;
    float *yb = malloc((size_t)ytot * 4);
    kguard_fill(yb, ytot);
    block_q8x *q8 = malloc(act_q8_bytes(m, w->k) + 1);
    struct act xa = {.m = m, .k = w->k, .f32 = x, .q8 = q8};
    kern_matmul_force_path(path);
    kern_matmul(pool, w, &xa, yb + guard, ldy);
    kern_matmul_force_path(KERN_PATH_AUTO);
    int64_t bad = kguard_count_bad(yb, guard) + kguard_count_bad(yb + guard + (int64_t)m * ldy, guard);
    for (int i = 0; i < m; i++) bad += kguard_count_bad(yb + guard + i * ldy + w->n, ldy - w->n);
    if (bad) ktest_fail("%s path %s: %" PRId64 " guard values overwritten", label, path_name(path), bad);
    float *y = malloc((size_t)m * ldy * 4);
    memcpy(y, yb + guard, (size_t)m * ldy * 4);
    free(yb);
    free(q8);
    return y;
}

/* A random k x n weight of type t as GGUF rows (src, wr) and packed (dst, wp), with m random
 * activation rows x: the setup of the matmul tests. */
struct pk_case {
    size_t rs; /* bytes per GGUF row */
    uint8_t *src, *dst;
    struct weight wr, wp;
    float *x;
};
static void pk_case_init(struct pk_case *c, krng *r, struct pool *pool, enum dtype t, int64_t k, int64_t n, int m) {
    c->rs = dtype_row_size(t, k);
    c->src = malloc(c->rs * (size_t)n);
    random_rows(r, t, c->src, c->rs, k, n);
    c->wr = weight_rows(t, k, n, c->src);
    c->dst = alloc64(weight_packed_bytes(layout_of(t), t, k, n));
    weight_pack(pool, layout_of(t), t, k, n, c->src, c->rs, c->dst, &c->wp);
    c->x = malloc((size_t)m * k * 4);
    for (int i = 0; i < m; i++) krng_acts(r, c->x + (size_t)i * k, k);
}
static void pk_case_free(struct pk_case *c) {
    free(c->src);
    nm_free(c->dst);
    free(c->x);
}

static void test_matmul(krng *r, struct pool *pool, enum dtype t, double tol, int64_t k, int64_t n, int m,
                        bool emu, bool amx_only) {
    char label[160];
    snprintf(label, sizeof label, "kern_matmul %s k=%" PRId64 " n=%" PRId64 " m=%d threads=%d", dtype_get(t)->name, k,
             n, m, pool_size(pool));
    struct pk_case pc;
    pk_case_init(&pc, r, pool, t, k, n, m);
    const size_t rs = pc.rs;
    const uint8_t *src = pc.src;
    const struct weight wr = pc.wr, wp = pc.wp;
    const float *x = pc.x;
    block_q8x *q8 = malloc(act_q8_bytes(m, k) + 1);
    struct act xr = {.m = m, .k = k, .f32 = x, .q8 = q8};
    const int64_t ldy = n + 3;
    float *want = malloc((size_t)m * ldy * 4);
    kern_matmul_ref(&wr, &xr, want, ldy);
    /* magnitudes */
    double *mag = malloc((size_t)m * n * sizeof(double));
    float *wf = malloc((size_t)k * 4), *af = malloc((size_t)k * 4), *got = malloc((size_t)m * n * 4),
          *wantc = malloc((size_t)m * n * 4);
    for (int i = 0; i < m; i++) {
        kact_values(t, x + (size_t)i * k, q8 + (size_t)i * (k / 32), af, k);
        for (int64_t j = 0; j < n; j++) {
            dequantize_row_ref(t, src + rs * j, wf, k);
            mag[i * n + j] = kmag(wf, af, k);
            wantc[i * n + j] = want[i * ldy + j];
        }
    }
    enum kern_path paths[5];
    int np = 0;
    if (!amx_only) {
        paths[np++] = KERN_PATH_REF;
        if (g_have_vnni) paths[np++] = KERN_PATH_VNNI;
        if (g_have_avx2 && (kern_isa_avx2_has_packed(t) || t == DTYPE_F16 || t == DTYPE_BF16)) paths[np++] = KERN_PATH_AVX2;
    }
    if (emu && g_have_vnni) paths[np++] = KERN_PATH_AMX_EMU;
    if (g_have_amx) paths[np++] = KERN_PATH_AMX;
    float *first = NULL;
    enum kern_path first_path = KERN_PATH_REF;
    const bool fl = t == DTYPE_F16 || t == DTYPE_BF16;
    for (int p = 0; p < np; p++) {
        float *y = run_packed(pool, paths[p], &wp, x, m, ldy, label);
        for (int i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) got[i * n + j] = y[i * ldy + j];
        const bool tiles = paths[p] == KERN_PATH_AMX || paths[p] == KERN_PATH_AMX_EMU;
        kcheck(got, wantc, mag, (int64_t)m * n, fl && tiles ? TOL_BF16_TILES : tol, "%s path %s", label,
               path_name(paths[p]));
        /* exactness: quantized types give the same bits on every path; floats on ref and vnni */
        if (!fl || !tiles) {
            if (!first) {
                first = y;
                first_path = paths[p];
                continue;
            }
            for (int i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++)
                    if (memcmp(&y[i * ldy + j], &first[i * ldy + j], 4) != 0) {
                        ktest_fail("%s: path %s gives %.9g, path %s %.9g at [%d][%" PRId64 "] (must be the same bits)",
                                   label, path_name(paths[p]), y[i * ldy + j], path_name(first_path),
                                   first[i * ldy + j], i, j);
                        i = m;
                        break;
                    }
        }
        free(y);
    }
    /* slice invariance: rows [r0, r1) packed alone give the same bits (auto path, this m) */
    if (first && n > 3) {
        float *yfull = run_packed(pool, KERN_PATH_AUTO, &wp, x, m, ldy, label);
        const int64_t r0 = 1 + krng_int(r, (int)(n - 2)), r1 = r0 + 1 + krng_int(r, (int)(n - r0));
        struct weight ws;
        uint8_t *ds = alloc64(weight_packed_bytes(layout_of(t), t, k, r1 - r0));
        weight_pack(NULL, layout_of(t), t, k, r1 - r0, src + rs * r0, rs, ds, &ws);
        float *ysl = run_packed(pool, KERN_PATH_AUTO, &ws, x, m, r1 - r0, label);
        for (int i = 0; i < m; i++)
            for (int64_t j = r0; j < r1; j++)
                if (memcmp(&ysl[i * (r1 - r0) + j - r0], &yfull[i * ldy + j], 4) != 0) {
                    ktest_fail("%s: row %" PRId64 " packed in the slice [%" PRId64 ", %" PRId64 ") gives %.9g, in the whole %.9g",
                               label, j, r0, r1, ysl[i * (r1 - r0) + j - r0], yfull[i * ldy + j]);
                    i = m;
                    break;
                }
        free(ysl);
        free(yfull);
        nm_free(ds);
    }
    free(first);
    pk_case_free(&pc);
    free(q8);
    free(want);
    free(mag);
    free(wf);
    free(af);
    free(got);
    free(wantc);
}

/* ---- quantized types on the bf16 tiles (kern_matmul_allow_bf16_tiles) --------------------
 * The plain-C twin (REF with the tiles allowed: bf16 weights and activations, f32 in column
 * order) against the exact reference within the bf16 tolerance; the tile code (emulated, and
 * real with AMX) against the twin within f32 summation order, the same bits on 1 and 2 threads,
 * and the chunked matmul (one call per chunk) likewise. m >= kern_matmul_bf16_min_m. */
static void test_bf16_tiles(krng *r, enum dtype t, int64_t k, int64_t n, int m) {
    char label[160];
    const bool rows = block_codec_get(t) != NULL; /* a block type: its GGUF rows (ROWS layout) */
    snprintf(label, sizeof label, "bf16 tiles %s%s k=%" PRId64 " n=%" PRId64 " m=%d", dtype_get(t)->name,
             rows ? " (rows)" : "", k, n, m);
    struct pool *p1 = pool_init(1, NULL), *p2 = pool_init(2, NULL);
    struct pk_case pc = {.rs = dtype_row_size(t, k)};
    pc.src = malloc(pc.rs * (size_t)n);
    random_rows(r, t, pc.src, pc.rs, k, n);
    pc.wr = weight_rows(t, k, n, pc.src);
    if (!rows) {
        pc.dst = alloc64(weight_packed_bytes(layout_of(t), t, k, n));
        weight_pack(p2, layout_of(t), t, k, n, pc.src, pc.rs, pc.dst, &pc.wp);
    } else {
        pc.wp = pc.wr;
    }
    pc.x = malloc((size_t)m * k * 4);
    for (int i = 0; i < m; i++) krng_acts(r, pc.x + (size_t)i * k, k);
    block_q8x *q8 = malloc(act_q8_bytes(m, k) + 1);
    struct act xr = {.m = m, .k = k, .f32 = pc.x, .q8 = q8};
    const int64_t ldy = n + 1;
    float *got = malloc((size_t)m * n * 4), *ref = malloc((size_t)m * n * 4), *wantc = malloc((size_t)m * n * 4),
          *wf = malloc((size_t)k * 4);
    double *mag = malloc((size_t)m * n * sizeof(double));
    /* the exact product of the dequantized weights and the f32 activations (not q8x's) */
    for (int64_t j = 0; j < n; j++) {
        dequantize_row_ref(t, pc.src + pc.rs * j, wf, k);
        for (int i = 0; i < m; i++) {
            const float *xi = pc.x + (size_t)i * k;
            double sum = 0;
            for (int64_t c = 0; c < k; c++) sum += (double)wf[c] * xi[c];
            wantc[i * n + j] = (float)sum;
            mag[i * n + j] = kmag(wf, xi, k);
        }
    }
    kern_matmul_allow_bf16_tiles(true);
    float *y = run_packed(p2, KERN_PATH_REF, &pc.wp, pc.x, m, ldy, label);
    for (int i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) ref[i * n + j] = y[i * ldy + j];
    free(y);
    kcheck(ref, wantc, mag, (int64_t)m * n, TOL_BF16_TILES, "%s: the plain-C twin against the exact result", label);
    enum kern_path paths[2];
    int np = 0;
    if (g_have_vnni) paths[np++] = KERN_PATH_AMX_EMU;
    if (g_have_amx) paths[np++] = KERN_PATH_AMX;
    for (int p = 0; p < np; p++) {
        float *y2 = run_packed(p2, paths[p], &pc.wp, pc.x, m, ldy, label), *y1 = run_packed(p1, paths[p], &pc.wp, pc.x, m, ldy, label);
        for (int i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) got[i * n + j] = y2[i * ldy + j];
        kcheck(got, ref, mag, (int64_t)m * n, TOL_FLOAT, "%s path %s against the twin", label, path_name(paths[p]));
        if (memcmp(y1, y2, (size_t)m * ldy * 4) != 0)
            ktest_fail("%s path %s: 1 and 2 threads give different bits", label, path_name(paths[p]));
        free(y1);
        free(y2);
    }
    /* chunked, chunks of 256 columns (ffn_down's SHARD_FF_CHUNK), one tile call per chunk */
    const int64_t cw = k % 256 == 0 ? 256 : rows ? dtype_get(t)->blck_size : pk_unit_cols(t);
    const int nc = (int)(k / cw);
    struct kern_chunk *ch = calloc((size_t)nc, sizeof *ch);
    for (int c = 0; c < nc; c++) ch[c] = (struct kern_chunk){.w0 = c * cw, .w1 = (c + 1) * cw, .a0 = c * cw, .a1 = (c + 1) * cw};
    double *ydr = calloc((size_t)m * n, sizeof(double)), *ydt = calloc((size_t)m * n, sizeof(double));
    kern_matmul_force_path(KERN_PATH_REF);
    kern_matmul_chunked_f64(p2, &pc.wp, &xr, ch, nc, ydr, n);
    for (int p = 0; p < np; p++) {
        kern_matmul_force_path(paths[p]);
        kern_matmul_chunked_f64(p2, &pc.wp, &xr, ch, nc, ydt, n);
        for (int64_t i = 0; i < (int64_t)m * n; i++) got[i] = (float)ydt[i], ref[i] = (float)ydr[i];
        kcheck(got, ref, mag, (int64_t)m * n, TOL_FLOAT, "%s chunked (%d chunks) path %s against the twin", label, nc,
               path_name(paths[p]));
    }
    kern_matmul_force_path(KERN_PATH_AUTO);
    kern_matmul_allow_bf16_tiles(false);
    free(ch);
    free(ydr);
    free(ydt);
    pk_case_free(&pc);
    free(q8);
    free(got);
    free(ref);
    free(wantc);
    free(wf);
    free(mag);
    pool_free(p1);
    pool_free(p2);
}

/* ---- chunked ------------------------------------------------------------------------------ */

/* big: K of several of the tile kernel's slabs (AMX_SLAB_BLOCKS = 64 blocks) and m of several
 * activation tiles, so that its accumulators wait between slabs and chunks end inside slabs.
 * kind: the chunks' kind below (-1: any); gemv: m = 1 (decode). */
static void test_chunked(krng *r, struct pool *pool, enum dtype t, double tol, bool big, int kind, bool gemv) {
    const int ucols = pk_unit_cols(t);
    const int nunits = big ? (ucols == 32 ? 130 + krng_int(r, 60) : 17 + krng_int(r, 8)) : 2 + krng_int(r, 4);
    const int64_t k = (int64_t)ucols * nunits, n = 1 + krng_int(r, 45);
    const int m = gemv ? 1 : big ? 17 + krng_int(r, 30) : 1 + krng_int(r, 20); /* m = 1: the GEMV (decode) */
    struct pk_case pc;
    pk_case_init(&pc, r, pool, t, k, n, m);
    const size_t rs = pc.rs;
    const uint8_t *src = pc.src;
    const struct weight wr = pc.wr, wp = pc.wp;
    const float *x = pc.x;
    /* chunks, in three kinds of cases:
     *  - split at every unit boundary, with one chunk masked to a 32-column sub-range;
     *  - end to end and unmasked, of one or more units each;
     *  - end to end in runs of 32-column blocks that need not end on units (attn_output's heads
     *    of 64 or 128 columns in a K-quant's 256-column unit), each chunk's w range its units.
     * The kernels that take chunks in one call (pk_args.chunk_end) take the last two kinds so. */
    struct kern_chunk ch[256];
    int nc = 0;
    if (kind < 0) kind = krng_int(r, 3);
    const bool mask = kind == 0;
    if (kind == 2) {
        for (int64_t a0 = 0; a0 < k;) {
            const int64_t len = 32 * (1 + krng_int(r, 2 * ucols / 32)), a1 = NM_MIN(k, a0 + len);
            NM_ASSERT(nc < (int)NM_ARRAY_LEN(ch));
            ch[nc++] = (struct kern_chunk){.w0 = a0 / ucols * ucols, .w1 = (a1 + ucols - 1) / ucols * ucols, .a0 = a0, .a1 = a1};
            a0 = a1;
        }
        /* a third of them without the first chunk (end to end, not from column 0: a rank's
         * slice of heads; one call per chunk then) */
        if (nc > 1 && krng_int(r, 3) == 0) memmove(ch, ch + 1, (size_t)--nc * sizeof *ch);
    } else {
        for (int u = 0; u < nunits; u++) {
            if (!mask && u > 0 && krng_int(r, 2)) { /* widen the previous chunk */
                ch[nc - 1].w1 = ch[nc - 1].a1 = (int64_t)(u + 1) * ucols;
                continue;
            }
            ch[nc] = (struct kern_chunk){.w0 = (int64_t)u * ucols, .w1 = (int64_t)(u + 1) * ucols,
                                         .a0 = (int64_t)u * ucols, .a1 = (int64_t)(u + 1) * ucols};
            if (mask && u == 1) ch[nc].a0 += 32 * (ucols / 32 / 2), ch[nc].a1 = ch[nc].a0 + 32;
            nc++;
        }
    }
    NM_ASSERT(nc <= (int)NM_ARRAY_LEN(ch));
    bool *covered = calloc((size_t)k, 1); /* in some chunk's [a0, a1) */
    for (int c = 0; c < nc; c++)
        for (int64_t j = ch[c].a0; j < ch[c].a1; j++) covered[j] = true;
    block_q8x *q8a = malloc(act_q8_bytes(m, k) + 1), *q8b = malloc(act_q8_bytes(m, k) + 1);
    struct act xa = {.m = m, .k = k, .f32 = x, .q8 = q8a}, xb = {.m = m, .k = k, .f32 = x, .q8 = q8b};
    double *yd = malloc((size_t)m * n * 8), *ydr = malloc((size_t)m * n * 8);
    /* chunks end to end from column 0 to k (kinds 1 and 2, but for a dropped first chunk; kind 0
     * where its masked sub-range is a whole unit) go in one kernel call to the kernels that take
     * chunk ends on any block; the others, one call per chunk (a silent fallback would give the
     * same bits, only slower) */
    bool one_call = ch[0].a0 == 0 && ch[nc - 1].a1 == k;
    for (int c = 0; c < nc; c++) one_call = one_call && ch[c].a1 % 32 == 0 && (c == 0 || ch[c].a0 == ch[c - 1].a1);
    uint64_t calls0 = pk_one_call_chunked();
    kern_matmul_chunked_f64(pool, &wp, &xa, ch, nc, yd, n);
    if (pk_takes_block_chunks(t, m) && pk_one_call_chunked() - calls0 != (one_call ? 1u : 0u))
        ktest_fail("chunked %s k=%" PRId64 " m=%d, %d chunks (kind %d): %s one kernel call", dtype_get(t)->name, k, m,
                   nc, kind, one_call ? "not in" : "unexpectedly in");
    kern_matmul_chunked_f64(pool, &wr, &xb, ch, nc, ydr, n);
    { /* the GGUF-block layout's chunks sharing a block run in one call (stacked masked copies):
       * each chunk's partial has the bits of a call of its own, added in chunk order */
        double *one = malloc((size_t)m * n * 8), *sum = calloc((size_t)m * n, 8);
        block_q8x *q8c = malloc(act_q8_bytes(m, k) + 1);
        struct act xc = {.m = m, .k = k, .f32 = x, .q8 = q8c};
        for (int c = 0; c < nc; c++) {
            kern_matmul_chunked_f64(pool, &wr, &xc, &ch[c], 1, one, n);
            for (int64_t i = 0; i < (int64_t)m * n; i++) sum[i] += one[i];
        }
        if (memcmp(sum, ydr, (size_t)m * n * 8) != 0)
            ktest_fail("chunked %s k=%" PRId64 " m=%d, %d chunks (kind %d), GGUF blocks: one call per chunk gives other bits",
                       dtype_get(t)->name, k, m, nc, kind);
        free(one);
        free(sum);
        free(q8c);
    }
    float *got = malloc((size_t)m * n * 4), *want = malloc((size_t)m * n * 4);
    double *mag = malloc((size_t)m * n * 8);
    float *wf = malloc((size_t)k * 4), *af = malloc((size_t)k * 4);
    for (int i = 0; i < m; i++) {
        kact_values(t, x + (size_t)i * k, q8b + (size_t)i * (k / 32), af, k);
        for (int64_t j = 0; j < k; j++) /* masked columns count as zero */
            if (!covered[j]) af[j] = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            dequantize_row_ref(t, src + rs * j, wf, k);
            mag[i * n + j] = kmag(wf, af, k);
            got[i * n + j] = (float)yd[i * n + j];
            want[i * n + j] = (float)ydr[i * n + j];
        }
    }
    const bool fl = t == DTYPE_F16 || t == DTYPE_BF16;
    const bool tiles = fl && g_have_amx && m >= kern_matmul_amx_min_m(t);
    kcheck(got, want, mag, (int64_t)m * n, tiles ? TOL_BF16_TILES : tol, "chunked %s k=%" PRId64 " n=%" PRId64 " m=%d", dtype_get(t)->name, k, n, m);
    /* the plain-C kernel, one call per chunk, gives the auto path's bits (VNNI, which takes
     * unit-aligned chunks in one call for m = 1; AVX2, any end-to-end chunks: pk_args.chunk_end),
     * wherever the auto path is not bf16 tiles */
    if (!tiles) {
        block_q8x *q8r = malloc(act_q8_bytes(m, k) + 1);
        struct act xr = {.m = m, .k = k, .f32 = x, .q8 = q8r};
        double *ydq = malloc((size_t)m * n * 8);
        kern_matmul_force_path(KERN_PATH_REF);
        kern_matmul_chunked_f64(pool, &wp, &xr, ch, nc, ydq, n);
        kern_matmul_force_path(KERN_PATH_AUTO);
        if (memcmp(ydq, yd, (size_t)m * n * 8) != 0)
            ktest_fail("chunked %s k=%" PRId64 " n=%" PRId64 " m=%d: the ref path differs from the auto path's bits",
                       dtype_get(t)->name, k, n, m);
        if (g_have_avx2 && kern_isa_avx2_has_packed(t)) { /* the AVX2 kernel (on an AVX2-only CPU, the auto path itself) */
            kern_matmul_force_path(KERN_PATH_AVX2);
            calls0 = pk_one_call_chunked();
            kern_matmul_chunked_f64(pool, &wp, &xr, ch, nc, ydq, n);
            if (pk_takes_block_chunks(t, m) && pk_one_call_chunked() - calls0 != (one_call ? 1u : 0u))
                ktest_fail("chunked %s k=%" PRId64 " m=%d (avx2 path): %s one kernel call", dtype_get(t)->name, k, m,
                           one_call ? "not in" : "unexpectedly in");
            kern_matmul_force_path(KERN_PATH_AUTO);
            if (memcmp(ydq, yd, (size_t)m * n * 8) != 0)
                ktest_fail("chunked %s k=%" PRId64 " n=%" PRId64 " m=%d: the avx2 path differs from the auto path's bits",
                           dtype_get(t)->name, k, n, m);
        }
        free(q8r);
        free(ydq);
    }
    /* the tile algorithm on the chunked path (emulated, and real where the CPU has AMX): quantized
     * types give the same bits as the auto path's result (VNNI or tiles), floats within the bf16
     * tolerance */
    enum kern_path tp[2];
    int ntp = 0;
    if (g_have_vnni) tp[ntp++] = KERN_PATH_AMX_EMU;
    if (g_have_amx) tp[ntp++] = KERN_PATH_AMX;
    for (int p = 0; p < ntp; p++) {
        block_q8x *q8t = malloc(act_q8_bytes(m, k) + 1);
        struct act xt = {.m = m, .k = k, .f32 = x, .q8 = q8t};
        double *ydt = malloc((size_t)m * n * 8);
        kern_matmul_force_path(tp[p]);
        kern_matmul_chunked_f64(pool, &wp, &xt, ch, nc, ydt, n);
        kern_matmul_force_path(KERN_PATH_AUTO);
        if (!fl && !tiles && memcmp(ydt, yd, (size_t)m * n * 8) != 0)
            ktest_fail("chunked %s k=%" PRId64 " n=%" PRId64 " m=%d: path %s differs from the auto path's bits",
                       dtype_get(t)->name, k, n, m, path_name(tp[p]));
        for (int64_t i = 0; i < (int64_t)m * n; i++) got[i] = (float)ydt[i];
        kcheck(got, want, mag, (int64_t)m * n, fl ? TOL_BF16_TILES : tol, "chunked %s k=%" PRId64 " n=%" PRId64 " m=%d path %s",
               dtype_get(t)->name, k, n, m, path_name(tp[p]));
        free(q8t);
        free(ydt);
    }
    /* each chunk from a weight packed from only its columns (a row-parallel rank's slice) */
    for (int c = 0; c < nc; c++) {
        const int64_t kc = ch[c].w1 - ch[c].w0;
        struct weight wc;
        uint8_t *dc = alloc64(weight_packed_bytes(layout_of(t), t, kc, n));
        weight_pack(NULL, layout_of(t), t, kc, n, src + dtype_row_size(t, ch[c].w0), rs, dc, &wc);
        float *xc = malloc((size_t)m * kc * 4);
        for (int i = 0; i < m; i++) memcpy(xc + (size_t)i * kc, x + (size_t)i * k + ch[c].w0, (size_t)kc * 4);
        struct kern_chunk one = {.w0 = 0, .w1 = kc, .a0 = ch[c].a0 - ch[c].w0, .a1 = ch[c].a1 - ch[c].w0};
        struct kern_chunk one_full = ch[c];
        block_q8x *q1 = malloc(act_q8_bytes(m, kc) + 1), *q2 = malloc(act_q8_bytes(m, k) + 1);
        struct act x1 = {.m = m, .k = kc, .f32 = xc, .q8 = q1}, x2 = {.m = m, .k = k, .f32 = x, .q8 = q2};
        double *y1 = malloc((size_t)m * n * 8), *y2 = malloc((size_t)m * n * 8);
        kern_matmul_chunked_f64(pool, &wc, &x1, &one, 1, y1, n);
        kern_matmul_chunked_f64(pool, &wp, &x2, &one_full, 1, y2, n);
        if (memcmp(y1, y2, (size_t)m * n * 8) != 0)
            ktest_fail("chunked %s: chunk %d's partial differs between the whole weight and its column slice",
                       dtype_get(t)->name, c);
        nm_free(dc);
        free(xc);
        free(q1);
        free(q2);
        free(y1);
        free(y2);
    }
    pk_case_free(&pc);
    free(covered);
    free(q8a);
    free(q8b);
    free(yd);
    free(ydr);
    free(got);
    free(want);
    free(mag);
    free(wf);
    free(af);
}

/* kern_matmul_multi: three weights of type t (n of 1..90 rows, one k) and a fourth of another
 * packed type, times the same m rows, against one kern_matmul each: the same bits on every path
 * this CPU has (the weights of one type in one pool run, the other one apart). */
static void test_multi(krng *r, struct pool *pool, enum dtype t, enum dtype other, int64_t k, int m) {
    enum { NW = 4 };
    struct pk_case pc[NW];
    struct weight w[NW];
    for (int i = 0; i < NW; i++) {
        pk_case_init(&pc[i], r, pool, i < NW - 1 ? t : other, k, 1 + krng_int(r, 90), m);
        w[i] = pc[i].wp;
    }
    enum kern_path paths[5];
    int np = 0;
    paths[np++] = KERN_PATH_AUTO;
    paths[np++] = KERN_PATH_REF;
    if (g_have_vnni) paths[np++] = KERN_PATH_VNNI, paths[np++] = KERN_PATH_AMX_EMU;
    if (g_have_amx) paths[np++] = KERN_PATH_AMX;
    block_q8x *q8 = malloc(act_q8_bytes(m, k) + 1);
    for (int p = 0; p < np; p++) {
        float *one[NW], *multi[NW];
        kern_matmul_force_path(paths[p]);
        for (int i = 0; i < NW; i++) {
            struct act xa = {.m = m, .k = k, .f32 = pc[0].x, .q8 = q8};
            one[i] = malloc((size_t)m * w[i].n * 4);
            multi[i] = malloc((size_t)m * w[i].n * 4 + 64);
            kern_matmul(pool, &w[i], &xa, one[i], w[i].n);
            kguard_fill(multi[i] + (size_t)m * w[i].n, 16);
        }
        struct act xa = {.m = m, .k = k, .f32 = pc[0].x, .q8 = q8};
        kern_matmul_multi(pool, NW, (const struct weight *const[]){&w[0], &w[1], &w[2], &w[3]}, &xa, multi);
        kern_matmul_force_path(KERN_PATH_AUTO);
        for (int i = 0; i < NW; i++) {
            if (memcmp(one[i], multi[i], (size_t)m * w[i].n * 4) != 0 || kguard_count_bad(multi[i] + (size_t)m * w[i].n, 16))
                ktest_fail("kern_matmul_multi %s (+ %s) k=%" PRId64 " m=%d threads=%d path %s: weight %d (n=%" PRId64
                           ") differs from kern_matmul", dtype_get(t)->name, dtype_get(other)->name, k, m,
                           pool_size(pool), path_name(paths[p]), i, w[i].n);
            free(one[i]);
            free(multi[i]);
        }
    }
    free(q8);
    for (int i = 0; i < NW; i++) pk_case_free(&pc[i]);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    const char *only = NULL;
    bool amx_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) only = argv[i + 1];
        if (strcmp(argv[i], "--amx-only") == 0) amx_only = true;
    }
    g_have_vnni = kern_isa_find("avx512", NULL) != NULL;
    g_have_avx2 = kern_isa_find("avx2", NULL) != NULL;
    g_have_amx = kern_amx_available();
    printf("test_packed: ISA %s; VNNI path %s; AVX2 path %s; AMX path %s\n", kern_isa_get()->name,
           g_have_vnni ? "yes" : "no", g_have_avx2 ? "yes" : "no",
           g_have_amx ? "yes (tested)" : "no (the tile algorithm is tested on emulated tiles)");
    if (amx_only && !g_have_amx) {
        printf("SKIP: no AMX here (CPUID AMX-TILE/INT8/BF16 + OS permission + avx512 path): the real tile path "
               "cannot run; its algorithm is tested by test_kernels_packed on emulated tiles\n");
        return KTEST_SKIP;
    }
    krng r = {ktest_seed};
    static const int k_m[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33, 67};
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_types); ti++) {
        const enum dtype t = k_types[ti].t;
        if (only && strcasecmp(only, dtype_get(t)->name) != 0) continue;
        ktest_worst_err = 0.0;
        if (!amx_only) test_unpack(&r, t);
        const int blk = dtype_get(t)->blck_size;
        for (int nth = 1; nth <= 2; nth++) {
            struct pool *pool = pool_init(nth, NULL);
            for (size_t mi = 0; mi < NM_ARRAY_LEN(k_m); mi++) {
                const int m = k_m[mi];
                const int64_t k = blk == 1 ? (mi % 3 == 0 ? 37 : mi % 3 == 1 ? 96 : 330)
                                           : (int64_t)blk * (blk == 32 ? 1 + krng_int(&r, 40) : 1 + krng_int(&r, 3));
                const int64_t n = 1 + krng_int(&r, 70);
                test_matmul(&r, pool, t, k_types[ti].tol, k, n, m, m <= 33, amx_only);
                if (ktest_failures > 20) goto done;
            }
            for (int kind = 0; kind < 3 && !amx_only; kind++) {
                test_chunked(&r, pool, t, k_types[ti].tol, false, kind, true);
                test_chunked(&r, pool, t, k_types[ti].tol, false, kind, false);
            }
            if (!amx_only) { /* with a weight of another type of the same block length: run apart */
                const enum dtype other = blk == 1    ? (t == DTYPE_F16 ? DTYPE_BF16 : DTYPE_F16)
                                         : blk == 32 ? (t == DTYPE_Q8_0 ? DTYPE_Q4_0 : DTYPE_Q8_0)
                                                     : (t == DTYPE_Q4_K ? DTYPE_Q6_K : DTYPE_Q4_K);
                static const int k_mm[] = {1, 5, 16, 40};
                for (size_t mi = 0; mi < NM_ARRAY_LEN(k_mm); mi++) {
                    const int64_t kk = blk == 1    ? 1 + krng_int(&r, 200)
                                       : blk == 32 ? 32 * (1 + krng_int(&r, 40))
                                                   : 256 * (1 + krng_int(&r, 3));
                    test_multi(&r, pool, t, other, kk, k_mm[mi]);
                }
            }
            { /* K of several tile-kernel slabs (64 blocks each), m of several tiles */
                const int64_t kb = blk == 1    ? 32 * (130 + krng_int(&r, 100)) + krng_int(&r, 32)
                                   : blk == 32 ? 32 * (130 + krng_int(&r, 100))
                                               : 256 * (17 + krng_int(&r, 8));
                test_matmul(&r, pool, t, k_types[ti].tol, kb, 1 + krng_int(&r, 40), 17 + krng_int(&r, 30), true, amx_only);
                if (!amx_only && blk > 1) test_chunked(&r, pool, t, k_types[ti].tol, true, -1, false);
            }
            if (blk > 1 && nth == 1) { /* quantized types on the bf16 tiles: short K, and K of slabs */
                const int mb = kern_matmul_bf16_min_m(t) + krng_int(&r, 40);
                test_bf16_tiles(&r, t, (int64_t)blk * (blk == 32 ? 1 + krng_int(&r, 40) : 1 + krng_int(&r, 3)),
                                1 + krng_int(&r, 40), mb);
                test_bf16_tiles(&r, t, blk == 32 ? 32 * (130 + krng_int(&r, 60)) : 256 * (17 + krng_int(&r, 6)),
                                1 + krng_int(&r, 40), mb);
            }
            pool_free(pool);
        }
        printf("  %-5s worst normalized error %.2e (tolerance %.0e; bf16 tiles %.0e)\n", dtype_get(t)->name,
               ktest_worst_err, k_types[ti].tol, TOL_BF16_TILES);
    }
    /* the block decoder types (ROWS layout, GGUF blocks) on the bf16 tiles: short K and K of slabs */
#define BLOCK_T(U, l) DTYPE_##U,
    static const enum dtype k_blocks[] = {BLOCK_TYPES(BLOCK_T)};
#undef BLOCK_T
    for (size_t bi = 0; bi < NM_ARRAY_LEN(k_blocks) && !amx_only; bi++) {
        const enum dtype t = k_blocks[bi];
        if (only && strcasecmp(only, dtype_get(t)->name) != 0) continue;
        ktest_worst_err = 0.0;
        const int64_t blk = dtype_get(t)->blck_size;
        const int mb = kern_matmul_bf16_min_m(t) + krng_int(&r, 40);
        test_bf16_tiles(&r, t, blk * (1 + krng_int(&r, blk == 32 ? 40 : 3)), 1 + krng_int(&r, 40), mb);
        test_bf16_tiles(&r, t, blk == 32 ? 32 * (130 + krng_int(&r, 60)) : 256 * (17 + krng_int(&r, 6)),
                        1 + krng_int(&r, 40), mb);
        printf("  %-7s (rows, bf16 tiles) worst normalized error %.2e (bf16 tiles %.0e)\n", dtype_get(t)->name,
               ktest_worst_err, TOL_BF16_TILES);
    }
done:
    return ktest_finish("test_packed");
}
