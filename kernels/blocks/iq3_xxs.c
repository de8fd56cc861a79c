/* IQ3_XXS's quantizer and codec row (layout and decoder: iq3_xxs.h). */
#include "iq3_xxs.h"

#include <assert.h>
#include <math.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs is 98 bytes (ggml)");

static void iq3_xxs_decode(const void *blk, int j, struct block_sub32 *out) { iq3_xxs_decode32(blk, j, out); }

/* Each sub-block's ideal scale puts its largest |x| on the top grid value 62; d is chosen so the
 * largest of those is s = 15, the others round to their nearest s. Groups of 8 = two grid
 * entries of 4 with one set of 7 stored signs (even parity, iq_quant.h). */
static void iq3_xxs_quantize(const float *x, void *blk) {
    block_iq3_xxs *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ3XXS);
    float want[8], wmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float amax = 0.0f;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(x[32 * j + l]));
        want[j] = amax / 62.0f;
        wmax = fmaxf(wmax, want[j]);
    }
    const uint16_t dh = fp32_to_fp16(wmax / 7.75f); /* (0.5 + 15) * 0.5 */
    const float d = fp16_to_fp32(dh);
    for (int j = 0; j < 8; j++) {
        int s = d > 0.0f ? (int)nearbyintf(want[j] / d * 2.0f - 0.5f) : 0;
        s = s < 0 ? 0 : s > 15 ? 15 : s;
        const float db = d * (0.5f + (float)s) * 0.5f;
        uint32_t w = (uint32_t)s << 28;
        for (int l = 0; l < 4; l++) {
            int idx[2];
            uint32_t signs;
            iq_quantize_signed8(L, x + 32 * j + 8 * l, db, 1, idx, &signs);
            b->qs[8 * j + 2 * l] = (uint8_t)idx[0];
            b->qs[8 * j + 2 * l + 1] = (uint8_t)idx[1];
            w |= (signs & 0x7Fu) << (7 * l);
        }
        for (int i = 0; i < 4; i++) b->qs[QK_IQ3_XXS / 4 + 4 * j + i] = (uint8_t)(w >> (8 * i));
    }
    b->d = dh;
}

const struct block_codec block_codec_iq3_xxs = {
    .info = {.name = "iq3_xxs", .blck_size = QK_IQ3_XXS, .type_size = sizeof(block_iq3_xxs), .quantized = true},
    .type = DTYPE_IQ3_XXS,
    .decode32 = iq3_xxs_decode,
    .quantize = iq3_xxs_quantize,
    .source = "ggml-common.h block_iq3_xxs, iq3xxs_grid",
};
