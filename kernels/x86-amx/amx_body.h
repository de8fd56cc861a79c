/* The AMX tile kernel of the packed layouts, written once over tile-operation macros and
 * included twice: by amx.c with the real instructions (built with -mamx-tile -mamx-int8
 * -mamx-bf16) and by amx_emu.c with a plain-C emulation (so the tile algorithm is tested on
 * machines without AMX). The includer defines AMX_FN (the function's name), TILE_CFG(cfg),
 * TILE_ZERO(t), TILE_LOAD(t, p, stride), TILE_STORE(t, p, stride), TILE_DPBSUD(c, a, b),
 * TILE_DPBF16PS(c, a, b).
 *
 * Int8 (block-quantized types). Per row group (16 weight rows, one B tile column each): the
 * group's codes are unpacked once into bytes in VNNI order (a sub-block = 8 lines of 64 bytes =
 * one B tile of K = 32; Q8_0's codes already are, and load in place) and its per-sub-block
 * scales into f32/int32 vectors. Then per pair of 16-row activation tiles and per sub-block:
 * A tiles load straight from the q8x rows (32 code bytes at stride act_stride), TDPBSUD
 * (signed activations x unsigned codes) gives the exact int32 block sums, and the post step
 * applies, per activation row, the same f32 operations as the VNNI kernel (x86-avx512/packed.c)
 * in the same order, so the results are the same bits. Q6_K's two 16-column scale groups per
 * sub-block use two half tiles (K = 16) with their own C tiles. Tiles: tmm0/1 A (two activation
 * tiles), tmm2 B, tmm4..7 C (activation tile x half).
 *
 * BF16 (F16/BF16 weights): A tiles of bf16 activations (16 rows x 32 columns), B = a unit's 16
 * pair lines (F16 converted to bf16 once per group), C accumulates f32 over all of K in the
 * tile (TDPBF16PS): 2 activation tiles x 2 groups, tmm0/1 A, tmm2/3 B, tmm4..7 C.
 *
 * Activation rows past m in the last tile come from a zero-padded copy (never read out of
 * bounds); rows past n are never stored. */
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

/* Per-thread scratch (grows; freed at thread exit through nm_scratch's key). */
#define AMX_SCRATCH_ALIGN 64

/* Post-processing parameters of one sub-block of a group (see the VNNI kernel). */
struct amx_post {
    float sc[16];   /* scale per row: d (Q4_0/Q4_1/Q8_0), d * sc (K-quants), d (Q6_K) */
    float mn[16];   /* Q4_1: m; Q4_K/Q5_K: dmin * mn */
    int32_t s0[16]; /* Q6_K: int8 scales of the two 16-column groups */
    int32_t s1[16];
};

static inline __m512 amx_h16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 amx_u8f(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* Unpack the codes of one sub-block (8 lines) of type t into 512 bytes at dst, and its post
 * parameters. u: the unit; s: the sub-block in it. */
static void amx_unpack_sub(enum dtype t, const uint8_t *u, int s, uint8_t *dst, struct amx_post *pp) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    switch (t) {
    case DTYPE_Q4_0:
    case DTYPE_Q4_1:
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const uint8_t *p = u + 256 * s;
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(p + 64 * j);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
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
            _mm512_store_ps(pp->sc, amx_h16(u + PK_Q4_0_D));
            if (t == DTYPE_Q4_1) _mm512_store_ps(pp->mn, amx_h16(u + PK_Q4_1_M));
        } else {
            const int five = t == DTYPE_Q5_K;
            const __m512 d = amx_h16(u + (five ? PK_K5_D : PK_K4_D)), dmin = amx_h16(u + (five ? PK_K5_DMIN : PK_K4_DMIN));
            _mm512_store_ps(pp->sc, _mm512_mul_ps(amx_u8f(u + (five ? PK_K5_SC : PK_K4_SC) + 16 * s), d));
            _mm512_store_ps(pp->mn, _mm512_mul_ps(amx_u8f(u + (five ? PK_K5_MN : PK_K4_MN) + 16 * s), dmin));
        }
        break;
    }
    case DTYPE_Q8_0:
        memcpy(dst, u, 512);
        _mm512_store_ps(pp->sc, amx_h16(u + PK_Q8_0_D));
        break;
    case DTYPE_Q6_K: {
        const uint8_t *sub = u + PK_K6_SUB * s;
        const __m512i m3 = _mm512_set1_epi8(0x03), mc = _mm512_set1_epi8(0x0C);
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(sub + 64 * j);
            const __m256i h32 = _mm256_loadu_si256((const __m256i *)(sub + 256 + 32 * j));
            const __m512i h =
                _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(h32), _mm256_srli_epi16(h32, 4), 1), m4);
            _mm512_store_si512(dst + 128 * j,
                               _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16(_mm512_and_si512(h, m3), 4)));
            _mm512_store_si512(dst + 128 * j + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                                                   _mm512_slli_epi16(_mm512_and_si512(h, mc), 2)));
        }
        _mm512_store_ps(pp->sc, amx_h16(u + PK_K6_D));
        _mm512_store_si512(pp->s0, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(u + PK_K6_SC + 32 * s))));
        _mm512_store_si512(pp->s1, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(u + PK_K6_SC + 32 * s + 16))));
        break;
    }
    default: nm_bug(__FILE__, __LINE__, "AMX int8 kernel: type without a packed layout");
    }
}

/* Sum of the first 16 codes of a q8x block. */
static inline int32_t amx_lo16(const block_q8x *a) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) s += a->qs[i];
    return s;
}

/* Apply one sub-block's int32 results (C tiles stored at c0 [and c1 for Q6_K's second half],
 * 16 rows x 16 int32) for 16 activation rows (their q8x block b at ab, stride as) to acc. */
static inline void amx_post_rows(enum dtype t, const int32_t *c0, const int32_t *c1, const struct amx_post *pp,
                                 const uint8_t *ab, size_t as, int rows, __m512 *acc) {
    const __m512 sc = _mm512_load_ps(pp->sc);
    for (int r = 0; r < rows; r++) {
        const block_q8x *a = (const block_q8x *)(ab + (size_t)r * as);
        const __m512i ci = _mm512_load_si512(c0 + 16 * r);
        switch (t) {
        case DTYPE_Q4_0:
        case DTYPE_Q8_0: {
            const __m512i s = _mm512_add_epi32(_mm512_set1_epi32((t == DTYPE_Q4_0 ? -8 : -128) * a->isum), ci);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, _mm512_set1_ps(a->d)), acc[r]);
            break;
        }
        case DTYPE_Q4_1:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(a->d)), acc[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_load_ps(pp->mn), _mm512_set1_ps(a->d * (float)a->isum), acc[r]);
            break;
        case DTYPE_Q4_K:
        case DTYPE_Q5_K:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(a->d)), acc[r]);
            acc[r] = _mm512_fnmadd_ps(_mm512_load_ps(pp->mn), _mm512_set1_ps(a->d * (float)a->isum), acc[r]);
            break;
        case DTYPE_Q6_K: {
            const int32_t lo = amx_lo16(a);
            const __m512i g0 = _mm512_add_epi32(_mm512_set1_epi32(-32 * lo), ci);
            const __m512i g1 = _mm512_add_epi32(_mm512_set1_epi32(-32 * (a->isum - lo)), _mm512_load_si512(c1 + 16 * r));
            const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(g0, _mm512_load_si512(pp->s0)),
                                               _mm512_mullo_epi32(g1, _mm512_load_si512(pp->s1)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, _mm512_set1_ps(a->d)), acc[r]);
            break;
        }
        default: break;
        }
    }
}

static void *amx_scratch(size_t bytes) { return nm_scratch(bytes); }

static void AMX_FN_INT8(const struct pk_args *a) {
    const enum dtype t = a->type;
    const int q6 = t == DTYPE_Q6_K;
    const int ublk = pk_unit_cols(t) / 32;
    const int64_t nsub = a->n_units * ublk;
    const size_t ub = pk_unit_bytes(t);
    const int m = a->m;
    /* scratch: B codes [nsub][512], post params [nsub], C [4][16][16] int32, tail A copy */
    const size_t b_bytes = (size_t)nsub * 512, p_bytes = (size_t)nsub * sizeof(struct amx_post);
    const size_t tail_stride = (size_t)nsub * sizeof(block_q8x);
    uint8_t *scr = amx_scratch(b_bytes + p_bytes + 4096 + 16 * tail_stride + 64);
    uint8_t *bbuf = scr;
    struct amx_post *post = (struct amx_post *)(scr + b_bytes);
    int32_t *cbuf = (int32_t *)(scr + b_bytes + p_bytes);
    uint8_t *tail = scr + b_bytes + p_bytes + 4096;

    struct amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int kb = q6 ? 16 : 32; /* A tile bytes per row (K per TDPBSUD) */
    amx_cfg_set(&cfg, 0, 16, kb);
    amx_cfg_set(&cfg, 1, 16, kb);
    amx_cfg_set(&cfg, 2, kb / 4, 64);
    for (int i = 4; i < 8; i++) amx_cfg_set(&cfg, i, 16, 64);
    TILE_CFG(&cfg);

    for (int64_t g = 0; g < a->n_groups; g++) {
        const uint8_t *wg = a->w + (size_t)g * a->group_stride;
        for (int64_t u = 0; u < a->n_units; u++)
            for (int s = 0; s < ublk; s++)
                amx_unpack_sub(t, wg + (size_t)u * ub, s, bbuf + (size_t)(u * ublk + s) * 512, &post[u * ublk + s]);
        const int64_t rows_g = NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
        const __mmask16 rm = (__mmask16)(rows_g >= 16 ? 0xFFFF : (1u << rows_g) - 1u);
        for (int m0 = 0; m0 < m; m0 += 32) {
            /* activation tiles: rows [m0, m0 + 16) and [m0 + 16, m0 + 32) */
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
            __m512 acc[2][16];
            for (int i = 0; i < 2; i++)
                for (int r = 0; r < 16; r++) acc[i][r] = _mm512_setzero_ps();
            for (int64_t sb = 0; sb < nsub; sb++) {
                const uint8_t *bt = bbuf + (size_t)sb * 512;
                for (int h = 0; h <= q6; h++) {
                    const size_t aoff = (size_t)sb * sizeof(block_q8x) + 8 + 16 * (size_t)h;
                    TILE_LOAD(2, bt + 256 * h, 64);
                    TILE_LOAD(0, abase[0] + aoff, astr[0]);
                    TILE_ZERO(4);
                    TILE_DPBSUD(4, 0, 2);
                    TILE_STORE(4, cbuf + 256 * (2 * 0 + h), 64);
                    if (mt == 2) {
                        TILE_LOAD(1, abase[1] + aoff, astr[1]);
                        TILE_ZERO(5);
                        TILE_DPBSUD(5, 1, 2);
                        TILE_STORE(5, cbuf + 256 * (2 * 1 + h), 64);
                    }
                }
                for (int i = 0; i < mt; i++)
                    amx_post_rows(t, cbuf + 256 * (2 * i), cbuf + 256 * (2 * i + 1), &post[sb],
                                  abase[i] + (size_t)sb * sizeof(block_q8x), astr[i], arows[i], acc[i]);
            }
            for (int i = 0; i < mt; i++)
                for (int r = 0; r < arows[i]; r++)
                    _mm512_mask_storeu_ps(a->y + (int64_t)(m0 + 16 * i + r) * a->ldy + g * PK_ROWS, rm, acc[i][r]);
        }
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
                    for (int r = 0; r < arows[i]; r++)
                        _mm512_mask_storeu_ps(a->y + (int64_t)(m0 + 16 * i + r) * a->ldy + (g0 + j) * PK_ROWS, rm,
                                              _mm512_load_ps(cbuf + 256 * (2 * i + j) + 16 * r));
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
