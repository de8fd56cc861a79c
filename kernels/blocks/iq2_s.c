/* IQ2_S's quantizer and codec row (layout and decoder: iq2_s.h). */
#include "iq2_s.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "iq_quant.h"
#include "types.h"

static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s is 82 bytes (ggml)");

static void iq2_s_decode(const void *blk, int j, struct block_sub32 *out) { iq2_s_decode32(blk, j, out); }

/* As IQ2_XS (iq2_xs.c), with 10-bit grid indices and all 8 signs stored (no parity rule). */
static void iq2_s_quantize(const float *x, void *blk) {
    block_iq2_s *b = blk;
    const struct iq_lut *L = iq_lut_get(IQ_GRID_IQ2S);
    uint8_t sc[16];
    const uint16_t dh = iq2_half_scales(x, sc);
    const float d = fp16_to_fp32(dh);
    memset(b->qh, 0, sizeof b->qh);
    for (int h = 0; h < 16; h++) {
        const int j = h / 2;
        const int s = sc[h];
        const float db = d * (0.5f + (float)s) * 0.25f;
        if (h % 2 == 0) b->scales[j] = (uint8_t)s;
        else b->scales[j] |= (uint8_t)(s << 4);
        for (int l = 2 * (h % 2); l < 2 * (h % 2) + 2; l++) {
            int idx[2];
            uint32_t signs;
            iq_quantize_signed8(L, x + 32 * j + 8 * l, db, 0, idx, &signs);
            b->qs[4 * j + l] = (uint8_t)idx[0];
            b->qh[j] |= (uint8_t)((idx[0] >> 8) << (2 * l));
            b->qs[QK_IQ2_S / 8 + 4 * j + l] = (uint8_t)signs;
        }
    }
    b->d = dh;
}

const struct block_codec block_codec_iq2_s = {
    .info = {.name = "iq2_s", .blck_size = QK_IQ2_S, .type_size = sizeof(block_iq2_s), .quantized = true},
    .type = DTYPE_IQ2_S,
    .decode32 = iq2_s_decode,
    .quantize = iq2_s_quantize,
    .source = "ggml-common.h block_iq2_s, iq2s_grid",
};
