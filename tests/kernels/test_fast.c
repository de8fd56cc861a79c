/* Every slot of the avx512 and avx2 kernel tables (each that this CPU can run) against its _ref
 * twin on random data (the avx2 table's own slots: quantize_act_q8x and the block decoder types'
 * vec_dot/gemm; its other slots are the ref ones):
 *  - quantize_act_q8x: bit-identical to quantize_act_q8x_ref (same float operations); to_bf16
 *    bit-identical to fp32_to_bf16_row_ref; swiglu and argmax (below);
 *  - vec_dot[t] and gemm[t] for every supported type, on rows of random bytes (all code
 *    patterns; see krng_row) and on rows quantized from normal data, with many random K
 *    (multiples of the block size: 1 block, odd counts, group tails) and, for gemm, nr/nc with
 *    odd tails around the register tiles; outputs checked for NaN/inf, for a normalized error
 *    under a per-type tolerance, and for writes outside y (guard values);
 *  - batch invariance, bit for bit: every (weight row, activation row) output of a gemm call
 *    equals vec_dot of that pair, gemm with nc = 1, and gemm over the rows from that one on (a
 *    different position in the register tiles), so a server's answer does not depend on what
 *    else is in its batch.
 * A type listed here whose decoder is not in this build (dtype_get NULL) is skipped by name.
 * Skips (exit 77) when the CPU can run neither path.
 *
 * Options: --seed N, --type NAME (only that type), --iters N (trials per type). */
#include "cpu.h"
#include "ktest.h"
#include "ops.h"

/* Tolerances on |fast - ref| / sum|w_k a_k| (see ktest.h). Both sides compute the same exact
 * integer dot product of each block (float types: the same exact f32 products; fp16/bf16
 * widening is exact), so they differ only in how the float terms are rounded and summed:
 *  - ref adds one term per block in sequence: error <= nb * 2^-24 * mag (nb blocks);
 *  - fast sums 16 lanes in a tree (smaller error) and adds the offset of the unsigned codes
 *    (Q4_0: -8 d_w d_a isum, Q4_1: m d_a isum, K-quant mins) as separate float terms, each at
 *    most ~8x a block's share of mag.
 * The longest rows here have 512 blocks: (512 + 8 * 16) * 6e-8 = 4e-5 in the worst case;
 * observed errors are ~1e-6 or less (printed per type). Q8_0's offset is -128 d_w d_a isum, up
 * to 128/|q| times a block's terms when the weights of a block are small; 2e-4 bounds that. A
 * wrong scale, nibble or lane costs errors of 1e-2 and more. Float types: ref adds n (up to
 * 8192) terms in sequence; those roundings are random, ~sqrt(n) * 2^-24 * mag = 5.4e-6, so 2e-5
 * is about 4 sigma of that (observed: 3e-7). */
#define TOL_FLOAT 2e-5  /* f32/f16/bf16 */
#define TOL_Q4 4e-5     /* q4_0, q4_1, k-quants, iq2_*, iq3_* */
#define TOL_Q8_0 2e-4   /* q8_0 */
/* The block-interface types (dot_blk.h). IQ2/IQ3 put their signs on the activations and have no
 * offset term: each float term is one 4-product lane of one half, as for the k-quants (TOL_Q4).
 * The others add one offset term per half as d_a * (sum of the half's codes) * off: IQ4_NL and
 * IQ4_XS code their values + 128 (off = -128 scale, Q8_0's case: up to 128 / |value| times the
 * half's share of mag, 2e-4 as for Q8_0); Q5_0 (-16 d), Q5_1 (m), Q2_K (-dmin * min), Q3_K
 * (-4 scale), IQ1_S/IQ1_M (-9/8 scale) have offsets of at most 16 code steps or a min of the
 * same size as the values, within the same bound. Observed on an emulation of the kernels
 * (SIMDe, development only): <= 1e-7. */
#define TOL_OFF 2e-4

static const struct { enum dtype t; double tol; } k_types[] = {
    {DTYPE_Q4_0, TOL_Q4}, {DTYPE_Q8_0, TOL_Q8_0}, {DTYPE_Q4_K, TOL_Q4}, {DTYPE_Q6_K, TOL_Q4},
    {DTYPE_F16, TOL_FLOAT}, {DTYPE_BF16, TOL_FLOAT}, {DTYPE_F32, TOL_FLOAT},
    {DTYPE_Q4_1, TOL_Q4}, {DTYPE_Q5_K, TOL_Q4},
    {DTYPE_Q5_0, TOL_OFF}, {DTYPE_Q5_1, TOL_OFF}, {DTYPE_Q2_K, TOL_OFF}, {DTYPE_Q3_K, TOL_OFF},
    {DTYPE_IQ4_NL, TOL_OFF}, {DTYPE_IQ4_XS, TOL_OFF}, {DTYPE_IQ2_XXS, TOL_Q4},
    {DTYPE_IQ2_XS, TOL_Q4}, {DTYPE_IQ2_S, TOL_Q4}, {DTYPE_IQ3_XXS, TOL_Q4}, {DTYPE_IQ3_S, TOL_Q4},
    {DTYPE_IQ1_S, TOL_OFF}, {DTYPE_IQ1_M, TOL_OFF},
};

static int g_iters = 60;
static const char *g_only = NULL;

static void test_quantize_act(krng *r, const struct kern_isa *fast) {
    for (int trial = 0; trial < 200; trial++) {
        const int64_t n = 32 * (1 + krng_int(r, 200));
        float *x = malloc(n * 4);
        block_q8x *a = malloc((n / 32) * sizeof(block_q8x)), *b = malloc((n / 32) * sizeof(block_q8x));
        krng_acts(r, x, n);
        if (trial == 1) for (int64_t i = 0; i < n; i++) x[i] = 1e-39f * krng_sym(r); /* subnormal */
        if (trial == 2) for (int64_t i = 0; i < n; i++) x[i] = 3e38f * krng_sym(r);  /* huge */
        if (trial == 3) for (int64_t i = 0; i < n; i++) x[i] = (float)(krng_int(r, 255) - 127) * 0.5f; /* ties */
        quantize_act_q8x_ref(x, a, n);
        fast->quantize_act_q8x(x, b, n);
        for (int64_t i = 0; i < n / 32; i++) {
            if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
                ktest_fail("quantize_act_q8x trial %d n=%" PRId64 " block %" PRId64
                           ": not bit-identical to ref (d %g vs %g, isum %d vs %d)",
                           trial, n, i, a[i].d, b[i].d, a[i].isum, b[i].isum);
                break;
            }
        }
        free(x);
        free(a);
        free(b);
    }
}

/* Batch invariance: y (from one gemm call over nr x nc) against vec_dot of each pair, gemm with
 * nc = 1 per activation row, and gemm over rows 1.. (when nr > 1: every row moves to another
 * place in the register tiles) for all nc rows; every output must have the same bits. */
static void check_invariance(const struct kern_isa *fast, enum dtype t, int64_t n, const uint8_t *w,
                             size_t row_bytes, int nr, const uint8_t *act, size_t act_bytes, int nc,
                             const float *y, int64_t ldy, int trial) {
    float *y1 = malloc((size_t)nr * sizeof(float)), *y2 = malloc((size_t)nr * nc * sizeof(float));
    const int r0 = nr > 1 ? 1 : 0;
    int bad = 0, first_r = -1, first_c = -1;
    const char *first_what = "";
    float first_got = 0.0f, first_want = 0.0f;
    if (r0 < nr) fast->gemm[t](n, w + row_bytes * r0, row_bytes, nr - r0, act, act_bytes, nc, y2, nr - r0);
    for (int c = 0; c < nc; c++) {
        fast->gemm[t](n, w, row_bytes, nr, act + act_bytes * c, act_bytes, 1, y1, nr);
        for (int i = 0; i < nr; i++) {
            const float want = y[c * ldy + i];
            const float vd = fast->vec_dot[t](n, w + row_bytes * i, act + act_bytes * c);
            const float alt[3] = {vd, y1[i], i >= r0 ? y2[(size_t)c * (nr - r0) + (i - r0)] : want};
            static const char *const names[3] = {"vec_dot", "gemm nc=1", "gemm from row r0"};
            for (int k = 0; k < 3; k++) {
                if (memcmp(&alt[k], &want, sizeof want) == 0) continue;
                if (bad++ == 0) {
                    first_r = i, first_c = c, first_what = names[k];
                    first_got = alt[k], first_want = want;
                }
            }
        }
    }
    if (bad)
        ktest_fail("batch invariance %s n=%" PRId64 " nr=%d nc=%d trial %d: %d outputs differ from the "
                   "nr x nc call; first: row %d act %d, %s gives %.9g, the call %.9g (r0=%d)",
                   dtype_get(t)->name, n, nr, nc, trial, bad, first_r, first_c, first_what,
                   (double)first_got, (double)first_want, r0);
    free(y1);
    free(y2);
}

/* One gemm/vec_dot case: nr weight rows of length n, nc activation rows. */
static void test_case(krng *r, const struct kern_isa *fast, enum dtype t, double tol, int64_t n,
                      int nr, int nc, int quantized_rows, int trial) {
    const size_t row_bytes = dtype_row_size(t, n);
    const int q8 = dtype_uses_q8x(t);
    const size_t act_bytes = q8 ? (size_t)(n / 32) * sizeof(block_q8x) : (size_t)n * 4;
    uint8_t *w = malloc(row_bytes * nr);
    float *x = malloc((size_t)n * nc * 4), *wf = malloc((size_t)n * 4), *af = malloc((size_t)n * 4);
    uint8_t *act = malloc(act_bytes * nc);
    if (quantized_rows) {
        for (int i = 0; i < nr; i++) {
            for (int64_t j = 0; j < n; j++) wf[j] = krng_normal(r);
            quantize_row_ref(t, wf, w + row_bytes * i, n);
        }
    } else {
        for (int i = 0; i < nr; i++) krng_row(r, t, w + row_bytes * i, n);
    }
    for (int c = 0; c < nc; c++) {
        krng_acts(r, x + (size_t)c * n, n);
        if (q8)
            quantize_act_q8x_ref(x + (size_t)c * n, (block_q8x *)(act + act_bytes * c), n);
        else
            memcpy(act + act_bytes * c, x + (size_t)c * n, (size_t)n * 4);
    }
    /* y with guard columns (ldy > nr) and guard rows before and after */
    const int64_t ldy = nr + 3, guard = 19;
    const int64_t ytot = nc * ldy + 2 * guard;
    float *ybuf = malloc(ytot * 4), *want = malloc((size_t)nr * nc * 4), *got = malloc((size_t)nr * nc * 4);
    double *mag = malloc((size_t)nr * nc * sizeof(double));
    kguard_fill(ybuf, ytot);
    float *y = ybuf + guard;
    fast->gemm[t](n, w, row_bytes, nr, act, act_bytes, nc, y, ldy);
    for (int c = 0; c < nc; c++) {
        kact_values(t, x + (size_t)c * n, (const block_q8x *)(act + act_bytes * c), af, n);
        for (int i = 0; i < nr; i++) {
            dequantize_row_ref(t, w + row_bytes * i, wf, n);
            want[c * nr + i] = vec_dot_ref(t, n, w + row_bytes * i, act + act_bytes * c);
            got[c * nr + i] = y[c * ldy + i];
            mag[c * nr + i] = kmag(wf, af, n);
        }
    }
    kcheck(got, want, mag, (int64_t)nr * nc, tol,
           "gemm %s n=%" PRId64 " nr=%d nc=%d %s rows trial %d", dtype_get(t)->name, n, nr, nc,
           quantized_rows ? "quantized" : "random-byte", trial);
    int64_t bad = kguard_count_bad(ybuf, guard) + kguard_count_bad(y + nc * ldy, guard);
    for (int c = 0; c < nc; c++) bad += kguard_count_bad(y + c * ldy + nr, ldy - nr);
    if (bad)
        ktest_fail("gemm %s n=%" PRId64 " nr=%d nc=%d trial %d: %" PRId64 " guard values overwritten",
                   dtype_get(t)->name, n, nr, nc, trial, bad);
    /* vec_dot on the first row / activation */
    const float vd = fast->vec_dot[t](n, w, act);
    kcheck(&vd, &want[0], &mag[0], 1, tol, "vec_dot %s n=%" PRId64 " trial %d", dtype_get(t)->name, n, trial);
    check_invariance(fast, t, n, w, row_bytes, nr, act, act_bytes, nc, y, ldy, trial);
    free(w);
    free(x);
    free(wf);
    free(af);
    free(act);
    free(ybuf);
    free(want);
    free(got);
    free(mag);
}

static void test_type(krng *r, const struct kern_isa *fast, enum dtype t, double tol) {
    const int blk = dtype_get(t)->blck_size;
    /* K in blocks of the type (float types: any length, stepping through the 16-lane tails) */
    static const int kblocks_small[] = {1, 2, 3, 5, 15, 16, 17, 31, 33, 47};
    static const int kblocks_k[] = {1, 2, 3, 5, 7, 9, 16};
    for (int trial = 0; trial < g_iters; trial++) {
        int64_t n;
        if (blk == 1)
            n = trial < 40 ? 1 + trial : 16 * krng_int(r, 300) + krng_int(r, 16) + 1;
        else if (blk == 32)
            n = 32 * (trial < (int)NM_ARRAY_LEN(kblocks_small) ? kblocks_small[trial] : 1 + krng_int(r, 160));
        else
            n = 256 * (trial < (int)NM_ARRAY_LEN(kblocks_k) ? kblocks_k[trial] : 1 + krng_int(r, 20));
        if (trial == g_iters - 1) n = blk == 1 ? 8192 : blk * (8192 / blk) * 2; /* one long row */
        /* the long row also gets many weight rows, so the gemm driver crosses its weight cache
         * blocks (192 KiB) with register tiles and a remainder row */
        const int nr = trial == g_iters - 1 ? 37 : 1 + krng_int(r, 13);
        const int nc = trial % 5 == 0 ? 1 : 1 + krng_int(r, 9);
        test_case(r, fast, t, tol, n, nr, nc, trial & 1, trial);
        if (ktest_failures > 20) return;
    }
}

/* swiglu: the fast twin against op_swiglu_ref on every length 1..80 (16-lane tails) and long
 * rows, gates from normal(0, 1) to +-120 (exp(-g) overflows expf above 88: ref gives -0, the
 * fast one a finite ~1e-37), out == gate in place as the forward pass calls it; guard values
 * after n. Tolerance TOL_SWIGLU relative to |ref| + 1e-20 (below that an output is 0 for any
 * use): the polynomial exp is within 2e-7 of expf, then one division and one multiply. */
#define TOL_SWIGLU 1e-6
static void test_swiglu(krng *r, const struct kern_isa *fast) {
    double worst = 0.0;
    for (int trial = 0; trial < 120; trial++) {
        const int64_t n = trial < 80 ? 1 + trial : 1 + krng_int(r, 20000);
        const float spread = trial % 4 == 0 ? 120.0f : trial % 4 == 1 ? 10.0f : 1.0f;
        float *g = malloc((size_t)(n + 16) * 4), *u = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            g[i] = spread * krng_normal(r);
            u[i] = krng_normal(r);
        }
        kguard_fill(g + n, 16);
        op_swiglu_ref(want, g, u, n);
        fast->swiglu(g, g, u, n); /* in place */
        if (kguard_count_bad(g + n, 16)) ktest_fail("swiglu n=%" PRId64 ": guard values overwritten", n);
        for (int64_t i = 0; i < n; i++) {
            const double err = isfinite(g[i]) ? fabs((double)g[i] - want[i]) / (fabs((double)want[i]) + 1e-20) : INFINITY;
            if (err > worst) worst = err;
            if (!(err <= TOL_SWIGLU)) {
                ktest_fail("swiglu n=%" PRId64 " [%" PRId64 "]: %.9g, want %.9g (relative error %.2e)", n, i, g[i],
                           want[i], err);
                break;
            }
        }
        free(g);
        free(u);
        free(want);
        if (ktest_failures > 10) break;
    }
    printf("  swiglu: worst relative error %.2e (tolerance %.0e)\n", worst, TOL_SWIGLU);
}

/* argmax: the fast twin against op_argmax_ref, the same index, on every length 1..100 and long
 * rows up to a 152k vocabulary: normal values; the maximum repeated at random places (the lowest
 * index wins); rows of zeros of both signs; all -inf; +inf; a NaN at a random place (the scan's
 * order, whatever it makes of it). */
static void test_argmax(krng *r, const struct kern_isa *fast) {
    int cases = 0;
    for (int trial = 0; trial < 400; trial++) {
        const int64_t n = trial < 100 ? 1 + trial : 1 + krng_int(r, trial % 10 == 0 ? 152064 : 5000);
        float *x = malloc((size_t)n * sizeof *x);
        const int kind = trial % 6;
        for (int64_t i = 0; i < n; i++) {
            switch (kind) {
            case 2: x[i] = krng_int(r, 2) ? 0.0f : -0.0f; break;
            case 3: x[i] = -INFINITY; break;
            default: x[i] = 8.0f * krng_normal(r); break;
            }
        }
        if (kind == 1) { /* the maximum, several times */
            const float top = 100.0f;
            for (int k = 0; k < 3; k++) x[krng_int(r, (int)n)] = top;
        }
        if (kind == 4) x[krng_int(r, (int)n)] = INFINITY;
        if (kind == 5) x[krng_int(r, (int)n)] = NAN;
        const int64_t want = op_argmax_ref(x, n), got = fast->argmax(x, n);
        if (got != want) ktest_fail("argmax n=%" PRId64 " kind %d: %" PRId64 ", want %" PRId64, n, kind, got, want);
        cases++;
        free(x);
        if (ktest_failures > 10) break;
    }
    printf("  argmax: %d rows, the reference's index on each\n", cases);
}

/* to_bf16: the fast twin against fp32_to_bf16_row_ref, the same bits, on every length 1..40
 * (16-lane tails) and long rows: random bit patterns (every exponent, NaNs with any payload,
 * infinities, subnormals), values just around the rounding ties (low 16 bits 0x7FFF, 0x8000,
 * 0x8001, with even and odd kept bits), and normal data; guard values after n. */
static void test_to_bf16(krng *r, const struct kern_isa *fast) {
    int cases = 0;
    for (int trial = 0; trial < 160; trial++) {
        const int64_t n = trial < 40 ? 1 + trial : 1 + krng_int(r, 9000);
        float *x = malloc((size_t)n * sizeof *x);
        uint16_t *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)(n + 16) * sizeof *got);
        static const uint32_t low[] = {0x7FFF, 0x8000, 0x8001, 0x0000, 0xFFFF};
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            switch (trial % 3) {
            case 0: u = (uint32_t)krng_u64(r); break;
            case 1: u = ((uint32_t)krng_u64(r) & 0xFFFF0000u) | low[krng_int(r, 5)]; break;
            default: {
                const float f = 4.0f * krng_normal(r);
                memcpy(&u, &f, 4);
            }
            }
            memcpy(&x[i], &u, 4);
        }
        for (int i = 0; i < 16; i++) got[n + i] = 0xA5A5;
        fp32_to_bf16_row_ref(x, want, n);
        fast->to_bf16(x, got, n);
        for (int i = 0; i < 16; i++)
            if (got[n + i] != 0xA5A5) {
                ktest_fail("to_bf16 n=%" PRId64 ": a value written past n", n);
                break;
            }
        for (int64_t i = 0; i < n; i++)
            if (got[i] != want[i]) {
                uint32_t u;
                memcpy(&u, &x[i], 4);
                ktest_fail("to_bf16 n=%" PRId64 " [%" PRId64 "]: 0x%08x -> 0x%04x, want 0x%04x", n, i, u, got[i], want[i]);
                break;
            }
        cases++;
        free(x);
        free(want);
        free(got);
        if (ktest_failures > 10) break;
    }
    printf("  to_bf16: %d rows, the reference's bits on each\n", cases);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    bool iq_gather = false;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--type") == 0) g_only = argv[i + 1];
        if (i + 1 < argc && strcmp(argv[i], "--iters") == 0) g_iters = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--iq-gather") == 0) iq_gather = true;
    }
    if (iq_gather) {
        /* the IQ types' gather kernels (dot_iq.c), which a CPU with AVX512_VBMI replaces */
        if (!cpu_features_get()->avx512vbmi || cpu_avx512_missing(cpu_features_get())) {
            printf("test_fast: SKIP: --iq-gather: no AVX512_VBMI here, so the main run tests the gathers\n");
            return KTEST_SKIP;
        }
        setenv("NM_IQ_VBMI", "0", 1);
    }
    static const char *const isas[] = {"avx512", "avx2"};
    int ran = 0;
    for (size_t ii = 0; ii < (iq_gather ? 1 : NM_ARRAY_LEN(isas)); ii++) {
        const char *why = NULL;
        const struct kern_isa *fast = kern_isa_find(isas[ii], &why);
        if (!fast) {
            printf("test_fast: the %s path cannot run here (%s): not tested\n", isas[ii], why);
            continue;
        }
        ran++;
        printf("test_fast: the %s path%s%s\n", isas[ii], fast->note ? ": " : "", fast->note ? fast->note : "");
        krng r = {ktest_seed};
        test_quantize_act(&r, fast);
        test_swiglu(&r, fast);
        test_argmax(&r, fast);
        test_to_bf16(&r, fast);
        for (size_t i = 0; i < NM_ARRAY_LEN(k_types); i++) {
            const struct dtype_info *info = dtype_get(k_types[i].t);
            if (!info) {
                printf("  %-7s SKIP: no decoder for this type in this build\n", dtype_ggml_name(k_types[i].t));
                continue;
            }
            if (g_only && strcasecmp(g_only, info->name) != 0) continue;
            if (iq_gather && strncmp(info->name, "iq", 2) != 0) continue;
            ktest_worst_err = 0.0;
            test_type(&r, fast, k_types[i].t, k_types[i].tol);
            printf("  %-7s vec_dot/gemm: worst normalized error %.2e (tolerance %.0e)\n",
                   dtype_get(k_types[i].t)->name, ktest_worst_err, k_types[i].tol);
        }
    }
    if (!ran) {
        printf("test_fast: SKIP: neither the avx512 nor the avx2 path can run here\n");
        return KTEST_SKIP;
    }
    return ktest_finish("test_fast");
}
