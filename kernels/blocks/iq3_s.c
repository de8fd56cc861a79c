/* IQ3_S's quantizer and codec row (layout and decoder: iq3_s.h). */
#include "iq3_s.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s is 110 bytes (ggml)");

static void iq3_s_decode(const void *blk, int j, struct block_sub32 *out) { iq3_s_decode32(blk, j, out); }

/* Each sub-block's ideal scale puts its largest |x| on the top grid value 15; d is chosen so the
 * largest of those is s = 15 (1 + 2s = 31), the others round to their nearest s. Groups of 8 =
 * two grid entries of 4, all 8 signs stored. */
static void iq3_s_quantize(const float *x, void *blk) {
    block_iq3_s *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ3S);
    float want[8], wmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float amax = 0.0f;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(x[32 * j + l]));
        want[j] = amax / 15.0f;
        wmax = fmaxf(wmax, want[j]);
    }
    const uint16_t dh = fp32_to_fp16(wmax / 31.0f);
    const float d = fp16_to_fp32(dh);
    memset(b->qh, 0, sizeof b->qh);
    memset(b->scales, 0, sizeof b->scales);
    for (int j = 0; j < 8; j++) {
        int s = d > 0.0f ? (int)nearbyintf((want[j] / d - 1.0f) * 0.5f) : 0;
        s = s < 0 ? 0 : s > 15 ? 15 : s;
        const float db = d * (float)(1 + 2 * s);
        b->scales[j / 2] |= (uint8_t)(s << (4 * (j % 2)));
        for (int l = 0; l < 4; l++) {
            int idx[2];
            uint32_t signs;
            iq_quantize_signed8(L, x + 32 * j + 8 * l, db, 0, idx, &signs);
            for (int h = 0; h < 2; h++) {
                b->qs[8 * j + 2 * l + h] = (uint8_t)idx[h];
                b->qh[j] |= (uint8_t)((idx[h] >> 8) << (2 * l + h));
            }
            b->signs[4 * j + l] = (uint8_t)signs;
        }
    }
    b->d = dh;
}

const struct block_codec block_codec_iq3_s = {
    .info = {.name = "iq3_s", .blck_size = QK_IQ3_S, .type_size = sizeof(block_iq3_s), .quantized = true},
    .type = DTYPE_IQ3_S,
    .decode32 = iq3_s_decode,
    .quantize = iq3_s_quantize,
    .source = "ggml-common.h block_iq3_s, iq3s_grid",
};
