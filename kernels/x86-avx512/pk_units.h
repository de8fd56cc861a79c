/* AVX-512 readers of the packed units' parts (packed.h) that the VNNI kernels
 * (x86-avx512/packed.c) and the AMX body (x86-amx/amx_body.h) share, so that both take the same
 * codes and scales and do the same f32 step (the same bits): the crumb codes of Q2_K/Q3_K, the
 * iq4nl lookup, the integer scales of Q2_K/Q3_K/Q6_K sub-blocks and IQ4_XS's sub-block scale. */
#ifndef NM_X86_AVX512_PK_UNITS_H
#define NM_X86_AVX512_PK_UNITS_H

#include <string.h>

#include "../blocks/iq4_nl.h"
#include "../packed.h"
#include "simd.h"

/* Codes of a crumb sub-block (Q2_K; Q3_K with its third bits at hi: 8 masks, adding 4): line
 * L = 0, 1 gives quads 4L + j at bits 2j. */
NM_INLINE void pk_crumb_codes(const uint8_t *p, const uint8_t *hi, __m512i q[8]) {
    const __m512i m3 = _mm512_set1_epi8(3);
    NM_UNROLL for (int l = 0; l < 2; l++) {
        const __m512i v = _mm512_loadu_si512(p + 64 * l);
        NM_UNROLL for (int j = 0; j < 4; j++) {
            q[4 * l + j] = _mm512_and_si512(j ? _mm512_srli_epi16(v, 2 * j) : v, m3);
            if (hi) {
                uint64_t k;
                memcpy(&k, hi + 8 * (4 * l + j), 8);
                q[4 * l + j] = _mm512_mask_add_epi8(q[4 * l + j], (__mmask64)k, q[4 * l + j], _mm512_set1_epi8(4));
            }
        }
    }
}

/* The 16 iq4nl values (-127..113) by index, in every 128-bit lane (iq4_nl.h's constants). */
NM_INLINE __m512i pk_iq4_values(void) {
    return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)IQ4NL_HI, (long long)IQ4NL_LO));
}

/* The integer scales of sub-block s of a Q2_K, Q3_K or Q6_K unit, one int32 lane per row: the
 * two 16-column halves' scales, and Q2_K's mins (zero for the others). */
struct pk_k_scales {
    __m512i sc[2], mn[2];
};
NM_INLINE struct pk_k_scales pk_k_scales(enum dtype t, const uint8_t *u, int s) {
    struct pk_k_scales k;
    k.mn[0] = k.mn[1] = _mm512_setzero_si512();
    NM_UNROLL for (int h = 0; h < 2; h++) {
        if (t == DTYPE_Q2_K) {
            const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(u + PK_K2_SC + 32 * s + 16 * h)));
            k.sc[h] = _mm512_and_si512(b, _mm512_set1_epi32(15));
            k.mn[h] = _mm512_srli_epi32(b, 4);
        } else {
            const uint8_t *p = u + (t == DTYPE_Q3_K ? PK_K3_SC : PK_K6_SC) + 32 * s + 16 * h;
            k.sc[h] = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
        }
    }
    return k;
}

/* acc plus the f32 step of such a sub-block for one activation block (its d_a, isum and the sum
 * lo of its first 16 codes): g0, g1 the exact integer sums of the two halves (offsets included),
 *   acc + f32(g0 sc0 + g1 sc1) * (d * d_a)  [ - f32(mn0 lo + mn1 (isum - lo)) * (dmin * d_a) ]. */
NM_INLINE __m512 pk_k_step(const struct pk_k_scales *k, bool mins, __m512i g0, __m512i g1, __m512 d, __m512 dmin,
                           float ad, int32_t isum, int32_t lo, __m512 acc) {
    const __m512 a = _mm512_set1_ps(ad);
    const __m512i sum = _mm512_add_epi32(_mm512_mullo_epi32(g0, k->sc[0]), _mm512_mullo_epi32(g1, k->sc[1]));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, a), acc);
    if (!mins) return acc;
    const __m512i m = _mm512_add_epi32(_mm512_mullo_epi32(k->mn[0], _mm512_set1_epi32(lo)),
                                       _mm512_mullo_epi32(k->mn[1], _mm512_set1_epi32(isum - lo)));
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, a), acc);
}

/* IQ4_XS sub-block s's scale per row: d * (ls - 32), in f32. */
NM_INLINE __m512 pk_xs_scale(const uint8_t *u, int s) {
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + PK_XS_D))),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(u + PK_XS_LS + 16 * s)))));
}

#endif
