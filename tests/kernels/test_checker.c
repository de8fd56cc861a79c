/* Self-test of the test machinery: the normalized-error checker must fail on one corrupted
 * output, on NaN and on inf, and pass on exact copies; the guard check must see one
 * overwritten sentinel; and a real fast-kernel result with one output nudged past the
 * tolerance must be caught. A checker that cannot fail proves nothing. */
#include "cpu.h"
#include "ktest.h"

static int expect_failures(int before, int want, const char *what) {
    const int got = ktest_failures - before;
    ktest_failures = before; /* the expected failures are not failures of this test */
    if (got != want) {
        ktest_fail("checker self-test '%s': %d failure(s) reported, want %d", what, got, want);
        return 1;
    }
    printf("  checker self-test '%s': reported as expected\n", what);
    return 0;
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    krng r = {ktest_seed};
    enum { N = 257 };
    float want[N], got[N];
    double mag[N];
    for (int i = 0; i < N; i++) {
        want[i] = krng_normal(&r);
        got[i] = want[i];
        mag[i] = fabs(want[i]) + 1.0;
    }
    int base = ktest_failures;
    if (kcheck(got, want, mag, N, 1e-6, "exact copy") != 0) ktest_fail("checker fails an exact copy");
    expect_failures(base, 0, "exact copy passes");

    fprintf(stderr, "(the FAIL lines below are expected: the checker's self-test)\n");
    got[123] = want[123] + (float)(1e-4 * mag[123]); /* normalized error 1e-4 > 1e-6 */
    base = ktest_failures;
    if (kcheck(got, want, mag, N, 1e-6, "one corrupted output") != 1) ktest_fail("checker count");
    expect_failures(base, 1, "one corrupted output");
    got[123] = want[123];

    got[0] = NAN;
    base = ktest_failures;
    kcheck(got, want, mag, N, 1.0, "NaN output (huge tolerance)");
    expect_failures(base, 1, "NaN output");
    got[0] = INFINITY;
    base = ktest_failures;
    kcheck(got, want, mag, N, 1.0, "inf output (huge tolerance)");
    expect_failures(base, 1, "inf output");
    got[0] = want[0];

    float buf[16];
    kguard_fill(buf, 16);
    if (kguard_count_bad(buf, 16) != 0) ktest_fail("guard check sees damage in a fresh buffer");
    buf[9] = 0.0f;
    if (kguard_count_bad(buf, 16) != 1) ktest_fail("guard check misses one overwritten value");
    else printf("  checker self-test 'one overwritten guard': reported as expected\n");

    /* A real kernel result, then one output corrupted just past the q4_0 tolerance. */
    const struct kern_isa *isa = kern_isa_get();
    enum { K = 512, R = 8 };
    static uint8_t w[R * (K / 32) * 18];
    static float x[K], wf[K], af[K];
    static block_q8x q8[K / 32];
    for (int i = 0; i < R; i++) krng_row(&r, DTYPE_Q4_0, w + i * (K / 32) * 18, K);
    krng_acts(&r, x, K);
    quantize_act_q8x_ref(x, q8, K);
    float y[R], yref[R];
    double m[R];
    isa->gemm[DTYPE_Q4_0](K, w, (K / 32) * 18, R, q8, sizeof q8, 1, y, R);
    kact_values(DTYPE_Q4_0, x, q8, af, K);
    for (int i = 0; i < R; i++) {
        yref[i] = vec_dot_ref(DTYPE_Q4_0, K, w + i * (K / 32) * 18, q8);
        dequantize_row_ref(DTYPE_Q4_0, w + i * (K / 32) * 18, wf, K);
        m[i] = kmag(wf, af, K);
    }
    if (kcheck(y, yref, m, R, 4e-5, "%s q4_0 gemm, untouched", isa->name) != 0)
        ktest_fail("the untouched kernel result fails the checker");
    y[5] = (float)(yref[5] + 2 * 4e-5 * m[5]);
    base = ktest_failures;
    kcheck(y, yref, m, R, 4e-5, "%s q4_0 gemm with output 5 corrupted", isa->name);
    expect_failures(base, 1, "corrupted kernel output");
    return ktest_finish("test_checker");
}
