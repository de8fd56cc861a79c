/* IQ4_XS's quantizer and codec row (layout and decoder: iq4_xs.h). */
#include "iq4_xs.h"

#include <assert.h>
#include <math.h>

#include "types.h"

static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs is 136 bytes (ggml)");

static void iq4_xs_decode(const void *blk, int j, struct block_sub32 *out) { iq4_xs_decode32(blk, j, out); }

/* Each sub-block of 32 wants the scale v / -127 for its value v of largest magnitude (as IQ4_NL);
 * d maps the largest of these to -32. The biased 6-bit scales are rounded to nearest from the
 * stored d (clamped to -32..31), the indices chosen nearest from the decoded sub-block scale. */
static void iq4_xs_quantize(const float *x, void *blk) {
    block_iq4_xs *b = blk;
    float want[8], want_max = 0.0f;
    for (int j = 0; j < 8; j++) {
        float amax = 0.0f, v = 0.0f;
        for (int l = 0; l < 32; l++)
            if (fabsf(x[32 * j + l]) > amax) amax = fabsf(x[32 * j + l]), v = x[32 * j + l];
        want[j] = v / -127.0f;
        if (fabsf(want[j]) > fabsf(want_max)) want_max = want[j];
    }
    b->d = fp32_to_fp16(want_max / -32.0f);
    const float d = fp16_to_fp32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    b->scales_h = 0;
    for (int i = 0; i < 4; i++) b->scales_l[i] = 0;
    for (int j = 0; j < 8; j++) {
        int ls = (int)nearbyintf(want[j] * id);
        ls = (ls < -32 ? -32 : ls > 31 ? 31 : ls) + 32;
        b->scales_l[j / 2] |= (uint8_t)((ls & 0xF) << (4 * (j % 2)));
        b->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
        const float dl = d * (float)(ls - 32), idl = dl != 0.0f ? 1.0f / dl : 0.0f;
        for (int l = 0; l < 16; l++)
            b->qs[16 * j + l] = (uint8_t)(iq4nl_nearest(x[32 * j + l] * idl) |
                                          iq4nl_nearest(x[32 * j + l + 16] * idl) << 4);
    }
}

const struct block_codec block_codec_iq4_xs = {
    .info = {.name = "iq4_xs", .blck_size = QK_K, .type_size = sizeof(block_iq4_xs), .quantized = true},
    .type = DTYPE_IQ4_XS,
    .decode32 = iq4_xs_decode,
    .quantize = iq4_xs_quantize,
    .source = "ggml-common.h block_iq4_xs, kvalues_iq4nl",
};
