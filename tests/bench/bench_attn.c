/* Prompt attention speed (issue 4): op_attention_queries over a causal prompt of n tokens for
 * one query head, in work items of ATTN_Q_BLOCK queries as the forward pass runs it, on one
 * thread. Prints GFLOP/s (2 x the multiply-adds of q.k and p.v over the causal triangle) against
 * the one-core FMA peak (2 x 16 f32 lanes x 2 flops per cycle at the clock measured here), and
 * the plain-C reference's rate for comparison.
 * --decode G: decode attention instead (op_attention_heads): one row's G query heads sharing one
 * KV head over n keys of a cache with 8 KV heads per row (the rows' stride), as a decode step's
 * work item runs them; GFLOP/s of the G heads' q.k and p.v, the KV in cache after the warm-up.
 * Usage: bench_attn [-n N,...] [-d HEAD_DIM,...] [-r REPS] [-ctk f16|f32] [--no-ref] [--decode G] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "bench_util.h"
#include "cpu.h"
#include "ops.h"


enum { DECODE_KV_HEADS = 8 };

static void run_decode(bool ref, float *out, const float *q, const void *k, const void *v, enum dtype kt, int64_t n,
                       int64_t hd, int g, float *scratch) {
    const int64_t stride = DECODE_KV_HEADS * hd;
    (ref ? op_attention_heads_ref : op_attention_heads)(out, hd, q, hd, g, k, v, kt, n, stride, stride, hd, hd,
                                                        1.0f / sqrtf((float)hd), scratch);
}

static void run_prompt(bool ref, float *out, const float *q, const void *k, const void *v, enum dtype kt, int64_t n,
                       int64_t hd, float *scratch) {
    for (int64_t i0 = 0; i0 < n; i0 += ATTN_Q_BLOCK) {
        const int64_t nq = NM_MIN((int64_t)ATTN_Q_BLOCK, n - i0);
        (ref ? op_attention_queries_ref : op_attention_queries)(out + i0 * hd, hd, q + i0 * hd, hd, nq, i0, k, v, kt,
                                                                hd, hd, hd, hd, 1.0f / sqrtf((float)hd), scratch);
    }
}

/* One measured call: decode attention of `decode` query heads, or (0) the whole prompt. */
static void run_once(bool ref, int decode, float *out, const float *q, const void *k, const void *v, enum dtype kt,
                     int64_t n, int64_t hd, float *scratch) {
    if (decode) run_decode(ref, out, q, k, v, kt, n, hd, decode, scratch);
    else run_prompt(ref, out, q, k, v, kt, n, hd, scratch);
}

int main(int argc, char **argv) {
    const char *ns = "512,2048", *ds = "64,128";
    int reps = 5;
    bool with_ref = true;
    enum dtype kt = DTYPE_F16;
    int decode = 0; /* query heads per KV head; 0: prompt attention */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) ns = argv[++i];
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) ds = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            const int r = atoi(argv[++i]);
            reps = r < 1 ? 1 : r > 99 ? 99 : r;
        }
        else if (!strcmp(argv[i], "-ctk") && i + 1 < argc) {
            const char *t = argv[++i];
            if (!strcmp(t, "f16")) kt = DTYPE_F16;
            else if (!strcmp(t, "f32")) kt = DTYPE_F32;
            else { fprintf(stderr, "bench_attn: -ctk takes f16 or f32, not '%s'\n", t); return 2; }
        } else if (!strcmp(argv[i], "--no-ref")) with_ref = false;
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) {
            decode = atoi(argv[++i]);
            if (decode < 1 || decode > 64) { fprintf(stderr, "bench_attn: --decode takes 1..64 query heads\n"); return 2; }
        }
        else {
            fprintf(stderr, "usage: bench_attn [-n N,...] [-d HEAD_DIM,...] [-r REPS] [-ctk f16|f32] [--no-ref] [--decode G]\n");
            return strcmp(argv[i], "-h") ? 2 : 0;
        }
    }
    const double ghz = bench_clock_ghz(), peak = ghz * 64.0; /* GFLOP/s: 2 FMA ports x 16 lanes x 2 */
    printf("# bench_attn: %s attention, ISA %s, KV %s, 1 thread, clock %.2f GHz (measured), FMA peak %.0f GFLOP/s\n",
           decode ? "decode" : "prompt", kern_isa_get()->name, kt == DTYPE_F16 ? "f16" : "f32", ghz, peak);
    if (decode) printf("# decode: %d query heads per call over one KV head of %d\n", decode, DECODE_KV_HEADS);
    printf("| n | head_dim | ms (median) | GFLOP/s | %% peak | ref ms | speed-up |\n|---|---|---|---|---|---|---|\n");
    char nbuf[256], dbuf[256];
    snprintf(nbuf, sizeof nbuf, "%s", ns);
    for (char *sn = strtok(nbuf, ","); sn; sn = strtok(NULL, ",")) {
        const int64_t n = atoll(sn);
        if (n < 1) continue;
        snprintf(dbuf, sizeof dbuf, "%s", ds);
        char *save = NULL;
        for (char *sd = strtok_r(dbuf, ",", &save); sd; sd = strtok_r(NULL, ",", &save)) {
            const int64_t hd = atoll(sd);
            if (hd < 1) continue;
            const size_t es = kt == DTYPE_F16 ? 2 : 4;
            /* decode: n keys of stride DECODE_KV_HEADS * hd (this head's values first), decode query rows */
            const int64_t ks = decode ? DECODE_KV_HEADS * hd : hd, nq = decode ? decode : n;
            float *q = malloc((size_t)(nq * hd) * 4), *out = malloc((size_t)(nq * hd) * 4), *row = malloc((size_t)hd * 4);
            uint8_t *k = malloc((size_t)(n * ks) * es), *v = malloc((size_t)(n * ks) * es);
            float *scratch = malloc((op_attention_queries_scratch(hd, hd) + (size_t)(n * nq)) * 4);
            NM_ASSERT(q && out && row && k && v && scratch);
            for (int64_t i = 0; i < nq * hd; i++) q[i] = bench_rng_val(1.0f);
            memset(k, 0, (size_t)(n * ks) * es);
            memset(v, 0, (size_t)(n * ks) * es);
            for (int64_t t = 0; t < n; t++) {
                for (int64_t c = 0; c < hd; c++) row[c] = bench_rng_val(1.0f);
                op_store_kv(k + (size_t)(t * ks) * es, row, hd, kt);
                for (int64_t c = 0; c < hd; c++) row[c] = bench_rng_val(1.0f);
                op_store_kv(v + (size_t)(t * ks) * es, row, hd, kt);
            }
            const double flops = decode ? 2.0 * 2.0 * (double)hd * (double)n * decode
                                        : 2.0 * 2.0 * (double)hd * (double)n * (double)(n + 1) / 2.0;
            double tv[99], tr[99];
            for (int pass = 0; pass < (with_ref ? 2 : 1); pass++) {
                double *t = pass ? tr : tv;
                run_once(pass, decode, out, q, k, v, kt, n, hd, scratch); /* warm-up */
                for (int r = 0; r < (pass ? 1 : reps); r++) {
                    const uint64_t t0 = nm_time_ns();
                    run_once(pass, decode, out, q, k, v, kt, n, hd, scratch);
                    t[r] = (double)(nm_time_ns() - t0) * 1e-6;
                }
            }
            const double ms = bench_median(tv, reps, NULL, NULL), gf = flops / (ms * 1e6);
            if (with_ref)
                printf("| %lld | %lld | %.3f | %.1f | %.1f%% | %.2f | %.1fx |\n", (long long)n, (long long)hd, ms, gf,
                       100 * gf / peak, tr[0], tr[0] / ms);
            else
                printf("| %lld | %lld | %.3f | %.1f | %.1f%% | - | - |\n", (long long)n, (long long)hd, ms, gf,
                       100 * gf / peak);
            free(q); free(out); free(row); free(k); free(v); free(scratch);
        }
    }
    return 0;
}
