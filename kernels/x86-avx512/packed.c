/* AVX-512 kernels of the packed layouts (packed.h): the decode GEMV (m = 1) and the VNNI GEMM
 * for any m (the fallback without AMX, and small m with it).
 *
 * One zmm lane per weight row: a 64-byte line of a unit is 16 rows x one quad of 4 columns, so
 * vpdpbusd(line, broadcast of the activation quad) adds the quad's 4 products into each row's
 * lane. No lane permutes, no horizontal sums, the 16 fp16 scales of a block are one vcvtph2ps;
 * each thread reads its row groups as a few long sequential streams, where the ROWS kernels read
 * 4 rows at once with per-block scale gathers and permutes. Per block (sub-block for K-quants)
 * and row: the exact int32 sum, then one f32 fma (plus one for Q4_1's m and the K-quant mins),
 * in K order: the same operations as pk_gemm_ref and the AMX kernel, so all three give the same
 * bits.
 *
 * GEMM: a tile is one row group x C activation rows (C <= 4): the unpacked codes of a unit serve
 * C activation rows. GEMV: GEMV_STREAMS row groups x 1 activation row (below; F16 takes the
 * C = 1 tile). Float types (F16/BF16 pairs): exact widening to f32 and f32 FMA with the f32
 * activations, even and odd columns in two accumulators (two dependency chains), summed at the
 * end. */
#include <stdlib.h>
#include <string.h>

#include "../packed.h"
#include "avx512.h"
#include "pk_units.h"
#include "simd.h"

/* Software prefetch distance (bytes ahead in each group stream, 0 = none), from NM_PK_PREFETCH
 * or the default. Device Xeon, 4096x14336 (RESULTS.md). One stream per thread: 2048 gave 84-90%
 * of stream with 2 threads, 92-97% with 16; 4096/8192 and the T1 hint measured within the
 * run-to-run noise (+-10%), 8192 once 69% for f16. The GEMV's 4 streams per thread, 2 threads:
 * 1024, 3072, 4096 and T1 measured no better than 2048. */
#define PK_PREFETCH_DEFAULT 2048
static int g_pf = -1, g_pf_hint = 0;
int pk_prefetch_bytes(void) {
    if (g_pf < 0) {
        const char *e = getenv("NM_PK_PREFETCH");
        g_pf = e ? atoi(e) : PK_PREFETCH_DEFAULT;
        if (g_pf < 0) g_pf = 0;
        /* NM_PK_PF_HINT: 0 = T0 (to L1, the default), 1 = T1 (to L2), 2 = NTA; for experiments */
        e = getenv("NM_PK_PF_HINT");
        g_pf_hint = e ? atoi(e) : 0;
    }
    return g_pf;
}

/* Prefetch, with the hint chosen above, the cache lines that start in [lo, hi) (abutting ranges:
 * each line once). */
NM_INLINE void pf_lines(const uint8_t *lo, const uint8_t *hi) {
    uintptr_t a = ((uintptr_t)lo + 63) & ~(uintptr_t)63;
    switch (g_pf_hint) {
    case 1:
        for (; a < (uintptr_t)hi; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T1);
        break;
    case 2:
        for (; a < (uintptr_t)hi; a += 64) _mm_prefetch((const char *)a, _MM_HINT_NTA);
        break;
    default:
        for (; a < (uintptr_t)hi; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
        break;
    }
}

NM_INLINE __m512i bq(const block_q8x *a, int q) { /* activation quad q, broadcast */
    int32_t v;
    memcpy(&v, a->qs + 4 * q, 4);
    return _mm512_set1_epi32(v);
}
NM_INLINE __m512 h16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
NM_INLINE __m512 u8x16(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* Codes of a nibble sub-block: lines j = 0..3 give quads 2j (lo) and 2j + 1 (hi). */
NM_INLINE void nib_codes(const uint8_t *p, __m512i q[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    NM_UNROLL for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_loadu_si512(p + 64 * j);
        q[2 * j] = _mm512_and_si512(v, m4);
        q[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
}

/* The iq4nl values + 128 (1..241) by index, the sign bit flipped: vpdpbusd's unsigned operand;
 * the kernels subtract 128 times the activations' sum. */
NM_INLINE __m512i iq4_lut(void) { return _mm512_xor_si512(pk_iq4_values(), _mm512_set1_epi8((char)0x80)); }

/* Codes of an IQ4_XS nibble sub-block as iq4nl value + 128. */
NM_INLINE void iq4_codes(const uint8_t *p, __m512i q[8]) {
    const __m512i lut = iq4_lut();
    nib_codes(p, q);
    NM_UNROLL for (int i = 0; i < 8; i++) q[i] = _mm512_shuffle_epi8(lut, q[i]);
}

/* int32 lanes: bias + sum over quads [q0, q1) of codes . activations */
NM_INLINE __m512i dots(const __m512i *q, const block_q8x *a, int q0, int q1, __m512i bias) {
    __m512i s0 = bias, s1 = _mm512_setzero_si512();
    NM_UNROLL for (int i = q0; i < q1; i += 2) {
        s0 = _mm512_dpbusd_epi32(s0, q[i], bq(a, i));
        s1 = _mm512_dpbusd_epi32(s1, q[i + 1], bq(a, i + 1));
    }
    return _mm512_add_epi32(s0, s1);
}

/* Sum of the first 16 activation codes of a block. */
NM_INLINE int32_t lo16_sum(const block_q8x *a) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)a->qs), _mm_set1_epi8((char)0x80));
    const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
    return (int32_t)(_mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4)) - 16 * 128;
}

NM_INLINE void unit_q(const enum dtype t, const int C, const uint8_t *u, const uint8_t *act, size_t as,
                      int64_t blk0, __m512 *acc) {
    __m512i q[8];
    switch (t) {
    case DTYPE_Q4_0:
    case DTYPE_Q4_1:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
    case DTYPE_IQ4_NL: { /* nibble codes (+ a fifth bit, or looked up), one scale (+ Q4_1/Q5_1's m) */
        const int five = t == DTYPE_Q5_0 || t == DTYPE_Q5_1, mn = t == DTYPE_Q4_1 || t == DTYPE_Q5_1;
        nib_codes(u, q);
        if (five)
            NM_UNROLL for (int i = 0; i < 8; i++) {
                uint64_t k;
                memcpy(&k, u + PK_Q5_HI + 8 * i, 8);
                q[i] = _mm512_mask_add_epi8(q[i], (__mmask64)k, q[i], _mm512_set1_epi8(16));
            }
        if (t == DTYPE_IQ4_NL) NM_UNROLL for (int i = 0; i < 8; i++) q[i] = _mm512_shuffle_epi8(iq4_lut(), q[i]);
        const __m512 dw = h16x16(u + (five ? PK_Q5_D : PK_Q4_0_D));
        const __m512 mw = mn ? h16x16(u + (five ? PK_Q5_1_M : PK_Q4_1_M)) : dw;
        const int off = t == DTYPE_Q4_0 ? 8 : t == DTYPE_Q5_0 ? 16 : t == DTYPE_IQ4_NL ? 128 : 0;
        NM_UNROLL for (int c = 0; c < C; c++) {
            const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0;
            const __m512i s = dots(q, a, 0, 8, _mm512_set1_epi32(-off * a->isum));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a->d)), acc[c]);
            if (mn) acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a->d * (float)a->isum), acc[c]);
        }
        break;
    }
    case DTYPE_Q8_0: {
        NM_UNROLL for (int j = 0; j < 8; j++) q[j] = _mm512_loadu_si512(u + 64 * j);
        const __m512 dw = h16x16(u + PK_Q8_0_D);
        NM_UNROLL for (int c = 0; c < C; c++) {
            const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0;
            const __m512i s = dots(q, a, 0, 8, _mm512_set1_epi32(-128 * a->isum));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a->d)), acc[c]);
        }
        break;
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const int five = t == DTYPE_Q5_K;
        const __m512 d = h16x16(u + (five ? PK_K5_D : PK_K4_D)), dmin = h16x16(u + (five ? PK_K5_DMIN : PK_K4_DMIN));
        const __m512i c16 = _mm512_set1_epi8(16);
        for (int s = 0; s < 8; s++) {
            nib_codes(u + 256 * s, q);
            if (five) {
                NM_UNROLL for (int i = 0; i < 8; i++) {
                    uint64_t mk;
                    memcpy(&mk, u + PK_K5_HI + 64 * s + 8 * i, 8);
                    q[i] = _mm512_mask_add_epi8(q[i], (__mmask64)mk, q[i], c16);
                }
            }
            const __m512 sc = _mm512_mul_ps(u8x16(u + (five ? PK_K5_SC : PK_K4_SC) + 16 * s), d);
            const __m512 mn = _mm512_mul_ps(u8x16(u + (five ? PK_K5_MN : PK_K4_MN) + 16 * s), dmin);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                const __m512i sum = dots(q, a, 0, 8, _mm512_setzero_si512());
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sc, _mm512_set1_ps(a->d)), acc[c]);
                acc[c] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(a->d * (float)a->isum), acc[c]);
            }
        }
        break;
    }
    case DTYPE_Q6_K: {
        const __m512 d = h16x16(u + PK_K6_D);
        const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03), mc = _mm512_set1_epi8(0x0C);
        for (int s = 0; s < 8; s++) {
            const uint8_t *sub = u + PK_K6_SUB * s;
            NM_UNROLL for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_loadu_si512(sub + 64 * j);
                const __m256i h32 = _mm256_loadu_si256((const __m256i *)(sub + 256 + 32 * j));
                const __m512i h = _mm512_and_si512(
                    _mm512_inserti64x4(_mm512_castsi256_si512(h32), _mm256_srli_epi16(h32, 4), 1), m4);
                q[2 * j] = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16(_mm512_and_si512(h, m3), 4));
                q[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                               _mm512_slli_epi16(_mm512_and_si512(h, mc), 2));
            }
            const struct pk_k_scales k = pk_k_scales(t, u, s);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                const int32_t lo = lo16_sum(a);
                const __m512i g0 = dots(q, a, 0, 4, _mm512_set1_epi32(-32 * lo));
                const __m512i g1 = dots(q, a, 4, 8, _mm512_set1_epi32(-32 * (a->isum - lo)));
                acc[c] = pk_k_step(&k, false, g0, g1, d, d, a->d, a->isum, lo, acc[c]);
            }
        }
        break;
    }
    case DTYPE_Q2_K:
    case DTYPE_Q3_K: {
        const int three = t == DTYPE_Q3_K;
        const __m512 d = h16x16(u + (three ? PK_K3_D : PK_K2_D));
        const __m512 dmin = three ? d : h16x16(u + PK_K2_DMIN);
        for (int s = 0; s < 8; s++) {
            pk_crumb_codes(u + PK_K2_SUB * s, three ? u + PK_K3_HI + 64 * s : NULL, q);
            const struct pk_k_scales k = pk_k_scales(t, u, s);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                const int32_t lo = lo16_sum(a);
                const __m512i g0 = dots(q, a, 0, 4, _mm512_set1_epi32(three ? -4 * lo : 0));
                const __m512i g1 = dots(q, a, 4, 8, _mm512_set1_epi32(three ? -4 * (a->isum - lo) : 0));
                acc[c] = pk_k_step(&k, !three, g0, g1, d, dmin, a->d, a->isum, lo, acc[c]);
            }
        }
        break;
    }
    case DTYPE_IQ4_XS: {
        for (int s = 0; s < 8; s++) {
            iq4_codes(u + 256 * s, q);
            const __m512 sc = pk_xs_scale(u, s);
            NM_UNROLL for (int c = 0; c < C; c++) {
                const block_q8x *a = (const block_q8x *)(act + (size_t)c * as) + blk0 + s;
                const __m512i sum = dots(q, a, 0, 8, _mm512_set1_epi32(-128 * a->isum));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sc, _mm512_set1_ps(a->d)), acc[c]);
            }
        }
        break;
    }
    default: break;
    }
}

/* F16/BF16 pair unit: 16 lines, line p = columns 2p (low half of each dword), 2p + 1 (high).
 * BF16: lanes = rows; acc0 takes the even columns, acc1 the odd ones. F16: each 32-byte half of
 * a line widens in place (vcvtph2ps) to rows 0-7 / 8-15 with the even and odd columns
 * interleaved, multiplied by the broadcast activation pair: acc0 holds rows 0-7, acc1 rows 8-15,
 * and pk_group adds each row's even and odd lanes at the end, so every row gets the same
 * operations as with BF16 (even chain + odd chain). */
NM_INLINE void unit_f(const enum dtype t, const int C, const uint8_t *u, const uint8_t *act, size_t as, int64_t col0,
                      __m512 *acc0, __m512 *acc1) {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
    NM_UNROLL for (int p = 0; p < 16; p++) {
        __m512 w0, w1;
        if (t == DTYPE_BF16) {
            const __m512i v = _mm512_loadu_si512(u + 64 * p);
            w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            w1 = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
        } else {
            w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 64 * p)));
            w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 64 * p + 32)));
        }
        NM_UNROLL for (int c = 0; c < C; c++) {
            const float *x = (const float *)(act + (size_t)c * as) + col0 + 2 * p;
            if (t == DTYPE_BF16) {
                acc0[c] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[0]), acc0[c]);
                acc1[c] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[1]), acc1[c]);
            } else {
                double pair;
                memcpy(&pair, x, 8);
                const __m512 xp = _mm512_castpd_ps(_mm512_set1_pd(pair));
                acc0[c] = _mm512_fmadd_ps(w0, xp, acc0[c]);
                acc1[c] = _mm512_fmadd_ps(w1, xp, acc1[c]);
            }
        }
    }
}

static const int32_t k_even_idx[16] __attribute__((aligned(64))) = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t k_odd_idx[16] __attribute__((aligned(64))) = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

NM_INLINE void pk_group(const enum dtype t, const int C, const uint8_t *wg, int64_t nu, const uint8_t *act,
                        size_t as, float *y, double *yd, int64_t ldy, __mmask16 rows, int pf) {
    const size_t ub = pk_unit_bytes(t);
    const int ublk = pk_unit_cols(t) / 32;
    const int fl = t == DTYPE_F16 || t == DTYPE_BF16;
    __m512 acc[NM_TILE_CMAX], acc1[NM_TILE_CMAX];
    NM_UNROLL for (int c = 0; c < C; c++) acc[c] = acc1[c] = _mm512_setzero_ps();
    for (int64_t u = 0; u < nu; u++) {
        const uint8_t *up = wg + (size_t)u * ub;
        if (pf > 0) pf_lines(up + pf, up + pf + ub);
        if (fl) unit_f(t, C, up, act, as, 32 * u, acc, acc1);
        else unit_q(t, C, up, act, as, ublk * u, acc);
    }
    NM_UNROLL for (int c = 0; c < C; c++) {
        __m512 r = acc[c];
        if (t == DTYPE_BF16) r = _mm512_add_ps(acc[c], acc1[c]);
        if (t == DTYPE_F16)
            r = _mm512_add_ps(_mm512_permutex2var_ps(acc[c], _mm512_load_si512(k_even_idx), acc1[c]),
                              _mm512_permutex2var_ps(acc[c], _mm512_load_si512(k_odd_idx), acc1[c]));
        nm_store_rows(y + c * ldy, yd ? yd + c * ldy : NULL, rows, r);
    }
}

typedef void (*pk_group_fn)(const uint8_t *wg, int64_t nu, const uint8_t *act, size_t as, float *y, double *yd,
                            int64_t ldy, __mmask16 rows, int pf);
#define PK_INST(T, C)                                                                                      \
    static void pk_group_##T##_##C(const uint8_t *wg, int64_t nu, const uint8_t *act, size_t as, float *y, \
                                   double *yd, int64_t ldy, __mmask16 rows, int pf) {                      \
        pk_group(DTYPE_##T, C, wg, nu, act, as, y, yd, ldy, rows, pf);                                     \
    }
#define PK_INST4(T) PK_INST(T, 1) PK_INST(T, 2) PK_INST(T, 3) PK_INST(T, 4)
PK_INST4(Q4_0)
PK_INST4(Q4_1)
PK_INST4(Q8_0)
PK_INST4(Q4_K)
PK_INST4(Q5_K)
PK_INST4(Q6_K)
PK_INST4(Q2_K)
PK_INST4(Q3_K)
PK_INST4(IQ4_XS)
PK_INST4(Q5_0)
PK_INST4(Q5_1)
PK_INST4(IQ4_NL)
PK_INST4(F16)
PK_INST4(BF16)
#define PK_ROW(T) [DTYPE_##T] = {NULL, pk_group_##T##_1, pk_group_##T##_2, pk_group_##T##_3, pk_group_##T##_4}
static const pk_group_fn k_groups[DTYPE_COUNT][5] = {PK_ROW(Q4_0), PK_ROW(Q4_1), PK_ROW(Q8_0), PK_ROW(Q4_K),
                                                     PK_ROW(Q5_K), PK_ROW(Q6_K), PK_ROW(Q2_K), PK_ROW(Q3_K),
                                                     PK_ROW(IQ4_XS), PK_ROW(Q5_0), PK_ROW(Q5_1), PK_ROW(IQ4_NL),
                                                     PK_ROW(F16), PK_ROW(BF16)};

/* ---- GEMV (m = 1): GEMV_STREAMS row groups at once -----------------------------------------
 * A thread's groups are cut into GEMV_STREAMS runs of consecutive groups, and one pass walks the
 * runs side by side, one unit of each per step: that many sequential streams per thread (as the
 * stream read benchmark reads), each with its own software prefetch, and each activation
 * broadcast serves every stream. Device Xeon, 2 threads, 4096x14336 and 2048x8192: one stream
 * per thread read Q4_0/Q4_K/Q6_K at 81-84% of the stream read, four at 90-97% (medians of 3
 * alternating runs). F16 stays on one stream: four read 98-104% with 2 threads but measured
 * below one stream with 16 threads (66-95% vs 89-107%, one host, 2 runs). Per group and row
 * the f32 operations are those of unit_q / unit_f, in the same order; only the exact integer
 * sums are formed differently:
 *   - nibble codes (not Q5_K): the high nibbles are used in place (v & 0xF0 = 16 x code), and
 *     their dot product is shifted right by 4 at the end of the block (exact: every term is a
 *     multiple of 16, |sum| < 2^20);
 *   - Q6_K: the two high bits of both codes of a line byte are moved to bits 4-5 by one dword
 *     rotate of the hh bytes broadcast to both halves of a zmm (a count per half), then merged
 *     with the nibble by one vpternlogd. */
#define GEMV_STREAMS 4


/* How gemv_nib reads a nibble sub-block's codes. */
enum { NIB_PLAIN, NIB_FIVE, NIB_LUT };

/* int32 lanes: bias + the dot product of one nibble sub-block (4 lines at p[g] + off) with block
 * a, for G groups; NIB_FIVE adds the fifth bits (8 masks at hi[g]: Q5_0, Q5_1, Q5_K), NIB_LUT
 * looks the nibbles up (iq4_lut: IQ4_NL, IQ4_XS). */
NM_INLINE void gemv_nib(const int G, const int mode, const uint8_t *const *p, size_t off, const uint8_t *const *hi,
                        const block_q8x *a, __m512i bias, __m512i *sum) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i s0[GEMV_STREAMS], s1[GEMV_STREAMS];
    NM_UNROLL for (int g = 0; g < G; g++) s0[g] = bias, s1[g] = _mm512_setzero_si512();
    if (mode == NIB_LUT) {
        const __m512i lut = iq4_lut();
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i b0 = bq(a, 2 * j), b1 = bq(a, 2 * j + 1);
            NM_UNROLL for (int g = 0; g < G; g++) {
                const __m512i v = _mm512_loadu_si512(p[g] + off + 64 * j);
                s0[g] = _mm512_dpbusd_epi32(s0[g], _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4)), b0);
                s1[g] = _mm512_dpbusd_epi32(s1[g], _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)),
                                            b1);
            }
        }
        NM_UNROLL for (int g = 0; g < G; g++) sum[g] = _mm512_add_epi32(s0[g], s1[g]);
    } else if (mode == NIB_PLAIN) {
        const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i b0 = bq(a, 2 * j), b1 = bq(a, 2 * j + 1);
            NM_UNROLL for (int g = 0; g < G; g++) {
                const __m512i v = _mm512_loadu_si512(p[g] + off + 64 * j);
                s0[g] = _mm512_dpbusd_epi32(s0[g], _mm512_and_si512(v, m4), b0);
                s1[g] = _mm512_dpbusd_epi32(s1[g], _mm512_and_si512(v, mf0), b1);
            }
        }
        NM_UNROLL for (int g = 0; g < G; g++) sum[g] = _mm512_add_epi32(s0[g], _mm512_srai_epi32(s1[g], 4));
    } else {
        const __m512i c16 = _mm512_set1_epi8(16);
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i b0 = bq(a, 2 * j), b1 = bq(a, 2 * j + 1);
            NM_UNROLL for (int g = 0; g < G; g++) {
                const __m512i v = _mm512_loadu_si512(p[g] + off + 64 * j);
                uint64_t k0, k1;
                memcpy(&k0, hi[g] + 16 * j, 8);
                memcpy(&k1, hi[g] + 16 * j + 8, 8);
                const __m512i lo = _mm512_and_si512(v, m4), hn = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                s0[g] = _mm512_dpbusd_epi32(s0[g], _mm512_mask_add_epi8(lo, (__mmask64)k0, lo, c16), b0);
                s1[g] = _mm512_dpbusd_epi32(s1[g], _mm512_mask_add_epi8(hn, (__mmask64)k1, hn, c16), b1);
            }
        }
        NM_UNROLL for (int g = 0; g < G; g++) sum[g] = _mm512_add_epi32(s0[g], s1[g]);
    }
}

/* One unit of each of G groups (unit pointers u[g]) against activation block(s) a; pf > 0:
 * also prefetch the bytes pf ahead in each stream. */
NM_INLINE void gemv_unit_q(const enum dtype t, const int G, const uint8_t *const *u, const block_q8x *a, int pf,
                           __m512 *acc) {
    const size_t ub = pk_unit_bytes(t);
    switch (t) {
    case DTYPE_Q4_0:
    case DTYPE_Q4_1: {
        if (pf > 0) NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf, u[g] + pf + ub);
        __m512i s[GEMV_STREAMS];
        gemv_nib(G, NIB_PLAIN, u, 0, NULL, a, t == DTYPE_Q4_0 ? _mm512_set1_epi32(-8 * a->isum) : _mm512_setzero_si512(), s);
        const __m512 ad = _mm512_set1_ps(a->d);
        NM_UNROLL for (int g = 0; g < G; g++) {
            const __m512 dw = h16x16(u[g] + PK_Q4_0_D);
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[g]), _mm512_mul_ps(dw, ad), acc[g]);
            if (t == DTYPE_Q4_1)
                acc[g] = _mm512_fmadd_ps(h16x16(u[g] + PK_Q4_1_M), _mm512_set1_ps(a->d * (float)a->isum), acc[g]);
        }
        break;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
    case DTYPE_IQ4_NL: {
        if (pf > 0) NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf, u[g] + pf + ub);
        const int nl = t == DTYPE_IQ4_NL;
        const uint8_t *hi[GEMV_STREAMS];
        NM_UNROLL for (int g = 0; g < G; g++) hi[g] = u[g] + PK_Q5_HI;
        __m512i s[GEMV_STREAMS];
        gemv_nib(G, nl ? NIB_LUT : NIB_FIVE, u, 0, hi, a,
                 _mm512_set1_epi32((nl ? -128 : t == DTYPE_Q5_0 ? -16 : 0) * a->isum), s);
        const __m512 ad = _mm512_set1_ps(a->d);
        NM_UNROLL for (int g = 0; g < G; g++) {
            const __m512 dw = h16x16(u[g] + (nl ? PK_NL_D : PK_Q5_D));
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[g]), _mm512_mul_ps(dw, ad), acc[g]);
            if (t == DTYPE_Q5_1)
                acc[g] = _mm512_fmadd_ps(h16x16(u[g] + PK_Q5_1_M), _mm512_set1_ps(a->d * (float)a->isum), acc[g]);
        }
        break;
    }
    case DTYPE_Q8_0: {
        if (pf > 0) NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf, u[g] + pf + ub);
        __m512i s0[GEMV_STREAMS], s1[GEMV_STREAMS];
        NM_UNROLL for (int g = 0; g < G; g++) s0[g] = _mm512_set1_epi32(-128 * a->isum), s1[g] = _mm512_setzero_si512();
        NM_UNROLL for (int j = 0; j < 8; j += 2) {
            const __m512i b0 = bq(a, j), b1 = bq(a, j + 1);
            NM_UNROLL for (int g = 0; g < G; g++) {
                s0[g] = _mm512_dpbusd_epi32(s0[g], _mm512_loadu_si512(u[g] + 64 * j), b0);
                s1[g] = _mm512_dpbusd_epi32(s1[g], _mm512_loadu_si512(u[g] + 64 * j + 64), b1);
            }
        }
        const __m512 ad = _mm512_set1_ps(a->d);
        NM_UNROLL for (int g = 0; g < G; g++) {
            const __m512 dw = h16x16(u[g] + PK_Q8_0_D);
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[g], s1[g])), _mm512_mul_ps(dw, ad), acc[g]);
        }
        break;
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const int five = t == DTYPE_Q5_K;
        const size_t osc = five ? PK_K5_SC : PK_K4_SC, omn = five ? PK_K5_MN : PK_K4_MN;
        __m512 d[GEMV_STREAMS], dmin[GEMV_STREAMS];
        NM_UNROLL for (int g = 0; g < G; g++) {
            d[g] = h16x16(u[g] + (five ? PK_K5_D : PK_K4_D));
            dmin[g] = h16x16(u[g] + (five ? PK_K5_DMIN : PK_K4_DMIN));
        }
        for (int s = 0; s < 8; s++) {
            if (pf > 0)
                NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf + ub * s / 8, u[g] + pf + ub * (s + 1) / 8);
            const block_q8x *as = a + s;
            const uint8_t *hi[GEMV_STREAMS];
            NM_UNROLL for (int g = 0; g < G; g++) hi[g] = u[g] + PK_K5_HI + 64 * s;
            __m512i sum[GEMV_STREAMS];
            gemv_nib(G, five ? NIB_FIVE : NIB_PLAIN, u, 256 * (size_t)s, hi, as, _mm512_setzero_si512(), sum);
            const __m512 ad = _mm512_set1_ps(as->d), am = _mm512_set1_ps(as->d * (float)as->isum);
            NM_UNROLL for (int g = 0; g < G; g++) {
                const __m512 sc = _mm512_mul_ps(u8x16(u[g] + osc + 16 * s), d[g]);
                const __m512 mn = _mm512_mul_ps(u8x16(u[g] + omn + 16 * s), dmin[g]);
                acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[g]), _mm512_mul_ps(sc, ad), acc[g]);
                acc[g] = _mm512_fnmadd_ps(mn, am, acc[g]);
            }
        }
        break;
    }
    case DTYPE_Q6_K: {
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        /* hh byte p of line j, broadcast to both halves of a zmm: the high bits of line byte p
         * (p < 32) sit at bits 0-1 (low code) and 2-3 (high code), of byte p + 32 at bits 4-5
         * and 6-7; rotate them to bits 4-5 (dword rotate: a byte's bits stay in the byte) */
        const __m512i rot_lo = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
        const __m512i rot_hi = _mm512_set_epi32(30, 30, 30, 30, 30, 30, 30, 30, 2, 2, 2, 2, 2, 2, 2, 2);
        __m512 d[GEMV_STREAMS];
        NM_UNROLL for (int g = 0; g < G; g++) d[g] = h16x16(u[g] + PK_K6_D);
        for (int s = 0; s < 8; s++) {
            if (pf > 0)
                NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf + ub * s / 8, u[g] + pf + ub * (s + 1) / 8);
            const block_q8x *as = a + s;
            const int32_t lo = lo16_sum(as);
            __m512i g0[GEMV_STREAMS], g1[GEMV_STREAMS];
            const __m512i bias0 = _mm512_set1_epi32(-32 * lo), bias1 = _mm512_set1_epi32(-32 * (as->isum - lo));
            NM_UNROLL for (int g = 0; g < G; g++) g0[g] = bias0, g1[g] = bias1;
            NM_UNROLL for (int j = 0; j < 4; j++) {
                const __m512i b0 = bq(as, 2 * j), b1 = bq(as, 2 * j + 1);
                NM_UNROLL for (int g = 0; g < G; g++) {
                    const uint8_t *sub = u[g] + PK_K6_SUB * s;
                    const __m512i v = _mm512_loadu_si512(sub + 64 * j);
                    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(sub + 256 + 32 * j)));
                    const __m512i hl = _mm512_and_si512(_mm512_rolv_epi32(h, rot_lo), m30);
                    const __m512i hh = _mm512_and_si512(_mm512_rolv_epi32(h, rot_hi), m30);
                    const __m512i ql = _mm512_ternarylogic_epi32(v, hl, m4, 0xEC); /* (v & m4) | hl */
                    const __m512i qh = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), hh, m4, 0xEC);
                    if (j < 2) {
                        g0[g] = _mm512_dpbusd_epi32(g0[g], ql, b0);
                        g0[g] = _mm512_dpbusd_epi32(g0[g], qh, b1);
                    } else {
                        g1[g] = _mm512_dpbusd_epi32(g1[g], ql, b0);
                        g1[g] = _mm512_dpbusd_epi32(g1[g], qh, b1);
                    }
                }
            }
            NM_UNROLL for (int g = 0; g < G; g++) {
                const struct pk_k_scales k = pk_k_scales(t, u[g], s);
                acc[g] = pk_k_step(&k, false, g0[g], g1[g], d[g], d[g], as->d, as->isum, lo, acc[g]);
            }
        }
        break;
    }
    case DTYPE_Q2_K:
    case DTYPE_Q3_K: {
        /* per sub-block: line 0 (columns 0-15) into g0, line 1 (16-31) into g1, as unit_q's
         * dots over quads 0-3 and 4-7 */
        const int three = t == DTYPE_Q3_K;
        const __m512i m3 = _mm512_set1_epi8(3), c4 = _mm512_set1_epi8(4);
        __m512 d[GEMV_STREAMS], dmin[GEMV_STREAMS];
        NM_UNROLL for (int g = 0; g < G; g++) {
            d[g] = h16x16(u[g] + (three ? PK_K3_D : PK_K2_D));
            dmin[g] = three ? d[g] : h16x16(u[g] + PK_K2_DMIN);
        }
        for (int s = 0; s < 8; s++) {
            if (pf > 0)
                NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf + ub * s / 8, u[g] + pf + ub * (s + 1) / 8);
            const block_q8x *as = a + s;
            const int32_t lo = lo16_sum(as);
            __m512i gs[2][GEMV_STREAMS];
            NM_UNROLL for (int l = 0; l < 2; l++) {
                const __m512i bias = _mm512_set1_epi32(three ? -4 * (l ? as->isum - lo : lo) : 0);
                __m512i b[4];
                NM_UNROLL for (int j = 0; j < 4; j++) b[j] = bq(as, 4 * l + j);
                NM_UNROLL for (int g = 0; g < G; g++) {
                    const __m512i v = _mm512_loadu_si512(u[g] + PK_K2_SUB * s + 64 * l);
                    __m512i acc_i = bias;
                    NM_UNROLL for (int j = 0; j < 4; j++) {
                        __m512i q = _mm512_and_si512(j ? _mm512_srli_epi16(v, 2 * j) : v, m3);
                        if (three) {
                            uint64_t k;
                            memcpy(&k, u[g] + PK_K3_HI + 64 * s + 8 * (4 * l + j), 8);
                            q = _mm512_mask_add_epi8(q, (__mmask64)k, q, c4);
                        }
                        acc_i = _mm512_dpbusd_epi32(acc_i, q, b[j]);
                    }
                    gs[l][g] = acc_i;
                }
            }
            NM_UNROLL for (int g = 0; g < G; g++) {
                const struct pk_k_scales k = pk_k_scales(t, u[g], s);
                acc[g] = pk_k_step(&k, !three, gs[0][g], gs[1][g], d[g], dmin[g], as->d, as->isum, lo, acc[g]);
            }
        }
        break;
    }
    case DTYPE_IQ4_XS: {
        for (int s = 0; s < 8; s++) {
            if (pf > 0)
                NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf + ub * s / 8, u[g] + pf + ub * (s + 1) / 8);
            const block_q8x *as = a + s;
            __m512i sum[GEMV_STREAMS];
            gemv_nib(G, NIB_LUT, u, 256 * (size_t)s, NULL, as, _mm512_set1_epi32(-128 * as->isum), sum);
            const __m512 ad = _mm512_set1_ps(as->d);
            NM_UNROLL for (int g = 0; g < G; g++)
                acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[g]), _mm512_mul_ps(pk_xs_scale(u[g], s), ad), acc[g]);
        }
        break;
    }
    default: break;
    }
}

/* One BF16 pair unit of each of G groups against the f32 activations x (unit_f's operations per
 * group: even columns into acc0, odd into acc1). */
NM_INLINE void gemv_unit_bf16(const int G, const uint8_t *const *u, const float *x, int pf, __m512 *acc0,
                              __m512 *acc1) {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
    NM_UNROLL for (int p = 0; p < 16; p++) {
        if (pf > 0 && p % 4 == 0)
            NM_UNROLL for (int g = 0; g < G; g++) pf_lines(u[g] + pf + 64 * p, u[g] + pf + 64 * p + 256);
        const __m512 x0 = _mm512_set1_ps(x[2 * p]), x1 = _mm512_set1_ps(x[2 * p + 1]);
        NM_UNROLL for (int g = 0; g < G; g++) {
            const __m512i v = _mm512_loadu_si512(u[g] + 64 * p);
            acc0[g] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), x0, acc0[g]);
            acc1[g] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, hi_mask)), x1, acc1[g]);
        }
    }
}

/* G runs of `steps` groups each, run i starting at group g0 + i * steps; row groups past
 * n_rows are not written. With chunk ends (pk_args.chunk_end), each chunk's f32 partial (BF16:
 * its even and odd sums added, as at the end of a call) is added in double to a per-group
 * accumulator as the chunk ends, and the sums go to yd at the end: the bits of one call per
 * chunk, with the streams running over all of K. */
NM_INLINE void gemv_runs(const enum dtype t, const int G, const struct pk_args *ar, int64_t g0, int64_t steps, int pf) {
    const size_t ub = pk_unit_bytes(t);
    const int ublk = pk_unit_cols(t) / 32;
    for (int64_t k = 0; k < steps; k++) {
        const uint8_t *w[GEMV_STREAMS];
        __m512 acc[GEMV_STREAMS], acc1[GEMV_STREAMS];
        __m512d dlo[GEMV_STREAMS], dhi[GEMV_STREAMS];
        NM_UNROLL for (int g = 0; g < G; g++) {
            w[g] = ar->w + (size_t)(g0 + g * steps + k) * ar->group_stride;
            acc[g] = acc1[g] = _mm512_setzero_ps();
            dlo[g] = dhi[g] = _mm512_setzero_pd();
        }
        const int32_t *ce = ar->chunk_end;
        for (int64_t un = 0; un < ar->n_units; un++) {
            const uint8_t *u[GEMV_STREAMS];
            NM_UNROLL for (int g = 0; g < G; g++) u[g] = w[g] + (size_t)un * ub;
            if (t == DTYPE_BF16) gemv_unit_bf16(G, u, (const float *)ar->act + 32 * un, pf, acc, acc1);
            else gemv_unit_q(t, G, u, (const block_q8x *)ar->act + ublk * un, pf, acc);
            if (ce && (un + 1) * ublk == *ce) {
                NM_UNROLL for (int g = 0; g < G; g++) {
                    const __m512 part = t == DTYPE_BF16 ? _mm512_add_ps(acc[g], acc1[g]) : acc[g];
                    dlo[g] = _mm512_add_pd(dlo[g], _mm512_cvtps_pd(_mm512_castps512_ps256(part)));
                    dhi[g] = _mm512_add_pd(
                        dhi[g], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(part), 1))));
                    acc[g] = acc1[g] = _mm512_setzero_ps();
                }
                ce++;
            }
        }
        NM_UNROLL for (int g = 0; g < G; g++) {
            if (t == DTYPE_BF16) acc[g] = _mm512_add_ps(acc[g], acc1[g]);
            const int64_t gi = g0 + g * steps + k, rows = NM_MIN((int64_t)PK_ROWS, ar->n_rows - gi * PK_ROWS);
            const __mmask16 rm = (__mmask16)(rows >= 16 ? 0xFFFF : (1u << rows) - 1u);
            if (ar->chunk_end) { /* yd += the chunks' double sum (yd starts at 0) */
                double *yd = ar->yd + gi * PK_ROWS;
                const __mmask8 m0 = (__mmask8)(rm & 0xFF), m1 = (__mmask8)(rm >> 8);
                _mm512_mask_storeu_pd(yd, m0, _mm512_add_pd(_mm512_maskz_loadu_pd(m0, yd), dlo[g]));
                _mm512_mask_storeu_pd(yd + 8, m1, _mm512_add_pd(_mm512_maskz_loadu_pd(m1, yd + 8), dhi[g]));
                continue;
            }
            nm_store_rows(ar->yd ? NULL : ar->y + gi * PK_ROWS, ar->yd ? ar->yd + gi * PK_ROWS : NULL, rm, acc[g]);
        }
    }
}

typedef void (*gemv_fn)(const struct pk_args *a, int64_t g0, int64_t steps, int pf);
#define GEMV_INST(T)                                                                                                   \
    static void gemv_##T##_1(const struct pk_args *a, int64_t g0, int64_t steps, int pf) {                             \
        gemv_runs(DTYPE_##T, 1, a, g0, steps, pf);                                                                     \
    }                                                                                                                  \
    static void gemv_##T##_n(const struct pk_args *a, int64_t g0, int64_t steps, int pf) {                             \
        gemv_runs(DTYPE_##T, GEMV_STREAMS, a, g0, steps, pf);                                                          \
    }
GEMV_INST(Q4_0)
GEMV_INST(Q4_1)
GEMV_INST(Q4_K)
GEMV_INST(Q5_K)
GEMV_INST(Q6_K)
GEMV_INST(Q2_K)
GEMV_INST(Q3_K)
GEMV_INST(IQ4_XS)
GEMV_INST(Q5_0)
GEMV_INST(Q5_1)
GEMV_INST(IQ4_NL)
GEMV_INST(Q8_0)
GEMV_INST(BF16)
#define GEMV_ROW(T) [DTYPE_##T] = {gemv_##T##_1, gemv_##T##_n}
static const gemv_fn k_gemv[DTYPE_COUNT][2] = {GEMV_ROW(Q4_0), GEMV_ROW(Q4_1), GEMV_ROW(Q4_K), GEMV_ROW(Q5_K),
                                               GEMV_ROW(Q6_K), GEMV_ROW(Q2_K), GEMV_ROW(Q3_K), GEMV_ROW(IQ4_XS),
                                               GEMV_ROW(Q5_0), GEMV_ROW(Q5_1), GEMV_ROW(IQ4_NL),
                                               GEMV_ROW(Q8_0), GEMV_ROW(BF16)};

/* The GEMV (a->m == 1): GEMV_STREAMS runs of a->n_groups / GEMV_STREAMS groups, then the
 * remaining groups one at a time. */
static void pk_gemv(const struct pk_args *a, int pf) {
    const gemv_fn *fns = k_gemv[a->type];
    const int64_t steps = a->n_groups / GEMV_STREAMS;
    if (steps > 0) fns[1](a, 0, steps, pf);
    for (int64_t g = steps * GEMV_STREAMS; g < a->n_groups; g++) fns[0](a, g, 1, pf);
}

/* Activation rows per pass over a group: all of them in tiles of 4, in blocks of at most 64 so
 * the group's weight bytes (<= 16 x k x 1.1 bytes) are reread from L1/L2, not DRAM. The first
 * tile of a group reads its weights from DRAM: it prefetches them as the GEMV does (the small m
 * of batched decode, where that read is most of the time). */
static void pk_gemm_avx512(const struct pk_args *a) {
    const pk_group_fn *fns = k_groups[a->type];
    NM_ASSERT(fns[1] != NULL);
    /* chunks in one call: the GEMV here (not F16), and the AMX int8 kernel (packed.h) */
    NM_ASSERT(a->chunk_end == NULL || (a->m == 1 && k_gemv[a->type][0] && a->yd));
    const int pf = pk_prefetch_bytes();
    if (a->m == 1 && k_gemv[a->type][0]) {
        pk_gemv(a, pf);
        return;
    }
    for (int64_t g = 0; g < a->n_groups; g++) {
        const int64_t rows = NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
        const __mmask16 rm = (__mmask16)(rows >= 16 ? 0xFFFF : (1u << rows) - 1u);
        const uint8_t *wg = a->w + (size_t)g * a->group_stride;
        for (int c0 = 0; c0 < a->m; c0 += 4) {
            const int cc = NM_MIN(4, a->m - c0);
            const int64_t o = (int64_t)c0 * a->ldy + g * PK_ROWS;
            fns[cc](wg, a->n_units, a->act + (size_t)c0 * a->act_stride, a->act_stride, a->yd ? NULL : a->y + o,
                    a->yd ? a->yd + o : NULL, a->ldy, rm, c0 == 0 ? pf : 0);
        }
    }
}

void avx512_fill_packed(struct kern_isa *t) { t->pk_gemm = pk_gemm_avx512; }
