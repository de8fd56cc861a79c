/* The codec table and the generic reference paths over the block decoder interface (block.h). */
#include "block.h"

#include "base.h"
#include "quant.h"

/* One row per type that goes through the interface, indexed by ggml type id. */
static const struct block_codec *const g_codecs[DTYPE_COUNT] = {
#define BLOCK_CODEC_ROW(T, t) [DTYPE_##T] = &block_codec_##t,
    BLOCK_TYPES(BLOCK_CODEC_ROW)
#undef BLOCK_CODEC_ROW
};

const struct block_codec *block_codec_get(enum dtype t) {
    if ((unsigned)t >= DTYPE_COUNT) return NULL;
    return g_codecs[t];
}

void block_dequantize_ref(const struct block_codec *c, const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    const int nsub = c->info.blck_size / BLK_SUB;
    for (int64_t i = 0; i < nb; i++, b += c->info.type_size) {
        for (int j = 0; j < nsub; j++) {
            struct block_sub32 s;
            c->decode32(b, j, &s);
            for (int l = 0; l < BLK_SUB; l++) *dst++ = s.d[l / 16] * (float)s.q[l] + s.m[l / 16];
        }
    }
}

void block_quantize_ref(const struct block_codec *c, const float *src, void *dst, int64_t nb) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += c->info.type_size, src += c->info.blck_size) c->quantize(src, b);
}

float block_vec_dot_ref(const struct block_codec *c, int64_t nb, const void *w, const void *act) {
    const uint8_t *b = w;
    const block_q8x *a = act;
    const int nsub = c->info.blck_size / BLK_SUB;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, b += c->info.type_size) {
        for (int j = 0; j < nsub; j++, a++) {
            struct block_sub32 s;
            c->decode32(b, j, &s);
            int32_t sq[2] = {0, 0}, sa[2] = {0, 0};
            for (int l = 0; l < BLK_SUB; l++) {
                sq[l / 16] += s.q[l] * a->qs[l];
                sa[l / 16] += a->qs[l];
            }
            sum += a->d * ((s.d[0] * (float)sq[0] + s.d[1] * (float)sq[1]) +
                           (s.m[0] * (float)sa[0] + s.m[1] * (float)sa[1]));
        }
    }
    return sum;
}
