/* GPU rank figures (not a test: timings are printed, not asserted).
 *   bench_gpu layers [TYPE ...]     GEMV GB/s for whole layers of qwen2.5-0.5b and llama-3-8b
 *                                   shapes in several types, next to the device's theoretical
 *                                   bandwidth; prompt GEMM TFLOP/s for the 8B layer. With types
 *                                   (names as --type takes them, or "all" for every type), the
 *                                   llama-3-8b layer in those types only
 *   bench_gpu rows [--preset P] [TYPE ...]
 *                                   one llama-3-8b (or qwen2.5-0.5b) layer (Q4_0 without types) for m = 1 .. 64
 *                                   activation rows, as batched decode runs it: the decode path
 *                                   (q8 activations, dp4a GEMV or int8 tensor cores, where
 *                                   cuk_gemv_q8 takes m rows) and dequantized tiles + cuBLAS, us per layer
 *                                   and the ratio to one row's decode path
 *   bench_gpu stage PRESET TYPE DIR pp512 and tg128 of a whole mkmodel model (DIR/PRESET_TYPE.gguf,
 *                                   made there unless it exists, and kept) on the GPU stage
 *                                   (layer_first 0), with weight bytes per token / time; then
 *                                   batched decode: steps of one row of each of B = 1 .. 32
 *                                   sequences, every row's logits to the host, as a server runs
 * Warm-up excluded; mean over repetitions. Exit 77 without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_stage.h"
#include "gtest.h"
#include "ktest.h"
#include "mkmodel.h"
#include "model.h"

static struct cuk_ctx *g_ctx;
static double g_bw;

struct shape { const char *name; int64_t k, n; };

/* the 7 matmuls of a llama-3-8b layer, and its head */
static const struct shape L8[8] = {{"q", 4096, 4096},     {"k", 4096, 1024},     {"v", 4096, 1024},
                                   {"o", 4096, 4096},     {"gate", 4096, 14336}, {"up", 4096, 14336},
                                   {"down", 14336, 4096}, {"head", 4096, 128256}};
/* and of qwen2.5-0.5b */
static const struct shape q05[8] = {{"q", 896, 896},     {"k", 896, 128},      {"v", 896, 128},
                                    {"o", 896, 896},     {"gate", 896, 4864},  {"up", 896, 4864},
                                    {"down", 4864, 896}, {"head", 896, 151936}};

/* A weight of shape sh in type t on the device: random blocks, one row pattern repeated (content
 * does not change the speed). *bytes: its size. */
static void *upload_weight(krng *r, enum dtype t, const struct shape *sh, size_t *bytes) {
    const size_t rb = dtype_row_size(t, sh->k);
    *bytes = rb * (size_t)sh->n;
    uint8_t *h = malloc(*bytes);
    NM_ASSERT(h);
    krng_row(r, t, h, sh->k);
    for (int64_t j = 1; j < sh->n; j++) memcpy(h + (size_t)j * rb, h, rb);
    void *w = cuk_malloc(g_ctx, *bytes, "bench weight", NULL, 0);
    NM_ASSERT(w);
    cuk_h2d(g_ctx, w, h, *bytes);
    free(h);
    return w;
}

/* One layer's decode matmuls as the stage runs them, for m rows of x: each input quantized to q8,
 * Q/K/V and gate/up one cuk_gemv_q8 each (o: the 7 outputs of L8's order). */
static void layer_q8(enum dtype t, const struct shape *sh, void *xq, const float *x, int m, const struct cuk_gemv_out *o) {
    cuk_quantize_q8(g_ctx, xq, x, sh[0].k, m, sh[0].k);
    cuk_gemv_q8(g_ctx, t, sh[0].k, xq, m, o, 3);     /* q, k, v */
    cuk_gemv_q8(g_ctx, t, sh[3].k, xq, m, o + 3, 1); /* o */
    cuk_gemv_q8(g_ctx, t, sh[4].k, xq, m, o + 4, 2); /* gate, up */
    cuk_quantize_q8(g_ctx, xq, x, sh[6].k, m, sh[6].k);
    cuk_gemv_q8(g_ctx, t, sh[6].k, xq, m, o + 6, 1); /* down */
}

static void bench_layer(const char *model, const struct shape *sh, int n_sh, enum dtype t) {
    krng r = {42};
    void *w[8];
    size_t bytes[8], total = 0;
    int64_t kmax = 0, nmax = 0;
    for (int i = 0; i < n_sh; i++) {
        w[i] = upload_weight(&r, t, &sh[i], &bytes[i]);
        total += bytes[i];
        kmax = NM_MAX(kmax, sh[i].k);
        nmax = NM_MAX(nmax, sh[i].n);
    }
    const int M = 512;
    float *x = cuk_malloc(g_ctx, (size_t)(M * kmax) * 4, "x", NULL, 0), *y = cuk_malloc(g_ctx, (size_t)(M * nmax) * 4, "y", NULL, 0);
    NM_ASSERT(x && y);
    /* one layer's GEMVs back to back, as in decode */
    const int reps = 200;
    for (int rep = 0; rep < 10; rep++)
        for (int i = 0; i < n_sh; i++) cuk_gemv(g_ctx, t, w[i], sh[i].k, sh[i].n, x, sh[i].k, 1, y, sh[i].n);
    cuk_sync(g_ctx);
    uint64_t t0 = nm_time_ns();
    for (int rep = 0; rep < reps; rep++)
        for (int i = 0; i < n_sh; i++) cuk_gemv(g_ctx, t, w[i], sh[i].k, sh[i].n, x, sh[i].k, 1, y, sh[i].n);
    cuk_sync(g_ctx);
    const double s_layer = (double)(nm_time_ns() - t0) * 1e-9 / reps;
    printf("%-12s %-7s layer GEMV f32: %7.1f MiB in %7.1f us: %6.0f GB/s (%.0f%% of %.0f GB/s)\n", model, dtype_get(t)->name,
           (double)total / (1 << 20), s_layer * 1e6, (double)total / s_layer / 1e9, 100 * (double)total / s_layer / 1e9 / g_bw,
           g_bw);
    for (int i = 0; i < n_sh; i++) {
        cuk_sync(g_ctx);
        t0 = nm_time_ns();
        for (int rep = 0; rep < reps; rep++) cuk_gemv(g_ctx, t, w[i], sh[i].k, sh[i].n, x, sh[i].k, 1, y, sh[i].n);
        cuk_sync(g_ctx);
        const double s = (double)(nm_time_ns() - t0) * 1e-9 / reps;
        printf("    %-6s %5lld x %5lld: %7.1f us %6.0f GB/s\n", sh[i].name, (long long)sh[i].n, (long long)sh[i].k, s * 1e6,
               (double)bytes[i] / s / 1e9);
    }
    /* decode path for block-quantized weights: int8 activations, Q/K/V and gate/up as one launch
     * each (as the stage runs them), plus the quantization of each input */
    if (cuk_gemv_q8_supported(t) && n_sh == 7) {
        void *xq = cuk_malloc(g_ctx, cuk_q8_bytes(1, kmax), "bench q8", NULL, 0);
        float *ys[7];
        for (int i = 0; i < n_sh; i++) ys[i] = cuk_malloc(g_ctx, (size_t)sh[i].n * 4, "y", NULL, 0);
        struct cuk_gemv_out o[7];
        for (int i = 0; i < n_sh; i++) o[i] = (struct cuk_gemv_out){.w = w[i], .n = sh[i].n, .y = ys[i], .ldy = sh[i].n};
        for (int rep = 0; rep < reps + 10; rep++) {
            if (rep == 10) {
                cuk_sync(g_ctx);
                t0 = nm_time_ns();
            }
            layer_q8(t, sh, xq, x, 1, o);
        }
        cuk_sync(g_ctx);
        const double sq = (double)(nm_time_ns() - t0) * 1e-9 / reps;
        printf("%-12s %-7s layer GEMV q8 : %7.1f MiB in %7.1f us: %6.0f GB/s (%.0f%% of %.0f GB/s)  [int8 activations, "
               "4 GEMV + 2 quantize launches]\n",
               model, dtype_get(t)->name, (double)total / (1 << 20), sq * 1e6, (double)total / sq / 1e9,
               100 * (double)total / sq / 1e9 / g_bw, g_bw);
        for (int i = 0; i < n_sh; i++) {
            cuk_sync(g_ctx);
            t0 = nm_time_ns();
            for (int rep = 0; rep < reps; rep++) cuk_gemv_q8(g_ctx, t, sh[i].k, xq, 1, o + i, 1);
            cuk_sync(g_ctx);
            const double sv = (double)(nm_time_ns() - t0) * 1e-9 / reps;
            printf("    q8 %-6s %5lld x %5lld: %7.1f us %6.0f GB/s\n", sh[i].name, (long long)sh[i].n, (long long)sh[i].k,
                   sv * 1e6, (double)bytes[i] / sv / 1e9);
        }
        for (int i = 0; i < n_sh; i++) cuk_free(ys[i]);
        cuk_free(xq);
    }
    /* prompt path: M = 512 rows through dequantized tiles + cuBLAS */
    double flops = 0;
    for (int i = 0; i < n_sh; i++) flops += 2.0 * M * (double)sh[i].k * (double)sh[i].n;
    for (int i = 0; i < n_sh; i++) cuk_gemm(g_ctx, t, w[i], sh[i].k, sh[i].n, x, sh[i].k, M, y, sh[i].n);
    cuk_sync(g_ctx);
    t0 = nm_time_ns();
    const int greps = 10;
    for (int rep = 0; rep < greps; rep++)
        for (int i = 0; i < n_sh; i++) cuk_gemm(g_ctx, t, w[i], sh[i].k, sh[i].n, x, sh[i].k, M, y, sh[i].n);
    cuk_sync(g_ctx);
    const double sg = (double)(nm_time_ns() - t0) * 1e-9 / greps;
    printf("    prompt GEMM M=%d: %.2f ms per layer, %.1f TFLOP/s\n", M, sg * 1e3, flops / sg / 1e12);
    for (int i = 0; i < n_sh; i++) cuk_free(w[i]);
    cuk_free(x);
    cuk_free(y);
}

static int bench_layers(int n_types, char **type_names) {
    char why[256];
    if (cuk_ctx_reserve_gemm(g_ctx, 512, 14336, 64 << 20, why, sizeof why)) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    if (n_types == 0) {
        bench_layer("qwen2.5-0.5b", q05, 7, DTYPE_Q4_0);
        const enum dtype ts[] = {DTYPE_Q4_0, DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K, DTYPE_F16};
        for (size_t i = 0; i < NM_ARRAY_LEN(ts); i++) bench_layer("llama-3-8b", L8, 7, ts[i]);
        return 0;
    }
    for (int a = 0; a < n_types; a++) {
        if (strcmp(type_names[a], "all") == 0) {
            for (uint32_t id = 0; id < DTYPE_COUNT; id++)
                if (dtype_get(id) && cuk_matmul_type_supported((enum dtype)id)) bench_layer("llama-3-8b", L8, 7, (enum dtype)id);
            continue;
        }
        const int t = dtype_from_name(type_names[a]);
        if (t < 0 || !cuk_matmul_type_supported((enum dtype)t)) {
            fprintf(stderr, "bench_gpu layers: unknown type or no CUDA kernel: %s (types: %s)\n", type_names[a],
                    dtype_supported_list());
            return 2;
        }
        bench_layer("llama-3-8b", L8, 7, (enum dtype)t);
    }
    return 0;
}

/* The decode path's launches of one layer one at a time (q8 quantization, Q/K/V, O, gate/up,
 * down) and the head's (o[7], sh[7]), us per launch at m rows: where a layer's time goes as the
 * row count grows. */
static void rows_by_launch(const struct shape *sh, enum dtype t, void *xq, const float *x, const struct cuk_gemv_out *o, int m) {
    const char *names[6] = {"quantize", "q/k/v", "o", "gate/up", "down", "head"};
    const int first[6] = {0, 0, 3, 4, 6, 7}, count[6] = {0, 3, 1, 2, 1, 1};
    printf("|%d rows, us per launch |", m);
    for (int g = 0; g < 6; g++) {
        const int reps = 200;
        double s = 0;
        for (int rep = 0; rep < reps + 10; rep++) {
            if (rep == 10) {
                cuk_sync(g_ctx);
                s = nm_time_s();
            }
            if (!count[g]) cuk_quantize_q8(g_ctx, xq, x, sh[0].k, m, sh[0].k);
            else cuk_gemv_q8(g_ctx, t, sh[first[g]].k, xq, m, o + first[g], count[g]);
        }
        cuk_sync(g_ctx);
        printf(" %s %.2f |", names[g], (nm_time_s() - s) / reps * 1e6);
    }
    printf("\n");
}

/* One layer (llama-3-8b or qwen2.5-0.5b) for m activation rows: the decode path (q8
 * quantization of each input and cuk_gemv_q8, Q/K/V and gate/up one launch each) while it takes
 * m rows, and the prompt path (each input staged once as f16, then cuBLAS) for every m, on
 * dequantized tiles and on the weights' f16 copies (cuk_dequant_f16, as the GPU stage keeps them
 * where they fit). */
static void bench_rows(const char *model, const struct shape *sh, enum dtype t) {
    enum { N_SH = 7, MAX_M = 64 };
    krng r = {42};
    void *w[N_SH], *w16[N_SH];
    float *ys[N_SH];
    size_t total = 0;
    for (int i = 0; i < N_SH; i++) {
        size_t bytes;
        w[i] = upload_weight(&r, t, &sh[i], &bytes);
        ys[i] = cuk_malloc(g_ctx, (size_t)(MAX_M * sh[i].n) * 4, "y", NULL, 0);
        w16[i] = cuk_malloc(g_ctx, (size_t)(sh[i].n * sh[i].k) * 2, "f16 copy", NULL, 0);
        NM_ASSERT(ys[i] && w16[i]);
        cuk_dequant_f16(g_ctx, t, w[i], sh[i].k, sh[i].n, w16[i]);
        total += bytes;
    }
    const int64_t kmax = sh[6].k;
    float *x = cuk_malloc(g_ctx, (size_t)(MAX_M * kmax) * 4, "x", NULL, 0);
    void *xq = cuk_malloc(g_ctx, cuk_q8_bytes(CUK_MMQ_MAX_ROWS, kmax), "bench q8", NULL, 0);
    NM_ASSERT(x && xq);
    {
        float *hx = malloc((size_t)(MAX_M * kmax) * 4);
        krng rx = {3};
        for (int64_t i = 0; i < MAX_M * kmax; i++) hx[i] = krng_normal(&rx);
        cuk_h2d(g_ctx, x, hx, (size_t)(MAX_M * kmax) * 4);
        free(hx);
    }
    const bool q8 = cuk_gemv_q8_supported(t);
    /* and the head (sh[N_SH]), for rows_by_launch only (the q8 types) */
    size_t head_bytes;
    void *w_head = q8 ? upload_weight(&r, t, &sh[N_SH], &head_bytes) : NULL;
    float *y_head = q8 ? cuk_malloc(g_ctx, (size_t)(MAX_M * sh[N_SH].n) * 4, "y", NULL, 0) : NULL;
    NM_ASSERT(!q8 || y_head);
    struct cuk_gemv_out o[N_SH + 1];
    for (int i = 0; i < N_SH; i++) o[i] = (struct cuk_gemv_out){.w = w[i], .n = sh[i].n, .y = ys[i], .ldy = sh[i].n};
    o[N_SH] = (struct cuk_gemv_out){.w = w_head, .n = sh[N_SH].n, .y = y_head, .ldy = sh[N_SH].n};
    printf("%s layer, %s, %.1f MiB: us per layer (GB/s of weights)%s\n", model, dtype_get(t)->name,
           (double)total / (1 << 20), q8 ? "" : " [no q8 GEMV for this type: the f32-activation GEMV, one pass per row]");
    printf("| rows | decode path | kernel | vs 1 row | tiles + cuBLAS | tiles vs 1 row's decode path | f16 copies + "
           "cuBLAS | copies vs 1 row's decode path |\n"
           "|---:|---:|---|---:|---:|---:|---:|---:|\n");
    const int ms[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64};
    double t1 = 0;
    for (size_t mi = 0; mi < NM_ARRAY_LEN(ms); mi++) {
        const int m = ms[mi];
        double sv = 0;
        if (!q8 ? m <= CUK_GEMV_MAX_ROWS : cuk_gemv_q8_takes(g_ctx, t, m)) {
            const int reps = 100;
            for (int rep = 0; rep < reps + 10; rep++) {
                if (rep == 10) {
                    cuk_sync(g_ctx);
                    sv = nm_time_s();
                }
                if (q8) {
                    layer_q8(t, sh, xq, x, m, o);
                } else {
                    for (int i = 0; i < N_SH; i++) cuk_gemv(g_ctx, t, w[i], sh[i].k, sh[i].n, x, sh[i].k, m, ys[i], sh[i].n);
                }
            }
            cuk_sync(g_ctx);
            sv = (nm_time_s() - sv) / reps;
            if (m == 1) t1 = sv;
        }
        double sgv[2] = {0, 0}; /* tiles, copies */
        for (int v = 0; v < 2; v++) {
            const int reps = 20;
            for (int rep = 0; rep < reps + 3; rep++) {
                if (rep == 3) {
                    cuk_sync(g_ctx);
                    sgv[v] = nm_time_s();
                }
                /* the inputs as the stage stages them: Q/K/V's, O's, gate/up's, down's */
                const int first[4] = {0, 3, 4, 6}, last[4] = {3, 4, 6, 7};
                for (int g = 0; g < 4; g++) {
                    cuk_gemm_input(g_ctx, x, sh[first[g]].k, m, sh[first[g]].k, dtype_uses_q8x(t));
                    for (int i = first[g]; i < last[g]; i++)
                        cuk_gemm_staged(g_ctx, t, w[i], v ? w16[i] : NULL, sh[i].k, sh[i].n, m, ys[i], sh[i].n);
                }
            }
            cuk_sync(g_ctx);
            sgv[v] = (nm_time_s() - sgv[v]) / reps;
        }
        const double sg = sgv[0], sc = sgv[1];
        char gv[64] = "-", gr[32] = "-";
        const char *kern = "-";
        if (sv > 0) {
            snprintf(gv, sizeof gv, "%.1f (%.0f)", sv * 1e6, (double)total / sv / 1e9);
            snprintf(gr, sizeof gr, "%.2fx", sv / t1);
            kern = !q8 ? "f32 GEMV" : cuk_q8_tensor_cores(g_ctx, t, m) ? "tensor cores" : "dp4a GEMV";
        }
        printf("| %d | %s | %s | %s | %.1f (%.0f) | %.2fx | %.1f | %.2fx |\n", m, gv, kern, gr, sg * 1e6,
               (double)total / sg / 1e9, sg / t1, sc * 1e6, sc / t1);
    }
    const int by_launch[] = {1, 16, 24, 32, 48};
    for (size_t i = 0; q8 && i < NM_ARRAY_LEN(by_launch); i++)
        if (cuk_gemv_q8_takes(g_ctx, t, by_launch[i])) rows_by_launch(sh, t, xq, x, o, by_launch[i]);
    for (int i = 0; i < N_SH; i++) {
        cuk_free(w16[i]);
        cuk_free(w[i]);
        cuk_free(ys[i]);
    }
    cuk_free(w_head); /* (NULL without q8) */
    cuk_free(y_head);
    cuk_free(x);
    cuk_free(xq);
}

static int bench_stage(const char *preset_name, const char *type_name, const char *dir) {
    const struct mkmodel_preset *preset = mkmodel_find_preset(preset_name);
    const int ti = dtype_from_name(type_name);
    if (!preset || ti < 0) return 2;
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s_%s.gguf", dir, preset_name, type_name);
    struct pool *pool = pool_init(16, NULL);
    struct mkmodel_params mp = {.preset = preset, .type = (enum dtype)ti, .output_type = -1, .seed = 7};
    double t0 = nm_time_s();
    FILE *exists = fopen(path, "rb");
    if (exists) {
        fclose(exists);
        printf("%s: made before, reused\n", path);
    } else {
        if (mkmodel_write(&mp, path, pool, err, sizeof err)) {
            fprintf(stderr, "mkmodel: %s\n", err);
            return 1;
        }
        printf("mkmodel %s %s: %.1f s\n", preset_name, type_name, nm_time_s() - t0);
    }
    struct gguf_file *f;
    struct model_config c;
    if (gguf_open(path, &f, err, sizeof err) || model_config_read(f, &c, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct gpu_stage *s;
    struct gpu_stage_params gp = {.device = 0, .layer_first = 0, .n_ctx = 1024, .n_batch = 512, .kv_type = DTYPE_F16};
    if (gpu_stage_open(&s, f, &c, &gp, err, sizeof err)) {
        fprintf(stderr, "gpu_stage_open: %s\n", err);
        return 1;
    }
    const int64_t E = c.n_embd;
    float *h = malloc((size_t)(2048 * E) * sizeof(float)); /* rows for pp512 and the batched prompts */
    krng r = {1};
    for (int64_t i = 0; i < 2048 * E; i++) h[i] = 0.5f * krng_normal(&r);
    int32_t id;
    float val;
    const struct stage_topk last = {.row = -1, .k = 1}; /* greedy on the last row */
    /* pp512 x 3 (first is warm-up) */
    double pp = 0;
    for (int rep = 0; rep < 3; rep++) {
        gpu_stage_truncate(s, 0);
        t0 = nm_time_s();
        gpu_stage_eval(s, h, 512, 0, false, NULL, err, sizeof err);
        gpu_stage_topk(s, 1, &last, &id, &val, err, sizeof err);
        if (rep) pp += nm_time_s() - t0;
    }
    pp /= 2;
    /* tg128 after a 16-token prompt; the hidden row goes up and the token id comes back */
    gpu_stage_truncate(s, 0);
    gpu_stage_eval(s, h, 16, 0, false, NULL, err, sizeof err);
    for (int i = 0; i < 4; i++) gpu_stage_eval(s, h + (int64_t)(16 + i) * E, 1, 16 + i, false, NULL, err, sizeof err);
    const int n_tg = 128;
    t0 = nm_time_s();
    for (int i = 0; i < n_tg; i++) {
        gpu_stage_eval(s, h + (int64_t)((20 + i) % 512) * E, 1, 20 + i, false, NULL, err, sizeof err);
        gpu_stage_topk(s, 1, &last, &id, &val, err, sizeof err);
    }
    const double tg = (nm_time_s() - t0) / n_tg;
    const double wb = (double)gpu_stage_weight_bytes_uploaded(s);
    printf("stage %s %s, all %lld layers + head on the GPU: pp512 %.1f tok/s, tg128 %.1f tok/s (%.2f ms/token); "
           "weights %.1f MiB -> %.0f GB/s per token (%.0f%% of %.0f GB/s; roofline %.1f tok/s); weight bytes after load %llu\n",
           preset_name, type_name, (long long)c.n_layer, 512 / pp, 1 / tg, tg * 1e3, wb / (1 << 20), wb / tg / 1e9,
           100 * wb / tg / 1e9 / g_bw, g_bw, g_bw * 1e9 / wb, (unsigned long long)gpu_stage_weight_bytes_after_load(s));
    gpu_stage_free(s);

    /* Batched decode: 32 sequences each with a 64-row prompt (one batch), then for each B steps
     * of one row of each of sequences 0 .. B-1, every row's logits to the host. */
    enum { MAX_B = 32, PROMPT = 64, WARM = 2, STEPS = 16 };
    const struct gpu_stage_params bp = {.device = 0, .layer_first = 0, .n_ctx = MAX_B * 128, .n_batch = 512,
                                        .n_seq = MAX_B, .kv_type = DTYPE_F16};
    if (gpu_stage_open(&s, f, &c, &bp, err, sizeof err)) {
        fprintf(stderr, "gpu_stage_open with %d sequences: %s\n", MAX_B, err);
        return 1;
    }
    int32_t *seq = malloc(MAX_B * PROMPT * sizeof *seq);
    int64_t *pos = malloc(MAX_B * PROMPT * sizeof *pos);
    bool *ask = malloc(MAX_B * PROMPT);
    float *lg = malloc((size_t)(MAX_B * c.n_vocab) * sizeof(float));
    NM_ASSERT(seq && pos && ask && lg);
    for (int i = 0; i < MAX_B * PROMPT; i++) {
        seq[i] = i / PROMPT;
        pos[i] = i % PROMPT;
        ask[i] = i % PROMPT == PROMPT - 1;
    }
    struct stage_batch b = {.n = MAX_B * PROMPT, .hidden = h, .seq = seq, .pos = pos, .logits = ask};
    if (gpu_stage_eval_batch(s, &b, lg, err, sizeof err)) {
        fprintf(stderr, "prompts of %d sequences: %s\n", MAX_B, err);
        return 1;
    }
    printf("batched decode, %s %s: steps of one row of each of B sequences (%d-row prompts), logits of every row to "
           "the host\n| B | ms per step | rows/s | vs B=1 |\n|---:|---:|---:|---:|\n",
           preset_name, type_name, PROMPT);
    double rate1 = 0;
    /* NM_BENCH_PROFILE_B=B: the timed steps of B rows are the profiler's range (cuk_profile) */
    const char *pb = getenv("NM_BENCH_PROFILE_B");
    const int profile_b = pb ? atoi(pb) : 0;
    for (int B = 1; B <= MAX_B; B *= 2) {
        for (int q = 0; q < B; q++) gpu_stage_seq_keep(s, q, PROMPT);
        double ts = 0;
        for (int step = 0; step < WARM + STEPS; step++) {
            if (step == WARM) {
                if (B == profile_b) cuk_profile(true);
                ts = nm_time_s();
            }
            for (int q = 0; q < B; q++) {
                seq[q] = q;
                pos[q] = PROMPT + step;
                ask[q] = true;
            }
            b = (struct stage_batch){.n = B, .hidden = h + (int64_t)(step % 16) * E, .seq = seq, .pos = pos, .logits = ask};
            if (gpu_stage_eval_batch(s, &b, lg, err, sizeof err)) {
                fprintf(stderr, "decode step of %d rows: %s\n", B, err);
                return 1;
            }
        }
        const double step_s = (nm_time_s() - ts) / STEPS, rate = B / step_s;
        if (B == profile_b) cuk_profile(false);
        if (B == 1) rate1 = rate;
        printf("| %d | %.2f | %.0f | %.2fx |\n", B, step_s * 1e3, rate, rate / rate1);
    }
    free(seq);
    free(pos);
    free(ask);
    free(lg);
    gpu_stage_free(s);
    gguf_close(f);
    pool_free(pool);
    free(h);
    return 0;
}

int main(int argc, char **argv) {
    gtest_require_device("bench_gpu");
    struct cuk_device_info gi;
    char err[256];
    if (gpu_device_info(0, &gi, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    g_bw = gi.bandwidth_gbs;
    printf("device 0: %s, %d SMs, cc %d.%d, %.1f GiB, %d-bit bus at %d MHz: %.0f GB/s theoretical, PCI %s\n", gi.name,
           gi.sm_count, gi.cc_major, gi.cc_minor, (double)gi.total_bytes / (1 << 30), gi.bus_width_bits,
           gi.mem_clock_khz / 1000, gi.bandwidth_gbs, gi.pci_bus_id);
    if (argc >= 2 && strcmp(argv[1], "layers") == 0) {
        g_ctx = cuk_ctx_init(0, err, sizeof err);
        if (!g_ctx) return 77;
        const int rc = bench_layers(argc - 2, argv + 2);
        cuk_ctx_free(g_ctx);
        return rc;
    }
    if (argc >= 2 && strcmp(argv[1], "rows") == 0) {
        g_ctx = cuk_ctx_init(0, err, sizeof err);
        if (!g_ctx) return 77;
        int rc = 0;
        if (cuk_ctx_reserve_gemm(g_ctx, 512, 14336, 64 << 20, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            rc = 1;
        }
        int a0 = 2;
        const char *model = "llama-3-8b";
        if (argc >= 4 && strcmp(argv[2], "--preset") == 0) {
            model = argv[3];
            a0 = 4;
            if (strcmp(model, "llama-3-8b") != 0 && strcmp(model, "qwen2.5-0.5b") != 0) {
                fprintf(stderr, "bench_gpu rows: --preset takes llama-3-8b or qwen2.5-0.5b, not %s\n", model);
                rc = 2;
            }
        }
        for (int a = a0; !rc && a <= NM_MAX(a0, argc - 1); a++) {
            const int t = a < argc ? dtype_from_name(argv[a]) : DTYPE_Q4_0;
            if (t < 0 || !cuk_matmul_type_supported((enum dtype)t)) {
                fprintf(stderr, "bench_gpu rows: unknown type or no CUDA kernel: %s (types: %s)\n", argv[a],
                        dtype_supported_list());
                rc = 2;
            } else if (strcmp(model, "qwen2.5-0.5b") == 0 && 896 % dtype_get((uint32_t)t)->blck_size != 0) {
                fprintf(stderr, "bench_gpu rows: qwen2.5-0.5b's rows of 896 values hold no whole %s block (its files "
                                "keep those matrices in a 32-value type)\n", argv[a]);
                rc = 2;
            } else {
                bench_rows(model, strcmp(model, "llama-3-8b") == 0 ? L8 : q05, (enum dtype)t);
            }
        }
        cuk_ctx_free(g_ctx);
        return rc;
    }
    if (argc >= 5 && strcmp(argv[1], "stage") == 0) return bench_stage(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: %s layers [TYPE ... | all] | rows [--preset llama-3-8b|qwen2.5-0.5b] [TYPE ...] | stage PRESET TYPE DIR\n", argv[0]);
    return 2;
}
