/* Q3_K's quantizer and codec row (layout and decoder: q3_k.h). */
#include "q3_k.h"

#include <assert.h>
#include <math.h>

#include "types.h"

static_assert(sizeof(block_q3_K) == 110, "block_q3_K is 110 bytes (ggml)");

static void q3_k_decode(const void *blk, int j, struct block_sub32 *out) { q3_k_decode32(blk, j, out); }

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Each group of 16 values wants the scale v / -4 for its value v of largest magnitude (v is then
 * code -4, the end of the asymmetric range -4..3); d maps the largest of these scales to -32.
 * The biased scales are rounded to nearest from the stored d (clamped to -32..31), the codes to
 * nearest from the decoded scale (clamped to -4..3). */
static void q3_k_quantize(const float *x, void *blk) {
    block_q3_K *b = blk;
    float want[16], want_max = 0.0f;
    for (int k = 0; k < 16; k++) {
        float amax = 0.0f, v = 0.0f;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[16 * k + l]) > amax) amax = fabsf(x[16 * k + l]), v = x[16 * k + l];
        want[k] = v / -4.0f;
        if (fabsf(want[k]) > fabsf(want_max)) want_max = want[k];
    }
    b->d = fp32_to_fp16(want_max / -32.0f);
    const float d = fp16_to_fp32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 12; i++) b->scales[i] = 0;
    for (int k = 0; k < 16; k++) {
        const int k6 = clamp_int((int)nearbyintf(want[k] * id), -32, 31) + 32;
        b->scales[k % 8] |= (uint8_t)((k6 & 0xF) << (4 * (k / 8)));
        b->scales[8 + k % 4] |= (uint8_t)((k6 >> 4) << (2 * (k / 4)));
    }
    for (int i = 0; i < 32; i++) b->hmask[i] = 0;
    for (int i = 0; i < 64; i++) b->qs[i] = 0;
    for (int j = 0; j < 8; j++) {
        struct block_sub32 s;
        q3_k_decode32(b, j, &s); /* the scales as decoded */
        for (int l = 0; l < 32; l++) {
            const float dl = s.d[l / 16];
            const int q = dl != 0.0f ? clamp_int((int)nearbyintf(x[32 * j + l] / dl), -4, 3) : 0;
            /* code q >= 0: low bits q, high bit set; q < 0: low bits q + 4, high bit clear */
            b->qs[32 * (j / 4) + l] |= (uint8_t)((q & 3) << (2 * (j % 4)));
            if (q >= 0) b->hmask[l] |= (uint8_t)(1u << j);
        }
    }
}

const struct block_codec block_codec_q3_k = {
    .info = {.name = "q3_k", .blck_size = QK_K, .type_size = sizeof(block_q3_K), .quantized = true},
    .type = DTYPE_Q3_K,
    .decode32 = q3_k_decode,
    .quantize = q3_k_quantize,
    .source = "ggml-common.h block_q3_K",
};
