/* AVX2 kernels of the packed layouts (packed.h), for x86-64 CPUs without AVX-512 (AMD Zen 2
 * and 3, Intel client cores): the decode GEMV (m = 1) and the GEMM for any m.
 *
 * One ymm lane per weight row, as the AVX-512 kernels have one zmm lane: a unit's 64-byte line
 * is two ymm halves, rows 0-7 and rows 8-15. There is no VNNI, so the integer dot product of a
 * line (8 rows x one quad of 4 columns) with a broadcast activation quad is vpmaddubsw (u8 code
 * x s8 activation, pairs summed to int16) then vpmaddwd with ones (int16 pairs to int32 lanes).
 * Exactness of the int16 step: activations lie in [-127, 127], so a pair sum is at most
 * 2 x max_code x 127, and the kernel adds in int16 only as many of them as stay below 2^15:
 * 8 quads of 4-bit codes (30480), 4 of 5-bit codes (Q5_0, Q5_1, Q5_K: 31496), 4 of Q2_K's 2-bit
 * or Q3_K's 3-bit codes (one 16-column scale group: 7112), 2 of 6-bit codes (32004). Q8_0's
 * 8-bit codes and the iq4nl values of IQ4_NL/IQ4_XS (-127..113) take the sign trick (|code| as
 * the u8 operand, the activation with the code's sign as the s8 one: at most 2 x 128 x 127),
 * one quad per int32 step. The K-quants' 6-bit (Q3_K) and 4-bit (Q2_K) group scales multiply the
 * int16 sums in vpmaddwd, Q2_K's mins the activations' 16-column sums. Every integer sum is
 * therefore exact, the same int32 as pk_gemm_ref's, and the f32 steps per block (sub-block) and
 * row are those of pk_gemm_ref in its order: the packed kernels give the same bits.
 *
 * F16/BF16 pairs: exact widening to f32 (vcvtph2ps; a 16-bit shift or mask for bf16), f32 FMA
 * with the f32 activations, each row's even and odd columns in two chains summed at the end,
 * as pk_gemm_ref does.
 *
 * GEMV: both halves of each unit in one pass, so each weight line is read once from memory.
 * GEMM: a tile is one half (8 rows) x up to 4 (quantized) or 6 (float) activation rows over
 * all of K, the group's bytes reread from L1/L2 for each tile.
 * Both take a row-parallel matmul's chunks in one call (pk_args.chunk_end; quantized types),
 * ending on any 32-column block: a chunk's f32 partials go to yd in double where it ends, even
 * inside a unit. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "../base.h"
#include "../packed.h"
#include "../quant.h"
#include "simd.h"

/* Activation rows per GEMM tile (at most): the float types' tile holds 2 x 6 accumulators, 2
 * weight vectors and a broadcast in the 16 ymm registers; the quantized ones' 8 code vectors,
 * 4 accumulators and the int16 sums (6 rows spill: bench_gemm -t 2 -m 512, 2048x8192, AMD EPYC
 * Zen 3: Q4_K 0.138 against 0.222 TOP/s with 4, Q6_K 0.123 against 0.136). */
#define GEMM_C 6
NM_INLINE int gemm_c(enum dtype t) { return t == DTYPE_F16 || t == DTYPE_BF16 ? 6 : 4; }

NM_INLINE __m256i bq(const block_q8x *a, int q) { /* activation quad q, broadcast */
    int32_t v;
    memcpy(&v, a->qs + 4 * q, 4);
    return _mm256_set1_epi32(v);
}
NM_INLINE __m256 h16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
NM_INLINE __m256 u8x8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
NM_INLINE __m256i s8x8(const uint8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* int32 lanes: sum over quads [q0, q1) of codes q[i] . activation quad i, in int16 first
 * (callers keep q1 - q0 within the bound above for their code width). */
NM_INLINE __m256i dot16(const __m256i *q, const block_q8x *a, int q0, int q1) {
    __m256i s = _mm256_maddubs_epi16(q[q0], bq(a, q0));
    NM_UNROLL for (int i = q0 + 1; i < q1; i++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[i], bq(a, i)));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

/* Codes of half h of a nibble sub-block at p: q[2j] = quad 2j (low nibbles of line j),
 * q[2j + 1] = quad 2j + 1. */
NM_INLINE void nib_half(const uint8_t *p, int h, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    NM_UNROLL for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * j + 32 * h));
        q[2 * j] = _mm256_and_si256(v, m4);
        q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

/* The high-bit mask of one quad's line half (8 rows x 4 columns: bit 4 r + i), as a u32. */
NM_INLINE uint32_t hi32(const uint8_t *p) {
    uint32_t m;
    memcpy(&m, p, 4);
    return m;
}

/* v in byte i where bit i of m is set, else 0 (Q5_0/Q5_1/Q5_K's fifth bits, v = 0x10; Q3_K's
 * third, v = 4; one quad, 8 rows). */
NM_INLINE __m256i bits_val(uint32_t m, char v) { return _mm256_and_si256(avx2_bytes_of_bits(m), _mm256_set1_epi8(v)); }

/* Codes of half h of a crumb sub-block at p (Q2_K; Q3_K's low 2 bits): line L gives quads
 * 4L + j at bits 2j. */
NM_INLINE void crumb_half(const uint8_t *p, int h, __m256i q[8]) {
    const __m256i m3 = _mm256_set1_epi8(3);
    NM_UNROLL for (int l = 0; l < 2; l++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * l + 32 * h));
        NM_UNROLL for (int j = 0; j < 4; j++) q[4 * l + j] = _mm256_and_si256(j ? _mm256_srli_epi16(v, 2 * j) : v, m3);
    }
}

/* int32 lanes: the dot product of 8 quads of signed values v (-127..127) with activation block
 * a. vpmaddubsw takes |v| and the activation with v's sign (a pair sums to at most 2 x 127 x
 * 127, so each quad goes to int32 on its own). */
NM_INLINE __m256i dot_signed(const __m256i *v, const block_q8x *a) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
    NM_UNROLL for (int i = 0; i < 8; i++) {
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v[i]), _mm256_sign_epi8(bq(a, i), v[i]));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    return s;
}

/* The sum of the first 16 activation codes of a block (the Q2_K mins' and the K-quant code
 * offsets' 16-column halves). */
NM_INLINE int32_t lo16(const block_q8x *a) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)a->qs), _mm_set1_epi8((char)0x80));
    const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128()); /* two sums of 8 codes + 128 */
    return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}

NM_INLINE __m256i set_pair16(int32_t lo, int32_t hi) {
    return _mm256_set1_epi32((int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFF)));
}

/* Store the first `rows` lanes of v at y, or (yd not NULL) add them, widened to double, to yd. */
NM_INLINE void store_rows(float *y, double *yd, int rows, __m256 v) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), iota);
    if (!yd) {
        _mm256_maskstore_ps(y, m, v);
        return;
    }
    const __m256i m0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(m)), m1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1));
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    _mm256_maskstore_pd(yd, m0, _mm256_add_pd(_mm256_maskload_pd(yd, m0), lo));
    _mm256_maskstore_pd(yd + 4, m1, _mm256_add_pd(_mm256_maskload_pd(yd + 4, m1), hi));
}

/* Chunk ends inside a unit (pk_args.chunk_end): bit s of mask set when a chunk ends after
 * sub-block s; the half's f32 partials of the C activation rows then go to its 8 rows of yd in
 * double (yd points at the half's first row, activation row c at yd + c * ldy; rows of it exist)
 * and restart from 0, as a call per chunk would. */
struct chunk_flush {
    uint32_t mask;
    double *yd;
    int64_t ldy;
    int rows;
};
NM_INLINE void flush_after(const struct chunk_flush *f, int s, const int C, __m256 *acc) {
    if (!f || !(f->mask >> s & 1)) return;
    NM_UNROLL for (int c = 0; c < C; c++) {
        if (f->rows > 0) store_rows(NULL, f->yd + c * f->ldy, f->rows < 8 ? f->rows : 8, acc[c]);
        acc[c] = _mm256_setzero_ps();
    }
}

/* Halves [H0, H1) of one Q2_K or Q3_K unit u against C activation rows (as unit_q; acc[h][c]),
 * the halves inside the sub-block loop so that each activation block's sums serve both. Per
 * sub-block and half: the int16 sums of quads 0-3 and 4-7 (2-bit codes, or 3-bit with Q3_K's
 * third bits: at most 4 x 2 x 7 x 127) times the halves' integer scales by vpmaddwd (exact),
 * then pk_gemm_ref's f32 step(s). */
NM_INLINE void unit_k23(const enum dtype t, const int C, const int H0, const int H1, const uint8_t *u,
                        const uint8_t *act, size_t as, int64_t blk0, __m256 acc[2][GEMM_C],
                        const struct chunk_flush *fl) {
    const int three = t == DTYPE_Q3_K;
    __m256 d[2], dmin[2];
    NM_UNROLL for (int h = H0; h < H1; h++) {
        d[h] = h16x8(u + (three ? PK_K3_D : PK_K2_D) + 16 * h);
        dmin[h] = three ? d[h] : h16x8(u + PK_K2_DMIN + 16 * h);
    }
    /* int16 pair (x, x) from the low int16 of each dword pair (x, y), and (y, y) */
    const __m256i dup_lo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9,
                                            8, 9, 12, 13, 12, 13);
    const __m256i dup_hi = _mm256_add_epi8(dup_lo, _mm256_set1_epi8(2));
    for (int s = 0; s < 8; s++) {
        __m256i lo_pair[GEMM_C]; /* Q2_K: (lo, isum - lo); Q3_K: -4 x that (the codes' offset) */
        __m256 ad[GEMM_C];
        NM_UNROLL for (int c = 0; c < C; c++) {
            const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
            const int32_t lo = lo16(a), f = three ? -4 : 1;
            lo_pair[c] = set_pair16(f * lo, f * (a->isum - lo));
            ad[c] = _mm256_set1_ps(a->d);
        }
        NM_UNROLL for (int h = H0; h < H1; h++) {
            __m256i q[8];
            crumb_half(u + PK_K2_SUB * s, h, q);
            /* the 8 rows' scale bytes of the two 16-column groups as int16 pairs (g0, g1) per row */
            const __m128i b = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(u + (three ? PK_K3_SC : PK_K2_SC) + 32 * s + 8 * h)),
                                                _mm_loadl_epi64((const __m128i *)(u + (three ? PK_K3_SC : PK_K2_SC) + 32 * s + 16 + 8 * h)));
            __m256i sc, off; /* sc: the scales (sc0, sc1); off: Q2_K's mins (mn0, mn1), Q3_K's scales again */
            if (three) {
                NM_UNROLL for (int i = 0; i < 8; i++)
                    q[i] = _mm256_or_si256(q[i], bits_val(hi32(u + PK_K3_HI + 64 * s + 8 * i + 4 * h), 4));
                sc = off = _mm256_cvtepi8_epi16(b);
            } else {
                const __m256i w = _mm256_cvtepu8_epi16(b);
                sc = _mm256_and_si256(w, _mm256_set1_epi16(15));
                off = _mm256_srli_epi16(w, 4);
            }
            const __m256i sc0 = _mm256_shuffle_epi8(sc, dup_lo), sc1 = _mm256_shuffle_epi8(sc, dup_hi);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                __m256i s0 = _mm256_maddubs_epi16(q[0], bq(a, 0)), s1 = _mm256_maddubs_epi16(q[4], bq(a, 4));
                NM_UNROLL for (int i = 1; i < 4; i++) {
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[i], bq(a, i)));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[4 + i], bq(a, 4 + i)));
                }
                __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s0, sc0), _mm256_madd_epi16(s1, sc1));
                if (three) /* - 4 (lo sc0 + (isum - lo) sc1) */
                    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(off, lo_pair[c]));
                acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d[h], ad[c]), acc[h][c]);
                if (!three) /* the mins: mn0 lo + mn1 (isum - lo) */
                    acc[h][c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(off, lo_pair[c])),
                                                 _mm256_mul_ps(dmin[h], ad[c]), acc[h][c]);
            }
            if (fl) flush_after(&fl[h], s, C, acc[h]);
        }
    }
}

/* Half h of one quantized unit u against C activation rows (row c's blocks at act + c * as,
 * from block blk0): acc[c] += its f32 terms, in pk_gemm_ref's order. */
NM_INLINE void unit_q(const enum dtype t, const int C, const int h, const uint8_t *u, const uint8_t *act, size_t as,
                      int64_t blk0, __m256 *acc, const struct chunk_flush *fl) {
    __m256i q[8];
    switch (t) {
    case DTYPE_Q4_0:
    case DTYPE_Q4_1:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
    case DTYPE_IQ4_NL: { /* nibble codes (+ a fifth bit, or looked up), one scale (+ Q4_1/Q5_1's m) */
        const int five = t == DTYPE_Q5_0 || t == DTYPE_Q5_1, nl = t == DTYPE_IQ4_NL;
        const int off = t == DTYPE_Q4_0 ? 8 : t == DTYPE_Q5_0 ? 16 : 0; /* the codes' offset */
        nib_half(u, h, q);
        if (nl) {
            const __m256i lut = avx2_iq4nl_lut();
            NM_UNROLL for (int i = 0; i < 8; i++) q[i] = _mm256_shuffle_epi8(lut, q[i]);
        } else if (five) {
            NM_UNROLL for (int i = 0; i < 8; i++)
                q[i] = _mm256_or_si256(q[i], bits_val(hi32(u + PK_Q5_HI + 8 * i + 4 * h), 0x10));
        }
        _Static_assert(PK_Q4_0_D == PK_Q4_1_D && PK_Q4_0_D == PK_NL_D, "one d offset for the 4-bit units");
        const __m256 dw = h16x8(u + (five ? PK_Q5_D : PK_Q4_0_D) + 16 * h);
        const int m = t == DTYPE_Q4_1 ? PK_Q4_1_M : t == DTYPE_Q5_1 ? PK_Q5_1_M : 0;
        NM_UNROLL for (int c = 0; c < C; c++) {
            const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0;
            __m256i s = nl ? dot_signed(q, a) : five ? _mm256_add_epi32(dot16(q, a, 0, 4), dot16(q, a, 4, 8)) : dot16(q, a, 0, 8);
            if (off) s = _mm256_add_epi32(s, _mm256_set1_epi32(-off * a->isum));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(a->d)), acc[c]);
            if (m) acc[c] = _mm256_fmadd_ps(h16x8(u + m + 16 * h), _mm256_set1_ps(a->d * (float)a->isum), acc[c]);
        }
        flush_after(fl, 0, C, acc);
        break;
    }
    case DTYPE_Q8_0: {
        const __m256i x80 = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
        NM_UNROLL for (int j = 0; j < 8; j++)
            q[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(u + 64 * j + 32 * h)), x80); /* code - 128 */
        const __m256 dw = h16x8(u + PK_Q8_0_D + 16 * h);
        NM_UNROLL for (int c = 0; c < C; c++) {
            const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0;
            __m256i s = _mm256_setzero_si256();
            NM_UNROLL for (int j = 0; j < 8; j++) {
                const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q[j], q[j]), _mm256_sign_epi8(bq(a, j), q[j]));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
            }
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(a->d)), acc[c]);
        }
        flush_after(fl, 0, C, acc);
        break;
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const int five = t == DTYPE_Q5_K;
        const __m256 d = h16x8(u + (five ? PK_K5_D : PK_K4_D) + 16 * h);
        const __m256 dmin = h16x8(u + (five ? PK_K5_DMIN : PK_K4_DMIN) + 16 * h);
        for (int s = 0; s < 8; s++) {
            nib_half(u + 256 * s, h, q);
            if (five) {
                NM_UNROLL for (int i = 0; i < 8; i++)
                    q[i] = _mm256_or_si256(q[i], bits_val(hi32(u + PK_K5_HI + 64 * s + 8 * i + 4 * h), 0x10));
            }
            const __m256 sc = _mm256_mul_ps(u8x8(u + (five ? PK_K5_SC : PK_K4_SC) + 16 * s + 8 * h), d);
            const __m256 mn = _mm256_mul_ps(u8x8(u + (five ? PK_K5_MN : PK_K4_MN) + 16 * s + 8 * h), dmin);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                const __m256i sum = five ? _mm256_add_epi32(dot16(q, a, 0, 4), dot16(q, a, 4, 8)) : dot16(q, a, 0, 8);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sc, _mm256_set1_ps(a->d)), acc[c]);
                acc[c] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(a->d * (float)a->isum), acc[c]);
            }
            flush_after(fl, s, C, acc);
        }
        break;
    }
    case DTYPE_Q6_K: {
        const __m256 d = h16x8(u + PK_K6_D + 16 * h);
        const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03), mc = _mm256_set1_epi8(0x0C);
        for (int s = 0; s < 8; s++) {
            const uint8_t *sub = u + PK_K6_SUB * s;
            NM_UNROLL for (int j = 0; j < 4; j++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(sub + 64 * j + 32 * h));
                __m256i hh = _mm256_loadu_si256((const __m256i *)(sub + 256 + 32 * j));
                if (h) hh = _mm256_srli_epi16(hh, 4); /* bytes p + 32: the high nibble of hh byte p */
                q[2 * j] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(_mm256_and_si256(hh, m3), 4));
                q[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(hh, mc), 2));
            }
            const __m256i sc0 = s8x8(u + PK_K6_SC + 32 * s + 8 * h), sc1 = s8x8(u + PK_K6_SC + 32 * s + 16 + 8 * h);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                const int32_t lo = lo16(a);
                const __m256i g0 = _mm256_add_epi32(_mm256_set1_epi32(-32 * lo),
                                                    _mm256_add_epi32(dot16(q, a, 0, 2), dot16(q, a, 2, 4)));
                const __m256i g1 = _mm256_add_epi32(_mm256_set1_epi32(-32 * (a->isum - lo)),
                                                    _mm256_add_epi32(dot16(q, a, 4, 6), dot16(q, a, 6, 8)));
                const __m256i sum = _mm256_add_epi32(_mm256_mullo_epi32(g0, sc0), _mm256_mullo_epi32(g1, sc1));
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, _mm256_set1_ps(a->d)), acc[c]);
            }
            flush_after(fl, s, C, acc);
        }
        break;
    }
    case DTYPE_IQ4_XS: {
        const __m256 d = h16x8(u + PK_XS_D + 16 * h);
        const __m256i lut = avx2_iq4nl_lut();
        for (int s = 0; s < 8; s++) {
            nib_half(u + 256 * s, h, q);
            NM_UNROLL for (int i = 0; i < 8; i++) q[i] = _mm256_shuffle_epi8(lut, q[i]);
            const __m256 sc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s8x8(u + PK_XS_LS + 16 * s + 8 * h)));
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_signed(q, a)), _mm256_mul_ps(sc, _mm256_set1_ps(a->d)),
                                         acc[c]);
            }
            flush_after(fl, s, C, acc);
        }
        break;
    }
    default: break;
    }
}

/* Half h of one F16/BF16 pair unit against C f32 activation rows (row c at act + c * as, unit
 * columns from col0). A line half (8 rows x a column pair) widens to two vectors of 4 rows with
 * each row's even and odd columns in adjacent lanes: F16 by vcvtph2ps (rows 0-3 | 4-7 of the
 * half), BF16 by interleaving zero low halves (vpunpckl/hwd: rows 0-1, 4-5 | 2-3, 6-7). Each
 * lane is one row's chain over its even or odd columns, times the broadcast activation pair;
 * unit_f_end adds each row's two chains. */
NM_INLINE void unit_f(const enum dtype t, const int C, const int h, const uint8_t *u, const uint8_t *act, size_t as,
                      int64_t col0, __m256 *acc0, __m256 *acc1) {
    NM_UNROLL for (int p = 0; p < 16; p++) {
        __m256 w0, w1;
        if (t == DTYPE_BF16) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(u + 64 * p + 32 * h)), z = _mm256_setzero_si256();
            w0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
            w1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
        } else {
            w0 = h16x8(u + 64 * p + 32 * h);
            w1 = h16x8(u + 64 * p + 32 * h + 16);
        }
        NM_UNROLL for (int c = 0; c < C; c++) {
            const float *x = (const float *)(act + (size_t)c * as) + col0 + 2 * p;
            const __m256 xp = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)x));
            acc0[c] = _mm256_fmadd_ps(w0, xp, acc0[c]);
            acc1[c] = _mm256_fmadd_ps(w1, xp, acc1[c]);
        }
    }
}

/* The 8 row results of a float unit's accumulators: even + odd chain of each row. hadd gives
 * F16's rows 0, 1, 4, 5 | 2, 3, 6, 7 (the 64-bit pairs then go back in row order) and BF16's
 * rows 0-7 in order. */
NM_INLINE __m256 unit_f_end(const enum dtype t, __m256 acc0, __m256 acc1) {
    const __m256 s = _mm256_hadd_ps(acc0, acc1);
    if (t == DTYPE_BF16) return s;
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), 0xD8));
}

/* Halves [H0, H1) of one row group (wg, nu units) x C activation rows, over all units; rows:
 * the group's rows that exist. */
NM_INLINE void tile(const enum dtype t, const int C, const int H0, const int H1, const uint8_t *wg, int64_t nu,
                    const uint8_t *act, size_t as, float *y, double *yd, int64_t ldy, int rows, int pf,
                    const int32_t *ce, int nce) {
    const size_t ub = pk_unit_bytes(t);
    const int ublk = pk_unit_cols(t) / 32;
    const int fl = t == DTYPE_F16 || t == DTYPE_BF16;
    __m256 acc[2][GEMM_C], acc1[2][GEMM_C];
    NM_UNROLL for (int h = H0; h < H1; h++) NM_UNROLL for (int c = 0; c < C; c++) acc[h][c] = acc1[h][c] = _mm256_setzero_ps();
    /* chunk ends (a quantized type, pk_args.chunk_end): the unit's in cf */
    struct chunk_flush cf[2] = {{0, yd, ldy, rows}, {0, yd ? yd + 8 : NULL, ldy, rows - 8}};
    const bool chunked = nce > 0;
    NM_ASSERT(!chunked || (yd && !fl));
    for (int64_t un = 0; un < nu; un++) {
        const uint8_t *up = wg + (size_t)un * ub;
        if (pf > 0)
            for (size_t o = 0; o < ub; o += 64) _mm_prefetch((const char *)up + pf + o, _MM_HINT_T0);
        uint32_t mask = 0;
        for (; nce > 0 && *ce <= (un + 1) * ublk; ce++, nce--) mask |= 1u << (*ce - 1 - un * ublk);
        cf[0].mask = cf[1].mask = mask;
        NM_UNROLL for (int h = H0; h < H1; h++) {
            if (fl) unit_f(t, C, h, up, act, as, 32 * un, acc[h], acc1[h]);
            else if (t != DTYPE_Q2_K && t != DTYPE_Q3_K) unit_q(t, C, h, up, act, as, ublk * un, acc[h], chunked ? &cf[h] : NULL);
        }
        if (t == DTYPE_Q2_K || t == DTYPE_Q3_K) unit_k23(t, C, H0, H1, up, act, as, ublk * un, acc, chunked ? cf : NULL);
    }
    if (chunked) return; /* every chunk's partial went to yd as it ended (the last ends with K) */
    NM_UNROLL for (int h = H0; h < H1; h++) {
        const int r = rows - 8 * h;
        if (r <= 0) break;
        NM_UNROLL for (int c = 0; c < C; c++) {
            const __m256 v = fl ? unit_f_end(t, acc[h][c], acc1[h][c]) : acc[h][c];
            store_rows(yd ? NULL : y + c * ldy + 8 * h, yd ? yd + c * ldy + 8 * h : NULL, r < 8 ? r : 8, v);
        }
    }
}

/* GEMV software prefetch distance in bytes (NM_PK_PREFETCH overrides; 0 = none). AMD EPYC Zen 3
 * (2 cores), llama-3.2-1b tg32, 3 runs each: BF16 8.0 t/s without, 10.1 / 11.9 / 11.4 at 2048 /
 * 3072 / 8192 bytes; Q4_0 25.8 without, 31.1 / 34.6 / 33.5. */
#define PK_PREFETCH_DEFAULT 4096
static int g_pf = -1;

typedef void (*tile_fn)(const uint8_t *wg, int64_t nu, const uint8_t *act, size_t as, float *y, double *yd,
                        int64_t ldy, int rows, const int32_t *ce, int nce);
#define TILE_INST(T, C, H)                                                                                          \
    static void tile_##T##_##C##_##H(const uint8_t *wg, int64_t nu, const uint8_t *act, size_t as, float *y,         \
                                     double *yd, int64_t ldy, int rows, const int32_t *ce, int nce) {               \
        if (nce > 0) /* two copies, as the GEMV's */                                                                \
            tile(DTYPE_##T, C, H, H + 1, wg, nu, act, as, y, yd, ldy, rows, 0, ce, nce);                               \
        else                                                                                                        \
            tile(DTYPE_##T, C, H, H + 1, wg, nu, act, as, y, yd, ldy, rows, 0, NULL, 0);                               \
    }
#define TILE_GEMV(T)                                                                                                \
    static void tile_##T##_gemv(const uint8_t *wg, int64_t nu, const uint8_t *act, size_t as, float *y, double *yd,  \
                                int64_t ldy, int rows, const int32_t *ce, int nce) {                                \
        if (nce > 0) /* two copies: the unchunked one without the chunk ends' checks */                              \
            tile(DTYPE_##T, 1, 0, 2, wg, nu, act, as, y, yd, ldy, rows, g_pf, ce, nce);                                   \
        else                                                                                                        \
            tile(DTYPE_##T, 1, 0, 2, wg, nu, act, as, y, yd, ldy, rows, g_pf, NULL, 0);                                   \
    }
/* the quantized types' tiles go to 4 rows, the float types' to 6 (gemm_c) */
#define TILE_HALF_Q(T, H) TILE_INST(T, 1, H) TILE_INST(T, 2, H) TILE_INST(T, 3, H) TILE_INST(T, 4, H)
#define TILE_HALF_F(T, H) TILE_HALF_Q(T, H) TILE_INST(T, 5, H) TILE_INST(T, 6, H)
#define TILE_TYPE(T) TILE_GEMV(T) TILE_HALF_Q(T, 0) TILE_HALF_Q(T, 1)
#define TILE_TYPE_F(T) TILE_GEMV(T) TILE_HALF_F(T, 0) TILE_HALF_F(T, 1)
TILE_TYPE(Q4_0)
TILE_TYPE(Q4_1)
TILE_TYPE(Q8_0)
TILE_TYPE(Q4_K)
TILE_TYPE(Q5_K)
TILE_TYPE(Q6_K)
TILE_TYPE(Q5_0)
TILE_TYPE(Q5_1)
TILE_TYPE(IQ4_NL)
TILE_TYPE(Q2_K)
TILE_TYPE(Q3_K)
TILE_TYPE(IQ4_XS)
TILE_TYPE_F(F16)
TILE_TYPE_F(BF16)

struct tiles {
    tile_fn gemv;
    tile_fn gemm[2][GEMM_C + 1]; /* [half][activation rows] */
};
#define TILE_ROW_Q(T, H) {NULL, tile_##T##_1_##H, tile_##T##_2_##H, tile_##T##_3_##H, tile_##T##_4_##H, NULL, NULL}
#define TILE_ROW_F(T, H) {NULL, tile_##T##_1_##H, tile_##T##_2_##H, tile_##T##_3_##H, tile_##T##_4_##H, tile_##T##_5_##H, tile_##T##_6_##H}
#define TILE_ROW(T) [DTYPE_##T] = {tile_##T##_gemv, {TILE_ROW_Q(T, 0), TILE_ROW_Q(T, 1)}}
#define TILE_ROWF(T) [DTYPE_##T] = {tile_##T##_gemv, {TILE_ROW_F(T, 0), TILE_ROW_F(T, 1)}}
static const struct tiles k_tiles[DTYPE_COUNT] = {TILE_ROW(Q4_0), TILE_ROW(Q4_1), TILE_ROW(Q4_K), TILE_ROW(Q5_K),
                                                  TILE_ROW(Q6_K), TILE_ROW(Q8_0), TILE_ROW(Q5_0), TILE_ROW(Q5_1),
                                                  TILE_ROW(IQ4_NL), TILE_ROW(Q2_K), TILE_ROW(Q3_K), TILE_ROW(IQ4_XS),
                                                  TILE_ROWF(F16), TILE_ROWF(BF16)};

static void pk_gemm_avx2(const struct pk_args *a) {
    if (g_pf < 0) {
        const char *e = getenv("NM_PK_PREFETCH");
        g_pf = e ? NM_MAX(0, atoi(e)) : PK_PREFETCH_DEFAULT;
    }
    const struct tiles *tl = &k_tiles[a->type];
    /* neither the bf16 tiles nor the block types' rows; chunks in one call for the quantized
     * types (pk_choose) */
    const bool fl = a->type == DTYPE_F16 || a->type == DTYPE_BF16;
    NM_ASSERT(tl->gemv != NULL && !a->bf16_tiles && !a->codec && !a->act_tiles);
    const int nce = a->chunk_end ? a->n_chunk_ends : 0;
    NM_ASSERT(!a->chunk_end || (a->yd && !fl && nce > 0 && a->chunk_end[nce - 1] == a->n_units * (pk_unit_cols(a->type) / 32)));
    for (int64_t g = 0; g < a->n_groups; g++) {
        const int rows = (int)NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
        const uint8_t *wg = a->w + (size_t)g * a->group_stride;
        float *y = a->yd ? NULL : a->y + g * PK_ROWS;
        double *yd = a->yd ? a->yd + g * PK_ROWS : NULL;
        if (a->m == 1) {
            tl->gemv(wg, a->n_units, a->act, a->act_stride, y, yd, a->ldy, rows, a->chunk_end, nce);
            continue;
        }
        const int cmax = gemm_c(a->type);
        for (int h = 0; h < 2 && 8 * h < rows; h++)
            for (int c0 = 0; c0 < a->m; c0 += cmax) {
                const int cc = NM_MIN(cmax, a->m - c0);
                const int64_t o = (int64_t)c0 * a->ldy;
                tl->gemm[h][cc](wg, a->n_units, a->act + (size_t)c0 * a->act_stride, a->act_stride, y ? y + o : NULL,
                                yd ? yd + o : NULL, a->ldy, rows, a->chunk_end, nce);
            }
    }
}

static bool pk_has_avx2(enum dtype t) { return (unsigned)t < DTYPE_COUNT && k_tiles[t].gemv != NULL; }

void avx2_fill_packed(struct kern_isa *t) {
    t->pk_gemm = pk_gemm_avx2;
    t->pk_has = pk_has_avx2;
}
