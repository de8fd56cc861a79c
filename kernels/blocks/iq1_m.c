/* IQ1_M's quantizer and codec row (layout and decoder: iq1_m.h). */
#include "iq1_m.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m is 56 bytes (ggml)");

static void iq1_m_decode(const void *blk, int j, struct block_sub32 *out) { iq1_m_decode32(blk, j, out); }

/* As IQ1_S (iq1_s.c) with a scale per 16 values and a delta sign per group of 8 (the better of
 * the two for that group). */
static void iq1_m_quantize(const float *x, void *blk) {
    block_iq1_m *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ1S);
    float want[16], wmax = 0.0f;
    for (int h = 0; h < 16; h++) {
        want[h] = iq1_scale_target(x + 16 * h, 16);
        wmax = fmaxf(wmax, want[h]);
    }
    const uint16_t dh = fp32_to_fp16(wmax / 15.0f);
    const float d = fp16_to_fp32(dh);
    uint32_t sc[4] = {0, 0, 0, 0};
    memset(b->qh, 0, sizeof b->qh);
    for (int h = 0; h < 16; h++) {
        const int j = h / 2;
        int s = d > 0.0f ? (int)nearbyintf((want[h] / d - 1.0f) * 0.5f) : 0;
        s = s < 0 ? 0 : s > 7 ? 7 : s;
        const float dl = d * (float)(2 * s + 1);
        sc[j / 2] |= (uint32_t)s << (6 * (j % 2) + 3 * (h % 2));
        for (int l = 2 * (h % 2); l < 2 * (h % 2) + 2; l++) {
            float e[2];
            int idx[2];
            for (int neg = 0; neg < 2; neg++)
                idx[neg] = iq1_quantize8(L, x + 32 * j + 8 * l, dl, neg ? -0.125f : 0.125f, &e[neg]);
            const int neg = e[1] < e[0];
            b->qs[4 * j + l] = (uint8_t)idx[neg];
            b->qh[2 * j + l / 2] |= (uint8_t)(((uint32_t)(idx[neg] >> 8) | (uint32_t)neg << 3) << (4 * (l % 2)));
        }
    }
    for (int k = 0; k < 4; k++) {
        sc[k] |= (uint32_t)((dh >> (4 * k)) & 0xF) << 12; /* the f16 d, a nibble per u16 */
        b->scales[2 * k] = (uint8_t)sc[k];
        b->scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
    }
}

const struct block_codec block_codec_iq1_m = {
    .info = {.name = "iq1_m", .blck_size = QK_IQ1_M, .type_size = sizeof(block_iq1_m), .quantized = true},
    .type = DTYPE_IQ1_M,
    .decode32 = iq1_m_decode,
    .quantize = iq1_m_quantize,
    .source = "ggml-common.h block_iq1_m, iq1m_scale_t, iq1s_grid, IQ1M_DELTA",
};
