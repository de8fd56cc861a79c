/* The AMX tile kernel of the packed layouts, written once over tile-operation macros and
 * included twice: by amx.c with the real instructions (built with -mamx-tile -mamx-int8
 * -mamx-bf16) and by amx_emu.c with a plain-C emulation (so the tile algorithm is tested on
 * machines without AMX). The includer defines AMX_FN (the function's name), TILE_CFG(cfg),
 * TILE_ZERO(t), TILE_LOAD(t, p, stride), TILE_STORE(t, p, stride), TILE_DPBSSD(c, a, b),
 * TILE_DPBF16PS(c, a, b).
 *
 * Int8 (block-quantized types). The f32 scaling per 32-column block (a q8x activation scale per
 * row, a weight scale per column) is the cost, not the tile product, so the kernel is built
 * around keeping the vector units busy while the tile unit works:
 *   - a batch of row groups is unpacked once per call into L2-resident panels: signed codes in
 *     B-tile order (Q4_0's q - 8, Q8_0's q, Q6_K's q - 32: TDPBSSD then gives the VNNI kernel's
 *     integer sum including its offset term) and the scales as f32 vectors, ready to use;
 *   - every activation tile (16 rows, in tile order: the driver copies the q8x rows once per
 *     call so a block's 16 x 32 codes are one TILELOADD of stride 32 and its 16 d and isum one
 *     line each; pk_args.act_tiles) runs over every panel of the batch with its 16 accumulators
 *     (16 output rows x 16 columns) in zmm registers;
 *   - per block: TILELOADD A and B, TILEZERO, TDPBSSD, TILESTORED of C into a 1 KiB L1 buffer,
 *     and the f32 step of the previous block (cvt, mul by d_a x d_w, fma: the same operations in
 *     the same order as the VNNI kernel, x86-avx512/packed.c, so the same bits); A and B rotate
 *     over three tile pairs and C over two, so loads run ahead of the products (amx_i8_dot).
 * Q6_K's two 16-column scale groups per block use two half tiles (K = 16) with their own C
 * tiles; its integer combination (two vpmulld) happens in the f32 step, as in the VNNI kernel.
 *
 * BF16 (F16/BF16 weights): A tiles of bf16 activations (16 rows x 32 columns), B = a unit's 16
 * pair lines (F16 converted to bf16 once per group), C accumulates f32 over all of K in the
 * tile (TDPBF16PS): 2 activation tiles x 2 groups, tmm0/1 A, tmm2/3 B, tmm4..7 C.
 *
 * Int8: activation rows past m in the last tile are zeros of the tile-order copy. BF16: they
 * come from a zero-padded copy (never read out of bounds). Rows past n are never stored. */
#include <stdlib.h>
#include <string.h>

#include "../base.h"
#include "../matmul_internal.h"
#include "../quant.h"
#include "../x86-avx512/simd.h"

struct amx_tilecfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
_Static_assert(sizeof(struct amx_tilecfg) == 64, "AMX tile config is 64 bytes");

static void amx_cfg_set(struct amx_tilecfg *c, int t, int rows, int colsb) {
    c->rows[t] = (uint8_t)rows;
    c->colsb[t] = (uint16_t)colsb;
}

static void *amx_scratch(size_t bytes) { return nm_scratch(bytes); }

/* ---- int8 tiles --------------------------------------------------------------------------
 * The panel of a row group: per (sub-)block of 32 columns, PANEL_B = 512 bytes of signed codes
 * in B-tile order (8 lines of 64 bytes: line q = quad q of the 16 rows; Q6_K: lines 0-3 are the
 * first 16 columns, lines 4-7 the last 16) followed by amx_np(t) vectors of 16 lanes:
 *   Q4_0, Q8_0: sc = d                      (f32)
 *   Q4_1:       sc = d, mn = m              (f32, f32)
 *   Q4_K, Q5_K: sc = d * sc_s, mn = dmin * mn_s (f32, f32: the VNNI kernel's products)
 *   Q6_K:       sc = d, s0, s1 (int32: the int8 scales of the two 16-column groups)
 * Signed codes (Q4_0: q - 8, Q8_0: q, Q6_K: q - 32; the others as they are) make TDPBSSD's
 * int32 equal to the VNNI kernel's integer sum including its offset term, so no per-row offset
 * correction is left for the f32 step. */
#define AMX_PANEL_B 512
/* Bytes of row-group panels unpacked at once: with one activation tile's rows they stay in L2. */
#define AMX_PANEL_BUDGET (384 * 1024)

static inline int amx_np(enum dtype t) {
    return t == DTYPE_Q4_0 || t == DTYPE_Q8_0 ? 1 : t == DTYPE_Q6_K ? 3 : 2;
}
static inline __m512 amx_h16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 amx_u8f(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* Sub-block s of unit u (type t) into the panel entry at dst (PANEL_B + 64 * amx_np(t) bytes). */
NM_INLINE void amx_unpack_blk(const enum dtype t, const uint8_t *u, int s, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    float *prm = (float *)(dst + AMX_PANEL_B);
    switch (t) {
    case DTYPE_Q4_0:
    case DTYPE_Q4_1:
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const uint8_t *p = u + 256 * s;
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(p + 64 * j);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (t == DTYPE_Q4_0) {
                lo = _mm512_sub_epi8(lo, _mm512_set1_epi8(8));
                hi = _mm512_sub_epi8(hi, _mm512_set1_epi8(8));
            }
            if (t == DTYPE_Q5_K) {
                uint64_t k0, k1;
                memcpy(&k0, u + PK_K5_HI + 64 * s + 8 * (2 * j), 8);
                memcpy(&k1, u + PK_K5_HI + 64 * s + 8 * (2 * j + 1), 8);
                lo = _mm512_mask_add_epi8(lo, (__mmask64)k0, lo, _mm512_set1_epi8(16));
                hi = _mm512_mask_add_epi8(hi, (__mmask64)k1, hi, _mm512_set1_epi8(16));
            }
            _mm512_store_si512(dst + 128 * j, lo);
            _mm512_store_si512(dst + 128 * j + 64, hi);
        }
        if (t == DTYPE_Q4_0 || t == DTYPE_Q4_1) {
            _mm512_store_ps(prm, amx_h16(u + PK_Q4_0_D));
            if (t == DTYPE_Q4_1) _mm512_store_ps(prm + 16, amx_h16(u + PK_Q4_1_M));
        } else {
            const int five = t == DTYPE_Q5_K;
            const __m512 d = amx_h16(u + (five ? PK_K5_D : PK_K4_D)), dmin = amx_h16(u + (five ? PK_K5_DMIN : PK_K4_DMIN));
            _mm512_store_ps(prm, _mm512_mul_ps(amx_u8f(u + (five ? PK_K5_SC : PK_K4_SC) + 16 * s), d));
            _mm512_store_ps(prm + 16, _mm512_mul_ps(amx_u8f(u + (five ? PK_K5_MN : PK_K4_MN) + 16 * s), dmin));
        }
        break;
    }
    case DTYPE_Q8_0:
        NM_UNROLL for (int q = 0; q < 8; q++)
            _mm512_store_si512(dst + 64 * q,
                               _mm512_xor_si512(_mm512_loadu_si512(u + 64 * q), _mm512_set1_epi8((char)0x80)));
        _mm512_store_ps(prm, amx_h16(u + PK_Q8_0_D));
        break;
    case DTYPE_Q6_K: {
        const uint8_t *sub = u + PK_K6_SUB * s;
        const __m512i m3 = _mm512_set1_epi8(0x03), mc = _mm512_set1_epi8(0x0C), c32 = _mm512_set1_epi8(32);
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(sub + 64 * j);
            const __m256i h32 = _mm256_loadu_si256((const __m256i *)(sub + 256 + 32 * j));
            const __m512i h =
                _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(h32), _mm256_srli_epi16(h32, 4), 1), m4);
            const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16(_mm512_and_si512(h, m3), 4));
            const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                               _mm512_slli_epi16(_mm512_and_si512(h, mc), 2));
            _mm512_store_si512(dst + 128 * j, _mm512_sub_epi8(lo, c32));
            _mm512_store_si512(dst + 128 * j + 64, _mm512_sub_epi8(hi, c32));
        }
        _mm512_store_ps(prm, amx_h16(u + PK_K6_D));
        _mm512_store_si512(prm + 16, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(u + PK_K6_SC + 32 * s))));
        _mm512_store_si512(prm + 32,
                           _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(u + PK_K6_SC + 32 * s + 16))));
        break;
    }
    default: nm_bug(__FILE__, __LINE__, "AMX int8 kernel: type without a packed layout");
    }
}

/* The f32 step of one block for 16 activation rows: c0 (and Q6_K's c1) the stored C tile(s),
 * 16 x 16 int32; prm the panel entry's vectors; ad, ai the rows' q8x d and isum of the block
 * (the activation tile's entry, pk_args.act_tiles). Per row the same operations, in the same
 * order, as the VNNI kernel (x86-avx512/packed.c). */
NM_INLINE void amx_post(const enum dtype t, const int32_t *c0, const int32_t *c1, const float *prm, const float *ad,
                        const int32_t *ai, __m512 *acc) {
    const __m512 sc = _mm512_load_ps(prm);
    NM_UNROLL for (int r = 0; r < 16; r++) {
        const __m512i ci = _mm512_load_si512(c0 + 16 * r);
        switch (t) {
        case DTYPE_Q4_0:
        case DTYPE_Q8_0:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            break;
        case DTYPE_Q4_1:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_load_ps(prm + 16), _mm512_set1_ps(ad[r] * (float)ai[r]), acc[r]);
            break;
        case DTYPE_Q4_K:
        case DTYPE_Q5_K:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            acc[r] = _mm512_fnmadd_ps(_mm512_load_ps(prm + 16), _mm512_set1_ps(ad[r] * (float)ai[r]), acc[r]);
            break;
        case DTYPE_Q6_K: {
            const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(ci, _mm512_load_si512(prm + 16)),
                                               _mm512_mullo_epi32(_mm512_load_si512(c1 + 16 * r),
                                                                  _mm512_load_si512(prm + 32)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            break;
        }
        default: break;
        }
    }
}

/* End of a chunk (pk_args.chunk_end): its f32 partial, acc, is added in double to dacc (16 rows
 * x 16 lanes) and acc restarts from 0. */
NM_INLINE void amx_chunk_flush(__m512 *acc, double *dacc) {
    NM_UNROLL for (int r = 0; r < 16; r++) {
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(acc[r]));
        const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1)));
        _mm512_store_pd(dacc + 16 * r, _mm512_add_pd(_mm512_load_pd(dacc + 16 * r), lo));
        _mm512_store_pd(dacc + 16 * r + 8, _mm512_add_pd(_mm512_load_pd(dacc + 16 * r + 8), hi));
        acc[r] = _mm512_setzero_ps();
    }
}

/* The order of the tile instructions: iteration b issues
 *   L(b + 2)  TILELOADD A and B of block b + 2 into tile set (b + 2) % 3 (A 0/1/2, B 3/4/5)
 *   T(b + 1)  TILEZERO + TDPBSSD of block b + 1 into C tile (b + 1) % 2 (6/7)
 *   P(b - 1)  the f32 step of block b - 1 from C buffer (b - 1) % 2
 *   S(b)      TILESTORED of block b's C into buffer b % 2
 * so every product has its operands loaded an iteration ahead and every store's product was
 * issued an iteration earlier. On the device Xeon this measured the same as the plain order
 * (store right after the product, the f32 step two blocks behind: 1.56 vs 1.59 int8 TOP/s, Q4_0,
 * 2 threads); the kernel is bound by the f32 step and the tile stores/loads, not by the order. */

/* One activation tile (ab: its first block in tile order, pk_args.act_tiles) times one row
 * group's panel (nb blocks, ps bytes apart) into acc; cb: four 1 KiB C buffers. Q6_K: per block
 * two half tiles (K = 16): A 0/1, B 2/3, C 4+5 / 6+7 alternating, loads one block ahead. With ce
 * (chunk ends, ascending, the last = nb), every chunk's acc goes to dacc through
 * amx_chunk_flush right after the f32 step of its last block. */
NM_INLINE void amx_i8_dot(const enum dtype t, const uint8_t *ab, const uint8_t *pnl, size_t ps, int64_t nb,
                          int32_t *cb, __m512 *acc, const int32_t *ce, double *dacc) {
    const long st = 32;
#define AMX_A(b) (ab + (size_t)(b) * PK_ACT_TILE_B)
#define AMX_AD(b) ((const float *)(AMX_A(b) + PK_ACT_TILE_D))
#define AMX_AI(b) ((const int32_t *)(AMX_A(b) + PK_ACT_TILE_ISUM))
#define AMX_B(b) (pnl + (size_t)(b) * ps)
#define AMX_CHUNK(b)                                                                                        \
    do {                                                                                                    \
        if (ce && (b) + 1 == *ce) {                                                                         \
            amx_chunk_flush(acc, dacc);                                                                     \
            ce++;                                                                                           \
        }                                                                                                   \
    } while (0)
#define AMX_POST2(b, cbi)                                                                                   \
    do {                                                                                                    \
        amx_post(t, cb + 256 * (cbi), NULL, (const float *)(pnl + (size_t)(b) * ps + AMX_PANEL_B), AMX_AD(b), \
                 AMX_AI(b), acc);                                                                           \
        AMX_CHUNK(b);                                                                                       \
    } while (0)
    if (t == DTYPE_Q6_K) {
#define AMX_Q6_L(b)                                                                                         \
    do {                                                                                                    \
        TILE_LOAD(0, AMX_A(b), st);                                                                         \
        TILE_LOAD(2, AMX_B(b), 64);                                                                         \
        TILE_LOAD(1, AMX_A(b) + 16, st);                                                                    \
        TILE_LOAD(3, AMX_B(b) + 256, 64);                                                                   \
    } while (0)
#define AMX_Q6_T(C0, C1)                                                                                    \
    do {                                                                                                    \
        TILE_ZERO(C0);                                                                                      \
        TILE_DPBSSD(C0, 0, 2);                                                                              \
        TILE_ZERO(C1);                                                                                      \
        TILE_DPBSSD(C1, 1, 3);                                                                              \
    } while (0)
#define AMX_Q6_POST(b)                                                                                      \
    do {                                                                                                    \
        amx_post(t, cb + 512 * ((b) & 1), cb + 512 * ((b) & 1) + 256,                                       \
                 (const float *)(pnl + (size_t)(b) * ps + AMX_PANEL_B), AMX_AD(b), AMX_AI(b), acc);         \
        AMX_CHUNK(b);                                                                                       \
    } while (0)
        AMX_Q6_L(0);
        for (int64_t b = 0; b < nb; b++) {
            if (b & 1) AMX_Q6_T(6, 7);
            else AMX_Q6_T(4, 5);
            if (b + 1 < nb) AMX_Q6_L(b + 1);
            if (b >= 1) AMX_Q6_POST(b - 1);
            if (b & 1) {
                TILE_STORE(6, cb + 512, 64);
                TILE_STORE(7, cb + 768, 64);
            } else {
                TILE_STORE(4, cb, 64);
                TILE_STORE(5, cb + 256, 64);
            }
        }
        AMX_Q6_POST(nb - 1);
        return;
    }
#define AMX_L(SA, SB, b)                                                                                    \
    do {                                                                                                    \
        TILE_LOAD(SA, AMX_A(b), st);                                                                        \
        TILE_LOAD(SB, AMX_B(b), 64);                                                                        \
    } while (0)
#define AMX_T(SA, SB, C)                                                                                    \
    do {                                                                                                    \
        TILE_ZERO(C);                                                                                       \
        TILE_DPBSSD(C, SA, SB);                                                                             \
    } while (0)
    AMX_L(0, 3, 0);
    if (nb > 1) AMX_L(1, 4, 1);
    AMX_T(0, 3, 6);
    for (int64_t b = 0; b < nb; b++) {
        if (b + 2 < nb) switch ((b + 2) % 3) {
            case 0: AMX_L(0, 3, b + 2); break;
            case 1: AMX_L(1, 4, b + 2); break;
            default: AMX_L(2, 5, b + 2); break;
            }
        if (b + 1 < nb) switch ((b + 1) % 6) {
            case 0: AMX_T(0, 3, 6); break;
            case 1: AMX_T(1, 4, 7); break;
            case 2: AMX_T(2, 5, 6); break;
            case 3: AMX_T(0, 3, 7); break;
            case 4: AMX_T(1, 4, 6); break;
            default: AMX_T(2, 5, 7); break;
            }
        if (b >= 1) AMX_POST2(b - 1, (b - 1) & 1);
        if (b & 1) TILE_STORE(7, cb + 256, 64);
        else TILE_STORE(6, cb, 64);
    }
    AMX_POST2(nb - 1, (nb - 1) & 1);
#undef AMX_A
#undef AMX_AD
#undef AMX_AI
#undef AMX_B
#undef AMX_CHUNK
#undef AMX_POST2
#undef AMX_Q6_L
#undef AMX_Q6_T
#undef AMX_Q6_POST
#undef AMX_L
#undef AMX_T
}

/* Int8 tiles for one type: for each batch of row groups whose panels fit AMX_PANEL_BUDGET, the
 * panels are unpacked once; then every activation tile (16 rows, in tile order: codes one
 * TILELOADD of stride 32, the rows' d and isum one line) runs over every panel of the batch, one
 * tile product per block, the f32 step trailing (amx_i8_dot). */
NM_INLINE void amx_i8(const enum dtype t, const struct pk_args *a) {
    NM_ASSERT(a->act_tiles);
    const int q6 = t == DTYPE_Q6_K;
    const int ublk = pk_unit_cols(t) / 32;
    const int64_t nb = a->n_units * ublk;
    const size_t ub = pk_unit_bytes(t);
    const size_t ps = AMX_PANEL_B + 64 * (size_t)amx_np(t), panel = (size_t)nb * ps;
    const int64_t gbatch = NM_MAX((int64_t)1, NM_MIN(a->n_groups, (int64_t)(AMX_PANEL_BUDGET / panel)));
    const int m = a->m;
    uint8_t *scr = amx_scratch((size_t)gbatch * panel + 4096 + 2048 + 64);
    uint8_t *pnl = scr;
    int32_t *cb = (int32_t *)(scr + (size_t)gbatch * panel);
    double *dacc = (double *)(scr + (size_t)gbatch * panel + 4096); /* [16][16]: chunked calls */
    const bool chunked = a->chunk_end != NULL;
    NM_ASSERT(!chunked || (a->yd && a->n_chunk_ends > 0 && a->chunk_end[a->n_chunk_ends - 1] == nb));

    struct amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    if (q6) { /* A 0/1 (K = 16), B 2/3, C 4..7 */
        amx_cfg_set(&cfg, 0, 16, 16);
        amx_cfg_set(&cfg, 1, 16, 16);
        amx_cfg_set(&cfg, 2, 4, 64);
        amx_cfg_set(&cfg, 3, 4, 64);
        for (int i = 4; i < 8; i++) amx_cfg_set(&cfg, i, 16, 64);
    } else { /* A 0/1/2 (K = 32), B 3/4/5, C 6/7 */
        for (int i = 0; i < 3; i++) {
            amx_cfg_set(&cfg, i, 16, 32);
            amx_cfg_set(&cfg, i + 3, 8, 64);
        }
        amx_cfg_set(&cfg, 6, 16, 64);
        amx_cfg_set(&cfg, 7, 16, 64);
    }
    TILE_CFG(&cfg);

    for (int64_t g0 = 0; g0 < a->n_groups; g0 += gbatch) {
        const int64_t ng = NM_MIN(gbatch, a->n_groups - g0);
        for (int64_t j = 0; j < ng; j++) {
            const uint8_t *wg = a->w + (size_t)(g0 + j) * a->group_stride;
            for (int64_t u = 0; u < a->n_units; u++)
                for (int s = 0; s < ublk; s++)
                    amx_unpack_blk(t, wg + (size_t)u * ub, s, pnl + (size_t)j * panel + (size_t)(u * ublk + s) * ps);
        }
        for (int m0 = 0; m0 < m; m0 += 16) {
            const int rows = NM_MIN(16, m - m0);
            const uint8_t *ab = a->act + (size_t)(m0 / 16) * a->act_stride;
            for (int64_t j = 0; j < ng; j++) {
                __m512 acc[16];
                NM_UNROLL for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
                if (chunked) memset(dacc, 0, 256 * sizeof(double));
                amx_i8_dot(t, ab, pnl + (size_t)j * panel, ps, nb, cb, acc, a->chunk_end, dacc);
                const int64_t g = g0 + j, rows_g = NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
                const __mmask16 rm = (__mmask16)(rows_g >= 16 ? 0xFFFF : (1u << rows_g) - 1u);
                const __mmask8 rm0 = (__mmask8)(rm & 0xFF), rm1 = (__mmask8)(rm >> 8);
                NM_UNROLL for (int r = 0; r < 16; r++)
                    if (r < rows) {
                        const int64_t o = (int64_t)(m0 + r) * a->ldy + g * PK_ROWS;
                        if (!chunked) {
                            nm_store_rows(a->yd ? NULL : a->y + o, a->yd ? a->yd + o : NULL, rm, acc[r]);
                            continue;
                        }
                        double *yd = a->yd + o; /* += the chunks' double sum (yd starts at 0) */
                        _mm512_mask_storeu_pd(yd, rm0, _mm512_add_pd(_mm512_maskz_loadu_pd(rm0, yd),
                                                                     _mm512_load_pd(dacc + 16 * r)));
                        _mm512_mask_storeu_pd(yd + 8, rm1, _mm512_add_pd(_mm512_maskz_loadu_pd(rm1, yd + 8),
                                                                         _mm512_load_pd(dacc + 16 * r + 8)));
                    }
            }
        }
    }
}

static void amx_i8_q4_0(const struct pk_args *a) { amx_i8(DTYPE_Q4_0, a); }
static void amx_i8_q4_1(const struct pk_args *a) { amx_i8(DTYPE_Q4_1, a); }
static void amx_i8_q8_0(const struct pk_args *a) { amx_i8(DTYPE_Q8_0, a); }
static void amx_i8_q4_k(const struct pk_args *a) { amx_i8(DTYPE_Q4_K, a); }
static void amx_i8_q5_k(const struct pk_args *a) { amx_i8(DTYPE_Q5_K, a); }
static void amx_i8_q6_k(const struct pk_args *a) { amx_i8(DTYPE_Q6_K, a); }

static void AMX_FN_INT8(const struct pk_args *a) {
    switch (a->type) {
    case DTYPE_Q4_0: amx_i8_q4_0(a); break;
    case DTYPE_Q4_1: amx_i8_q4_1(a); break;
    case DTYPE_Q8_0: amx_i8_q8_0(a); break;
    case DTYPE_Q4_K: amx_i8_q4_k(a); break;
    case DTYPE_Q5_K: amx_i8_q5_k(a); break;
    case DTYPE_Q6_K: amx_i8_q6_k(a); break;
    default: nm_bug(__FILE__, __LINE__, "AMX int8 kernel: type without a packed layout");
    }
}

static void AMX_FN_BF16(const struct pk_args *a) {
    const enum dtype t = a->type;
    const int64_t nu = a->n_units;
    const int m = a->m;
    const size_t gb = (size_t)nu * 1024; /* one group's B tiles as bf16 */
    const size_t tail_stride = (size_t)nu * 64;
    uint8_t *scr = amx_scratch(2 * gb + 2 * 4096 + 16 * tail_stride + 64);
    uint8_t *bbuf = scr;
    float *cbuf = (float *)(scr + 2 * gb);
    uint8_t *tail = scr + 2 * gb + 2 * 4096;

    struct amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) amx_cfg_set(&cfg, i, 16, 64);
    TILE_CFG(&cfg);

    for (int64_t g0 = 0; g0 < a->n_groups; g0 += 2) {
        const int ng = (int)NM_MIN((int64_t)2, a->n_groups - g0);
        const uint8_t *bt[2];
        for (int j = 0; j < ng; j++) {
            const uint8_t *wg = a->w + (size_t)(g0 + j) * a->group_stride;
            if (t == DTYPE_BF16) {
                bt[j] = wg;
                continue;
            }
            /* F16 -> bf16 (round to nearest even) once per group */
            uint8_t *dst = bbuf + (size_t)j * gb;
            for (int64_t u = 0; u < nu; u++)
                for (int p = 0; p < 16; p++) {
                    const __m256i h = _mm256_loadu_si256((const __m256i *)(wg + (size_t)u * 1024 + 64 * p));
                    const __m256i h2 = _mm256_loadu_si256((const __m256i *)(wg + (size_t)u * 1024 + 64 * p + 32));
                    const __m512 f0 = _mm512_cvtph_ps(h), f1 = _mm512_cvtph_ps(h2);
                    const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(f0)),
                                                         (__m256i)_mm512_cvtneps_pbh(f1), 1);
                    _mm512_store_si512(dst + (size_t)u * 1024 + 64 * p, b);
                }
            bt[j] = dst;
        }
        for (int m0 = 0; m0 < m; m0 += 32) {
            const int mt = m - m0 > 16 ? 2 : 1;
            const uint8_t *abase[2];
            size_t astr[2];
            int arows[2];
            for (int i = 0; i < mt; i++) {
                const int r0 = m0 + 16 * i, nr = NM_MIN(16, m - r0);
                arows[i] = nr;
                if (nr == 16) {
                    abase[i] = a->act + (size_t)r0 * a->act_stride;
                    astr[i] = a->act_stride;
                } else {
                    memset(tail, 0, 16 * tail_stride);
                    for (int r = 0; r < nr; r++)
                        memcpy(tail + (size_t)r * tail_stride, a->act + (size_t)(r0 + r) * a->act_stride, tail_stride);
                    abase[i] = tail;
                    astr[i] = tail_stride;
                }
            }
            TILE_ZERO(4);
            TILE_ZERO(5);
            TILE_ZERO(6);
            TILE_ZERO(7);
            for (int64_t u = 0; u < nu; u++) {
                TILE_LOAD(0, abase[0] + (size_t)u * 64, astr[0]);
                TILE_LOAD(2, bt[0] + (size_t)u * 1024, 64);
                TILE_DPBF16PS(4, 0, 2);
                if (ng == 2) {
                    TILE_LOAD(3, bt[1] + (size_t)u * 1024, 64);
                    TILE_DPBF16PS(5, 0, 3);
                }
                if (mt == 2) {
                    TILE_LOAD(1, abase[1] + (size_t)u * 64, astr[1]);
                    TILE_DPBF16PS(6, 1, 2);
                    if (ng == 2) TILE_DPBF16PS(7, 1, 3);
                }
            }
            TILE_STORE(4, cbuf, 64);
            if (ng == 2) TILE_STORE(5, cbuf + 256, 64);
            if (mt == 2) {
                TILE_STORE(6, cbuf + 512, 64);
                if (ng == 2) TILE_STORE(7, cbuf + 768, 64);
            }
            for (int i = 0; i < mt; i++)
                for (int j = 0; j < ng; j++) {
                    const int64_t rows_g = NM_MIN((int64_t)PK_ROWS, a->n_rows - (g0 + j) * PK_ROWS);
                    const __mmask16 rm = (__mmask16)(rows_g >= 16 ? 0xFFFF : (1u << rows_g) - 1u);
                    for (int r = 0; r < arows[i]; r++) {
                        const int64_t o = (int64_t)(m0 + 16 * i + r) * a->ldy + (g0 + j) * PK_ROWS;
                        nm_store_rows(a->yd ? NULL : a->y + o, a->yd ? a->yd + o : NULL, rm,
                                      _mm512_load_ps(cbuf + 256 * (2 * i + j) + 16 * r));
                    }
                }
        }
    }
}

void AMX_FN(const struct pk_args *a) {
    if (a->m == 0 || a->n_groups == 0) return;
    if (a->type == DTYPE_F16 || a->type == DTYPE_BF16) AMX_FN_BF16(a);
    else AMX_FN_INT8(a);
    TILE_RELEASE();
}
