/* STREAM-like read bandwidth: sum a large float array (default 1 GiB, far more than the caches)
 * with 1 and 2 (or -t N) threads bound to cores, each summing its own contiguous part, which it
 * also first-touched (so on a multi-node machine the pages are local). One warm-up pass is
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

__attribute__((target("avx512f"))) static double sum_avx512(const float *a, long n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    long i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(a + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(a + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(a + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(a + i + 48));
    }
    double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i];
    return s;
}

__attribute__((target("avx2"))) static double sum_avx2(const float *a, long n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    double s = 0;
    for (int j = 0; j < 8; j++) s += t[j];
    for (; i < n; i++) s += a[i];
    return s;
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
