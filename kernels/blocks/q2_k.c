/* Q2_K's quantizer and codec row (layout and decoder: q2_k.h). */
#include "q2_k.h"

#include <assert.h>
#include <math.h>

#include "types.h"

static_assert(sizeof(block_q2_K) == 84, "block_q2_K is 84 bytes (ggml)");

static void q2_k_decode(const void *blk, int j, struct block_sub32 *out) { q2_k_decode32(blk, j, out); }

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Each group of 16 values gets the offset lo = min(0, its minimum) and the step (max - lo) / 3;
 * d and dmin map the largest step and the largest -lo to nibble 15; the nibbles are rounded to
 * nearest from the stored d and dmin, and the codes to nearest from the decoded step and offset
 * (the f32 values the decoder forms), clamped to 0..3. */
static void q2_k_quantize(const float *x, void *blk) {
    block_q2_K *b = blk;
    float step[16], neg_lo[16], step_max = 0.0f, neg_lo_max = 0.0f;
    for (int k = 0; k < 16; k++) {
        float lo = 0.0f, hi = x[16 * k];
        for (int l = 0; l < 16; l++) {
            lo = fminf(lo, x[16 * k + l]);
            hi = fmaxf(hi, x[16 * k + l]);
        }
        step[k] = (hi - lo) / 3.0f;
        neg_lo[k] = -lo;
        step_max = fmaxf(step_max, step[k]);
        neg_lo_max = fmaxf(neg_lo_max, neg_lo[k]);
    }
    b->d = fp32_to_fp16(step_max / 15.0f);
    b->dmin = fp32_to_fp16(neg_lo_max / 15.0f);
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int k = 0; k < 16; k++) {
        const int sc = d > 0.0f ? clamp_int((int)nearbyintf(step[k] / d), 0, 15) : 0;
        const int mn = dmin > 0.0f ? clamp_int((int)nearbyintf(neg_lo[k] / dmin), 0, 15) : 0;
        b->scales[k] = (uint8_t)(sc | mn << 4);
    }
    for (int i = 0; i < 64; i++) b->qs[i] = 0;
    for (int j = 0; j < 8; j++) {
        struct block_sub32 s;
        q2_k_decode32(b, j, &s); /* the scales and offsets as decoded; codes still 0 */
        for (int l = 0; l < 32; l++) {
            const float dl = s.d[l / 16], off = s.m[l / 16];
            const int q = dl > 0.0f ? clamp_int((int)nearbyintf((x[32 * j + l] - off) / dl), 0, 3) : 0;
            b->qs[32 * (j / 4) + l] |= (uint8_t)(q << (2 * (j % 4)));
        }
    }
}

const struct block_codec block_codec_q2_k = {
    .info = {.name = "q2_k", .blck_size = QK_K, .type_size = sizeof(block_q2_K), .quantized = true},
    .type = DTYPE_Q2_K,
    .decode32 = q2_k_decode,
    .quantize = q2_k_quantize,
    .source = "ggml-common.h block_q2_K",
};
