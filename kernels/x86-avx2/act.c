/* AVX2 activation kernels: the argmax of a row (below), and the quantization of activations to
 * q8x blocks, bit-identical to quantize_act_q8x_ref as the AVX-512 one is (x86-avx512/act.c):
 * the same float operations (amax / 127, 1 / d, x * (1 / d)) and the same rounding (to nearest
 * even, the MXCSR default that vcvtps2dq uses and nearbyintf follows). */
#include <immintrin.h>
#include <math.h>

#include "../base.h"
#include "../ops.h"
#include "../quant.h"
#include "avx2.h"

static void quantize_act_q8x_avx2(const float *x, block_q8x *y, int64_t n) {
    NM_ASSERT(n % QK8X == 0);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8X; i++, x += QK8X) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) d = id = 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
        /* int32 -> int8 (saturating; |q| <= 127 here), then the 128-bit lanes' interleave undone */
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        y[i].d = d;
        y[i].isum = _mm_cvtsi128_si32(s4);
    }
}

/* op_argmax_ref's index, as the AVX-512 one (x86-avx512/act.c): the maximum over 4 vectors of 8
 * lanes and a NaN check (a row with a NaN goes to the scan), then the first 8 values that hold it
 * and the lowest such lane; the tail (n % 8 values) one by one. */
static int64_t argmax_avx2(const float *x, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m[4] = {ninf, ninf, ninf, ninf}, nan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            m[k] = _mm256_max_ps(m[k], v);
        }
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m[0] = _mm256_max_ps(m[0], v);
    }
    if (_mm256_movemask_ps(nan)) return op_argmax_ref(x, n);
    __m256 v = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float best = _mm_cvtss_f32(h);
    for (int64_t j = i; j < n; j++) { /* the tail: a NaN goes to the scan as above */
        if (isnan(x[j])) return op_argmax_ref(x, n);
        if (x[j] > best) best = x[j];
    }
    const __m256 b = _mm256_set1_ps(best);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + k), b, _CMP_EQ_OQ));
        if (eq) return k + __builtin_ctz((unsigned)eq);
    }
    for (; k < n; k++)
        if (x[k] == best) return k;
    nm_bug(__FILE__, __LINE__, "argmax: the maximum is not in the row");
}

void avx2_fill_act(struct kern_isa *t) {
    t->quantize_act_q8x = quantize_act_q8x_avx2;
    t->argmax = argmax_avx2;
}
