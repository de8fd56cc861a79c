/* IQ1_S's quantizer and codec row (layout and decoder: iq1_s.h). */
#include "iq1_s.h"

#include <assert.h>
#include <math.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s is 50 bytes (ggml)");

static void iq1_s_decode(const void *blk, int j, struct block_sub32 *out) { iq1_s_decode32(blk, j, out); }

/* Each sub-block's scale aims at iq1_scale_target (iq_quant.h); d is chosen so the largest aim is
 * s = 7 (2s + 1 = 15), the others round to their nearest s. The sub-block's delta sign is the one
 * of the two whose groups (each the grid entry nearest to its rounded values) err least. */
static void iq1_s_quantize(const float *x, void *blk) {
    block_iq1_s *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ1S);
    float want[8], wmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        want[j] = iq1_scale_target(x + 32 * j, 32);
        wmax = fmaxf(wmax, want[j]);
    }
    const uint16_t dh = fp32_to_fp16(wmax / 15.0f);
    const float d = fp16_to_fp32(dh);
    for (int j = 0; j < 8; j++) {
        int s = d > 0.0f ? (int)nearbyintf((want[j] / d - 1.0f) * 0.5f) : 0;
        s = s < 0 ? 0 : s > 7 ? 7 : s;
        const float dl = d * (float)(2 * s + 1);
        int idx[2][4];
        float err[2] = {0.0f, 0.0f};
        for (int neg = 0; neg < 2; neg++) {
            for (int l = 0; l < 4; l++) {
                float e;
                idx[neg][l] = iq1_quantize8(L, x + 32 * j + 8 * l, dl, neg ? -0.125f : 0.125f, &e);
                err[neg] += e;
            }
        }
        const int neg = err[1] < err[0];
        uint32_t w = (uint32_t)s << 12 | (uint32_t)neg << 15;
        for (int l = 0; l < 4; l++) {
            b->qs[4 * j + l] = (uint8_t)idx[neg][l];
            w |= (uint32_t)(idx[neg][l] >> 8) << (3 * l);
        }
        b->qh[j] = (uint16_t)w;
    }
    b->d = dh;
}

const struct block_codec block_codec_iq1_s = {
    .info = {.name = "iq1_s", .blck_size = QK_IQ1_S, .type_size = sizeof(block_iq1_s), .quantized = true},
    .type = DTYPE_IQ1_S,
    .decode32 = iq1_s_decode,
    .quantize = iq1_s_quantize,
    .source = "ggml-common.h block_iq1_s, iq1s_grid, IQ1S_DELTA",
};
