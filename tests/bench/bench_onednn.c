/* oneDNN as a candidate for BF16/F32 matmuls (kernels/onednn) against numallm's own kern_matmul,
 * on the same weights: numallm's side in the layout its planner chooses for this CPU
 * (layout_plan(TENSOR_USE_MATMUL, type, cpu_features_get(), NULL), packed by weight_pack: BF16 ->
 * f_pair16 on an AVX-512 CPU; F32 -> the plain rows), oneDNN's side on the GGUF rows in place
 * (kern_onednn_matmul; BF16 activations rounded to bf16 inside the timed call).
 *
 * One row per (type, KxN, m): median time per call of -r repetitions after a warm-up (min and
 * max printed for the spread), GFLOP/s (2 m n k per call) and GB/s of weight bytes per call (the
 * bytes of the layout each side reads), and dnn/nm: the median over the repetitions of numallm's
 * time / oneDNN's time (> 1: oneDNN faster). The two sides alternate per repetition (a block of
 * calls of >= ~20 ms each), so that the load of a shared machine falls on both alike. Then the
 * verdict per (type, m): the geometric mean of dnn/nm over the shapes. Decode (m = 1) cycles through enough copies of the weight (>= 512 MiB)
 * that every call reads from DRAM, next to the STREAM-like read bandwidth of the same threads;
 * prompt shapes (m >= 16) use one copy. Each row also compares the two outputs (max |a - b| /
 * max |b|) to show both computed the same product.
 *
 * Threads: numallm's pool of -t threads bound to cpus 0..t-1 (its caller bound to cpu 0);
 * oneDNN's OpenMP threads with omp_set_num_threads(t), the calling thread's affinity widened to
 * cpus 0..t-1 for its calls (OpenMP's threads inherit it; onednn.h).
 *
 *   bench_onednn [-t 2] [-T bf16,f32] [-S 896x4864,...] [-M 1,16,64,512] [-r 7] */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base.h"
#include "cpu.h"
#include "layout.h"
#include "matmul.h"
#include "onednn.h"
#include "pool.h"
#include "bench_util.h"

double bench_stream_measure(struct pool *pool, size_t bytes, int reps, double *lo, double *hi);

static const int64_t k_shapes[][2] = {{896, 4864}, {2048, 8192}, {4096, 14336}};
static const int k_ms[] = {1, 16, 64, 512};
static const enum dtype k_types[] = {DTYPE_BF16, DTYPE_F32};
#define COPY_BYTES_MIN ((size_t)512 << 20)
#define MAX_REPS 64

/* Bind the calling thread to cpus 0..n-1. */
static void pin_self(int n) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++) CPU_SET(i, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) perror("bench_onednn: sched_setaffinity");
}

struct timing {
    double med, lo, hi; /* ns per call */
};
static struct timing summarize(double *v, int n) {
    struct timing t;
    t.med = bench_median(v, n, &t.lo, &t.hi);
    return t;
}

/* One side's call on copy c. */
struct side {
    struct pool *pool;   /* numallm: its pool; NULL: oneDNN */
    int n_threads;
    const struct weight *w; /* [copies] */
};
static void call(const struct side *s, int c, struct act *x, float *y, int64_t ldy) {
    if (s->pool) {
        kern_matmul(s->pool, &s->w[c], x, y, ldy);
        return;
    }
    char why[512];
    enum kern_onednn_status st = kern_onednn_matmul(&s->w[c], x, y, ldy, s->n_threads, why, sizeof why);
    if (st != KERN_ONEDNN_OK) nm_fatal("kern_onednn_matmul: %s: %s", kern_onednn_status_str(st), why);
}
/* ns per call of `calls` calls cycling through `copies` weights, with the caller's affinity
 * set for the side (numallm: cpu 0, as pool_init bound it; oneDNN: cpus 0..t-1, inherited by
 * OpenMP's threads). */
static double time_block(const struct side *s, int copies, int calls, struct act *x, float *y, int64_t ldy) {
    pin_self(s->pool ? 1 : s->n_threads);
    uint64_t t0 = nm_time_ns();
    for (int c = 0; c < calls; c++) call(s, c % copies, x, y, ldy);
    return (double)(nm_time_ns() - t0) / calls;
}

/* The two sides timed in alternation (a, b, then b, a, ...), so that the load of a shared
 * machine falls on both alike: per repetition a block of calls of each (one pass over the
 * copies, at least ~20 ms). *ta, *tb: the sides' timings; returns the median of the paired
 * ratios ta / tb. */
static double time_pair(const struct side *a, const struct side *b, int copies, struct act *x, float *ya, float *yb,
                        int64_t ldy, int reps, struct timing *ta, struct timing *tb) {
    double va[MAX_REPS], vb[MAX_REPS], vr[MAX_REPS];
    const double wa = time_block(a, copies, copies, x, ya, ldy), wb = time_block(b, copies, copies, x, yb, ldy);
    const int calls = copies * (int)NM_MAX(1.0, 20e6 / (copies * NM_MAX(wa, wb)));
    for (int r = 0; r < reps; r++) {
        if (r % 2 == 0) {
            va[r] = time_block(a, copies, calls, x, ya, ldy);
            vb[r] = time_block(b, copies, calls, x, yb, ldy);
        } else {
            vb[r] = time_block(b, copies, calls, x, yb, ldy);
            va[r] = time_block(a, copies, calls, x, ya, ldy);
        }
        vr[r] = va[r] / vb[r];
    }
    pin_self(1);
    *ta = summarize(va, reps);
    *tb = summarize(vb, reps);
    return summarize(vr, reps).med;
}

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) snprintf(buf, len, "%s", p + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    fclose(f);
}

int main(int argc, char **argv) {
    const char *types = NULL, *shapes = NULL, *ms_arg = NULL;
    int nth = 2, reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) nth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-T")) types = argv[i + 1];
        else if (!strcmp(argv[i], "-S")) shapes = argv[i + 1];
        else if (!strcmp(argv[i], "-M")) ms_arg = argv[i + 1];
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-t 2] [-T bf16,f32] [-S KxN,...] [-M 1,16,64,512] [-r reps]\n", argv[0]);
            return 2;
        }
    }
    reps = NM_MAX(1, NM_MIN(reps, MAX_REPS));
    int ms[16], n_ms = 0;
    if (ms_arg) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", ms_arg);
        for (char *tok = strtok(buf, ","); tok && n_ms < 16; tok = strtok(NULL, ",")) ms[n_ms++] = atoi(tok);
    } else {
        for (size_t i = 0; i < NM_ARRAY_LEN(k_ms); i++) ms[n_ms++] = k_ms[i];
    }
    int m_max = 1;
    for (int i = 0; i < n_ms; i++) m_max = NM_MAX(m_max, ms[i]);

    char why[512], model[128];
    if (!kern_onednn_available(why, sizeof why)) {
        fprintf(stderr, "bench_onednn: %s\n", why);
        return 1;
    }
    const int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    nth = NM_MAX(1, NM_MIN(nth, ncpu));
    const struct cpu_features *cf = cpu_features_get();
    cpu_model(model, sizeof model);
    int cpus[512];
    for (int i = 0; i < nth; i++) cpus[i] = i;
    struct pool *pool = pool_init(nth, cpus);
    double slo, shi;
    const double stream = bench_stream_measure(pool, (size_t)1 << 30, 5, &slo, &shi);
    printf("# bench_onednn: %s, %d cpus; numallm ISA %s, AVX512_BF16 %s, AMX-BF16 %s; threads %d (cpus 0..%d)\n", model, ncpu,
           kern_isa_get()->name, cf->avx512bf16 ? "yes" : "no", cpu_has_amx_bf16(cf) ? "yes" : "no", nth, nth - 1);
    printf("# %s\n", kern_onednn_describe(why, sizeof why));
    printf("# stream read %.2f GB/s (min %.2f max %.2f) with %d threads; median of %d reps after a warm-up;"
           " m=1 cycles >= %zu MiB of weight copies\n",
           stream, slo, shi, nth, reps, COPY_BYTES_MIN >> 20);
    printf("%-5s %-11s %4s | %-8s %9s %8s %7s | %-20s %9s %8s %7s | %7s %8s\n", "type", "KxN", "m", "numallm", "us", "GFLOP/s",
           "GB/s", "oneDNN impl", "us", "GFLOP/s", "GB/s", "dnn/nm", "maxdiff");

    /* speed-ups per (type, m) over the shapes, for the verdicts */
    double logsum[NM_ARRAY_LEN(k_types)][16] = {{0}}, rmin[NM_ARRAY_LEN(k_types)][16], rmax[NM_ARRAY_LEN(k_types)][16];
    int cnt[NM_ARRAY_LEN(k_types)][16] = {{0}};
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_types); ti++) {
        const enum dtype t = k_types[ti];
        const char *tn = dtype_get((uint32_t)t)->name;
        if (!bench_in_list(types, tn)) continue;
        struct layout_why lw;
        const enum weight_layout lay = layout_plan(TENSOR_USE_MATMUL, t, cf, &lw);
        for (size_t si = 0; si < NM_ARRAY_LEN(k_shapes); si++) {
            const int64_t k = k_shapes[si][0], n = k_shapes[si][1];
            char shape[32];
            snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64, k, n);
            if (!bench_in_list(shapes, shape)) continue;
            const size_t rbytes = dtype_row_size(t, k) * (size_t)n;
            const size_t pbytes = lay == WEIGHT_LAYOUT_ROWS ? rbytes : weight_packed_bytes(lay, t, k, n);
            const int copies = (int)NM_MAX(1, (COPY_BYTES_MIN + NM_MIN(rbytes, pbytes) - 1) / NM_MIN(rbytes, pbytes));
            uint8_t *src = nm_alloc(rbytes * copies, 4096, "rows");
            if (t == DTYPE_BF16) {
                uint16_t *p = (uint16_t *)src;
                for (size_t i = 0; i < rbytes / 2; i++) p[i] = fp32_to_bf16(bench_rng_val(0.01f));
            } else {
                float *p = (float *)src;
                for (size_t i = 0; i < rbytes / 4; i++) p[i] = bench_rng_val(0.01f);
            }
            for (int c = 1; c < copies; c++) memcpy(src + rbytes * c, src, rbytes);
            struct weight *wr = calloc((size_t)copies, sizeof *wr), *wn = calloc((size_t)copies, sizeof *wn);
            uint8_t *pk = NULL;
            if (lay != WEIGHT_LAYOUT_ROWS) {
                pk = nm_alloc(pbytes * copies, 4096, "packed");
                weight_pack(pool, lay, t, k, n, src, dtype_row_size(t, k), pk, &wn[0]);
            }
            for (int c = 0; c < copies; c++) {
                wr[c] = weight_rows(t, k, n, src + rbytes * c);
                if (pk) {
                    if (c) memcpy(pk + pbytes * c, pk, pbytes);
                    wn[c] = wn[0];
                    wn[c].data = pk + pbytes * c;
                } else {
                    wn[c] = wr[c];
                }
            }
            float *x = nm_alloc((size_t)m_max * k * 4, 64, "x");
            for (int64_t i = 0; i < (int64_t)m_max * k; i++) x[i] = (float)((int)(bench_rng() % 2001) - 1000) * 1e-3f;
            block_q8x *q8 = nm_alloc(act_q8_bytes(m_max, k), 64, "q8");
            float *ya = nm_alloc((size_t)m_max * n * 4, 64, "y numallm"), *yb = nm_alloc((size_t)m_max * n * 4, 64, "y oneDNN");
            for (int mi = 0; mi < n_ms; mi++) {
                const int m = ms[mi];
                if (m < 1 || m > m_max) continue;
                const int cp = m == 1 ? copies : 1;
                struct act xa = {.m = m, .k = k, .f32 = x, .q8 = q8};
                const struct side nm_side = {.pool = pool, .n_threads = nth, .w = wn};
                const struct side dnn_side = {.pool = NULL, .n_threads = nth, .w = wr};
                struct timing tn_, td;
                const double ratio = time_pair(&nm_side, &dnn_side, cp, &xa, ya, yb, n, reps, &tn_, &td);
                double dmax = 0, ymax = 0;
                for (int64_t i = 0; i < (int64_t)m * n; i++) {
                    dmax = fmax(dmax, fabs((double)ya[i] - (double)yb[i]));
                    ymax = fmax(ymax, fabs((double)ya[i]));
                }
                if (isnan(dmax)) dmax = INFINITY;
                char impl[256];
                kern_onednn_weights_check(t, m, k, n, KERN_ONEDNN_WEIGHTS_ROWS, impl, sizeof impl);
                /* "impl brg:avx512_core_bf16, weights ..." -> "brg:avx512_core_bf16" */
                char *ip = strncmp(impl, "impl ", 5) == 0 ? impl + 5 : impl;
                ip[strcspn(ip, ",")] = 0;
                const double flop = 2.0 * m * (double)n * (double)k;
                printf("%-5s %-11s %4d | %-8s %9.1f %8.1f %7.2f | %-20s %9.1f %8.1f %7.2f | %7.2f %8.1e\n", tn, shape, m,
                       weight_layout_name(lay), tn_.med * 1e-3, flop / tn_.med, pbytes / tn_.med, ip, td.med * 1e-3,
                       flop / td.med, rbytes / td.med, ratio, ymax > 0 ? dmax / ymax : dmax);
                printf("%-5s %-11s %4s | %-8s %9s %8s %7s |   spread (min-max us): numallm %.1f-%.1f, oneDNN %.1f-%.1f\n", "", "",
                       "", "", "", "", "", tn_.lo * 1e-3, tn_.hi * 1e-3, td.lo * 1e-3, td.hi * 1e-3);
                fflush(stdout);
                if (!cnt[ti][mi]) rmin[ti][mi] = rmax[ti][mi] = ratio;
                logsum[ti][mi] += log(ratio);
                rmin[ti][mi] = fmin(rmin[ti][mi], ratio);
                rmax[ti][mi] = fmax(rmax[ti][mi], ratio);
                cnt[ti][mi]++;
            }
            kern_onednn_cache_clear();
            free(wr);
            free(wn);
            nm_free(src);
            nm_free(pk);
            nm_free(x);
            nm_free(q8);
            nm_free(ya);
            nm_free(yb);
        }
    }
    printf("\n# verdict per (type, m): geometric mean over the shapes of dnn/nm = numallm time / oneDNN time (> 1: oneDNN faster)\n");
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_types); ti++)
        for (int mi = 0; mi < n_ms; mi++) {
            if (!cnt[ti][mi]) continue;
            const double g = exp(logsum[ti][mi] / cnt[ti][mi]);
            const char *tn = dtype_get((uint32_t)k_types[ti])->name;
            if (g >= 1.1)
                printf("%-5s m=%-4d oneDNN faster: %.2fx (%.2f-%.2fx over %d shapes)\n", tn, ms[mi], g, rmin[ti][mi], rmax[ti][mi],
                       cnt[ti][mi]);
            else if (g <= 1 / 1.1)
                printf("%-5s m=%-4d numallm faster: %.2fx (%.2f-%.2fx over %d shapes)\n", tn, ms[mi], 1 / g, 1 / rmax[ti][mi],
                       1 / rmin[ti][mi], cnt[ti][mi]);
            else
                printf("%-5s m=%-4d a tie within 10%%: oneDNN/numallm speed %.2fx (%.2f-%.2fx over %d shapes)\n", tn, ms[mi], g,
                       rmin[ti][mi], rmax[ti][mi], cnt[ti][mi]);
        }
    pool_free(pool);
    return 0;
}
