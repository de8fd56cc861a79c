/* Packed-layout matmul throughput (issue 4), one row per (threads, type, shape, path):
 *  - GEMV m = 1 on the packed layout (the auto path) and, for comparison, on the ROWS layout:
 *    GB/s of weight bytes read per call (the packed bytes; GGUF bytes differ by <= 3%: packed.h),
 *    next to the STREAM-like read bandwidth measured in the same run with the same threads.
 *    Enough copies of the weight are cycled (>= 512 MiB) that every call reads from DRAM.
 *  - GEMM m = 512 (-m) on each packed path this CPU has (the SIMD kernel: AVX-512 VNNI, or AVX2
 *    without AVX-512, in the columns named "vnni"; AMX when present): TFLOP/s
 *    (2 m n k per call) and % of the AMX peak, which is assumed to be, per core per cycle, 2048
 *    int8 ops (TDPBSUD: 16x16x64 MACs in 16 cycles) or 1024 bf16 flops (TDPBF16PS: 16x16x32 in
 *    16 cycles), times the cores used and the clock measured here (a chain of dependent adds).
 *  - the switch point: time per call for m = 1..32 on the VNNI and AMX paths (-x 1: one copy of
 *    the weight, so mostly from cache; -x 2: the copies cycled, from DRAM as in batched decode),
 *    per type on 4096x14336, or on every shape -S names: the m from which the tiles win.
 *  - with -c C: the same m = 512 GEMM through kern_matmul_chunked_f64 with chunks of C columns
 *    (the row-parallel matmuls attn_output / ffn_down always run that way, SHARD_FF_CHUNK = 256).
 * Median of -r repetitions after one warm-up. Threads bound to the first t CPUs the process may
 * use (so several copies under taskset measure what cores give when all work at once).
 *
 *   bench_gemm [-t 2,16] [-T q4_0,...] [-S KxN,...] [-r reps] [-m 512] [-x 0|1|2] [-c cols] */
#define _GNU_SOURCE /* sched_getaffinity */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base.h"
#include "cpu.h"
#include "matmul.h"
#include "packed.h"
#include "pool.h"
#include "bench_util.h"

double bench_stream_measure(struct pool *pool, size_t bytes, int reps, double *lo, double *hi);
long bench_amx_probe(bool int8, long iters, const uint8_t *src, size_t span);

/* The tile unit's ceilings with nth threads (amx_probe.c), TOP/s: every thread of the pool runs
 * the probe at once for 0.05-0.5 s and times its own run; span > 0: each round's A and B tiles
 * loaded from a buffer of span bytes of the thread's own (16 KiB: L1; 1 MiB: L2). Returns the
 * sum of the threads' rates (what the cores give together) and, in *slowest, nth times the
 * slowest thread's: the pool run's own rate when the work is split evenly. The cores of the
 * device host differed by up to 2.5x at once (RESULTS.md, session 26), and a probe timed until
 * its slowest thread ended had reported that as the unit's scaling. Best of three. */
struct probe_job {
    bool int8;
    long iters;
    size_t span;
    double *rate; /* per thread, ops per ns */
};
static void probe_worker(void *ctx, int ith, int nth) {
    (void)nth;
    struct probe_job *j = ctx;
    uint8_t *buf = NULL;
    if (j->span) {
        buf = nm_alloc(j->span, 4096, "the AMX probe's tiles");
        for (size_t i = 0; i < j->span; i++) buf[i] = (uint8_t)(i * 7 % 61); /* small bf16 and int8 values */
    }
    const uint64_t t0 = nm_time_ns();
    const long ops = bench_amx_probe(j->int8, j->iters, buf, j->span);
    j->rate[ith] = (double)ops / (double)(nm_time_ns() - t0);
    nm_free(buf);
}
static double amx_probe(struct pool *pool, bool int8, size_t span, double *slowest) {
    const int nth = pool_size(pool);
    double best = 0, best_slow = 0;
    double *rate = calloc((size_t)nth, sizeof *rate);
    NM_ASSERT(rate);
    for (int r = 0; r < 3; r++) {
        struct probe_job j = {.int8 = int8, .iters = span ? 1L << 21 : 1L << 23, .span = span, .rate = rate};
        pool_run(pool, probe_worker, &j);
        double sum = 0, lo = rate[0];
        for (int i = 0; i < nth; i++) {
            sum += rate[i];
            lo = NM_MIN(lo, rate[i]);
        }
        best = NM_MAX(best, sum * 1e-3);
        best_slow = NM_MAX(best_slow, lo * nth * 1e-3);
    }
    free(rate);
    *slowest = best_slow;
    return best;
}

static const enum dtype k_types[] = {DTYPE_Q4_0, DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_Q6_K, DTYPE_BF16,  DTYPE_F16,
                                     DTYPE_Q4_1, DTYPE_Q5_K, DTYPE_Q2_K, DTYPE_Q3_K, DTYPE_IQ4_XS,
                                     DTYPE_Q5_0, DTYPE_Q5_1, DTYPE_IQ4_NL};
static const int64_t k_shapes[][2] = {{896, 4864}, {2048, 8192}, {4096, 14336}, {14336, 4096}, {4864, 896}, {896, 896}, {896, 128},
                                      {4096, 4096}, {4096, 1024}};
#define SWEEP_SHAPE 2 /* 4096x14336 */
#define COPY_BYTES_MIN ((size_t)512 << 20)


/* ns per kern_matmul call (median), cycling through `copies` weights */
static double time_calls(struct pool *pool, const struct weight *w, int copies, struct act *x, float *y, int reps) {
    double v[64];
    reps = NM_MIN(reps, 64);
    for (int c = 0; c < copies; c++) kern_matmul(pool, &w[c], x, y, w->n);
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = nm_time_ns();
        for (int c = 0; c < copies; c++) kern_matmul(pool, &w[c], x, y, w->n);
        v[r] = (double)(nm_time_ns() - t0) / copies;
    }
    return bench_median(v, reps, NULL, NULL);
}

/* ns per kern_matmul_chunked_f64 call (median) with chunks of `cols` columns */
static double time_chunked(struct pool *pool, const struct weight *w, int64_t cols, struct act *x, double *yd, int reps) {
    double v[64];
    reps = NM_MIN(reps, 64);
    const int nc = (int)((w->k + cols - 1) / cols);
    struct kern_chunk *ch = calloc((size_t)nc, sizeof *ch);
    for (int c = 0; c < nc; c++) {
        ch[c].w0 = ch[c].a0 = c * cols;
        ch[c].w1 = ch[c].a1 = NM_MIN(w->k, (c + 1) * cols);
    }
    kern_matmul_chunked_f64(pool, w, x, ch, nc, yd, w->n);
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = nm_time_ns();
        kern_matmul_chunked_f64(pool, w, x, ch, nc, yd, w->n);
        v[r] = (double)(nm_time_ns() - t0);
    }
    free(ch);
    return bench_median(v, reps, NULL, NULL);
}

/* The largest m of the switch-point sweep (-x). */
#define SWEEP_M_MAX 32

/* The SIMD path of this CPU: AVX-512 VNNI, else AVX2, else plain C. */
static enum kern_path g_simd = KERN_PATH_REF;

int main(int argc, char **argv) {
    g_simd = kern_isa_find("avx512", NULL) ? KERN_PATH_VNNI : kern_isa_find("avx2", NULL) ? KERN_PATH_AVX2 : KERN_PATH_REF;
    const char *threads = "2,all", *types = NULL, *shapes = NULL;
    int reps = 7, m_gemm = 512, sweep = 1, chunk = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = argv[i + 1];
        else if (!strcmp(argv[i], "-T")) types = argv[i + 1];
        else if (!strcmp(argv[i], "-S")) shapes = argv[i + 1];
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) m_gemm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-x")) sweep = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) chunk = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-t 2,all] [-T type,...] [-S KxN,...] [-r reps] [-m M] [-x 0|1|2] [-c cols]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    /* the CPUs this process may run on (taskset): threads are bound to the first t of them */
    int allowed[512], ncpu = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE && ncpu < 512; c++)
            if (CPU_ISSET(c, &set)) allowed[ncpu++] = c;
    } else {
        ncpu = (int)NM_MIN(512L, sysconf(_SC_NPROCESSORS_ONLN));
        for (int c = 0; c < ncpu; c++) allowed[c] = c;
    }
    const bool amx = kern_amx_available();
    const double ghz = bench_clock_ghz();
    printf("# bench_gemm: ISA %s, AMX %s, %d cpus, clock %.2f GHz (measured); GEMV m=1 from DRAM (>= %zu MiB cycled);"
           " GEMM m=%d; median of %d reps\n",
           kern_isa_get()->name, amx ? "yes" : "no", ncpu, ghz, COPY_BYTES_MIN >> 20, m_gemm, reps);
    struct pool *packer = pool_init(ncpu, allowed);
    char tbuf[128];
    snprintf(tbuf, sizeof tbuf, "%s", threads);
    for (char *save = NULL, *tok = strtok_r(tbuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int nth = strcmp(tok, "all") == 0 ? ncpu : NM_MIN(atoi(tok), ncpu);
        int cpus[512];
        for (int i = 0; i < nth; i++) cpus[i] = allowed[i];
        struct pool *pool = pool_init(nth, cpus);
        double slo, shi;
        const double stream = bench_stream_measure(pool, (size_t)1 << 30, 5, &slo, &shi);
        const double peak_i8 = 2048.0 * nth * ghz * 1e-3, peak_bf = 1024.0 * nth * ghz * 1e-3; /* TOP/s */
        printf("\n## threads=%d  stream read %.2f GB/s (min %.2f max %.2f); AMX peak %.1f int8 TOP/s, %.1f bf16 TFLOP/s\n",
               nth, stream, slo, shi, peak_i8, peak_bf);
        if (amx) {
            double si, sb;
            const double pi = amx_probe(pool, true, 0, &si), pb = amx_probe(pool, false, 0, &sb);
            printf("   the tile unit alone (tile products, no memory; amx_probe.c): %.1f int8 TOP/s, %.1f bf16 TFLOP/s"
                   " summed over the threads (%.2f / %.2f per thread); %.1f / %.1f at the slowest thread's rate\n",
                   pi, pb, pi / nth, pb / nth, si, sb);
            double s1, s2;
            const double p1 = amx_probe(pool, false, 16 << 10, &s1), p2 = amx_probe(pool, false, 1 << 20, &s2);
            printf("   bf16 2 x 2 tile loop, A and B tiles loaded every round: from L1 (16 KiB) %.1f, from L2 (1 MiB) %.1f"
                   " TFLOP/s summed (%.2f / %.2f per thread); %.1f / %.1f at the slowest thread's rate\n",
                   p1, p2, p1 / nth, p2 / nth, s1, s2);
        }
        printf("%-5s %-11s | %8s %6s | %8s %6s | %9s %9s %6s | %9s %6s | %9s %6s\n", "type", "KxN", "pk GB/s", "%strm",
               "rows GB/s", "%strm", "vnni TF/s", "amx TF/s", "%peak", "amx/vnni", "MiB", "bf16 TF/s", "%peak");
        for (size_t ti = 0; ti < NM_ARRAY_LEN(k_types); ti++) {
            const enum dtype t = k_types[ti];
            const struct dtype_info *info = dtype_get((uint32_t)t);
            if (!bench_in_list(types, info->name)) continue;
            const enum weight_layout lay = (t == DTYPE_F16 || t == DTYPE_BF16) ? WEIGHT_LAYOUT_F_PAIR16 : WEIGHT_LAYOUT_Q_TILE16;
            for (size_t si = 0; si < NM_ARRAY_LEN(k_shapes); si++) {
                const int64_t k = k_shapes[si][0], n = k_shapes[si][1];
                char shape[32];
                snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64, k, n);
                if (!bench_in_list(shapes, shape) || k % info->blck_size) continue;
                const size_t rbytes = dtype_row_size(t, k) * (size_t)n, pbytes = weight_packed_bytes(lay, t, k, n);
                const int copies = (int)NM_MAX(1, (COPY_BYTES_MIN + pbytes - 1) / pbytes);
                uint8_t *src = nm_alloc(rbytes * copies, 4096, "rows");
                bench_fill_weight(t, src, k, n);
                for (int c = 1; c < copies; c++) memcpy(src + rbytes * c, src, rbytes);
                uint8_t *pk = nm_alloc(pbytes * copies, 4096, "packed");
                struct weight *wp = calloc((size_t)copies, sizeof *wp), *wr = calloc((size_t)copies, sizeof *wr);
                weight_pack(packer, lay, t, k, n, src, dtype_row_size(t, k), pk, &wp[0]);
                for (int c = 0; c < copies; c++) {
                    if (c) memcpy(pk + pbytes * c, pk, pbytes);
                    wp[c] = wp[0];
                    wp[c].data = pk + pbytes * c;
                    wr[c] = weight_rows(t, k, n, src + rbytes * c);
                }
                const int m_max = NM_MAX(m_gemm, SWEEP_M_MAX); /* rows of the buffers: the GEMM's and the sweep's */
                float *x = nm_alloc((size_t)m_max * k * 4, 64, "x");
                for (int64_t i = 0; i < (int64_t)m_max * k; i++) x[i] = (float)((int)(bench_rng() % 2001) - 1000) * 1e-3f;
                block_q8x *q8 = nm_alloc(act_q8_bytes(m_max, k), 64, "q8");
                float *y = nm_alloc((size_t)m_max * n * 4, 64, "y");
                struct act x1 = {.m = 1, .k = k, .f32 = x, .q8 = q8};
                kern_matmul_force_path(KERN_PATH_AUTO);
                const double gp = pbytes / time_calls(pool, wp, copies, &x1, y, reps);
                const double gr = rbytes / time_calls(pool, wr, copies, &x1, y, reps);
                struct act xm = {.m = m_gemm, .k = k, .f32 = x, .q8 = q8};
                const double flop = 2.0 * m_gemm * (double)n * (double)k;
                const int greps = reps;
                kern_matmul_force_path(g_simd);
                const double tv = flop / time_calls(pool, wp, 1, &xm, y, greps) * 1e-3;
                double ta = 0;
                if (amx) {
                    kern_matmul_force_path(KERN_PATH_AMX);
                    ta = flop / time_calls(pool, wp, 1, &xm, y, greps) * 1e-3;
                }
                double tb = 0; /* a quantized type on the bf16 tiles (kern_matmul_allow_bf16_tiles) */
                if (amx && dtype_uses_q8x(t) && m_gemm >= kern_matmul_bf16_min_m(t)) {
                    kern_matmul_allow_bf16_tiles(true);
                    kern_matmul_force_path(KERN_PATH_AMX);
                    tb = flop / time_calls(pool, wp, 1, &xm, y, greps) * 1e-3;
                    kern_matmul_allow_bf16_tiles(false);
                }
                const double peak = dtype_uses_q8x(t) ? peak_i8 : peak_bf;
                printf("%-5s %-11s | %8.2f %5.0f%% | %8.2f %5.0f%% | %9.3f %9.3f %5.1f%% | %9.2f %6.1f | %9.3f %5.1f%%\n",
                       info->name, shape, gp, 100 * gp / stream, gr, 100 * gr / stream, tv, ta, 100 * ta / peak,
                       ta > 0 ? ta / tv : 0.0, pbytes / 1048576.0, tb, 100 * tb / peak_bf);
                fflush(stdout);
                if (chunk > 0 && k % chunk == 0 && chunk % info->blck_size == 0) {
                    double *yd = nm_alloc((size_t)m_gemm * n * 8, 64, "yd");
                    kern_matmul_force_path(g_simd);
                    const double cv = flop / time_chunked(pool, wp, chunk, &xm, yd, greps) * 1e-3;
                    double ca = 0;
                    if (amx) {
                        kern_matmul_force_path(KERN_PATH_AMX);
                        ca = flop / time_chunked(pool, wp, chunk, &xm, yd, greps) * 1e-3;
                    }
                    double cb = 0;
                    if (amx && dtype_uses_q8x(t) && m_gemm >= kern_matmul_bf16_min_m(t)) {
                        kern_matmul_allow_bf16_tiles(true);
                        kern_matmul_force_path(KERN_PATH_AMX);
                        cb = flop / time_chunked(pool, wp, chunk, &xm, yd, greps) * 1e-3;
                        kern_matmul_allow_bf16_tiles(false);
                    }
                    printf("  chunked %s %s, chunks of %d columns: vnni %.3f TF/s, amx %.3f TF/s (%.1f%% of peak), "
                           "amx bf16 %.3f TF/s\n", info->name, shape, chunk, cv, ca, 100 * ca / peak, cb);
                    nm_free(yd);
                }
                if (sweep && (shapes || si == SWEEP_SHAPE) && t != DTYPE_Q4_1 && t != DTYPE_Q5_K) {
                    const int sc = sweep == 2 ? copies : 1; /* -x 2: weights from DRAM, as in batched decode */
                    printf("  switch %s %s, weights from %s: us per call by m (vnni / amx):", info->name, shape,
                           sc > 1 ? "DRAM" : "one copy (cache)");
                    static const int ms[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, SWEEP_M_MAX};
                    for (size_t mi = 0; mi < NM_ARRAY_LEN(ms); mi++) {
                        struct act xs = {.m = ms[mi], .k = k, .f32 = x, .q8 = q8};
                        kern_matmul_force_path(g_simd);
                        const double a = time_calls(pool, wp, sc, &xs, y, reps);
                        double b = 0;
                        if (amx) {
                            kern_matmul_force_path(KERN_PATH_AMX);
                            b = time_calls(pool, wp, sc, &xs, y, reps);
                        }
                        printf(" m=%d %.0f/%.0f", ms[mi], a * 1e-3, b * 1e-3);
                    }
                    printf("\n");
                }
                kern_matmul_force_path(KERN_PATH_AUTO);
                free(wp);
                free(wr);
                nm_free(src);
                nm_free(pk);
                nm_free(x);
                nm_free(q8);
                nm_free(y);
            }
        }
        pool_free(pool);
    }
    pool_free(packer);
    return 0;
}
