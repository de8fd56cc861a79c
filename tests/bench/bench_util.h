/* Helpers shared by the kernel benchmarks (bench_gemv, bench_gemm, bench_onednn): a seeded
 * generator, weights of random codes with small finite scales, comma-list filters and the
 * median / range of repeated timings. Header-only (static): each benchmark is one program. */
#ifndef NM_BENCH_UTIL_H
#define NM_BENCH_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../kernels/kscales.h"
#include "base.h"
#include "quant.h"
#include "types.h"

static uint64_t g_bench_rng = 0x1234567;

/* xorshift64 */
static inline uint64_t bench_rng(void) {
    g_bench_rng ^= g_bench_rng << 13;
    g_bench_rng ^= g_bench_rng >> 7;
    g_bench_rng ^= g_bench_rng << 17;
    return g_bench_rng;
}

/* A value in [-scale, scale] in steps of scale / 1000. */
static inline float bench_rng_val(float scale) { return (float)((int)(bench_rng() % 2001) - 1000) * (scale / 1000); }

/* n rows of k values of type t: random codes with small finite scales (the speed of generation
 * matters, not the values). */
static inline void bench_fill_weight(enum dtype t, uint8_t *p, int64_t k, int64_t n) {
    const size_t bytes = dtype_row_size(t, k) * (size_t)n;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t v = bench_rng();
        memcpy(p + i, &v, 8);
    }
    const struct dtype_info *info = dtype_get((uint32_t)t);
    const size_t nblk = bytes / (size_t)info->type_size;
    const uint16_t h = fp32_to_fp16(0.01f), b = fp32_to_bf16(0.01f);
    for (size_t i = 0; i < nblk; i++) {
        uint8_t *blk = p + i * (size_t)info->type_size;
        kscales_set(t, blk, h, h);
        switch (t) {
        case DTYPE_F16: memcpy(blk, &h, 2); break;
        case DTYPE_BF16: memcpy(blk, &b, 2); break;
        case DTYPE_F32: { const float f = bench_rng_val(1.0f); memcpy(blk, &f, 4); break; }
        default: break;
        }
    }
}

static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median, minimum and maximum of v[n] (sorts v). */
static inline double bench_median(double *v, int n, double *lo, double *hi) {
    qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
    if (lo) *lo = v[0];
    if (hi) *hi = v[n - 1];
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Core clock in GHz: a chain of dependent adds runs one per cycle. */
static inline double bench_clock_ghz(void) {
    const long n = 200000000;
    const uint64_t t0 = nm_time_ns();
    long x = 0;
    for (long i = 0; i < n; i++) __asm__ volatile("add $1, %0" : "+r"(x));
    return (double)n / (double)(nm_time_ns() - t0);
}

/* Whether word is in the comma-separated list (case-insensitive); a NULL list holds everything. */
static inline bool bench_in_list(const char *list, const char *word) {
    if (!list) return true;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
        if (strcasecmp(tok, word) == 0) return true;
    return false;
}

#endif
