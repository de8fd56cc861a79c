/* STREAM-like read bandwidth: sum a large float array (default 1 GiB, far more than the caches)
 * with 1 and 2 (or -t N) threads bound to cores, each summing its own contiguous part (as 4
 * concurrent streams), which it also first-touched (so on a multi-node machine the pages are
 * local). One warm-up pass is
 * excluded; then N repetitions, reported as median / min / max GB/s (1 GB = 1e9 bytes).
 *
 *   bench_stream [-s MiB] [-r reps] [-t max_threads]
 *
 * Built a second time into bench_gemv with BENCH_STREAM_NO_MAIN, which then calls
 * bench_stream_measure() to print the bandwidth ceiling next to its GEMV figures. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cpu.h"
#include "pool.h"

struct stream_job {
    const float *a;
    long n;
    double partial[256];
    int touch; /* 1: write the array (first touch), 0: sum it */
};

/* Each thread sums its part as 4 concurrent streams (its quarters), 2 accumulators each, the
 * way a GEMV tile reads 4 weight rows at once: one sequential stream leaves bandwidth unused on
 * cores whose prefetchers track several streams (measured: a 4-row F32 GEMV beat a one-stream
 * sum by 30-40% on a Xeon). */
__attribute__((target("avx512f"))) static double sum_avx512(const float *a, long n) {
    const long q = n / 4 / 32 * 32;
    const float *p0 = a, *p1 = a + q, *p2 = a + 2 * q, *p3 = a + 3 * q;
    __m512 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm512_setzero_ps();
    for (long i = 0; i < q; i += 32) {
        s[0] = _mm512_add_ps(s[0], _mm512_loadu_ps(p0 + i));
        s[1] = _mm512_add_ps(s[1], _mm512_loadu_ps(p0 + i + 16));
        s[2] = _mm512_add_ps(s[2], _mm512_loadu_ps(p1 + i));
        s[3] = _mm512_add_ps(s[3], _mm512_loadu_ps(p1 + i + 16));
        s[4] = _mm512_add_ps(s[4], _mm512_loadu_ps(p2 + i));
        s[5] = _mm512_add_ps(s[5], _mm512_loadu_ps(p2 + i + 16));
        s[6] = _mm512_add_ps(s[6], _mm512_loadu_ps(p3 + i));
        s[7] = _mm512_add_ps(s[7], _mm512_loadu_ps(p3 + i + 16));
    }
    for (int k = 1; k < 8; k++) s[0] = _mm512_add_ps(s[0], s[k]);
    double sum = _mm512_reduce_add_ps(s[0]);
    for (long i = 4 * q; i < n; i++) sum += a[i];
    return sum;
}

__attribute__((target("avx2"))) static double sum_avx2(const float *a, long n) {
    const long q = n / 4 / 16 * 16;
    const float *p[4] = {a, a + q, a + 2 * q, a + 3 * q};
    __m256 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm256_setzero_ps();
    for (long i = 0; i < q; i += 16)
        for (int k = 0; k < 4; k++) {
            s[2 * k] = _mm256_add_ps(s[2 * k], _mm256_loadu_ps(p[k] + i));
            s[2 * k + 1] = _mm256_add_ps(s[2 * k + 1], _mm256_loadu_ps(p[k] + i + 8));
        }
    for (int k = 1; k < 8; k++) s[0] = _mm256_add_ps(s[0], s[k]);
    float t[8];
    _mm256_storeu_ps(t, s[0]);
    double sum = 0;
    for (int j = 0; j < 8; j++) sum += t[j];
    for (long i = 4 * q; i < n; i++) sum += a[i];
    return sum;
}

static void stream_run(void *ctx, int ith, int nth) {
    struct stream_job *j = ctx;
    long lo, hi;
    pool_split(j->n, 4096, ith, nth, &lo, &hi);
    if (j->touch) {
        float *p = (float *)j->a;
        for (long i = lo; i < hi; i++) p[i] = (float)(i & 7);
        return;
    }
    const struct cpu_features *f = cpu_features_get();
    j->partial[ith] = f->avx512f ? sum_avx512(j->a + lo, hi - lo)
                      : f->avx2  ? sum_avx2(j->a + lo, hi - lo)
                                 : 0.0;
    if (!f->avx512f && !f->avx2)
        for (long i = lo; i < hi; i++) j->partial[ith] += j->a[i];
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Read bandwidth of `bytes` with the pool's threads: median over reps (min and max in lo, hi). */
double bench_stream_measure(struct pool *pool, size_t bytes, int reps, double *lo, double *hi);
double bench_stream_measure(struct pool *pool, size_t bytes, int reps, double *lo, double *hi) {
    struct stream_job j = {.n = (long)(bytes / sizeof(float))};
    j.a = nm_alloc(bytes, 4096, "stream array");
    j.touch = 1;
    pool_run(pool, stream_run, &j);
    j.touch = 0;
    pool_run(pool, stream_run, &j); /* warm-up, excluded */
    double *gbs = calloc((size_t)reps, sizeof(double));
    double check = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = nm_time_ns();
        pool_run(pool, stream_run, &j);
        uint64_t t1 = nm_time_ns();
        gbs[r] = (double)bytes / (double)(t1 - t0);
        for (int i = 0; i < pool_size(pool); i++) check += j.partial[i];
    }
    if (check < 0) printf("impossible sum %g\n", check); /* keeps the sums alive */
    qsort(gbs, (size_t)reps, sizeof(double), cmp_double);
    double med = reps % 2 ? gbs[reps / 2] : 0.5 * (gbs[reps / 2 - 1] + gbs[reps / 2]);
    if (lo) *lo = gbs[0];
    if (hi) *hi = gbs[reps - 1];
    free(gbs);
    nm_free((void *)j.a);
    return med;
}

#ifndef BENCH_STREAM_NO_MAIN
int main(int argc, char **argv) {
    size_t mib = 1024;
    int reps = 10, max_threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) mib = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) max_threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-s MiB] [-r reps] [-t max_threads]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    printf("# bench_stream: read bandwidth, sum of a %zu MiB float array, %d reps after 1 warm-up\n",
           mib, reps);
    printf("# GB/s = 1e9 bytes/s; threads bound to cpus 0..t-1\n");
    printf("%8s %12s %12s %12s\n", "threads", "median GB/s", "min GB/s", "max GB/s");
    for (int t = 1; t <= max_threads; t++) {
        int cpus[256];
        for (int i = 0; i < t && i < 256; i++) cpus[i] = i;
        struct pool *pool = pool_init(t, cpus);
        double lo, hi, med = bench_stream_measure(pool, mib << 20, reps, &lo, &hi);
        printf("%8d %12.2f %12.2f %12.2f\n", t, med, lo, hi);
        pool_free(pool);
    }
    return 0;
}
#endif
