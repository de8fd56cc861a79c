/* The IQ grids' nearest-entry tables and group quantizers (iq_quant.h). */
#include "iq_quant.h"

#include <math.h>
#include <pthread.h>

#include "base.h"
#include "iq_common.h"
#include "types.h"

/* The largest tables: 3^8 tuples, 2048 entries of 8. */
#define IQ_MAX_KEYS 6561
#define IQ_MAX_VALUES (2048 * 8)

struct iq_grid_src {
    const void *table;
    int entry_bits; /* 64: uint64_t entries of 8 values; 32: uint32_t entries of 4 */
    int n_entry, n_level;
    float level[8];
};

static const struct iq_grid_src g_src[IQ_GRID_COUNT] = {
    [IQ_GRID_IQ2XXS] = {iq_grid_iq2xxs, 64, IQ_GRID_IQ2XXS_N, 3, {8, 25, 43}},
    [IQ_GRID_IQ2XS] = {iq_grid_iq2xs, 64, IQ_GRID_IQ2XS_N, 3, {8, 25, 43}},
    [IQ_GRID_IQ2S] = {iq_grid_iq2s, 64, IQ_GRID_IQ2S_N, 3, {8, 25, 43}},
    [IQ_GRID_IQ3XXS] = {iq_grid_iq3xxs, 32, IQ_GRID_IQ3XXS_N, 8, {4, 12, 20, 28, 36, 44, 52, 62}},
    [IQ_GRID_IQ3S] = {iq_grid_iq3s, 32, IQ_GRID_IQ3S_N, 8, {1, 3, 5, 7, 9, 11, 13, 15}},
    [IQ_GRID_IQ1S] = {iq_grid_iq1s, 64, IQ_GRID_IQ1S_N, 3, {-1, 0, 1}},
};

static struct iq_lut g_lut[IQ_GRID_COUNT];
static uint16_t g_nearest[IQ_GRID_COUNT][IQ_MAX_KEYS];
static int8_t g_value[IQ_GRID_COUNT][IQ_MAX_VALUES];
static pthread_once_t g_once[IQ_GRID_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                              PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static void lut_build(enum iq_grid g) {
    const struct iq_grid_src *s = &g_src[g];
    struct iq_lut *L = &g_lut[g];
    L->n_coord = s->entry_bits / 8;
    L->n_level = s->n_level;
    L->n_entry = s->n_entry;
    for (int k = 0; k < s->n_level; k++) L->level[k] = s->level[k];
    for (int k = 0; k + 1 < s->n_level; k++) L->cut[k] = 0.5f * (s->level[k] + s->level[k + 1]);
    int8_t *val = g_value[g];
    for (int e = 0; e < s->n_entry; e++) {
        const uint64_t bits = s->entry_bits == 64 ? ((const uint64_t *)s->table)[e] : ((const uint32_t *)s->table)[e];
        for (int c = 0; c < L->n_coord; c++) val[e * L->n_coord + c] = (int8_t)iq_grid_byte(bits, c);
    }
    int n_keys = 1;
    for (int c = 0; c < L->n_coord; c++) n_keys *= L->n_level;
    NM_ASSERT(n_keys <= IQ_MAX_KEYS && s->n_entry * L->n_coord <= IQ_MAX_VALUES);
    for (int key = 0; key < n_keys; key++) {
        float t[8];
        for (int c = 0, k = key; c < L->n_coord; c++, k /= L->n_level) t[c] = s->level[k % L->n_level];
        int best = 0;
        float best_d = INFINITY;
        for (int e = 0; e < s->n_entry; e++) { /* ties: the lowest index */
            float dist = 0.0f;
            for (int c = 0; c < L->n_coord; c++) {
                const float diff = (float)val[e * L->n_coord + c] - t[c];
                dist += diff * diff;
            }
            if (dist < best_d) best_d = dist, best = e;
        }
        g_nearest[g][key] = (uint16_t)best;
    }
    L->value = val;
    L->nearest = g_nearest[g];
}

#define IQ_LUT_INIT(G) \
    static void lut_init_##G(void) { lut_build(G); }
IQ_LUT_INIT(IQ_GRID_IQ2XXS)
IQ_LUT_INIT(IQ_GRID_IQ2XS)
IQ_LUT_INIT(IQ_GRID_IQ2S)
IQ_LUT_INIT(IQ_GRID_IQ3XXS)
IQ_LUT_INIT(IQ_GRID_IQ3S)
IQ_LUT_INIT(IQ_GRID_IQ1S)
#undef IQ_LUT_INIT

static void (*const g_init[IQ_GRID_COUNT])(void) = {
    lut_init_IQ_GRID_IQ2XXS, lut_init_IQ_GRID_IQ2XS, lut_init_IQ_GRID_IQ2S,
    lut_init_IQ_GRID_IQ3XXS, lut_init_IQ_GRID_IQ3S,  lut_init_IQ_GRID_IQ1S,
};

const struct iq_lut *iq_lut_get(enum iq_grid g) {
    NM_ASSERT((unsigned)g < IQ_GRID_COUNT);
    pthread_once(&g_once[g], g_init[g]);
    return &g_lut[g];
}

void iq_quantize_signed8(const struct iq_lut *L, const float *x, float db, int even, int idx[2], uint32_t *signs) {
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    float a[8];
    uint32_t s = 0;
    int smallest = 0;
    for (int c = 0; c < 8; c++) {
        a[c] = fabsf(x[c]) * id;
        if (x[c] < 0.0f) s |= 1u << c;
        if (fabsf(x[c]) < fabsf(x[smallest])) smallest = c;
    }
    if (even && (__builtin_popcount(s) & 1)) {
        s ^= 1u << smallest;
        a[smallest] = 0.0f; /* stored with the wrong sign: as small as the grid allows */
    }
    idx[0] = iq_lut_find(L, a);
    idx[1] = L->n_coord == 4 ? iq_lut_find(L, a + 4) : 0;
    *signs = s;
}

int iq1_quantize8(const struct iq_lut *L, const float *x, float dl, float delta, float *err) {
    const float id = dl > 0.0f ? 1.0f / dl : 0.0f;
    float t[8];
    for (int c = 0; c < 8; c++) t[c] = x[c] * id - delta;
    const int e = iq_lut_find(L, t);
    float sum = 0.0f;
    for (int c = 0; c < 8; c++) {
        const float diff = x[c] - dl * ((float)L->value[8 * e + c] + delta);
        sum += diff * diff;
    }
    *err = sum;
    return e;
}

float iq1_scale_target(const float *x, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i] * x[i];
    return IQ1_SCALE_PER_RMS * sqrtf(sum / (float)n);
}

uint16_t iq2_half_scales(const float *x, uint8_t s[16]) {
    float want[16], wmax = 0.0f;
    for (int h = 0; h < 16; h++) {
        float amax = 0.0f;
        for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * h + l]));
        want[h] = amax / 43.0f;
        wmax = fmaxf(wmax, want[h]);
    }
    const uint16_t dh = fp32_to_fp16(wmax / 3.875f); /* (0.5 + 15) * 0.25 */
    const float d = fp16_to_fp32(dh);
    for (int h = 0; h < 16; h++) {
        const int v = d > 0.0f ? (int)nearbyintf(want[h] / d * 4.0f - 0.5f) : 0;
        s[h] = (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
    }
    return dh;
}
