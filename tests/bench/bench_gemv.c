/* kern_matmul throughput per weight type and shape:
 *  - m = 1 (decode GEMV): GB/s of weight bytes read, next to the STREAM read bandwidth measured
 *    in the same run with the same threads (the ceiling: decode is memory bound). Enough copies
 *    of the weight are cycled (>= 512 MiB in all) that every call reads it from DRAM, not L3;
 *    with -c 1, one copy instead: a weight that fits the caches then stays there, and the GEMV
 *    runs at its kernel's own rate (what its decoding costs), with no DRAM read to wait for.
 *  - m = 512 (prefill GEMM): GFLOP/s (2 m n k flops per call), one weight copy; where AMX runs,
 *    also on the AMX-BF16 tiles (kern_matmul_allow_bf16_tiles: a prompt of one sequence).
 * The activation's q8x copy is made once and reused (q8_ready), as a decode step shares it
 * between Q/K/V and gate/up; the quantization is not timed. One warm-up pass is excluded; the
 * median of the repetitions is reported with min and max. Threads are bound to cpus 0..t-1.
 *
 *   bench_gemv [-t max_threads | -t N,N,...] [-T type,type,...] [-S KxN,KxN,...] [-r reps] [-m M] [-c 1]
 *
 * -t 16 runs 1, 2, ..., 16 threads; -t 2,16 runs only 2 and 16. -m 0 skips the GEMM.
 * Shapes are K x N: K input features (row length), N output features (rows). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "cpu.h"
#include "matmul.h"
#include "pool.h"
#include "bench_util.h"

double bench_stream_measure(struct pool *pool, size_t bytes, int reps, double *lo, double *hi);

/* All types with a fast kernel; -T picks some. A type whose decoder is not in this build (the
 * issue 15 types before their kernels/blocks files) is reported and skipped. */
static const enum dtype k_types[] = {
    DTYPE_Q4_0,   DTYPE_Q8_0,   DTYPE_Q4_K,    DTYPE_Q6_K,   DTYPE_F16,     DTYPE_BF16,
    DTYPE_F32,    DTYPE_Q4_1,   DTYPE_Q5_K,    DTYPE_Q5_0,   DTYPE_Q5_1,    DTYPE_Q2_K,
    DTYPE_Q3_K,   DTYPE_IQ4_NL, DTYPE_IQ4_XS,  DTYPE_IQ2_XXS, DTYPE_IQ2_XS, DTYPE_IQ2_S,
    DTYPE_IQ3_XXS, DTYPE_IQ3_S, DTYPE_IQ1_S,   DTYPE_IQ1_M,
};
/* 0.5B-class shapes, then llama-3-8b's (ffn_up/gate, ffn_down, attn q/output). */
static const int64_t k_shapes[][2] = {{896, 4864}, {4864, 896},   {2048, 8192},
                                      {4096, 14336}, {14336, 4096}, {4096, 4096}};

#define COPY_BYTES_MIN ((size_t)512 << 20)

int main(int argc, char **argv) {
    int reps = 10, m_gemm = 512, one_copy = 0;
    const char *types = NULL, *shapes = NULL, *threads = "2";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = argv[i + 1];
        else if (!strcmp(argv[i], "-T")) types = argv[i + 1];
        else if (!strcmp(argv[i], "-S")) shapes = argv[i + 1];
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) m_gemm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c") && !strcmp(argv[i + 1], "1")) one_copy = 1;
        else {
            fprintf(stderr, "usage: %s [-t max_threads | -t N,N,...] [-T type,...] [-S KxN,...] [-r reps] [-m M] [-c 1]\n",
                    argv[0]);
            return 2;
        }
    }
    /* the thread counts: 1..N for a single N, else the listed ones */
    int nths[64], n_nth = 0;
    if (!strchr(threads, ',')) {
        const int max_threads = atoi(threads);
        for (int t = 1; t <= max_threads && n_nth < 64; t++) nths[n_nth++] = t;
    } else {
        for (const char *p = threads; *p && n_nth < 64; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
            if (atoi(p) > 0) nths[n_nth++] = atoi(p);
    }
    if (reps < 1) reps = 1;
    const struct kern_isa *isa = kern_isa_get();
    char gemv_from[96];
    if (one_copy) snprintf(gemv_from, sizeof gemv_from, "one copy of the weights: from the caches where they fit");
    else snprintf(gemv_from, sizeof gemv_from, "weights cycled through >= %zu MiB, from DRAM", COPY_BYTES_MIN >> 20);
    printf("# bench_gemv: kern_matmul, ISA %s; GEMV m=1 (%s), GEMM m=%d; median of %d reps (GEMM: %d) after 1 warm-up\n",
           isa->name, gemv_from, m_gemm, reps, NM_MAX(1, reps / 3));
    for (int ni = 0; ni < n_nth; ni++) {
        const int nth = NM_MIN(nths[ni], 256);
        int cpus[256];
        for (int i = 0; i < nth; i++) cpus[i] = i;
        struct pool *pool = pool_init(nth, cpus);
        double slo, shi, stream = bench_stream_measure(pool, (size_t)1 << 30, 5, &slo, &shi);
        printf("\n## threads=%d  stream read bandwidth: %.2f GB/s (min %.2f, max %.2f)\n", nth, stream, slo, shi);
        printf("%-7s %-11s %9s %9s %9s %9s %7s | %10s %9s %9s\n", "type", "KxN", "gemv_us", "GB/s",
               "min", "max", "%strm", "gemm_ms", "GFLOP/s", "bf16 GF/s");
        for (size_t ti = 0; ti < NM_ARRAY_LEN(k_types); ti++) {
            const enum dtype t = k_types[ti];
            const struct dtype_info *info = dtype_get((uint32_t)t);
            if (!bench_in_list(types, dtype_ggml_name((uint32_t)t))) continue;
            if (!info) {
                printf("%-7s (no decoder for this type in this build)\n", dtype_ggml_name((uint32_t)t));
                continue;
            }
            for (size_t si = 0; si < NM_ARRAY_LEN(k_shapes); si++) {
                const int64_t k = k_shapes[si][0], n = k_shapes[si][1];
                char shape[32];
                snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64, k, n);
                if (!bench_in_list(shapes, shape)) continue;
                if (k % info->blck_size) {
                    printf("%-7s %-11s   (K is not a multiple of %d: no such tensor)\n", info->name, shape, info->blck_size);
                    continue;
                }
                const size_t wbytes = dtype_row_size(t, k) * (size_t)n;
                const int copies = one_copy ? 1 : (int)NM_MAX(1, (COPY_BYTES_MIN + wbytes - 1) / wbytes);
                uint8_t *wmem = nm_alloc(wbytes * copies, 4096, "bench weights");
                bench_fill_weight(t, wmem, k, n);
                for (int c = 1; c < copies; c++) memcpy(wmem + wbytes * c, wmem, wbytes);
                struct weight *w = calloc((size_t)copies, sizeof *w);
                for (int c = 0; c < copies; c++) w[c] = weight_rows(t, k, n, wmem + wbytes * c);

                /* GEMV */
                const int m_rows = NM_MAX(m_gemm, 1);
                float *x = nm_alloc((size_t)m_rows * k * 4, 64, "bench x");
                for (int64_t i = 0; i < (int64_t)m_rows * k; i++) x[i] = (float)((int)(bench_rng() % 2001) - 1000) * 1e-3f;
                block_q8x *q8 = nm_alloc(act_q8_bytes(m_rows, k), 64, "bench q8");
                float *y = nm_alloc((size_t)m_rows * n * 4, 64, "bench y");
                struct act x1 = {.m = 1, .k = k, .f32 = x, .q8 = q8};
                double *v = calloc((size_t)reps, sizeof(double));
                for (int c = 0; c < copies; c++) kern_matmul(pool, &w[c], &x1, y, n); /* warm-up */
                for (int r = 0; r < reps; r++) {
                    uint64_t t0 = nm_time_ns();
                    for (int c = 0; c < copies; c++) kern_matmul(pool, &w[c], &x1, y, n);
                    v[r] = (double)(nm_time_ns() - t0) / copies; /* ns per call */
                }
                double med, lo, hi;
                med = bench_median(v, reps, &lo, &hi);
                const double gbs = wbytes / med, gbs_lo = wbytes / hi, gbs_hi = wbytes / lo;

                /* GEMM (-m 0: none, printed as 0) */
                double gmed = 0.0, gflops = 0.0;
                if (m_gemm > 0) {
                    struct act xm = {.m = m_gemm, .k = k, .f32 = x, .q8 = q8};
                    const int greps = NM_MAX(1, reps / 3);
                    kern_matmul(pool, &w[0], &xm, y, n); /* warm-up; quantizes once */
                    for (int r = 0; r < greps; r++) {
                        uint64_t t0 = nm_time_ns();
                        kern_matmul(pool, &w[0], &xm, y, n);
                        v[r] = (double)(nm_time_ns() - t0);
                    }
                    double glo, ghi;
                    gmed = bench_median(v, greps, &glo, &ghi);
                    gflops = 2.0 * m_gemm * (double)n * (double)k / gmed;
                }
                /* the same GEMM on the AMX-BF16 tiles where they run (a prompt of one sequence) */
                double bflops = 0.0;
                if (m_gemm >= kern_matmul_bf16_min_m(t) && kern_amx_available() && dtype_uses_q8x(t)) {
                    kern_matmul_allow_bf16_tiles(true);
                    struct act xm = {.m = m_gemm, .k = k, .f32 = x, .q8 = q8};
                    const int greps = NM_MAX(1, reps / 3);
                    kern_matmul(pool, &w[0], &xm, y, n);
                    for (int r = 0; r < greps; r++) {
                        uint64_t t0 = nm_time_ns();
                        kern_matmul(pool, &w[0], &xm, y, n);
                        v[r] = (double)(nm_time_ns() - t0);
                    }
                    bflops = 2.0 * m_gemm * (double)n * (double)k / bench_median(v, greps, NULL, NULL);
                    kern_matmul_allow_bf16_tiles(false);
                }
                printf("%-7s %-11s %9.1f %9.2f %9.2f %9.2f %6.0f%% | %10.2f %9.1f %9.1f\n", info->name,
                       shape, med * 1e-3, gbs, gbs_lo, gbs_hi, 100.0 * gbs / stream, gmed * 1e-6, gflops, bflops);
                fflush(stdout);
                free(v);
                free(w);
                nm_free(wmem);
                nm_free(x);
                nm_free(q8);
                nm_free(y);
            }
        }
        pool_free(pool);
    }
    return 0;
}
