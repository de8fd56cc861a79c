/* The CUDA kernels' unit over the block decoder interface (kernels/cuda/cuk_blocks.cuh: QB<D>,
 * the code the q8 GEMV, the f32 GEMV and the f16 tile dequantization run on the device) run on
 * the host, without a GPU: for every type of BLOCK_TYPES, on random rows (every byte random but
 * the f16 scales) and random q8x activations,
 *   - QB::load gives dequantize_row_ref's floats, bit for bit (what the tiles for cuBLAS hold
 *     before their f16 rounding);
 *   - QB::dot summed over the units in order gives block_vec_dot_ref's float, bit for bit (the
 *     device sums the same unit values in another order: the tolerance of test_gpu_kernels);
 *   - the type is in the dispatch tables (cuk_matmul_type_supported, cuk_gemv_q8_supported).
 * A checker self-test: one flipped code bit must be seen. Built where nvcc is; needs no device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuk_blocks.cuh"

extern "C" {
#include "quant.h"
void blocks_host_row(uint64_t seed, enum dtype t, void *dst, int64_t n);
void blocks_host_acts(uint64_t seed, block_q8x *q8, int64_t n);
}

static int g_failures;

/* Units of one row of k values of type t through QB<D>; returns the number of mismatches, and
 * prints the first. */
template <class D> static int check_row(enum dtype t, const uint8_t *w, int64_t k, const block_q8x *q8, bool quiet) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    QB<D> q;
    q.UPB = info->blck_size / QB_UNIT;
    q.BB = info->type_size;
    const int64_t nu = k / QB_UNIT;
    int8_t *aq = (int8_t *)aligned_alloc(16, (size_t)k);
    cuk_q8s *as = (cuk_q8s *)malloc((size_t)nu * sizeof *as);
    float *ref = (float *)malloc((size_t)k * sizeof(float));
    for (int64_t u = 0; u < nu; u++) {
        memcpy(aq + u * QB_UNIT, q8[u].qs, QB_UNIT);
        as[u] = cuk_q8s{q8[u].d, q8[u].isum};
    }
    int bad = 0;
    dequantize_row_ref(t, w, ref, k);
    for (int64_t u = 0; u < nu && !bad; u++) {
        float v[QB_UNIT];
        int pos[QB_UNIT / 4];
        q.load(w, (int)u, v, pos);
        for (int g = 0; g < QB_UNIT / 4; g++)
            for (int e = 0; e < 4; e++)
                if (memcmp(&v[4 * g + e], &ref[pos[g] + e], sizeof(float)) != 0) {
                    if (!quiet && !bad)
                        fprintf(stderr, "FAIL: %s k=%lld: QB::load value %d = %.9g, dequantize_row_ref %.9g\n",
                                info->name, (long long)k, pos[g] + e, (double)v[4 * g + e], (double)ref[pos[g] + e]);
                    bad++;
                }
    }
    float sum = 0.0f;
    for (int64_t u = 0; u < nu; u++) sum += q.dot(q.unit(w, (int)u), (int)u, aq, as);
    const float want = vec_dot_ref(t, k, w, q8);
    if (memcmp(&sum, &want, sizeof sum) != 0) {
        if (!quiet) fprintf(stderr, "FAIL: %s k=%lld: QB::dot sum %.9g, block_vec_dot_ref %.9g\n", info->name,
                            (long long)k, (double)sum, (double)want);
        bad++;
    }
    free(aq);
    free(as);
    free(ref);
    return bad;
}

template <class D> static void check_type(enum dtype t, uint64_t *seed) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    if (!info || !cuk_matmul_type_supported(t) || !cuk_gemv_q8_supported(t)) {
        fprintf(stderr, "FAIL: type %d of BLOCK_TYPES: no dtype_get row or not in the CUDA dispatch tables\n", (int)t);
        g_failures++;
        return;
    }
    const int64_t kmax = 8 * (int64_t)info->blck_size;
    uint8_t *w = (uint8_t *)malloc(dtype_row_size(t, kmax));
    block_q8x *q8 = (block_q8x *)malloc((size_t)(kmax / QK8X) * sizeof *q8);
    int bad = 0;
    for (int trial = 0; trial < 40 && !bad; trial++) {
        const int64_t k = (int64_t)info->blck_size * (1 + trial % 8);
        blocks_host_row((*seed)++, t, w, k);
        blocks_host_acts((*seed)++, q8, k);
        bad += check_row<D>(t, w, k, q8, false);
    }
    /* the checker sees a one-bit change of the codes: flip bits of the last byte of the block (a
     * code or index byte in every layout here) until the decoded row changes */
    const int64_t k = info->blck_size;
    blocks_host_row((*seed)++, t, w, k);
    blocks_host_acts((*seed)++, q8, k);
    float *before = (float *)malloc((size_t)k * sizeof(float)), *after = (float *)malloc((size_t)k * sizeof(float));
    dequantize_row_ref(t, w, before, k);
    bool seen = true;
    for (int bit = 0; bit < 8; bit++) {
        uint8_t *wc = (uint8_t *)malloc((size_t)info->type_size);
        memcpy(wc, w, (size_t)info->type_size);
        wc[info->type_size - 1] ^= (uint8_t)(1u << bit);
        dequantize_row_ref(t, wc, after, k);
        if (memcmp(before, after, (size_t)k * sizeof(float)) != 0) {
            /* QB on the changed block against the reference of the original one must differ */
            block_q8x *q8c = q8;
            float v[QB_UNIT];
            int pos[QB_UNIT / 4];
            QB<D> q;
            q.UPB = info->blck_size / QB_UNIT;
            q.BB = info->type_size;
            bool differs = false;
            for (int u = 0; u < (int)(k / QB_UNIT); u++) {
                q.load(wc, u, v, pos);
                for (int g = 0; g < QB_UNIT / 4; g++)
                    differs = differs || memcmp(v + 4 * g, before + pos[g], 4 * sizeof(float)) != 0;
            }
            seen = differs && check_row<D>(t, wc, k, q8c, true) == 0;
            free(wc);
            break;
        }
        free(wc);
    }
    if (!seen) {
        fprintf(stderr, "FAIL: %s: a flipped code bit of the last byte was not seen by the checker\n", info->name);
        bad++;
    }
    printf("  %-8s QB load == dequantize_row_ref, QB dot == block_vec_dot_ref (bits): %s\n", info->name,
           bad ? "FAIL" : "ok");
    g_failures += bad;
    free(before);
    free(after);
    free(w);
    free(q8);
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 2 && strcmp(argv[1], "--seed") == 0 ? strtoull(argv[2], NULL, 0) : 1;
    const uint64_t seed0 = seed;
#define QB_CHECK(T, t) check_type<dec_##t>(DTYPE_##T, &seed);
    BLOCK_TYPES(QB_CHECK)
#undef QB_CHECK
    if (g_failures) {
        fprintf(stderr, "test_gpu_blocks_host: %d failure(s)\n  reproduce: %s --seed %llu\n", g_failures, argv[0],
                (unsigned long long)seed0);
        return 1;
    }
    printf("test_gpu_blocks_host: ok\n");
    return 0;
}
