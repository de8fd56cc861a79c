/* IQ4_NL's quantizer and codec row (layout, value table and decoder: iq4_nl.h), and the
 * nearest-value search that IQ4_XS's quantizer shares (iq4nl_nearest). */
#include "iq4_nl.h"

#include <assert.h>
#include <math.h>

#include "types.h"

static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl is 18 bytes (ggml)");

static void iq4_nl_decode(const void *blk, int j, struct block_sub32 *out) { iq4_nl_decode32(blk, j, out); }

int iq4nl_nearest(float t) {
    /* the first index of the least distance, the running choice kept by selects rather than a
     * branch per index: the quantizers of IQ4_NL and IQ4_XS 2.0-2.4x faster, the same indices
     * (RESULTS.md, "Making models") */
    float d[16];
    for (int i = 0; i < 16; i++) d[i] = fabsf(t - (float)iq4nl_value((unsigned)i));
    int best = 0;
    float bd = d[0];
    for (int i = 1; i < 16; i++) {
        const bool closer = d[i] < bd;
        best = closer ? i : best;
        bd = closer ? d[i] : bd;
    }
    return best;
}

/* d = v / -127 for the value v of largest magnitude (v itself is then index 0, value -127);
 * each value gets the index whose table value times the stored d is nearest. */
static void iq4_nl_quantize(const float *x, void *blk) {
    block_iq4_nl *b = blk;
    float amax = 0.0f, v = 0.0f;
    for (int l = 0; l < QK4_NL; l++)
        if (fabsf(x[l]) > amax) amax = fabsf(x[l]), v = x[l];
    b->d = fp32_to_fp16(v / -127.0f);
    const float d = fp16_to_fp32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < 16; l++)
        b->qs[l] = (uint8_t)(iq4nl_nearest(x[l] * id) | iq4nl_nearest(x[l + 16] * id) << 4);
}

const struct block_codec block_codec_iq4_nl = {
    .info = {.name = "iq4_nl", .blck_size = QK4_NL, .type_size = sizeof(block_iq4_nl), .quantized = true},
    .type = DTYPE_IQ4_NL,
    .decode32 = iq4_nl_decode,
    .quantize = iq4_nl_quantize,
    .source = "ggml-common.h block_iq4_nl, kvalues_iq4nl",
};
