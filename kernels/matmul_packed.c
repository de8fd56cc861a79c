/* The plain-C packed kernel pk_gemm_ref (packed.h): the reference twin of the AVX-512 and AMX
 * packed kernels. It decodes each code from the packed bytes where packed.h says it is and does,
 * per row, the same f32 operations in the same order as the fast kernels (one fused multiply-add
 * per block or sub-block, via fmaf), so on the same input they agree bit for bit; the integer
 * block sums are exact everywhere. */
#include <math.h>
#include <string.h>

#include "base.h"
#include "blocks/block.h"
#include "blocks/iq4_nl.h"
#include "packed.h"
#include "quant.h"

static inline unsigned nib(const uint8_t *p, int r, int c) {
    const int q = c / 4;
    return (p[64 * (q / 2) + 4 * r + c % 4] >> (4 * (q & 1))) & 0xF;
}
static inline float h16(const uint8_t *p, int idx) {
    uint16_t v;
    memcpy(&v, p + 2 * idx, 2);
    return fp16_to_fp32(v);
}
/* The 6-bit code of row r, column c of Q6_K sub-block `sub`. */
static inline int q6_code(const uint8_t *sub, int r, int c) {
    const int q = c / 4, pos = 4 * r + c % 4;
    const uint8_t hb = sub[256 + 32 * (q / 2) + (pos & 31)];
    const unsigned n = pos >= 32 ? hb >> 4 : hb & 0xF;
    return (int)(nib(sub, r, c) | (((n >> (2 * (q & 1))) & 3) << 4));
}

/* The 2-bit code of row r, column c of a crumb sub-block at p, and the high bit of row r,
 * column c in a sub-block's masks at hi. */
static inline int crumb(const uint8_t *p, int r, int c) {
    const int q = c / 4;
    return (p[64 * (q / 4) + 4 * r + c % 4] >> (2 * (q % 4))) & 3;
}
static inline int hibit(const uint8_t *hi, int r, int c) {
    const int bit = 4 * r + c % 4;
    return (hi[8 * (c / 4) + bit / 8] >> (bit % 8)) & 1;
}
/* The sum of the first 16 activation codes of a block. */
static inline int32_t lo16(const block_q8x *a) {
    int32_t s = 0;
    for (int c = 0; c < 16; c++) s += a->qs[c];
    return s;
}

/* sum over the 32 columns of code(c) * a->qs[c], codes from a nibble sub-block */
static inline int32_t dot_nib(const uint8_t *p, int r, const block_q8x *a) {
    int32_t s = 0;
    for (int c = 0; c < 32; c++) s += (int32_t)nib(p, r, c) * a->qs[c];
    return s;
}

static float unit_q(enum dtype t, const uint8_t *u, int r, const block_q8x *a, float acc) {
    switch (t) {
    case DTYPE_Q4_0: {
        const int32_t s = -8 * a->isum + dot_nib(u, r, a);
        return fmaf((float)s, h16(u + PK_Q4_0_D, r) * a->d, acc);
    }
    case DTYPE_Q4_1: {
        const int32_t s = dot_nib(u, r, a);
        acc = fmaf((float)s, h16(u + PK_Q4_1_D, r) * a->d, acc);
        return fmaf(h16(u + PK_Q4_1_M, r), a->d * (float)a->isum, acc);
    }
    case DTYPE_Q8_0: {
        int32_t s = -128 * a->isum;
        for (int c = 0; c < 32; c++) s += (int32_t)u[64 * (c / 4) + 4 * r + c % 4] * a->qs[c];
        return fmaf((float)s, h16(u + PK_Q8_0_D, r) * a->d, acc);
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const bool five = t == DTYPE_Q5_K;
        const float d = h16(u + (five ? PK_K5_D : PK_K4_D), r), dmin = h16(u + (five ? PK_K5_DMIN : PK_K4_DMIN), r);
        for (int s = 0; s < 8; s++) {
            const block_q8x *ab = a + s;
            int32_t sum = 0;
            for (int c = 0; c < 32; c++) {
                int code = (int)nib(u + 256 * s, r, c);
                if (five) {
                    const int bit = 4 * r + c % 4;
                    code |= ((u[PK_K5_HI + 64 * s + 8 * (c / 4) + bit / 8] >> (bit % 8)) & 1) << 4;
                }
                sum += code * ab->qs[c];
            }
            const float sc = (float)u[(five ? PK_K5_SC : PK_K4_SC) + 16 * s + r] * d;
            const float mn = (float)u[(five ? PK_K5_MN : PK_K4_MN) + 16 * s + r] * dmin;
            acc = fmaf((float)sum, sc * ab->d, acc);
            acc = fmaf(-mn, ab->d * (float)ab->isum, acc);
        }
        return acc;
    }
    case DTYPE_Q6_K: {
        const float d = h16(u + PK_K6_D, r);
        for (int s = 0; s < 8; s++) {
            const block_q8x *ab = a + s;
            const uint8_t *sub = u + PK_K6_SUB * s;
            int32_t lo16 = 0;
            for (int c = 0; c < 16; c++) lo16 += ab->qs[c];
            int32_t g[2] = {-32 * lo16, -32 * (ab->isum - lo16)};
            for (int c = 0; c < 32; c++) g[c / 16] += q6_code(sub, r, c) * ab->qs[c];
            const int32_t sum = g[0] * (int8_t)u[PK_K6_SC + 16 * (2 * s) + r] +
                                g[1] * (int8_t)u[PK_K6_SC + 16 * (2 * s + 1) + r];
            acc = fmaf((float)sum, d * ab->d, acc);
        }
        return acc;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        int32_t s = t == DTYPE_Q5_0 ? -16 * a->isum : 0;
        for (int c = 0; c < 32; c++) s += ((int32_t)nib(u, r, c) + 16 * hibit(u + PK_Q5_HI, r, c)) * a->qs[c];
        acc = fmaf((float)s, h16(u + PK_Q5_D, r) * a->d, acc);
        return t == DTYPE_Q5_1 ? fmaf(h16(u + PK_Q5_1_M, r), a->d * (float)a->isum, acc) : acc;
    }
    case DTYPE_IQ4_NL: {
        int32_t s = 0;
        for (int c = 0; c < 32; c++) s += iq4nl_value(nib(u, r, c)) * a->qs[c];
        return fmaf((float)s, h16(u + PK_NL_D, r) * a->d, acc);
    }
    case DTYPE_Q2_K: {
        const float d = h16(u + PK_K2_D, r), dmin = h16(u + PK_K2_DMIN, r);
        for (int s = 0; s < 8; s++) {
            const block_q8x *ab = a + s;
            int32_t g[2] = {0, 0};
            for (int c = 0; c < 32; c++) g[c / 16] += crumb(u + PK_K2_SUB * s, r, c) * ab->qs[c];
            const unsigned s0 = u[PK_K2_SC + 16 * (2 * s) + r], s1 = u[PK_K2_SC + 16 * (2 * s + 1) + r];
            const int32_t lo = lo16(ab);
            const int32_t sum = g[0] * (int32_t)(s0 & 15) + g[1] * (int32_t)(s1 & 15);
            const int32_t mins = (int32_t)(s0 >> 4) * lo + (int32_t)(s1 >> 4) * (ab->isum - lo);
            acc = fmaf((float)sum, d * ab->d, acc);
            acc = fmaf(-(float)mins, dmin * ab->d, acc);
        }
        return acc;
    }
    case DTYPE_Q3_K: {
        const float d = h16(u + PK_K3_D, r);
        for (int s = 0; s < 8; s++) {
            const block_q8x *ab = a + s;
            const int32_t lo = lo16(ab);
            int32_t g[2] = {-4 * lo, -4 * (ab->isum - lo)};
            for (int c = 0; c < 32; c++)
                g[c / 16] += (crumb(u + PK_K2_SUB * s, r, c) + 4 * hibit(u + PK_K3_HI + 64 * s, r, c)) * ab->qs[c];
            const int32_t sum = g[0] * (int8_t)u[PK_K3_SC + 16 * (2 * s) + r] +
                                g[1] * (int8_t)u[PK_K3_SC + 16 * (2 * s + 1) + r];
            acc = fmaf((float)sum, d * ab->d, acc);
        }
        return acc;
    }
    case DTYPE_IQ4_XS: {
        const float d = h16(u + PK_XS_D, r);
        for (int s = 0; s < 8; s++) {
            const block_q8x *ab = a + s;
            int32_t sum = 0;
            for (int c = 0; c < 32; c++) sum += iq4nl_value(nib(u + 256 * s, r, c)) * ab->qs[c];
            acc = fmaf((float)sum, d * (float)(int8_t)u[PK_XS_LS + 16 * s + r] * ab->d, acc);
        }
        return acc;
    }
    default: nm_bug(__FILE__, __LINE__, "pk_gemm_ref: type without a packed layout");
    }
}

/* Row r, column c of a quantized unit as the bf16 tiles take it before rounding to bf16 (the
 * same f32 operations as amx_bf_block: code x scale, or fmaf(code, scale, min)). */
static float unit_weight(enum dtype t, const uint8_t *u, int r, int c) {
    switch (t) {
    case DTYPE_Q4_0: return (float)((int)nib(u, r, c) - 8) * h16(u + PK_Q4_0_D, r);
    case DTYPE_Q4_1: return fmaf((float)nib(u, r, c), h16(u + PK_Q4_1_D, r), h16(u + PK_Q4_1_M, r));
    case DTYPE_Q8_0: return (float)((int)u[64 * (c / 4) + 4 * r + c % 4] - 128) * h16(u + PK_Q8_0_D, r);
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const bool five = t == DTYPE_Q5_K;
        const int s = c / 32, cc = c % 32;
        int code = (int)nib(u + 256 * s, r, cc);
        if (five) {
            const int bit = 4 * r + cc % 4;
            code |= ((u[PK_K5_HI + 64 * s + 8 * (cc / 4) + bit / 8] >> (bit % 8)) & 1) << 4;
        }
        const float sc = (float)u[(five ? PK_K5_SC : PK_K4_SC) + 16 * s + r] * h16(u + (five ? PK_K5_D : PK_K4_D), r);
        const float mn = (float)u[(five ? PK_K5_MN : PK_K4_MN) + 16 * s + r] * h16(u + (five ? PK_K5_DMIN : PK_K4_DMIN), r);
        return fmaf((float)code, sc, -mn);
    }
    case DTYPE_Q6_K: {
        const int s = c / 32, cc = c % 32;
        const float sc = h16(u + PK_K6_D, r) * (float)(int8_t)u[PK_K6_SC + 16 * (2 * s + cc / 16) + r];
        return (float)(q6_code(u + PK_K6_SUB * s, r, cc) - 32) * sc;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        const int q = (int)nib(u, r, c) + 16 * hibit(u + PK_Q5_HI, r, c);
        if (t == DTYPE_Q5_1) return fmaf((float)q, h16(u + PK_Q5_D, r), h16(u + PK_Q5_1_M, r));
        return (float)(q - 16) * h16(u + PK_Q5_D, r);
    }
    case DTYPE_IQ4_NL: return (float)iq4nl_value(nib(u, r, c)) * h16(u + PK_NL_D, r);
    case DTYPE_Q2_K: {
        const int s = c / 32, cc = c % 32;
        const unsigned sc = u[PK_K2_SC + 16 * (2 * s + cc / 16) + r];
        const float dl = h16(u + PK_K2_D, r) * (float)(sc & 15), ml = h16(u + PK_K2_DMIN, r) * (float)(sc >> 4);
        return fmaf((float)crumb(u + PK_K2_SUB * s, r, cc), dl, -ml);
    }
    case DTYPE_Q3_K: {
        const int s = c / 32, cc = c % 32;
        const float sc = h16(u + PK_K3_D, r) * (float)(int8_t)u[PK_K3_SC + 16 * (2 * s + cc / 16) + r];
        const int q = crumb(u + PK_K2_SUB * s, r, cc) + 4 * hibit(u + PK_K3_HI + 64 * s, r, cc);
        return (float)(q - 4) * sc;
    }
    case DTYPE_IQ4_XS: {
        const int s = c / 32, cc = c % 32;
        const float sc = h16(u + PK_XS_D, r) * (float)(int8_t)u[PK_XS_LS + 16 * s + r];
        return (float)iq4nl_value(nib(u + 256 * s, r, cc)) * sc;
    }
    default: nm_bug(__FILE__, __LINE__, "pk_gemm_ref: type without a packed layout");
    }
}

void pk_gemm_ref(const struct pk_args *a) {
    const enum dtype t = a->type;
    const size_t ub = pk_unit_bytes(t);
    const int ucols = pk_unit_cols(t);
    const bool fl = t == DTYPE_F16 || t == DTYPE_BF16;
    if (a->bf16_tiles) { /* bf16 weights and activations (bf16 rows), f32 sum in column order */
        NM_ASSERT(!fl);
        const struct block_codec *bc = a->codec; /* a ROWS-layout block type */
        const int uc = bc ? (int)bc->info.blck_size : ucols;
        const size_t rb = a->group_stride / PK_ROWS;
        for (int64_t g = 0; g < a->n_groups; g++) {
            const uint8_t *wg = a->w + (size_t)g * a->group_stride;
            const int rows = (int)NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
            for (int c = 0; c < a->m; c++) {
                const uint16_t *x = (const uint16_t *)(a->act + (size_t)c * a->act_stride);
                for (int r = 0; r < rows; r++) {
                    float acc = 0.0f;
                    struct block_sub32 b = {0};
                    for (int64_t u = 0; u < a->n_units; u++)
                        for (int k = 0; k < uc; k++) {
                            if (bc && k % 32 == 0)
                                bc->decode32(wg + (size_t)r * rb + (size_t)u * bc->info.type_size, k / 32, &b);
                            const float v = bc ? b.d[(k % 32) / 16] * (float)b.q[k % 32] + b.m[(k % 32) / 16]
                                               : unit_weight(t, wg + (size_t)u * ub, r, k);
                            acc = fmaf(bf16_to_fp32(fp32_to_bf16(v)), bf16_to_fp32(x[u * uc + k]), acc);
                        }
                    const int64_t o = (int64_t)c * a->ldy + g * PK_ROWS + r;
                    if (a->yd) a->yd[o] += (double)acc;
                    else a->y[o] = acc;
                }
            }
        }
        return;
    }
    for (int64_t g = 0; g < a->n_groups; g++) {
        const uint8_t *wg = a->w + (size_t)g * a->group_stride;
        const int rows = (int)NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
        for (int c = 0; c < a->m; c++) {
            const uint8_t *act = a->act + (size_t)c * a->act_stride;
            for (int r = 0; r < rows; r++) {
                float acc = 0.0f, acc1 = 0.0f;
                for (int64_t u = 0; u < a->n_units; u++) {
                    const uint8_t *up = wg + (size_t)u * ub;
                    if (fl) {
                        const float *x = (const float *)act + 32 * u;
                        for (int p = 0; p < 16; p++) {
                            uint16_t v[2];
                            memcpy(v, up + 64 * p + 4 * r, 4);
                            const float w0 = t == DTYPE_F16 ? fp16_to_fp32(v[0]) : bf16_to_fp32(v[0]);
                            const float w1 = t == DTYPE_F16 ? fp16_to_fp32(v[1]) : bf16_to_fp32(v[1]);
                            acc = fmaf(w0, x[2 * p], acc);
                            acc1 = fmaf(w1, x[2 * p + 1], acc1);
                        }
                    } else {
                        acc = unit_q(t, up, r, (const block_q8x *)act + (ucols / 32) * u, acc);
                    }
                }
                const int64_t o = (int64_t)c * a->ldy + g * PK_ROWS + r;
                if (a->yd) a->yd[o] += (double)(fl ? acc + acc1 : acc);
                else a->y[o] = fl ? acc + acc1 : acc;
            }
        }
    }
}
