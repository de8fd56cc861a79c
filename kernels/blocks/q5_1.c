/* Q5_1's quantizer and codec row (layout and decoder: q5_1.h). */
#include "q5_1.h"

#include <assert.h>
#include <math.h>

#include "types.h"

static_assert(sizeof(block_q5_1) == 24, "block_q5_1 is 24 bytes (ggml)");

static void q5_1_decode(const void *blk, int j, struct block_sub32 *out) { q5_1_decode32(blk, j, out); }

/* m = the block's minimum, d = (max - min) / 31 (both rounded to f16 first), codes rounded to
 * nearest from the stored d and m and clamped to 0..31. */
static void q5_1_quantize(const float *x, void *blk) {
    block_q5_1 *b = blk;
    float lo = x[0], hi = x[0];
    for (int l = 1; l < QK5_1; l++) {
        lo = fminf(lo, x[l]);
        hi = fmaxf(hi, x[l]);
    }
    b->d = fp32_to_fp16((hi - lo) / 31.0f);
    b->m = fp32_to_fp16(lo);
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m), id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    for (int l = 0; l < 16; l++) {
        int q0 = (int)nearbyintf((x[l] - m) * id), q1 = (int)nearbyintf((x[l + 16] - m) * id);
        q0 = q0 < 0 ? 0 : q0 > 31 ? 31 : q0;
        q1 = q1 < 0 ? 0 : q1 > 31 ? 31 : q1;
        b->qs[l] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
        qh |= (uint32_t)(q0 >> 4) << l | (uint32_t)(q1 >> 4) << (l + 16);
    }
    for (int i = 0; i < 4; i++) b->qh[i] = (uint8_t)(qh >> (8 * i));
}

const struct block_codec block_codec_q5_1 = {
    .info = {.name = "q5_1", .blck_size = QK5_1, .type_size = sizeof(block_q5_1), .quantized = true},
    .type = DTYPE_Q5_1,
    .decode32 = q5_1_decode,
    .quantize = q5_1_quantize,
    .source = "ggml-common.h block_q5_1",
};
