/* Plain-C reference quantization, dequantization and dot products (see quant.h). Block layouts
 * follow ggml's ggml-common.h exactly (shared FORMATS.md); the quantizers are numallm's own and
 * only promise valid blocks with a sane error. Integer parts of the dot products are exact, so
 * the fast kernels can only differ from these in the order of the float additions. */
#include "quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "base.h"
#include "blocks/block.h"

static_assert(sizeof(block_q8x) == 40, "block_q8x is 40 bytes");
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes (ggml)");
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 is 20 bytes (ggml)");
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes (ggml)");
static_assert(sizeof(block_q4_K) == 144, "block_q4_K is 144 bytes (ggml)");
static_assert(sizeof(block_q5_K) == 176, "block_q5_K is 176 bytes (ggml)");
static_assert(sizeof(block_q6_K) == 210, "block_q6_K is 210 bytes (ggml)");
static_assert(offsetof(block_q6_K, d) == 208, "block_q6_K keeps d last");
static_assert(offsetof(block_q5_K, qs) == 48, "block_q5_K: d, dmin, scales, qh, qs");

/* The 6-bit (scale, min) pair j < 8 of a Q4_K/Q5_K super-block (ggml get_scale_min_k4). */
static inline void get_scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Inverse of get_scale_min_k4: pack 8 six-bit scales and mins into 12 bytes. */
static void set_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12]) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] |= sc[j] & 63;
            s[j + 4] |= m[j] & 63;
        } else {
            s[j + 4] = (uint8_t)((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Dequantization                                                                           */

static void dequant_q4_0(const block_q4_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[i * QK4_0 + j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
            y[i * QK4_0 + j + QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const block_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[i * QK4_1 + j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[i * QK4_1 + j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void dequant_q8_0(const block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = (float)x[i].qs[j] * d;
    }
}

static void dequant_q4_K(const block_q4_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++) { /* 64-value chunk c: sub-blocks 2c (low) and 2c+1 (high) */
            uint8_t sc, m;
            get_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
        }
    }
}

static void dequant_q5_K(const block_q5_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            get_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

static void dequant_q6_K(const block_q6_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void dequantize_row_ref(enum dtype t, const void *src, float *dst, int64_t n) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    NM_ASSERT(info != NULL && n >= 0 && n % info->blck_size == 0);
    const int64_t nb = n / info->blck_size;
    switch (t) {
    case DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(((const uint16_t *)src)[i]);
        return;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(((const uint16_t *)src)[i]);
        return;
    case DTYPE_Q4_0: dequant_q4_0(src, dst, nb); return;
    case DTYPE_Q4_1: dequant_q4_1(src, dst, nb); return;
    case DTYPE_Q8_0: dequant_q8_0(src, dst, nb); return;
    case DTYPE_Q4_K: dequant_q4_K(src, dst, nb); return;
    case DTYPE_Q5_K: dequant_q5_K(src, dst, nb); return;
    case DTYPE_Q6_K: dequant_q6_K(src, dst, nb); return;
    default: break;
    }
    const struct block_codec *c = block_codec_get(t);
    NM_ASSERT(c != NULL && "dequantize_row_ref: unsupported type");
    block_dequantize_ref(c, src, dst, nb);
}

/* ---------------------------------------------------------------------------------------- */
/* Quantization                                                                             */

/* ggml's quantize_row_q4_0_ref: d maps the value of largest magnitude to -8 exactly, so the
 * asymmetric range [-8, 7] is used in full; the sign of d follows that value. */
static void quant_q4_0(const float *x, block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int q0 = NM_MIN(15, (int)(int8_t)(x[j] * id + 8.5f));
            const int q1 = NM_MIN(15, (int)(int8_t)(x[j + QK4_0 / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ggml's quantize_row_q4_1_ref: 16 levels from the block's min to its max. */
static void quant_q4_1(const float *x, block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) {
            min = fminf(min, x[j]);
            max = fmaxf(max, x[j]);
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int q0 = NM_MIN(15, (int)(int8_t)((x[j] - min) * id + 0.5f));
            const int q1 = NM_MIN(15, (int)(int8_t)((x[j + QK4_1 / 2] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ggml's quantize_row_q8_0_ref: symmetric, d = amax / 127. */
static void quant_q8_0(const float *x, block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* NM_MAX(lo, NM_MIN(hi, (int)nearbyintf(v))) with neither a call nor a branch, so that the
 * quantizers' loops over candidate scales vectorize (GCC 12 at -O2: the clamp as two selects, not
 * one nested conditional). For |v| < 2^22, v + 1.5 * 2^23 lies in [2^23, 2^24), where floats are
 * the integers, so the addition itself rounds v to nearest, ties to even, as nearbyintf does in
 * the default mode, and the subtraction is exact. Larger |v| keeps its sign and stays >= 2^22,
 * so the clamp gives what it gave; NaN and |v| >= 2^31 convert to INT_MIN (x86's cvttss2si and
 * cvttps2dq alike, as nearbyintf's result did): lo. */
static inline int nm_level(float v, int lo, int hi) {
    int l = (int)((v + 0x1.8p23f) - 0x1.8p23f);
    l = l < lo ? lo : l;
    return l > hi ? hi : l;
}

/* Fit x[i] ~= scale * q[i] - min with q in [0, nmax] and min >= 0 (the K-quant convention:
 * the offset is subtracted and never positive, so blocks of all-positive values use min = 0).
 * Weighted least squares (w[i] emphasises large values, as ggml does) over a small grid of
 * candidate step sizes around (max - min) / nmax; each candidate's levels get the optimal
 * (scale, min) in closed form. Returns the scale; *the_min receives min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, float *the_min) {
    /* candidate step sizes: (nmax + 0.1 s) / (hi - lo), s = -10 .. 10 (21; the arrays are padded
     * to 24 so that the loops over the candidates have no remainder, and vectorize) */
    enum { STEPS = 21, LANES = 24 };
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (lo > 0.0f) lo = 0.0f;
    if (hi <= lo) {
        *the_min = -lo;
        return 0.0f;
    }
    /* The candidates side by side: each one's sums still run over i in order, with the same
     * operations as one candidate at a time, so the same bits; the loops over the candidates
     * vectorize (SSE: 4 candidates per instruction). Q4_K's quantizer 3.2x faster (RESULTS.md). */
    float iscale[LANES], sl[LANES], sl2[LANES], slx[LANES], scale[LANES], off[LANES], err[LANES];
    float sw = 0, sx = 0;
    for (int s = 0; s < LANES; s++) {
        iscale[s] = ((float)nmax + 0.1f * (float)(s - STEPS / 2)) / (hi - lo);
        sl[s] = sl2[s] = slx[s] = err[s] = 0.0f;
    }
    for (int i = 0; i < n; i++) {
        sw += w[i];
        sx += w[i] * x[i];
        for (int s = 0; s < LANES; s++) {
            const int l = nm_level(iscale[s] * (x[i] - lo), 0, nmax);
            sl[s] += w[i] * (float)l;
            sl2[s] += w[i] * (float)l * (float)l;
            slx[s] += w[i] * (float)l * x[i];
        }
    }
    bool ok[LANES];
    for (int s = 0; s < LANES; s++) {
        /* Minimise sum w (scale*l + off - x)^2 over scale, off with off <= 0. */
        const float det = sw * sl2[s] - sl[s] * sl[s];
        scale[s] = 1.0f, off[s] = 0.0f;
        ok[s] = s < STEPS && det > 0.0f;
        if (!ok[s]) continue;
        float sc = (sw * slx[s] - sl[s] * sx) / det;
        float of = (sl2[s] * sx - sl[s] * slx[s]) / det;
        if (of > 0.0f) {
            of = 0.0f;
            sc = sl2[s] > 0.0f ? slx[s] / sl2[s] : 0.0f;
        }
        ok[s] = sc > 0.0f;
        if (ok[s]) scale[s] = sc, off[s] = of;
    }
    for (int i = 0; i < n; i++) {
        const float xi = x[i], wi = w[i];
        for (int s = 0; s < LANES; s++) {
            const int l = nm_level((xi - off[s]) / scale[s], 0, nmax);
            const float e = scale[s] * (float)l + off[s] - xi;
            err[s] += wi * e * e;
        }
    }
    float best_scale = (hi - lo) / (float)nmax, best_min = lo, best_err = INFINITY;
    for (int s = 0; s < STEPS; s++)
        if (ok[s] && err[s] < best_err) {
            best_err = err[s];
            best_scale = scale[s];
            best_min = off[s];
        }
    *the_min = -best_min;
    return best_scale;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-value sub-block (scale, min) fits, their
 * 6-bit quantization against d = max scale / 63 and dmin = max min / 63, then the values are
 * quantized against the scales actually stored. L receives the levels of 256 values. */
static void quant_k_scales(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t scales[12], uint8_t L[QK_K]) {
    float scale[8], min[8], w[32];
    float sum_x2 = 0.0f;
    for (int l = 0; l < QK_K; l++) sum_x2 += x[l] * x[l];
    const float av_x = sqrtf(sum_x2 / QK_K);
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scale[j] = fit_scale_min(32, nmax, x + 32 * j, w, &min[j]);
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, min[j]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)NM_MIN(63, (int)nearbyintf(inv_scale * scale[j]));
        mn[j] = (uint8_t)NM_MIN(63, (int)nearbyintf(inv_min * min[j]));
    }
    set_scale_min_k4(sc, mn, scales);
    *d_out = fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = fp32_to_fp16(max_min / 63.0f);
    /* Requantize against the stored (rounded) d, dmin and 6-bit scales. */
    const float d = fp16_to_fp32(*d_out), dmin = fp16_to_fp32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        const float dl = d * sc[j], ml = dmin * mn[j];
        for (int l = 0; l < 32; l++) {
            int q = dl != 0.0f ? (int)nearbyintf((x[32 * j + l] + ml) / dl) : 0;
            L[32 * j + l] = (uint8_t)NM_MAX(0, NM_MIN(nmax, q));
        }
    }
}

static void quant_q4_K(const float *x, block_q4_K *y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quant_k_scales(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void quant_q5_K(const float *x, block_q5_K *y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quant_k_scales(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                if (lo & 16) y[i].qh[l] |= (uint8_t)(1u << (2 * c));
                if (hi & 16) y[i].qh[l] |= (uint8_t)(2u << (2 * c));
            }
        }
    }
}

/* Signed scale for a 16-value group of Q6_K, levels in [-32, 31]: like Q4_0, the value of
 * largest magnitude maps to -32; a few nearby step sizes are tried by weighted squared error. */
static float fit_scale_q6(const float *x, const float *w) {
    /* candidates iscale = -(32 + 0.25 s) / max, s = -6 .. 6 (13), side by side in 16 lanes as in
     * fit_scale_min */
    enum { STEPS = 13, LANES = 16 };
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 16; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax == 0.0f) return 0.0f;
    float iscale[LANES], sl2[LANES], slx[LANES], scale[LANES], dvs[LANES], err[LANES];
    int keep[LANES];
    for (int s = 0; s < LANES; s++) {
        iscale[s] = -(32.0f + 0.25f * (float)(s - STEPS / 2)) / max;
        sl2[s] = slx[s] = err[s] = 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        const float xi = x[i], wi = w[i];
        for (int s = 0; s < LANES; s++) {
            const int l = nm_level(iscale[s] * xi, -32, 31);
            sl2[s] += wi * (float)(l * l);
            slx[s] += wi * (float)l * xi;
        }
    }
    for (int s = 0; s < LANES; s++) {
        scale[s] = !(sl2[s] <= 0.0f) ? slx[s] / sl2[s] : 0.0f;
        dvs[s] = scale[s] != 0.0f ? scale[s] : 1.0f; /* a zero scale's levels are 0: */
        keep[s] = scale[s] != 0.0f ? -1 : 0;
    }
    for (int i = 0; i < 16; i++) {
        const float xi = x[i], wi = w[i];
        for (int s = 0; s < LANES; s++) {
            const int l = nm_level(xi / dvs[s], -32, 31) & keep[s];
            const float e = scale[s] * (float)l - xi;
            err[s] += wi * e * e;
        }
    }
    float best = max / -32.0f, best_err = INFINITY;
    for (int s = 0; s < STEPS; s++)
        if (!(sl2[s] <= 0.0f) && err[s] < best_err) {
            best_err = err[s];
            best = scale[s];
        }
    return best;
}

static void quant_q6_K(const float *x, block_q6_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float scale[16], w[16];
        float amax = 0.0f, max = 0.0f;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++) w[l] = x[16 * g + l] * x[16 * g + l] + 1e-30f;
            scale[g] = fit_scale_q6(x + 16 * g, w);
            if (fabsf(scale[g]) > amax) {
                amax = fabsf(scale[g]);
                max = scale[g];
            }
        }
        /* int8 scales; the largest maps to -128 like ggml (max / -128 keeps its sign in d). */
        const float iscale = max != 0.0f ? -128.0f / max : 0.0f;
        y[i].d = fp32_to_fp16(max != 0.0f ? 1.0f / iscale : 0.0f);
        const float d = fp16_to_fp32(y[i].d);
        uint8_t L[QK_K];
        for (int g = 0; g < 16; g++) {
            const int sc = NM_MAX(-128, NM_MIN(127, (int)nearbyintf(iscale * scale[g])));
            y[i].scales[g] = (int8_t)sc;
            const float dl = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int q = dl != 0.0f ? (int)nearbyintf(x[16 * g + l] / dl) : 0;
                L[16 * g + l] = (uint8_t)(NM_MAX(-32, NM_MIN(31, q)) + 32);
            }
        }
        for (int half = 0; half < 2; half++) {
            uint8_t *ql = y[i].ql + 64 * half, *qh = y[i].qh + 32 * half;
            const uint8_t *Lh = L + 128 * half;
            for (int l = 0; l < 32; l++) {
                const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

void quantize_row_ref(enum dtype t, const float *src, void *dst, int64_t n) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    NM_ASSERT(info != NULL && n >= 0 && n % info->blck_size == 0);
    const int64_t nb = n / info->blck_size;
    switch (t) {
    case DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_fp16(src[i]);
        return;
    case DTYPE_BF16: fp32_to_bf16_row_ref(src, dst, n); return;
    case DTYPE_Q4_0: quant_q4_0(src, dst, nb); return;
    case DTYPE_Q4_1: quant_q4_1(src, dst, nb); return;
    case DTYPE_Q8_0: quant_q8_0(src, dst, nb); return;
    case DTYPE_Q4_K: quant_q4_K(src, dst, nb); return;
    case DTYPE_Q5_K: quant_q5_K(src, dst, nb); return;
    case DTYPE_Q6_K: quant_q6_K(src, dst, nb); return;
    default: break;
    }
    const struct block_codec *c = block_codec_get(t);
    NM_ASSERT(c != NULL && "quantize_row_ref: unsupported type");
    block_quantize_ref(c, src, dst, nb);
}

/* d = amax/127 and qs = x * (1/d) rounded to nearest even. The fast twins compute exactly these
 * float operations, so their output is bit-identical. A block whose 1/d overflows (amax below
 * ~2^-121) quantizes to zeros with d = 0. Inputs must be finite. */
void quantize_act_q8x_ref(const float *x, block_q8x *y, int64_t n) {
    NM_ASSERT(n % QK8X == 0);
    for (int64_t i = 0; i < n / QK8X; i++, x += QK8X) {
        float amax = 0.0f;
        for (int j = 0; j < QK8X; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) d = id = 0.0f;
        int32_t isum = 0;
        for (int j = 0; j < QK8X; j++) {
            const int q = (int)nearbyintf(x[j] * id);
            y[i].qs[j] = (int8_t)q;
            isum += q;
        }
        y[i].d = d;
        y[i].isum = isum;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Dot products. Integer sums per q8x block are exact; the float part is one product per block */

static float dot_q4_0(int64_t nb, const block_q4_0 *x, const block_q8x *a) {
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += (x[i].qs[j] & 0xF) * a[i].qs[j] + (x[i].qs[j] >> 4) * a[i].qs[j + 16];
        sum += fp16_to_fp32(x[i].d) * a[i].d * (float)(s - 8 * a[i].isum);
    }
    return sum;
}

static float dot_q4_1(int64_t nb, const block_q4_1 *x, const block_q8x *a) {
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += (x[i].qs[j] & 0xF) * a[i].qs[j] + (x[i].qs[j] >> 4) * a[i].qs[j + 16];
        sum += fp16_to_fp32(x[i].d) * a[i].d * (float)s +
               fp16_to_fp32(x[i].m) * a[i].d * (float)a[i].isum;
    }
    return sum;
}

static float dot_q8_0(int64_t nb, const block_q8_0 *x, const block_q8x *a) {
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += x[i].qs[j] * a[i].qs[j];
        sum += fp16_to_fp32(x[i].d) * a[i].d * (float)s;
    }
    return sum;
}

/* Q4_K/Q5_K: sub-block j of super-block i meets q8x block 8i + j. */
static float dot_q4_K(int64_t nb, const block_q4_K *x, const block_q8x *a) {
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            const block_q8x *ab = &a[8 * i + j];
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int shift = (j & 1) * 4;
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += ((q[l] >> shift) & 0xF) * ab->qs[l];
            uint8_t sc, m;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            sum += ab->d * (d * (float)(sc * s) - dmin * (float)(m * ab->isum));
        }
    }
    return sum;
}

static float dot_q5_K(int64_t nb, const block_q5_K *x, const block_q8x *a) {
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            const block_q8x *ab = &a[8 * i + j];
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int shift = (j & 1) * 4;
            int32_t s = 0;
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4);
                s += v * ab->qs[l];
            }
            uint8_t sc, m;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            sum += ab->d * (d * (float)(sc * s) - dmin * (float)(m * ab->isum));
        }
    }
    return sum;
}

/* Q6_K: value v of the super-block (0..255), of 16-value group v/16, meets q8x block 8i + v/32. */
static float dot_q6_K(int64_t nb, const block_q6_K *x, const block_q8x *a) {
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int8_t q[QK_K];
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = x[i].ql + 64 * half, *qh = x[i].qh + 32 * half;
            int8_t *qq = q + 128 * half;
            for (int l = 0; l < 32; l++) {
                qq[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                qq[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                qq[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                qq[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        const float d = fp16_to_fp32(x[i].d);
        for (int b = 0; b < 8; b++) {
            const block_q8x *ab = &a[8 * i + b];
            int32_t s = 0;
            for (int g = 0; g < 2; g++) {
                int32_t sg = 0;
                for (int l = 0; l < 16; l++) sg += q[32 * b + 16 * g + l] * ab->qs[16 * g + l];
                s += x[i].scales[2 * b + g] * sg;
            }
            sum += d * ab->d * (float)s;
        }
    }
    return sum;
}

float vec_dot_ref(enum dtype t, int64_t n, const void *w_row, const void *act_row) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    NM_ASSERT(info != NULL && n >= 0 && n % info->blck_size == 0);
    if (dtype_uses_q8x(t)) NM_ASSERT(n % QK8X == 0);
    const int64_t nb = n / info->blck_size;
    const float *af = act_row;
    float sum = 0.0f;
    switch (t) {
    case DTYPE_F32:
        for (int64_t i = 0; i < n; i++) sum += ((const float *)w_row)[i] * af[i];
        return sum;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) sum += fp16_to_fp32(((const uint16_t *)w_row)[i]) * af[i];
        return sum;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) sum += bf16_to_fp32(((const uint16_t *)w_row)[i]) * af[i];
        return sum;
    case DTYPE_Q4_0: return dot_q4_0(nb, w_row, act_row);
    case DTYPE_Q4_1: return dot_q4_1(nb, w_row, act_row);
    case DTYPE_Q8_0: return dot_q8_0(nb, w_row, act_row);
    case DTYPE_Q4_K: return dot_q4_K(nb, w_row, act_row);
    case DTYPE_Q5_K: return dot_q5_K(nb, w_row, act_row);
    case DTYPE_Q6_K: return dot_q6_K(nb, w_row, act_row);
    default: break;
    }
    const struct block_codec *c = block_codec_get(t);
    NM_ASSERT(c != NULL && "vec_dot_ref: unsupported type");
    return block_vec_dot_ref(c, nb, w_row, act_row);
}
