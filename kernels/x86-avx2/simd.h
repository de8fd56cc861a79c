/* Helpers shared by the AVX2 kernel files (packed.c, blocks.c); only included by files built
 * with the AVX2 flags of kernels.cmake. */
#ifndef NM_X86_AVX2_SIMD_H
#define NM_X86_AVX2_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#include "../blocks/iq4_nl.h"
#include "avx2.h"

/* 0xFF in byte c where bit c of m is set, else 0: the 32 bits of m spread one per byte (a
 * broadcast, a byte shuffle that gives byte c the byte c / 8 of m, and a compare with bit c % 8).
 * The fifth bits of Q5_0/Q5_1/Q5_K, the third of Q3_K, the sign bits of IQ2_S/IQ3_S. */
NM_INLINE __m256i avx2_bytes_of_bits(uint32_t m) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)m), spread), bit), bit);
}

/* The 16 iq4nl values by index in both 128-bit lanes (iq4_nl.h's constants): a vpshufb table
 * that maps IQ4_NL/IQ4_XS nibbles to their values. */
NM_INLINE __m256i avx2_iq4nl_lut(void) {
    return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)IQ4NL_HI, (long long)IQ4NL_LO));
}

#endif
