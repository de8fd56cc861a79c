/* The fast attention kernels (every ISA table this CPU runs: avx512, avx2) against
 * op_attention_heads_ref: 1, 4 and 19 query heads per KV head (each with the bits it gets alone),
 * f16 and f32 caches, head sizes with
 * tails (64, 128, 80, 40, 256, K and V sizes that differ), 1 to 1000 positions, strides wider
 * than a head (several KV heads per position), large score ranges (softmax saturation), guard
 * bytes around the output, NaN/inf checks. Tolerance, relative to the output's largest
 * magnitude: 2e-6 (the polynomial exp, < 2e-7, and the f32 sums of V in another order) plus the
 * scores' own rounding, which exp turns into a relative error: a score summed in f32 in another
 * order differs by up to about 8 eps * B, B = scale * max_t sum_i |q_i k_ti|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cpu.h"
#include "ops.h"

#define GUARD 16
#define TOL 2e-6

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

/* nq query heads that share the last KV head of a cache with `heads` KV heads per position: each
 * head against the reference, and the same bits as the head computed alone (n_q = 1). */
static int check(const struct kern_isa *isa, enum dtype t, int64_t hd, int64_t hdv, int64_t n, int64_t heads, int nq,
                 float spread) {
    const int64_t ks = heads * hd, vs = heads * hdv, h = heads - 1; /* read the last head */
    const int64_t ldo = hdv + GUARD;                                 /* guard floats after every head */
    const size_t es = t == DTYPE_F16 ? 2 : 4;
    uint8_t *k = malloc((size_t)(n * ks) * es), *v = malloc((size_t)(n * vs) * es);
    float *q = malloc((size_t)(nq * hd) * 4), *row = malloc((size_t)NM_MAX(ks, vs) * 4);
    float *want = malloc((size_t)(nq * hdv) * 4), *got = malloc((size_t)(GUARD + nq * ldo) * 4);
    float *alone = malloc((size_t)hdv * 4);
    float *s1 = malloc((size_t)n * 4), *s2 = malloc((size_t)(n * nq) * 4);
    for (int64_t i = 0; i < nq * hd; i++) q[i] = frand() * spread;
    for (int64_t p = 0; p < n; p++) {
        for (int64_t i = 0; i < ks; i++) row[i] = frand();
        op_store_kv(k + (size_t)(p * ks) * es, row, ks, t);
        for (int64_t i = 0; i < vs; i++) row[i] = frand() * 3;
        op_store_kv(v + (size_t)(p * vs) * es, row, vs, t);
    }
    const float scale = 1.0f / sqrtf((float)hd);
    const uint8_t *k0 = k + (size_t)(h * hd) * es, *v0 = v + (size_t)(h * hdv) * es;
    op_attention_heads_ref(want, hdv, q, hd, nq, k0, v0, t, n, ks, vs, hd, hdv, scale, s1);
    for (int64_t i = 0; i < GUARD + nq * ldo; i++) got[i] = 12345.0f;
    isa->attn_heads(got + GUARD, ldo, q, hd, nq, k0, v0, t, n, ks, vs, hd, hdv, scale, s2);
    int fail = 0;
    for (int j = 0; j < nq; j++) {
        double bound = 0; /* B above */
        for (int64_t p = 0; p < n; p++) {
            double a = 0;
            for (int64_t i = 0; i < hd; i++) {
                const uint8_t *kp = k + (size_t)(p * ks + h * hd + i) * es;
                const float kv = t == DTYPE_F16 ? fp16_to_fp32(*(const uint16_t *)kp) : *(const float *)kp;
                a += fabs((double)q[j * hd + i] * kv);
            }
            bound = fmax(bound, a * scale);
        }
        const double tol = TOL + 8 * 5.96e-8 * bound;
        const float *g = got + GUARD + j * ldo, *w = want + j * hdv;
        double mag = 0, err = 0;
        int bad = 0;
        for (int64_t i = 0; i < hdv; i++) {
            mag = fmax(mag, fabs(w[i]));
            err = fmax(err, fabs((double)g[i] - w[i]));
            if (!isfinite(g[i])) bad = 1;
        }
        for (int i = 0; i < GUARD; i++)
            if (g[-GUARD + i] != 12345.0f || (j + 1 == nq && g[hdv + i] != 12345.0f)) bad = 2;
        if (!bad && nq > 1) { /* the same bits as alone */
            isa->attn_heads(alone, hdv, q + j * hd, hd, 1, k0, v0, t, n, ks, vs, hd, hdv, scale, s2);
            if (memcmp(alone, g, (size_t)hdv * 4) != 0) bad = 3;
        }
        if (bad || err > tol * mag) {
            fail = 1;
            printf("FAIL %s %s hd=%lld hdv=%lld n=%lld heads=%lld nq=%d (head %d) spread=%g: err %.3e of %.3e (tol %.1e)%s\n"
                   "  repro: ctest -R test_attention --output-on-failure\n",
                   isa->name, t == DTYPE_F16 ? "f16" : "f32", (long long)hd, (long long)hdv, (long long)n,
                   (long long)heads, nq, j, spread, err, mag, tol,
                   bad == 1   ? " (non-finite)"
                   : bad == 2 ? " (guard bytes overwritten)"
                   : bad == 3 ? " (other bits than the head alone)"
                              : "");
        }
    }
    free(k), free(v), free(q), free(row), free(want), free(got), free(alone), free(s1), free(s2);
    return fail;
}

int main(void) {
    static const char *const isas[] = {"avx512", "avx2"};
    const int64_t hds[][2] = {{64, 64}, {128, 128}, {80, 80}, {40, 40}, {256, 256}, {128, 64}, {64, 96}, {36, 20}};
    const int64_t ns[] = {1, 2, 7, 15, 16, 17, 33, 300, 1000};
    const int nqs[] = {1, 4, 19}; /* query heads per KV head: none, a GQA group, more than a pass holds */
    int fails = 0, cases = 0, tested = 0;
    for (size_t a = 0; a < NM_ARRAY_LEN(isas); a++) {
        const char *why = NULL;
        const struct kern_isa *isa = kern_isa_find(isas[a], &why);
        if (!isa) {
            printf("test_attention: the %s path cannot run here (%s): not tested\n", isas[a], why);
            continue;
        }
        tested++;
        for (int t = 0; t < 2; t++)
            for (size_t i = 0; i < NM_ARRAY_LEN(hds); i++)
                for (size_t j = 0; j < NM_ARRAY_LEN(ns); j++)
                    for (int heads = 1; heads <= 3; heads += 2)
                        for (size_t g = 0; g < NM_ARRAY_LEN(nqs); g++)
                            for (int s = 0; s < 2; s++, cases++)
                                fails += check(isa, t ? DTYPE_F32 : DTYPE_F16, hds[i][0], hds[i][1], ns[j], heads, nqs[g],
                                               s ? 30.0f : 1.0f);
    }
    if (!tested) {
        printf("SKIP: this CPU runs neither the AVX-512 nor the AVX2 path\n");
        return 77;
    }
    printf("%s: test_attention: %d cases, %d failures\n", fails ? "FAIL" : "PASS", cases, fails);
    return fails ? 1 : 0;
}
