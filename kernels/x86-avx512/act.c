/* AVX-512 activation kernels: SwiGLU, the argmax of a row and the rounding of a row to bf16 (below), and quantization of activations to q8x blocks, bit-identical to quantize_act_q8x_ref:
 * the same float operations (amax / 127, 1 / d, x * (1 / d)) and the same rounding (to nearest
 * even, the MXCSR default that vcvtps2dq uses and nearbyintf follows). */
#include <math.h>

#include "../ops.h"
#include "avx512.h"
#include "simd.h"

static void quantize_act_q8x_avx512(const float *x, block_q8x *y, int64_t n) {
    NM_ASSERT(n % QK8X == 0);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8X; i++, x += QK8X) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const __m512 amax16 = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        const float amax = _mm512_reduce_max_ps(amax16);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) d = id = 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtsepi32_epi8(q1));
        y[i].d = d;
        y[i].isum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}


/* out = silu(gate) * up = gate / (1 + exp(-gate)) * up, 16 lanes at a time (op_swiglu_ref with
 * nm_exp_ps for expf: within a few ulp of it). */
static void swiglu_avx512(float *out, const float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        const __m512 e = nm_exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
    }
}

/* op_argmax_ref's index: the maximum over 4 vectors of 16 lanes (masked tail: -inf), with a
 * mask of any NaN seen (then the scan, whose order puts a NaN first), then the first 16 values
 * that hold it and the lowest such lane. Equal values compare equal (-0.0 == +0.0), so the first
 * of them is found whichever one vmaxps kept. */
static int64_t argmax_avx512(const float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m[4] = {ninf, ninf, ninf, ninf};
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        NM_UNROLL for (int k = 0; k < 4; k++) {
            const __m512 v = _mm512_loadu_ps(x + i + 16 * k);
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            m[k] = _mm512_max_ps(m[k], v);
        }
    for (; i < n; i += 16) {
        const __mmask16 t = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mask_loadu_ps(ninf, t, x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m[0] = _mm512_max_ps(m[0], v);
    }
    if (nan) return op_argmax_ref(x, n);
    const float best = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3])));
    const __m512 b = _mm512_set1_ps(best);
    for (i = 0; i < n; i += 16) {
        const __mmask16 t = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __mmask16 eq = _mm512_mask_cmp_ps_mask(t, _mm512_maskz_loadu_ps(t, x + i), b, _CMP_EQ_OQ);
        if (eq) return i + __builtin_ctz(eq);
    }
    nm_bug(__FILE__, __LINE__, "argmax: the maximum is not in the row");
}

/* fp32_to_bf16 on 16 lanes in integers, as the scalar one: a NaN keeps its sign and top payload
 * with the quiet bit set; everything else rounds to nearest even (subnormals too: VCVTNEPS2BF16
 * would flush them to zero, so it is not used). The row's tail takes masked loads and stores. */
static void to_bf16_avx512(const float *x, uint16_t *y, int64_t n) {
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i half = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(64);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 t = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512i u = _mm512_maskz_loadu_epi32(t, x + i);
        const __m512i hi = _mm512_srli_epi32(u, 16);
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(hi, one))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i r = _mm512_mask_or_epi32(rounded, nan, hi, quiet);
        _mm256_mask_storeu_epi16(y + i, t, _mm512_cvtepi32_epi16(r));
    }
}

void avx512_fill_act(struct kern_isa *t) {
    t->quantize_act_q8x = quantize_act_q8x_avx512;
    t->to_bf16 = to_bf16_avx512;
    t->swiglu = swiglu_avx512;
    t->argmax = argmax_avx512;
}
