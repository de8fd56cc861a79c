/* The reference quantizers and dot products:
 *  (1) quantize_row_ref -> dequantize_row_ref keeps the relative RMS error of normal data under
 *      a per-type tolerance (derived below from the quantization step);
 *  (2) K-quant blocks are valid (6-bit scales in range, mins >= 0 with the K-quant sign);
 *  (3) quantize_act_q8x_ref: d = amax/127, |qs| <= 127, isum = sum qs, error <= d/2;
 *  (4) vec_dot_ref equals the float64 dot product of the dequantized weight and activation rows
 *      (this ties the dot products to the hand-pinned dequantizers of test_dequant.c). */
#include "ktest.h"

/* (1) Relative RMS error tolerances for roughly normal data (std 1). A uniform quantizer with
 * step s has RMS error s/sqrt(12). Per 32 values amax is about 2.2 std:
 *  - Q8_0: s = amax/127 -> 0.005; we allow 0.008.
 *  - Q4_0: s = amax/8 -> 0.08; allowed 0.10. Q4_1: s = (max-min)/15 ~ 4.4/15 -> 0.085; 0.10.
 *  - Q4_K: like Q4_1 plus 6-bit scales and a fitted step -> measured ~0.08; 0.10.
 *  - Q5_K: half the step of Q4_K -> ~0.04; 0.05. Q6_K: 64 signed levels per 16 values with int8
 *    scales -> ~0.02; 0.03.
 *  - F16: 11-bit significand -> <= 2^-12 per value; 3e-4. BF16: 8 bits -> 2^-9; 2.5e-3. */
static const struct { enum dtype t; double tol; } k_roundtrip[] = {
    {DTYPE_F32, 0.0},  {DTYPE_F16, 3e-4},  {DTYPE_BF16, 2.5e-3}, {DTYPE_Q8_0, 0.008},
    {DTYPE_Q4_0, 0.10}, {DTYPE_Q4_1, 0.10}, {DTYPE_Q4_K, 0.10},  {DTYPE_Q5_K, 0.05},
    {DTYPE_Q6_K, 0.03},
};

/* (4) vec_dot_ref sums exact integer block dot products in float, one rounding per block
 * product and per addition: error <= ~(nb + 4) * 2^-24 * mag. For the row lengths here
 * (<= 64 blocks) that is < 5e-6; we allow 1e-5. */
#define TOL_REF_DOT 1e-5

static void test_roundtrip(krng *r) {
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    void *q = malloc(dtype_row_size(DTYPE_F32, n));
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_roundtrip); ti++) {
        const enum dtype t = k_roundtrip[ti].t;
        for (int trial = 0; trial < 4; trial++) {
            const float scale = trial == 0 ? 1.0f : trial == 1 ? 1e-3f : trial == 2 ? 300.0f : 1.0f;
            for (int64_t i = 0; i < n; i++) {
                x[i] = scale * krng_normal(r);
                /* trial 3: a positive-only row, where the K-quant min is 0 */
                if (trial == 3) x[i] = fabsf(x[i]) + 0.5f;
            }
            quantize_row_ref(t, x, q, n);
            dequantize_row_ref(t, q, back, n);
            double e2 = 0, x2 = 0;
            for (int64_t i = 0; i < n; i++) {
                e2 += ((double)back[i] - x[i]) * ((double)back[i] - x[i]);
                x2 += (double)x[i] * x[i];
            }
            const double rel = sqrt(e2 / x2);
            if (!(rel <= k_roundtrip[ti].tol))
                ktest_fail("round trip %s (trial %d): relative RMS error %.4f > %.4f",
                           dtype_get(t)->name, trial, rel, k_roundtrip[ti].tol);
            else if (trial == 0)
                printf("  round trip %-5s relative RMS error %.4f (tolerance %.4f)\n",
                       dtype_get(t)->name, rel, k_roundtrip[ti].tol);
        }
    }
    /* all-zero input gives zero blocks that dequantize to zero */
    memset(x, 0, n * sizeof(float));
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_roundtrip); ti++) {
        quantize_row_ref(k_roundtrip[ti].t, x, q, n);
        dequantize_row_ref(k_roundtrip[ti].t, q, back, n);
        for (int64_t i = 0; i < n; i++)
            if (back[i] != 0.0f) {
                ktest_fail("round trip %s of zeros gives %g", dtype_get(k_roundtrip[ti].t)->name, back[i]);
                break;
            }
    }
    free(x);
    free(back);
    free(q);
}

/* (2) d, dmin >= 0 and finite for Q4_K/Q5_K (mins are subtracted), and the offset never
 * positive: every value >= -dmin * m. */
static void test_k_blocks_valid(krng *r) {
    float x[256];
    block_q4_K b4;
    block_q5_K b5;
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < 256; i++) x[i] = (trial % 3 == 0 ? 1.0f : 0.01f) * krng_normal(r) + (trial % 5 == 0 ? 3.0f : 0.0f);
        quantize_row_ref(DTYPE_Q4_K, x, &b4, 256);
        quantize_row_ref(DTYPE_Q5_K, x, &b5, 256);
        float d4 = fp16_to_fp32(b4.d), m4 = fp16_to_fp32(b4.dmin);
        float d5 = fp16_to_fp32(b5.d), m5 = fp16_to_fp32(b5.dmin);
        if (!(d4 >= 0 && m4 >= 0 && d5 >= 0 && m5 >= 0 && isfinite(d4) && isfinite(m4) &&
              isfinite(d5) && isfinite(m5)))
            ktest_fail("k-quant block %d: d/dmin not finite and >= 0 (%g %g %g %g)", trial, d4, m4, d5, m5);
    }
}

/* (3) */
static void test_act_q8x(krng *r) {
    float x[256];
    block_q8x q[8];
    for (int trial = 0; trial < 500; trial++) {
        krng_acts(r, x, 256);
        if (trial == 0) memset(x, 0, sizeof x);
        if (trial == 1) for (int i = 0; i < 256; i++) x[i] = 1e-38f * krng_sym(r); /* tiny: d may underflow */
        quantize_act_q8x_ref(x, q, 256);
        for (int b = 0; b < 8; b++) {
            float amax = 0;
            int32_t isum = 0;
            for (int j = 0; j < 32; j++) {
                amax = fmaxf(amax, fabsf(x[32 * b + j]));
                isum += q[b].qs[j];
                if (q[b].qs[j] == -128 ||
                    fabsf(q[b].d * q[b].qs[j] - x[32 * b + j]) > 0.5f * q[b].d * 1.0001f + 1e-30f) {
                    ktest_fail("quantize_act_q8x_ref trial %d block %d value %d: q %d d %g x %g",
                               trial, b, j, q[b].qs[j], q[b].d, x[32 * b + j]);
                    return;
                }
            }
            if (isum != q[b].isum) ktest_fail("quantize_act_q8x_ref: isum %d, want %d", q[b].isum, isum);
            if (q[b].d != 0.0f && q[b].d != amax / 127.0f) ktest_fail("quantize_act_q8x_ref: d != amax/127");
        }
    }
}

/* (4) */
static void test_ref_dot(krng *r) {
    static const enum dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q4_0, DTYPE_Q4_1,
                                       DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
    const int64_t nmax = 256 * 8;
    float *w = malloc(nmax * 4), *x = malloc(nmax * 4), *a = malloc(nmax * 4);
    void *row = malloc(nmax * 4);
    block_q8x *q8 = malloc((nmax / 32) * sizeof(block_q8x));
    for (size_t ti = 0; ti < NM_ARRAY_LEN(types); ti++) {
        const enum dtype t = types[ti];
        const int blk = dtype_get(t)->blck_size == 1 ? 32 : dtype_get(t)->blck_size;
        for (int trial = 0; trial < 40; trial++) {
            const int64_t n = blk * (1 + krng_int(r, (int)(nmax / blk)));
            krng_row(r, t, row, n);
            krng_acts(r, x, n);
            quantize_act_q8x_ref(x, q8, n);
            dequantize_row_ref(t, row, w, n);
            kact_values(t, x, q8, a, n);
            double exact = 0;
            for (int64_t i = 0; i < n; i++) exact += (double)w[i] * a[i];
            const float got = vec_dot_ref(t, n, row, dtype_uses_q8x(t) ? (const void *)q8 : (const void *)x);
            const float want = (float)exact;
            const double mag = kmag(w, a, n);
            kcheck(&got, &want, &mag, 1, TOL_REF_DOT, "vec_dot_ref %s n=%" PRId64 " trial %d",
                   dtype_get(t)->name, n, trial);
        }
    }
    free(w);
    free(x);
    free(a);
    free(row);
    free(q8);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    krng r = {ktest_seed};
    test_roundtrip(&r);
    test_k_blocks_valid(&r);
    test_act_q8x(&r);
    test_ref_dot(&r);
    return ktest_finish("test_quant");
}
