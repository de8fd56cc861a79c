/* Q5_0's quantizer and codec row (layout and decoder: q5_0.h). */
#include "q5_0.h"

#include <assert.h>
#include <math.h>

#include "types.h"

static_assert(sizeof(block_q5_0) == 22, "block_q5_0 is 22 bytes (ggml)");

static void q5_0_decode(const void *blk, int j, struct block_sub32 *out) { q5_0_decode32(blk, j, out); }

/* d = v / -16 for the value v of largest magnitude (so v itself is code 0), codes rounded to
 * nearest and clamped to 0..31. */
static void q5_0_quantize(const float *x, void *blk) {
    block_q5_0 *b = blk;
    float amax = 0.0f, vmax = 0.0f;
    for (int l = 0; l < QK5_0; l++)
        if (fabsf(x[l]) > amax) amax = fabsf(x[l]), vmax = x[l];
    const float d = vmax / -16.0f;
    const uint16_t dh = fp32_to_fp16(d);
    const float dd = fp16_to_fp32(dh), id = dd != 0.0f ? 1.0f / dd : 0.0f;
    uint32_t qh = 0;
    for (int l = 0; l < 16; l++) {
        int q0 = (int)nearbyintf(x[l] * id) + 16, q1 = (int)nearbyintf(x[l + 16] * id) + 16;
        q0 = q0 < 0 ? 0 : q0 > 31 ? 31 : q0;
        q1 = q1 < 0 ? 0 : q1 > 31 ? 31 : q1;
        b->qs[l] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
        qh |= (uint32_t)(q0 >> 4) << l | (uint32_t)(q1 >> 4) << (l + 16);
    }
    b->d = dh;
    for (int i = 0; i < 4; i++) b->qh[i] = (uint8_t)(qh >> (8 * i));
}

const struct block_codec block_codec_q5_0 = {
    .info = {.name = "q5_0", .blck_size = QK5_0, .type_size = sizeof(block_q5_0), .quantized = true},
    .type = DTYPE_Q5_0,
    .decode32 = q5_0_decode,
    .quantize = q5_0_quantize,
    .source = "ggml-common.h block_q5_0",
};
