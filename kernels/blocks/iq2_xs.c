/* IQ2_XS's quantizer and codec row (layout and decoder: iq2_xs.h). */
#include "iq2_xs.h"

#include <assert.h>
#include <math.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs is 74 bytes (ggml)");

static void iq2_xs_decode(const void *blk, int j, struct block_sub32 *out) { iq2_xs_decode32(blk, j, out); }

/* As IQ2_XXS (iq2_xxs.c), with a scale per 16 values and 9-bit grid indices. */
static void iq2_xs_quantize(const float *x, void *blk) {
    block_iq2_xs *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ2XS);
    uint8_t sc[16];
    const uint16_t dh = iq2_half_scales(x, sc);
    const float d = fp16_to_fp32(dh);
    for (int h = 0; h < 16; h++) {
        const int s = sc[h];
        const float db = d * (0.5f + (float)s) * 0.25f;
        if (h % 2 == 0) b->scales[h / 2] = (uint8_t)s;
        else b->scales[h / 2] |= (uint8_t)(s << 4);
        for (int l = 0; l < 2; l++) {
            int idx[2];
            uint32_t signs;
            iq_quantize_signed8(L, x + 16 * h + 8 * l, db, 1, idx, &signs);
            b->qs[2 * h + l] = (uint16_t)((uint32_t)idx[0] | (signs & 0x7Fu) << 9);
        }
    }
    b->d = dh;
}

const struct block_codec block_codec_iq2_xs = {
    .info = {.name = "iq2_xs", .blck_size = QK_IQ2_XS, .type_size = sizeof(block_iq2_xs), .quantized = true},
    .type = DTYPE_IQ2_XS,
    .decode32 = iq2_xs_decode,
    .quantize = iq2_xs_quantize,
    .source = "ggml-common.h block_iq2_xs, iq2xs_grid",
};
