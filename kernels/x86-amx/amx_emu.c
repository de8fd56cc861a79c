/* The AMX tile kernels (amx_body.h) over a plain-C emulation of the tile registers and
 * instructions (the semantics of Intel's pseudocode for LDTILECFG, TILELOADD, TILESTORED,
 * TILEZERO, TDPBSSD, TDPBF16PS; bf16 denormals are not flushed). Built with the AVX-512 flags
 * only: it lets the tile algorithm (tiling, tails, post-processing) be tested on CPUs without
 * AMX (test_kernels_amx, KERN_PATH_AMX_EMU). Slow; never chosen by KERN_PATH_AUTO. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../types.h"
#include "../x86-avx512/simd.h"

static __thread struct {
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t d[8][16][64];
} g_tiles;

static void emu_cfg(const void *cfg) {
    const uint8_t *c = cfg;
    NM_ASSERT(c[0] == 1); /* palette 1 */
    for (int t = 0; t < 8; t++) {
        uint16_t cb;
        memcpy(&cb, c + 16 + 2 * t, 2);
        g_tiles.colsb[t] = cb;
        g_tiles.rows[t] = c[48 + t];
        NM_ASSERT(cb <= 64 && g_tiles.rows[t] <= 16);
    }
}
static void emu_zero(int t) { memset(g_tiles.d[t], 0, sizeof g_tiles.d[t]); }
static void emu_load(int t, const void *p, size_t stride) {
    emu_zero(t);
    for (int r = 0; r < g_tiles.rows[t]; r++) memcpy(g_tiles.d[t][r], (const uint8_t *)p + (size_t)r * stride, g_tiles.colsb[t]);
}
static void emu_store(int t, void *p, size_t stride) {
    for (int r = 0; r < g_tiles.rows[t]; r++) memcpy((uint8_t *)p + (size_t)r * stride, g_tiles.d[t][r], g_tiles.colsb[t]);
}
static void emu_dpbssd(int c, int a, int b) {
    NM_ASSERT(g_tiles.colsb[a] / 4 == g_tiles.rows[b] && g_tiles.rows[c] == g_tiles.rows[a] &&
              g_tiles.colsb[c] == g_tiles.colsb[b]);
    for (int m = 0; m < g_tiles.rows[c]; m++)
        for (int n = 0; n < g_tiles.colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &g_tiles.d[c][m][4 * n], 4);
            for (int k = 0; k < g_tiles.colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++)
                    acc += (int32_t)(int8_t)g_tiles.d[a][m][4 * k + i] * (int32_t)(int8_t)g_tiles.d[b][k][4 * n + i];
            memcpy(&g_tiles.d[c][m][4 * n], &acc, 4);
        }
}
static float emu_bf(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return bf16_to_fp32(h);
}
static void emu_dpbf16ps(int c, int a, int b) {
    NM_ASSERT(g_tiles.colsb[a] / 4 == g_tiles.rows[b] && g_tiles.rows[c] == g_tiles.rows[a] &&
              g_tiles.colsb[c] == g_tiles.colsb[b]);
    for (int m = 0; m < g_tiles.rows[c]; m++)
        for (int n = 0; n < g_tiles.colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, &g_tiles.d[c][m][4 * n], 4);
            for (int k = 0; k < g_tiles.colsb[a] / 4; k++) {
                acc += emu_bf(&g_tiles.d[a][m][4 * k]) * emu_bf(&g_tiles.d[b][k][4 * n]);
                acc += emu_bf(&g_tiles.d[a][m][4 * k + 2]) * emu_bf(&g_tiles.d[b][k][4 * n + 2]);
            }
            memcpy(&g_tiles.d[c][m][4 * n], &acc, 4);
        }
}

#define AMX_FN pk_gemm_amx_emu
#define AMX_FN_INT8 amx_emu_int8
#define AMX_FN_BF16 amx_emu_bf16
#define TILE_CFG(cfg) emu_cfg(cfg)
#define TILE_ZERO(t) emu_zero(t)
#define TILE_LOAD(t, p, s) emu_load(t, p, s)
#define TILE_STORE(t, p, s) emu_store(t, p, s)
#define TILE_DPBSSD(c, a, b) emu_dpbssd(c, a, b)
#define TILE_DPBF16PS(c, a, b) emu_dpbf16ps(c, a, b)
#define TILE_RELEASE() ((void)0)
#include "amx_body.h"
