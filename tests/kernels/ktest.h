/* Shared helpers of the kernel tests: a seeded RNG, random weight blocks and activations, the
 * normalized-error checker (with its own self-test in test_checker.c), guard-byte buffers, and
 * the one-line reproduce command every failure prints.
 *
 * Normalized error of one output: |got - want| / mag, where mag = sum_k |w_k * a_k| over the
 * dequantized terms of that dot product (never below FLT_MIN). Float rounding of any summation
 * order is bounded by a small multiple of eps * mag, so this is scale-free and does not blow up
 * when the terms cancel. A non-finite got (NaN/inf) always fails. */
#ifndef NM_TESTS_KTEST_H
#define NM_TESTS_KTEST_H

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "kscales.h"
#include "quant.h"
#include "types.h"

#define KTEST_SKIP 77

/* ---- reproduce line ---------------------------------------------------------------------- */

static char ktest_cmd[1024]; /* argv without --seed, for the reproduce line */
static uint64_t ktest_seed = 1;
static int ktest_failures = 0;
static double ktest_worst_err = 0.0; /* largest normalized error kcheck has seen (reset by tests) */

/* Parse "--seed N" (default: fixed); every test is deterministic for a given seed. The other
 * arguments are kept for the reproduce line. */
static inline void ktest_init(int argc, char **argv) {
    size_t len = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            ktest_seed = strtoull(argv[++i], NULL, 0);
            continue;
        }
        int w = snprintf(ktest_cmd + len, sizeof ktest_cmd - len, "%s%s", i ? " " : "", argv[i]);
        if (w > 0 && (size_t)w < sizeof ktest_cmd - len) len += (size_t)w;
    }
}

/* Report one failure: the message, then the command that reproduces it. */
__attribute__((format(printf, 1, 2))) static inline void ktest_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    const char *isa = getenv("NM_ISA");
    fprintf(stderr, "\n  reproduce: %s%s%s%s --seed %" PRIu64 "\n", isa ? "NM_ISA=" : "",
            isa ? isa : "", isa ? " " : "", ktest_cmd, ktest_seed);
    ktest_failures++;
}

static inline int ktest_finish(const char *name) {
    if (ktest_failures) {
        fprintf(stderr, "%s: %d failure(s)\n", name, ktest_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* ---- RNG (splitmix64) -------------------------------------------------------------------- */

typedef struct { uint64_t s; } krng;

static inline uint64_t krng_u64(krng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float krng_unit(krng *r) { return (float)(krng_u64(r) >> 40) * (1.0f / 16777216.0f); }
static inline float krng_sym(krng *r) { return 2.0f * krng_unit(r) - 1.0f; }
static inline int krng_int(krng *r, int n) { return (int)(krng_u64(r) % (uint64_t)n); }
/* Roughly normal (sum of 4 uniforms), mean 0, std ~1. */
static inline float krng_normal(krng *r) {
    return (krng_sym(r) + krng_sym(r) + krng_sym(r) + krng_sym(r)) * 0.866f;
}

/* Activation-like data: normal values with a per-call scale and a few outliers, so blocks
 * differ in d; sometimes a whole block of zeros (d = 0). */
static inline void krng_acts(krng *r, float *x, int64_t n) {
    const float scale = 0.01f + 10.0f * krng_unit(r);
    for (int64_t i = 0; i < n; i++) {
        x[i] = scale * krng_normal(r);
        if (krng_int(r, 64) == 0) x[i] *= 20.0f;
    }
    if (n >= 64 && krng_int(r, 4) == 0) memset(x + 32 * krng_int(r, (int)(n / 32)), 0, 32 * sizeof(float));
}

static inline uint16_t krng_fp16_scale(krng *r, float mag) {
    return fp32_to_fp16(mag * krng_sym(r));
}

/* A row of n values of type t with every byte random (all code patterns, every scale index,
 * Q5_K/Q6_K high bits, Q6_K's -128 scale, every grid index and sign of the IQ types) except the
 * fp16 scales (kscales.h), which are finite and small (both signs), so the dot products are
 * finite. Float types get normal values. */
static inline void krng_row(krng *r, enum dtype t, void *dst, int64_t n) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    const size_t bytes = dtype_row_size(t, n);
    uint8_t *p = dst;
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)krng_u64(r);
    const int64_t nb = n / info->blck_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + (size_t)b * (size_t)info->type_size;
        const uint16_t h0 = krng_fp16_scale(r, 0.05f), h1 = krng_fp16_scale(r, 0.05f);
        kscales_set(t, blk, h0, h1);
        switch (t) {
        case DTYPE_F32: { float f = krng_normal(r); memcpy(blk, &f, 4); break; }
        case DTYPE_F16: { uint16_t v = fp32_to_fp16(krng_normal(r)); memcpy(blk, &v, 2); break; }
        case DTYPE_BF16: { uint16_t v = fp32_to_bf16(krng_normal(r)); memcpy(blk, &v, 2); break; }
        default: break;
        }
    }
}

/* ---- magnitudes and the checker ---------------------------------------------------------- */

/* Activation row as the kernel sees it: q8x dequantized for quantized t, else f32 as is. */
static inline void kact_values(enum dtype t, const float *x, const block_q8x *q8, float *out,
                               int64_t n) {
    if (!dtype_uses_q8x(t)) {
        memcpy(out, x, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = q8[i / QK8X].d * (float)q8[i / QK8X].qs[i % QK8X];
}

/* sum |w_k a_k| in double, floored at FLT_MIN. */
static inline double kmag(const float *w, const float *a, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)w[i] * (double)a[i]);
    return s > FLT_MIN ? s : FLT_MIN;
}

/* Compare got[i] with want[i] for i < count under tol (normalized by mag[i]). Returns the number
 * of bad outputs; reports the worst one (with what, a printf-style label) when any is bad. */
__attribute__((format(printf, 6, 7))) static inline int kcheck(const float *got, const float *want,
                                                                const double *mag, int64_t count,
                                                                double tol, const char *what, ...) {
    int bad = 0;
    int64_t worst = -1;
    double worst_err = -1.0;
    for (int64_t i = 0; i < count; i++) {
        double err = isfinite(got[i]) ? fabs((double)got[i] - (double)want[i]) / mag[i] : INFINITY;
        if (isnan(err)) err = INFINITY;
        if (err > tol) bad++;
        if (err > worst_err) {
            worst_err = err;
            worst = i;
        }
    }
    if (worst_err > ktest_worst_err) ktest_worst_err = worst_err;
    if (bad) {
        char label[256];
        va_list ap;
        va_start(ap, what);
        vsnprintf(label, sizeof label, what, ap);
        va_end(ap);
        ktest_fail("%s: %d of %" PRId64 " outputs over tolerance %.1e; worst [%" PRId64
                   "] got %.9g want %.9g (normalized error %.3e)",
                   label, bad, count, tol, worst, (double)got[worst], (double)want[worst],
                   worst_err);
    }
    return bad;
}

/* ---- guard bytes ------------------------------------------------------------------------- */

/* A float buffer with `guard` sentinel floats before and after; also used for the padding
 * columns of y (ldy > n). The sentinel is a NaN bit pattern no kernel produces. */
#define KGUARD_BITS 0x7FA5A5A5u

static inline float kguard_value(void) {
    float f;
    uint32_t u = KGUARD_BITS;
    memcpy(&f, &u, 4);
    return f;
}
static inline bool kguard_is(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u == KGUARD_BITS;
}
static inline void kguard_fill(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = kguard_value();
}
/* Count the sentinels that were overwritten in p[0..n). */
static inline int64_t kguard_count_bad(const float *p, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !kguard_is(p[i]);
    return bad;
}

#endif
