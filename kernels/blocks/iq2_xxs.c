/* IQ2_XXS's quantizer and codec row (layout and decoder: iq2_xxs.h). */
#include "iq2_xxs.h"

#include <assert.h>
#include <math.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs is 66 bytes (ggml)");

static void iq2_xxs_decode(const void *blk, int j, struct block_sub32 *out) { iq2_xxs_decode32(blk, j, out); }

/* Each sub-block's ideal scale puts its largest |x| on the top grid value 43; d is chosen so the
 * largest of those is s = 15, the others round to their nearest s. Groups of 8: per-value
 * nearest magnitude, the nearest grid entry to that, even sign parity (iq_quant.h). */
static void iq2_xxs_quantize(const float *x, void *blk) {
    block_iq2_xxs *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ2XXS);
    float want[8], wmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float amax = 0.0f;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(x[32 * j + l]));
        want[j] = amax / 43.0f;
        wmax = fmaxf(wmax, want[j]);
    }
    const uint16_t dh = fp32_to_fp16(wmax / 3.875f); /* (0.5 + 15) * 0.25 */
    const float d = fp16_to_fp32(dh);
    uint8_t *p = (uint8_t *)b->qs;
    for (int j = 0; j < 8; j++, p += 8) {
        int s = d > 0.0f ? (int)nearbyintf(want[j] / d * 4.0f - 0.5f) : 0;
        s = s < 0 ? 0 : s > 15 ? 15 : s;
        const float db = d * (0.5f + (float)s) * 0.25f;
        uint32_t w = (uint32_t)s << 28;
        for (int l = 0; l < 4; l++) {
            int idx[2];
            uint32_t signs;
            iq_quantize_signed8(L, x + 32 * j + 8 * l, db, 1, idx, &signs);
            p[l] = (uint8_t)idx[0];
            w |= (signs & 0x7Fu) << (7 * l);
        }
        for (int i = 0; i < 4; i++) p[4 + i] = (uint8_t)(w >> (8 * i));
    }
    b->d = dh;
}

const struct block_codec block_codec_iq2_xxs = {
    .info = {.name = "iq2_xxs", .blck_size = QK_IQ2_XXS, .type_size = sizeof(block_iq2_xxs), .quantized = true},
    .type = DTYPE_IQ2_XXS,
    .decode32 = iq2_xxs_decode,
    .quantize = iq2_xxs_quantize,
    .source = "ggml-common.h block_iq2_xxs, iq2xxs_grid",
};
