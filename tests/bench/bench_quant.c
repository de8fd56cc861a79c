/* The reference quantizers (quantize_row_ref: what `numallm mkmodel --type T` runs on every
 * weight row): ns per value on one thread, median of -r runs over the same input, and a hash of
 * each type's output bytes, so that two builds can be checked to write the same files (a speed-up
 * of a quantizer should leave its hash as it was).
 *
 * The input: 2^18 values, in blocks of 256 of eight kinds (uniform, cubed, all positive, all
 * negative, small with outliers, zeros, tiny, halves: ties for the roundings), from a fixed seed.
 *
 *   bench_quant [-T q4_k,iq4_nl,...] [-r reps] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { N_VALUES = 1 << 18 };

static void fill_input(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float u = bench_rng_val(1.0f);
        switch ((i / 256) % 8) {
        case 0: x[i] = u; break;
        case 1: x[i] = u * u * u; break;
        case 2: x[i] = fabsf(u) + 0.5f; break;
        case 3: x[i] = -fabsf(u) - 2.0f; break;
        case 4: x[i] = i % 37 == 0 ? u * 1000.0f : u * 1e-3f; break;
        case 5: x[i] = 0.0f; break;
        case 6: x[i] = u * 1e-6f; break;
        default: x[i] = (float)(int)(u * 8.0f) * 0.5f; break;
        }
    }
}

/* FNV-1a, 64 bits */
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv) {
    const char *types = NULL;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-T") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-T q4_k,iq4_nl,...] [-r reps]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 100) reps = 5;
    float *x = malloc(N_VALUES * sizeof *x);
    uint8_t *y = malloc(N_VALUES * sizeof(float));
    if (!x || !y) return 1;
    fill_input(x, N_VALUES);
    printf("# bench_quant: quantize_row_ref on %d values, 1 thread, median of %d runs\n", N_VALUES, reps);
    printf("type      ns/value   (min   max)   8B params, s   output hash\n");
    for (int t = 0; t < DTYPE_COUNT; t++) {
        const struct dtype_info *info = dtype_get((uint32_t)t);
        if (!info || !bench_in_list(types, info->name) || N_VALUES % info->blck_size) continue;
        if (t == DTYPE_F32) continue;
        const size_t bytes = dtype_row_size((enum dtype)t, N_VALUES);
        quantize_row_ref((enum dtype)t, x, y, 4096); /* one-time tables (the IQ grids' nearest entries) */
        double ns[100];
        for (int r = 0; r < reps; r++) {
            const uint64_t t0 = nm_time_ns();
            quantize_row_ref((enum dtype)t, x, y, N_VALUES);
            ns[r] = (double)(nm_time_ns() - t0) / N_VALUES;
        }
        double lo, hi;
        const double med = bench_median(ns, reps, &lo, &hi);
        printf("%-8s %9.1f  (%5.1f %5.1f)  %13.0f   %016llx\n", info->name, med, lo, hi, med * 8e9 * 1e-9,
               (unsigned long long)hash_bytes(y, bytes));
    }
    free(x);
    free(y);
    return 0;
}
