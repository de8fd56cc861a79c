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
 *   - the weight's blocks are unpacked into panel entries: signed codes in B-tile order (Q4_0's
 *     q - 8, Q8_0's q, Q6_K's q - 32: TDPBSSD then gives the VNNI kernel's integer sum including
 *     its offset term) and the scales as f32 vectors, ready to use. With several activation
 *     tiles a batch of row groups is unpacked once per call into L2-resident panels; with one
 *     (m <= 16, batched decode) each block is unpacked just before its use into a small L1 ring
 *     (amx_i8_thin);
 *   - every activation tile (16 rows, in tile order: the driver copies the q8x rows once per
 *     call so a block's 16 x 32 codes are one TILELOADD of stride 32 and its 16 d and isum one
 *     line each; pk_args.act_tiles) runs over every panel of the batch with its 16 accumulators
 *     (16 output rows x 16 columns) in zmm registers;
 *   - per block: TILELOADD A and B, TILEZERO, TDPBSSD, TILESTORED of C into a 1 KiB L1 buffer,
 *     and the f32 step of an earlier block (cvt, mul by d_a x d_w, fma: the same operations in
 *     the same order as the VNNI kernel, x86-avx512/packed.c, so the same bits); A and B rotate
 *     over two tiles each and C over four, the store one block and the f32 step two blocks
 *     behind the product (amx_i8_dot).
 * Q6_K's, Q3_K's and Q2_K's two 16-column scale groups per block use two half tiles (K = 16) with
 * their own C tiles; their integer combination (two vpmulld; Q2_K's mins two more, from the
 * activation tile's first-16 sums) happens in the f32 step, as in the VNNI kernel.
 *
 * BF16 (F16/BF16 weights, and every type with pk_args.bf16_tiles): see "bf16 tiles" below.
 *
 * Int8: activation rows past m in the last tile are zeros of the tile-order copy. BF16: they
 * come from a zero-padded copy (never read out of bounds). Rows past n are never stored. */
#include <stdlib.h>
#include <string.h>

#include "../base.h"
#include "../blocks/block.h"
#include "../matmul_internal.h"
#include "../quant.h"
#include "../x86-avx512/pk_units.h"
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

static void *amx_scratch(size_t bytes) { return nm_thread_buf(NM_TBUF_KERNEL, bytes); }

/* ---- int8 tiles --------------------------------------------------------------------------
 * The panel of a row group: per (sub-)block of 32 columns, PANEL_B = 512 bytes of signed codes
 * in B-tile order (8 lines of 64 bytes: line q = quad q of the 16 rows; Q6_K: lines 0-3 are the
 * first 16 columns, lines 4-7 the last 16) followed by amx_np(t) vectors of 16 lanes:
 *   Q4_0, Q8_0: sc = d                      (f32)
 *   Q4_1:       sc = d, mn = m              (f32, f32)
 *   Q4_K, Q5_K: sc = d * sc_s, mn = dmin * mn_s (f32, f32: the VNNI kernel's products)
 *   Q6_K, Q3_K: sc = d, s0, s1 (int32: the int8 scales of the two 16-column groups)
 *   Q2_K:       sc = d, s0, s1, m0, m1 (int32: the 4-bit scales and mins of the two groups), dmin
 *   IQ4_XS:     sc = d * ls_s (f32)
 *   Q5_0, IQ4_NL: sc = d; Q5_1: sc = d, mn = m (as Q4_0 and Q4_1)
 * Signed codes (Q4_0: q - 8, Q5_0: q - 16, Q8_0: q, Q6_K: q - 32, Q3_K: q - 4, IQ4_NL and IQ4_XS:
 * the iq4nl value; the others as they are) make TDPBSSD's int32 equal to the VNNI kernel's integer sum including its offset term, so no per-row offset
 * correction is left for the f32 step. */
#define AMX_PANEL_B 512
/* Bytes of row-group panels unpacked at once, and the K of a slab (in 32-column blocks): the
 * panels, an activation tile's slab and the accumulators between slabs stay in L2 (2 MiB per
 * core on the Xeons with AMX). */
#define AMX_PANEL_BUDGET (640 * 1024)
#define AMX_SLAB_BLOCKS 64

static inline int amx_np(enum dtype t) {
    switch (t) {
    case DTYPE_Q4_0:
    case DTYPE_Q8_0:
    case DTYPE_Q5_0:
    case DTYPE_IQ4_NL:
    case DTYPE_IQ4_XS: return 1;
    case DTYPE_Q6_K:
    case DTYPE_Q3_K: return 3;
    case DTYPE_Q2_K: return 6;
    default: return 2;
    }
}
/* The types whose blocks take two half tiles (K = 16: a scale per 16 columns). */
static inline bool amx_halves(enum dtype t) { return t == DTYPE_Q6_K || t == DTYPE_Q3_K || t == DTYPE_Q2_K; }
static inline __m512 amx_h16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 amx_u8f(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* The panel vectors of a Q6_K, Q3_K or Q2_K sub-block: d, the two halves' integer scales and
 * Q2_K's two integer mins (pk_k_scales), at prm + 0, 16, 32 (, 48, 64). */
NM_INLINE void amx_store_k(const enum dtype t, const uint8_t *u, int s, __m512 d, float *prm) {
    const struct pk_k_scales k = pk_k_scales(t, u, s);
    _mm512_store_ps(prm, d);
    _mm512_store_si512(prm + 16, k.sc[0]);
    _mm512_store_si512(prm + 32, k.sc[1]);
    if (t != DTYPE_Q2_K) return;
    _mm512_store_si512(prm + 48, k.mn[0]);
    _mm512_store_si512(prm + 64, k.mn[1]);
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
        amx_store_k(t, u, s, amx_h16(u + PK_K6_D), prm);
        break;
    }
    case DTYPE_Q2_K:
    case DTYPE_Q3_K: {
        const int three = t == DTYPE_Q3_K;
        __m512i q[8];
        pk_crumb_codes(u + PK_K2_SUB * s, three ? u + PK_K3_HI + 64 * s : NULL, q);
        NM_UNROLL for (int i = 0; i < 8; i++)
            _mm512_store_si512(dst + 64 * i, three ? _mm512_sub_epi8(q[i], _mm512_set1_epi8(4)) : q[i]);
        amx_store_k(t, u, s, amx_h16(u + (three ? PK_K3_D : PK_K2_D)), prm);
        if (!three) _mm512_store_ps(prm + 80, amx_h16(u + PK_K2_DMIN));
        break;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        const int one = t == DTYPE_Q5_1;
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(u + 64 * j);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            uint64_t k0, k1;
            memcpy(&k0, u + PK_Q5_HI + 8 * (2 * j), 8);
            memcpy(&k1, u + PK_Q5_HI + 8 * (2 * j + 1), 8);
            lo = _mm512_mask_add_epi8(lo, (__mmask64)k0, lo, _mm512_set1_epi8(16));
            hi = _mm512_mask_add_epi8(hi, (__mmask64)k1, hi, _mm512_set1_epi8(16));
            if (!one) {
                lo = _mm512_sub_epi8(lo, _mm512_set1_epi8(16));
                hi = _mm512_sub_epi8(hi, _mm512_set1_epi8(16));
            }
            _mm512_store_si512(dst + 128 * j, lo);
            _mm512_store_si512(dst + 128 * j + 64, hi);
        }
        _mm512_store_ps(prm, amx_h16(u + PK_Q5_D));
        if (one) _mm512_store_ps(prm + 16, amx_h16(u + PK_Q5_1_M));
        break;
    }
    case DTYPE_IQ4_NL:
    case DTYPE_IQ4_XS: {
        const __m512i lut = pk_iq4_values();
        const int xs = t == DTYPE_IQ4_XS;
        const uint8_t *p = u + 256 * s;
        NM_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(p + 64 * j);
            _mm512_store_si512(dst + 128 * j, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4)));
            _mm512_store_si512(dst + 128 * j + 64,
                               _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
        }
        _mm512_store_ps(prm, xs ? pk_xs_scale(u, s) : amx_h16(u + PK_NL_D));
        break;
    }
    default: nm_bug(__FILE__, __LINE__, "AMX int8 kernel: type without a packed layout");
    }
}

/* The f32 step of one block for the first rows (<= 16) activation rows of a tile: c0 (and the
 * half-tile types' c1) the stored C tile(s), 16 x 16 int32; prm the panel entry's vectors; ad, ai,
 * al, adi the rows' q8x d, isum, first-16 sum and d * isum of the block (the activation tile's
 * entry, pk_args.act_tiles). Per row the same operations, in the same order, as the VNNI kernel
 * (x86-avx512/packed.c). */
NM_INLINE void amx_post(const enum dtype t, const int32_t *c0, const int32_t *c1, const float *prm, const float *ad,
                        const int32_t *ai, const int32_t *al, const float *adi, __m512 *acc, int rows) {
    const __m512 sc = _mm512_load_ps(prm);
    NM_UNROLL for (int r = 0; r < 16; r++) {
        if (r >= rows) break; /* rows past m: zeros of the activation tile, never stored */
        const __m512i ci = _mm512_load_si512(c0 + 16 * r);
        switch (t) {
        case DTYPE_Q4_0:
        case DTYPE_Q8_0:
        case DTYPE_Q5_0:
        case DTYPE_IQ4_NL:
        case DTYPE_IQ4_XS:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            break;
        case DTYPE_Q4_1:
        case DTYPE_Q5_1:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_load_ps(prm + 16), _mm512_set1_ps(adi[r]), acc[r]);
            break;
        case DTYPE_Q4_K:
        case DTYPE_Q5_K:
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(sc, _mm512_set1_ps(ad[r])), acc[r]);
            acc[r] = _mm512_fnmadd_ps(_mm512_load_ps(prm + 16), _mm512_set1_ps(adi[r]), acc[r]);
            break;
        case DTYPE_Q6_K:
        case DTYPE_Q3_K:
        case DTYPE_Q2_K: {
            const bool mins = t == DTYPE_Q2_K;
            const struct pk_k_scales k = {
                .sc = {_mm512_load_si512(prm + 16), _mm512_load_si512(prm + 32)},
                .mn = {mins ? _mm512_load_si512(prm + 48) : _mm512_setzero_si512(),
                       mins ? _mm512_load_si512(prm + 64) : _mm512_setzero_si512()}};
            acc[r] = pk_k_step(&k, mins, ci, _mm512_load_si512(c1 + 16 * r), sc, mins ? _mm512_load_ps(prm + 80) : sc, ad[r],
                               ai[r], al[r], acc[r]);
            break;
        }
        default: break;
        }
    }
}

/* Where a (tile, group) pair's results go: row r of the tile at y or yd + r * ldy (the group's
 * first column), rows < rows, lanes in rm (the group's rows of the weight). */
struct amx_out {
    float *y;   /* y + the pair's offset, or NULL when the output is yd */
    double *yd; /* yd + the pair's offset, or NULL */
    int64_t ldy;
    int rows;
    __mmask16 rm;
};

/* End of a chunk (pk_args.chunk_end): its f32 partial, acc, is added in double to the output
 * (which starts at 0, so the sum is the chunks' partials added in order, as the VNNI kernel
 * adds them) and acc restarts from 0. */
NM_INLINE void amx_chunk_flush(__m512 *acc, const struct amx_out *o) {
    NM_UNROLL for (int r = 0; r < 16; r++) {
        if (r < o->rows) nm_store_rows(NULL, o->yd + r * o->ldy, o->rm, acc[r]);
        acc[r] = _mm512_setzero_ps();
    }
}

/* Just-in-time panel entries (one activation tile, amx_i8_thin): block b of the row group is
 * unpacked AMX_AHEAD iterations before its tile load into slot b % AMX_RING of a small ring that
 * stays in L1, instead of a whole panel written to L2 and read back; the weights are prefetched
 * pfd bytes ahead of the unpacking, as the GEMV does (the weights come from DRAM, read once). */
#define AMX_RING 8
#define AMX_AHEAD 4
/* slots by b & (AMX_RING - 1); in use at once: b - 2 .. b + AMX_AHEAD (amx_i8_dot) */
_Static_assert((AMX_RING & (AMX_RING - 1)) == 0 && AMX_AHEAD + 3 <= AMX_RING, "the ring holds the entries in use");
struct amx_jit {
    const uint8_t *wg;          /* the group's first unit */
    size_t ub;                  /* bytes per unit */
    int ublk;                   /* blocks per unit */
    const uint8_t *pf, *pf_end; /* the next line to prefetch; the end of the weight bytes to read */
    int pfd;                    /* prefetch distance in bytes (0: none) */
};

NM_INLINE void amx_jit_unpack(const enum dtype t, struct amx_jit *j, int64_t b, uint8_t *dst) {
    const uint8_t *u = j->wg + (size_t)(b / j->ublk) * j->ub;
    if (j->pfd) {
        const uint8_t *to = u + NM_MIN((size_t)(j->pf_end - u), j->ub + (size_t)j->pfd);
        for (; j->pf < to; j->pf += 64) _mm_prefetch((const char *)j->pf, _MM_HINT_T0);
    }
    amx_unpack_blk(t, u, (int)(b % j->ublk), dst);
}

/* The order of the tile instructions (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K): iteration b issues
 *   U(b + 4)  with jit: the unpacking of block b + 4 into its ring slot
 *   L(b + 1)  TILELOADD A and B of block b + 1 into tile set (b + 1) % 2 (A 0/1, B 2/3)
 *   T(b)      TILEZERO + TDPBSSD of block b into C tile 4 + b % 4
 *   S(b - 1)  TILESTORED of block b - 1's C into buffer (b - 1) % 4
 *   P(b - 2)  the f32 step of block b - 2 from buffer (b - 2) % 4
 * The tile instructions alone cost 2.5-3x the product's own 16 cycles per block (device Xeon,
 * RESULTS.md). Taking the cause to be a chain through the C registers (with C over two tiles each
 * product waits for the store of the product two blocks back, if the tiles are not renamed), C
 * now rotates over four, three blocks of slack; measured, that was within the noise of the two-
 * tile order (the chain is not confirmed as the cause). A ring slot's vector stores are three
 * iterations old when a tile load reads them; the entries in use at iteration b are b - 2 ..
 * b + 4, 7 of the ring's 8. */

/* One activation tile (ab: its first block in tile order, pk_args.act_tiles) times one row
 * group's blocks into acc, for the tile's first out->rows rows; cb: four 1 KiB C buffers (Q6_K: two of
 * 2 KiB). The panel entries (ps bytes each) are pnl's, unpacked before (jit NULL: block b at
 * pnl + b * ps), or unpacked here into the ring at pnl (jit; then b0 = 0). Q6_K: per block two half tiles
 * (K = 16): A 0/1, B 2/3, C 4+5 / 6+7 alternating, loads one block ahead. The blocks are b0 ..
 * b0 + nb - 1 of the row; with ce (chunk ends of the row, ascending, the first one > b0), every
 * chunk's acc goes to out through amx_chunk_flush right after the f32 step of its last block. */
NM_INLINE void amx_i8_dot(const enum dtype t, const uint8_t *ab, uint8_t *pnl, size_t ps, int64_t nb, int32_t *cb,
                          __m512 *acc, const int32_t *ce, int64_t b0, const struct amx_out *out, struct amx_jit *jit) {
    const long st = 32;
    const int rows = out->rows;
    NM_ASSERT(!jit || b0 == 0);
#define AMX_A(b) (ab + (size_t)(b) * PK_ACT_TILE_B)
#define AMX_AD(b) ((const float *)(AMX_A(b) + PK_ACT_TILE_D))
#define AMX_AI(b) ((const int32_t *)(AMX_A(b) + PK_ACT_TILE_ISUM))
#define AMX_AL(b) ((const int32_t *)(AMX_A(b) + PK_ACT_TILE_LO))
#define AMX_ADI(b) ((const float *)(AMX_A(b) + PK_ACT_TILE_DI))
#define AMX_B(b) (pnl + (size_t)(jit ? (b) & (AMX_RING - 1) : (b)) * ps)
#define AMX_U(b)                                                                                            \
    do {                                                                                                    \
        if (jit && (b) < nb) amx_jit_unpack(t, jit, (b), AMX_B(b));                                         \
    } while (0)
#define AMX_CHUNK(b)                                                                                        \
    do {                                                                                                    \
        if (ce && b0 + (b) + 1 == *ce) {                                                                    \
            amx_chunk_flush(acc, out);                                                                      \
            ce++;                                                                                           \
        }                                                                                                   \
    } while (0)
#define AMX_POST2(b, cbi)                                                                                   \
    do {                                                                                                    \
        amx_post(t, cb + 256 * (cbi), NULL, (const float *)(AMX_B(b) + AMX_PANEL_B), AMX_AD(b), AMX_AI(b),  \
                 AMX_AL(b), AMX_ADI(b), acc, rows);                                                         \
        AMX_CHUNK(b);                                                                                       \
    } while (0)
    for (int64_t b = 0; b < AMX_AHEAD; b++) AMX_U(b);
    if (amx_halves(t)) {
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
        amx_post(t, cb + 512 * ((b) & 1), cb + 512 * ((b) & 1) + 256, (const float *)(AMX_B(b) + AMX_PANEL_B), \
                 AMX_AD(b), AMX_AI(b), AMX_AL(b), AMX_ADI(b), acc, rows);                                   \
        AMX_CHUNK(b);                                                                                       \
    } while (0)
        AMX_Q6_L(0);
        for (int64_t b = 0; b < nb; b++) {
            AMX_U(b + AMX_AHEAD);
            if (b & 1) AMX_Q6_T(6, 7);
            else AMX_Q6_T(4, 5);
            if (b + 1 < nb) AMX_Q6_L(b + 1);
            if (b >= 1) AMX_Q6_POST(b - 1);
            int32_t *c = cb + 512 * (b & 1);
            if (b & 1) {
                TILE_STORE(6, c, 64);
                TILE_STORE(7, c + 256, 64);
            } else {
                TILE_STORE(4, c, 64);
                TILE_STORE(5, c + 256, 64);
            }
        }
        AMX_Q6_POST(nb - 1);
        return;
    }
/* block b's step: next A, B (LA, LB); product into C (TA, TB); the previous C (SC, its buffer SI) */
#define AMX_STEP(LA, LB, C, TA, TB, SC, SI)                                                                 \
    do {                                                                                                    \
        if (b + 1 < nb) {                                                                                   \
            TILE_LOAD(LA, AMX_A(b + 1), st);                                                                \
            TILE_LOAD(LB, AMX_B(b + 1), 64);                                                                \
        }                                                                                                   \
        TILE_ZERO(C);                                                                                       \
        TILE_DPBSSD(C, TA, TB);                                                                             \
        if (b >= 1) TILE_STORE(SC, cb + 256 * (SI), 64);                                                    \
        if (b >= 2) AMX_POST2(b - 2, (b - 2) & 3);                                                          \
    } while (0)
    TILE_LOAD(0, AMX_A(0), st);
    TILE_LOAD(2, AMX_B(0), 64);
    for (int64_t b = 0; b < nb; b++) {
        AMX_U(b + AMX_AHEAD);
        switch (b & 3) {
        case 0: AMX_STEP(1, 3, 4, 0, 2, 7, 3); break;
        case 1: AMX_STEP(0, 2, 5, 1, 3, 4, 0); break;
        case 2: AMX_STEP(1, 3, 6, 0, 2, 5, 1); break;
        default: AMX_STEP(0, 2, 7, 1, 3, 6, 2); break;
        }
    }
    switch ((nb - 1) & 3) { /* the last block's C */
    case 0: TILE_STORE(4, cb, 64); break;
    case 1: TILE_STORE(5, cb + 256, 64); break;
    case 2: TILE_STORE(6, cb + 512, 64); break;
    default: TILE_STORE(7, cb + 768, 64); break;
    }
    if (nb >= 2) AMX_POST2(nb - 2, (nb - 2) & 3);
    AMX_POST2(nb - 1, (nb - 1) & 3);
#undef AMX_A
#undef AMX_AD
#undef AMX_AI
#undef AMX_AL
#undef AMX_ADI
#undef AMX_B
#undef AMX_U
#undef AMX_CHUNK
#undef AMX_POST2
#undef AMX_Q6_L
#undef AMX_Q6_T
#undef AMX_Q6_POST
#undef AMX_STEP
}

/* Where row group g's results go (the tile's first rows rows, starting at activation row m0). */
NM_INLINE struct amx_out amx_out_of(const struct pk_args *a, int64_t g, int m0, int rows) {
    const int64_t rows_g = NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
    const int64_t o = (int64_t)m0 * a->ldy + g * PK_ROWS;
    return (struct amx_out){.y = a->yd ? NULL : a->y + o, .yd = a->yd ? a->yd + o : NULL, .ldy = a->ldy,
                            .rows = rows, .rm = (__mmask16)(rows_g >= 16 ? 0xFFFF : (1u << rows_g) - 1u)};
}

/* A finished (tile, group) pair's acc to the output: y written or yd added to. */
NM_INLINE void amx_i8_out(const struct amx_out *o, const __m512 *acc) {
    NM_UNROLL for (int r = 0; r < 16; r++)
        if (r < o->rows)
            nm_store_rows(o->y ? o->y + r * o->ldy : NULL, o->yd ? o->yd + r * o->ldy : NULL, o->rm, acc[r]);
}

/* Chunked output (pk_args.chunk_end): a (tile, group) pair's chunks go to a 16 x 16 double
 * buffer of its own, dacc, zeroed before its first block (amx_dacc), and dacc to yd after its
 * last (amx_dacc_out): flushed straight into yd, whose rows are ldy doubles apart (a multiple of
 * 4 KiB for most models), the 16 rows fell in one set of the L1 and missed it at every chunk.
 * The sums are the same: yd starts at 0, so yd + dacc is dacc. */
NM_INLINE struct amx_out amx_dacc(double *dacc, const struct amx_out *o, bool zero) {
    if (zero) memset(dacc, 0, 256 * sizeof *dacc);
    return (struct amx_out){.yd = dacc, .ldy = 16, .rows = o->rows, .rm = 0xFFFF};
}
/* dacc's rows (dld doubles apart) added to the output o points at (yd, its rows and lanes). */
NM_INLINE void amx_dacc_out(const struct amx_out *o, const double *dacc, int dld) {
    const __mmask8 m0 = (__mmask8)(o->rm & 0xFF), m1 = (__mmask8)(o->rm >> 8);
    for (int r = 0; r < o->rows; r++) {
        double *yd = o->yd + r * o->ldy;
        const double *d = dacc + r * dld;
        _mm512_mask_storeu_pd(yd, m0, _mm512_add_pd(_mm512_maskz_loadu_pd(m0, yd), _mm512_load_pd(d)));
        _mm512_mask_storeu_pd(yd + 8, m1, _mm512_add_pd(_mm512_maskz_loadu_pd(m1, yd + 8), _mm512_load_pd(d + 8)));
    }
}

/* One activation tile (m <= 16: the rows of a batched decode step). Each weight block then
 * serves one tile product only, so a panel unpacked to L2 and read back buys nothing: each row
 * group runs all of K with its blocks unpacked just in time into the L1 ring (amx_jit), its
 * weights prefetched, A and C tiles of m rows (amx_i8 configures them so: fewer C lines stored
 * and read back) and the f32 step for the m rows only. The operations per output are those of
 * the panel path (and of the VNNI kernel): the same bits. */
NM_INLINE void amx_i8_thin(const enum dtype t, const struct pk_args *a, uint8_t *ring, size_t ps, int32_t *cb,
                           double *dacc) {
    const int ublk = pk_unit_cols(t) / 32;
    const int64_t nb = a->n_units * ublk;
    const size_t ub = pk_unit_bytes(t), gbytes = (size_t)a->n_units * ub;
    /* the groups' bytes follow each other (a whole-K call): the prefetch runs on into the next group */
    const bool contiguous = a->group_stride == gbytes;
    const uint8_t *wend = a->w + (size_t)(a->n_groups - 1) * a->group_stride + gbytes;
    struct amx_jit jit = {.ub = ub, .ublk = ublk, .pf = a->w, .pfd = pk_prefetch_bytes()};
    for (int64_t g = 0; g < a->n_groups; g++) {
        jit.wg = a->w + (size_t)g * a->group_stride;
        if (jit.pf < jit.wg) jit.pf = jit.wg;
        jit.pf_end = contiguous ? wend : jit.wg + gbytes;
        const struct amx_out out = amx_out_of(a, g, 0, a->m);
        __m512 acc[16];
        NM_UNROLL for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
        if (!a->chunk_end) {
            amx_i8_dot(t, a->act, ring, ps, nb, cb, acc, NULL, 0, &out, &jit);
            amx_i8_out(&out, acc);
            continue;
        }
        const struct amx_out dout = amx_dacc(dacc, &out, true);
        amx_i8_dot(t, a->act, ring, ps, nb, cb, acc, a->chunk_end, 0, &dout, &jit);
        amx_dacc_out(&out, dacc, 16);
    }
}

/* Int8 tiles for one type. One activation tile: amx_i8_thin. More: the weight is taken in slabs
 * of AMX_SLAB_BLOCKS blocks of K for a batch of row groups whose slab panels fit
 * AMX_PANEL_BUDGET (L2): the panels are unpacked once; then every activation tile (16 rows, in
 * tile order: codes one TILELOADD of stride 32, the rows' d and isum one line) runs over every
 * panel of the batch, one tile product per block, the f32 step trailing (amx_i8_dot). An
 * activation tile's slab is read from the shared cache once per batch of groups and reused from
 * L2 by each of them; between slabs each (tile, group)'s 16 x 16 f32 accumulators wait in an L2
 * buffer, so every output is still one f32 sum over K in block order (the same bits as one pass:
 * the slabs change where acc lives, not the operations). */
NM_INLINE void amx_i8(const enum dtype t, const struct pk_args *a) {
    NM_ASSERT(a->act_tiles);
    const int q6 = amx_halves(t);
    const int ublk = pk_unit_cols(t) / 32;
    const int64_t nb = a->n_units * ublk;
    const size_t ub = pk_unit_bytes(t);
    const size_t ps = AMX_PANEL_B + 64 * (size_t)amx_np(t);
    const int m = a->m, nt = (m + 15) / 16;
    const bool thin = nt == 1;
    const int64_t sb = NM_MIN(nb, (int64_t)AMX_SLAB_BLOCKS / ublk * ublk);
    const size_t panel = thin ? AMX_RING * ps : (size_t)sb * ps; /* thin: the ring; else one group's slab */
    const int64_t gbatch = thin ? 1 : NM_MAX((int64_t)1, NM_MIN(a->n_groups, (int64_t)(AMX_PANEL_BUDGET / panel)));
    const bool slabs = !thin && sb < nb;
    const size_t accb = slabs ? (size_t)nt * (size_t)gbatch * 1024 : 0; /* [tile][group][16][16] f32 */
    const bool chunked = a->chunk_end != NULL;
    const size_t daccb = chunked ? (size_t)nt * (size_t)gbatch * 2048 : 0; /* [tile][group][16][16] double */
    uint8_t *scr = amx_scratch((size_t)gbatch * panel + 4096 + accb + daccb + 64);
    uint8_t *pnl = scr;
    int32_t *cb = (int32_t *)(scr + (size_t)gbatch * panel); /* C buffers: 4 x 1 KiB (Q6_K: 2 x 2 KiB) */
    float *accbuf = (float *)(scr + (size_t)gbatch * panel + 4096);
    double *daccbuf = (double *)((uint8_t *)accbuf + accb);
    NM_ASSERT(!chunked || (a->yd && a->n_chunk_ends > 0 && a->chunk_end[a->n_chunk_ends - 1] == nb));

    struct amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int tr = thin ? m : 16; /* rows of the A and C tiles */
    if (q6) { /* A 0/1 (K = 16), B 2/3, C 4..7 */
        amx_cfg_set(&cfg, 0, tr, 16);
        amx_cfg_set(&cfg, 1, tr, 16);
        amx_cfg_set(&cfg, 2, 4, 64);
        amx_cfg_set(&cfg, 3, 4, 64);
        for (int i = 4; i < 8; i++) amx_cfg_set(&cfg, i, tr, 64);
    } else { /* A 0/1 (K = 32), B 2/3, C 4..7 */
        for (int i = 0; i < 2; i++) {
            amx_cfg_set(&cfg, i, tr, 32);
            amx_cfg_set(&cfg, i + 2, 8, 64);
        }
        for (int i = 4; i < 8; i++) amx_cfg_set(&cfg, i, tr, 64);
    }
    TILE_CFG(&cfg);
    if (thin) {
        amx_i8_thin(t, a, pnl, ps, cb, daccbuf);
        return;
    }

    for (int64_t g0 = 0; g0 < a->n_groups; g0 += gbatch) {
        const int64_t ng = NM_MIN(gbatch, a->n_groups - g0);
        const int32_t *ce0 = a->chunk_end;
        for (int64_t k0 = 0; k0 < nb; k0 += sb) {
            const int64_t kb = NM_MIN(sb, nb - k0);
            const bool first = k0 == 0, last = k0 + kb == nb;
            while (chunked && *ce0 <= k0) ce0++; /* the first chunk that ends in this slab or later */
            for (int64_t j = 0; j < ng; j++) {
                const uint8_t *wg = a->w + (size_t)(g0 + j) * a->group_stride;
                for (int64_t b = 0; b < kb; b++)
                    amx_unpack_blk(t, wg + (size_t)((k0 + b) / ublk) * ub, (int)((k0 + b) % ublk),
                                   pnl + (size_t)j * panel + (size_t)b * ps);
            }
            for (int ti = 0; ti < nt; ti++) {
                const int m0 = 16 * ti, rows = NM_MIN(16, m - m0);
                const uint8_t *ab = a->act + (size_t)ti * a->act_stride + (size_t)k0 * PK_ACT_TILE_B;
                for (int64_t j = 0; j < ng; j++) {
                    const struct amx_out out = amx_out_of(a, g0 + j, m0, rows);
                    float *sav = accbuf + ((size_t)ti * (size_t)gbatch + (size_t)j) * 256;
                    double *dacc = chunked ? daccbuf + ((size_t)ti * (size_t)gbatch + (size_t)j) * 256 : NULL;
                    const struct amx_out dout = chunked ? amx_dacc(dacc, &out, first) : out;
                    __m512 acc[16];
                    NM_UNROLL for (int r = 0; r < 16; r++) acc[r] = first ? _mm512_setzero_ps() : _mm512_load_ps(sav + 16 * r);
                    amx_i8_dot(t, ab, pnl + (size_t)j * panel, ps, kb, cb, acc, chunked ? ce0 : NULL, k0, &dout, NULL);
                    if (!last) {
                        NM_UNROLL for (int r = 0; r < 16; r++) _mm512_store_ps(sav + 16 * r, acc[r]);
                        continue;
                    }
                    if (chunked) amx_dacc_out(&out, dacc, 16); /* every chunk went to dacc as it ended */
                    else amx_i8_out(&out, acc);
                }
            }
        }
    }
}

/* One function per type, each its own instance of amx_i8 (the type a constant inside it). */
#define AMX_I8_TYPES(X) X(Q4_0) X(Q4_1) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(Q2_K) X(Q3_K) X(IQ4_XS) X(Q5_0) X(Q5_1) X(IQ4_NL)
#define AMX_I8_INST(T) \
    static void amx_i8_##T(const struct pk_args *a) { amx_i8(DTYPE_##T, a); }
AMX_I8_TYPES(AMX_I8_INST)
#define AMX_I8_CASE(T) \
    case DTYPE_##T: amx_i8_##T(a); break;

static void AMX_FN_INT8(const struct pk_args *a) {
    switch (a->type) {
        AMX_I8_TYPES(AMX_I8_CASE)
    default: nm_bug(__FILE__, __LINE__, "AMX int8 kernel: type without a packed layout");
    }
}

/* ---- bf16 tiles ---------------------------------------------------------------------------
 * F16/BF16 weights, and the quantized types when the caller lets prompt rows round to bf16
 * (pk_args.bf16_tiles): every weight value as bf16 in 1 KiB blocks of 32 columns (16 pair lines:
 * the TDPBF16PS B tile), activations as bf16 rows. C accumulates f32 over K in the tile
 * registers, so there is no per-block f32 step: the tile unit and the tile loads are the cost.
 *
 * Blocking, for L2 (2 MiB per core): a batch of row groups whose slab of AMX_BF_SLAB blocks of K
 * fits AMX_BF_PANEL is converted once (F16 -> bf16; quantized: codes x scale [+ min], rounded);
 * then every pair of activation tiles (32 rows) runs over every pair of groups of the batch (2 A
 * x 2 B -> 4 C tiles: tmm0/1 A, tmm2/3 B, tmm4..7 C). The activation slab of 32 rows is read
 * from the shared cache once per batch and reused from L2 by its groups; between slabs the C
 * tiles wait in an L2 buffer. */
#define AMX_BF_PANEL (768 * 1024)
#define AMX_BF_SLAB 64

/* Int8 line q of a block in B-tile order (amx_unpack_blk: dword r = row r's codes of columns
 * 4q..4q+3) as the two bf16 pair lines 2q, 2q + 1: value = code * s (+ mn when mn), s and mn
 * per row, in the pair layout (lane 2r + i = row r). Rounded to bf16 to nearest even. */
NM_INLINE void amx_bf_line(const uint8_t *q, __m512 slo, __m512 shi, const __m512 *mlo, const __m512 *mhi,
                           uint8_t *dst) {
    const __m512i v = _mm512_load_si512(q);
    const __m256i w[2] = {_mm512_cvtepi32_epi16(v), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))};
    NM_UNROLL for (int h = 0; h < 2; h++) {
        __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(w[h])));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(w[h], 1)));
        if (mlo) {
            lo = _mm512_fmadd_ps(lo, slo, *mlo);
            hi = _mm512_fmadd_ps(hi, shi, *mhi);
        } else {
            lo = _mm512_mul_ps(lo, slo);
            hi = _mm512_mul_ps(hi, shi);
        }
        _mm512_store_si512(dst + 64 * h, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* Block blk (32 columns) of row group wg as 16 bf16 pair lines at dst (1 KiB); tmp: a panel
 * entry's scratch (AMX_PANEL_B + 64 * amx_np(t) bytes, 64-aligned) for the quantized types. */
NM_INLINE void amx_bf_block(const enum dtype t, const uint8_t *wg, int64_t blk, uint8_t *dst, uint8_t *tmp) {
    if (t == DTYPE_BF16 || t == DTYPE_F16) {
        const uint8_t *u = wg + (size_t)blk * 1024;
        NM_UNROLL for (int p = 0; p < 16; p += 2) {
            if (t == DTYPE_BF16) {
                _mm512_store_si512(dst + 64 * p, _mm512_loadu_si512(u + 64 * p));
                _mm512_store_si512(dst + 64 * p + 64, _mm512_loadu_si512(u + 64 * p + 64));
                continue;
            }
            const __m512 f0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 64 * p)));
            const __m512 f1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 64 * p + 32)));
            const __m512 f2 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 64 * p + 64)));
            const __m512 f3 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(u + 64 * p + 96)));
            _mm512_store_si512(dst + 64 * p, (__m512i)_mm512_cvtne2ps_pbh(f1, f0));
            _mm512_store_si512(dst + 64 * p + 64, (__m512i)_mm512_cvtne2ps_pbh(f3, f2));
        }
        return;
    }
    const int ublk = pk_unit_cols(t) / 32;
    amx_unpack_blk(t, wg + (size_t)(blk / ublk) * pk_unit_bytes(t), (int)(blk % ublk), tmp);
    const float *prm = (const float *)(tmp + AMX_PANEL_B);
    const __m512i ilo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i ihi = _mm512_add_epi32(ilo, _mm512_set1_epi32(8));
    __m512 s0 = _mm512_load_ps(prm), s1 = s0;
    __m512 mn0 = _mm512_setzero_ps(), mn1 = mn0; /* the mins of the first and the last 16 columns */
    const bool has_mn = t == DTYPE_Q4_1 || t == DTYPE_Q5_1 || t == DTYPE_Q4_K || t == DTYPE_Q5_K || t == DTYPE_Q2_K;
    if (t == DTYPE_Q4_1 || t == DTYPE_Q5_1) mn0 = mn1 = _mm512_load_ps(prm + 16);
    if (t == DTYPE_Q4_K || t == DTYPE_Q5_K) mn0 = mn1 = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_load_ps(prm + 16));
    if (amx_halves(t)) { /* lines 0-3: the first 16 columns' scale, lines 4-7: the second's */
        s0 = _mm512_mul_ps(_mm512_load_ps(prm), _mm512_cvtepi32_ps(_mm512_load_si512(prm + 16)));
        s1 = _mm512_mul_ps(_mm512_load_ps(prm), _mm512_cvtepi32_ps(_mm512_load_si512(prm + 32)));
    }
    if (t == DTYPE_Q2_K) {
        const __m512 dmin = _mm512_load_ps(prm + 80);
        mn0 = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_load_si512(prm + 48))));
        mn1 = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_load_si512(prm + 64))));
    }
    const __m512 m0lo = _mm512_permutexvar_ps(ilo, mn0), m0hi = _mm512_permutexvar_ps(ihi, mn0);
    const __m512 m1lo = _mm512_permutexvar_ps(ilo, mn1), m1hi = _mm512_permutexvar_ps(ihi, mn1);
    const __m512 a_lo = _mm512_permutexvar_ps(ilo, s0), a_hi = _mm512_permutexvar_ps(ihi, s0);
    const __m512 b_lo = _mm512_permutexvar_ps(ilo, s1), b_hi = _mm512_permutexvar_ps(ihi, s1);
    NM_UNROLL for (int q = 0; q < 8; q++)
        amx_bf_line(tmp + 64 * q, q < 4 ? a_lo : b_lo, q < 4 ? a_hi : b_hi, has_mn ? (q < 4 ? &m0lo : &m1lo) : NULL,
                    has_mn ? (q < 4 ? &m0hi : &m1hi) : NULL, dst + 128 * q);
}

/* Block blk (32 columns) of row group g of a ROWS-layout block type (pk_args.codec) as 16 bf16
 * pair lines at dst: each row's sub-block through the type's decoder (value = d * q + m, as
 * block.h writes it), rounded to bf16, then transposed from rows to pair lines; rows past n_rows
 * are zeros. tmp: 1 KiB, 64-aligned. */
NM_INLINE void amx_bf_rows_block(const struct pk_args *a, int64_t g, int64_t blk, uint8_t *dst, uint8_t *tmp) {
    const struct block_codec *c = a->codec;
    const int sub = (int)c->info.blck_size / 32;
    const size_t rb = a->group_stride / PK_ROWS;
    const int rows = (int)NM_MIN((int64_t)PK_ROWS, a->n_rows - g * PK_ROWS);
    const uint8_t *wg = a->w + (size_t)g * a->group_stride + (size_t)(blk / sub) * c->info.type_size;
    uint32_t *rowv = (uint32_t *)tmp; /* [row][pair] */
    for (int r = 0; r < PK_ROWS; r++) {
        if (r >= rows) {
            _mm512_store_si512(rowv + 16 * r, _mm512_setzero_si512());
            continue;
        }
        struct block_sub32 b;
        c->decode32(wg + (size_t)r * rb, (int)(blk % sub), &b);
        const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b.q)));
        const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b.q + 16))));
        const __m512 v0 = _mm512_add_ps(_mm512_mul_ps(q0, _mm512_set1_ps(b.d[0])), _mm512_set1_ps(b.m[0]));
        const __m512 v1 = _mm512_add_ps(_mm512_mul_ps(q1, _mm512_set1_ps(b.d[1])), _mm512_set1_ps(b.m[1]));
        _mm512_store_si512(rowv + 16 * r, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
    }
    const __m512i idx = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
    NM_UNROLL for (int p = 0; p < 16; p++) /* line p: pair p of rows 0..15 */
        _mm512_store_si512(dst + 64 * p, _mm512_i32gather_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(p)), rowv, 4));
}

/* C tiles 4..7 (activation tile i of the pair, group j + jj: tile 4 + 2 i + jj) of the pair at
 * row m0 and groups g, g + 1 (two) through cbuf into the output: y written, or yd added to
 * (chunks end to end: each chunk's f32 partial added in double, in order). */
NM_INLINE void amx_bf_out(const struct pk_args *a, float *cbuf, int64_t g, bool two, int m0, int mt) {
    TILE_STORE(4, cbuf, 64);
    if (two) TILE_STORE(5, cbuf + 256, 64);
    if (mt == 2) {
        TILE_STORE(6, cbuf + 512, 64);
        if (two) TILE_STORE(7, cbuf + 768, 64);
    }
    for (int i = 0; i < mt; i++)
        for (int jj = 0; jj < (two ? 2 : 1); jj++) {
            const int64_t rows_g = NM_MIN((int64_t)PK_ROWS, a->n_rows - (g + jj) * PK_ROWS);
            const __mmask16 rm = (__mmask16)(rows_g >= 16 ? 0xFFFF : (1u << rows_g) - 1u);
            const int rows = NM_MIN(16, a->m - m0 - 16 * i);
            for (int r = 0; r < rows; r++) {
                const int64_t o = (int64_t)(m0 + 16 * i + r) * a->ldy + (g + jj) * PK_ROWS;
                nm_store_rows(a->yd ? NULL : a->y + o, a->yd ? a->yd + o : NULL, rm,
                              _mm512_load_ps(cbuf + 256 * (2 * i + jj) + 16 * r));
            }
        }
}

/* Chunked output (pk_args.chunk_end), as amx_dacc for the int8 tiles: a pair's 32 x 32 outputs
 * add up their chunks' f32 partials in double in a buffer of their own, dacc (row 16 i + r,
 * column 16 jj + c: 8 KiB in a row), and go to yd once, after the last block. This VM, bf16
 * tiles, m = 512, K = 4096 and 14336 in chunks of 128 columns, 1 thread: 0.40-0.48 -> 0.56-0.65
 * TFLOP/s. Folding a chunk into dacc a few lines per block after it, so that the vector units
 * would work beside the tile unit, gained nothing more (tried). amx_bf_fold: the 4 C tiles at
 * cbuf (line q: row q % 16 of C tile 4 + q / 16) added to dacc. */
NM_INLINE void amx_bf_fold(const float *cbuf, double *dacc) {
    for (int q = 0; q < 64; q++) {
        const int t = q >> 4, r = q & 15;
        const __m512 v = _mm512_load_ps(cbuf + 256 * t + 16 * r);
        double *d = dacc + (16 * (t >> 1) + r) * 32 + 16 * (t & 1);
        _mm512_store_pd(d, _mm512_add_pd(_mm512_load_pd(d), _mm512_cvtps_pd(_mm512_castps512_ps256(v))));
        _mm512_store_pd(d + 8, _mm512_add_pd(_mm512_load_pd(d + 8), _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1))));
    }
}

/* A pair's dacc added to yd (the pair at row m0, groups g and g + 1 when two). */
NM_INLINE void amx_bf_dout(const struct pk_args *a, const double *dacc, int64_t g, bool two, int m0, int mt) {
    for (int i = 0; i < mt; i++)
        for (int jj = 0; jj < (two ? 2 : 1); jj++) {
            const struct amx_out o = amx_out_of(a, g + jj, m0 + 16 * i, NM_MIN(16, a->m - m0 - 16 * i));
            amx_dacc_out(&o, dacc + 16 * i * 32 + 16 * jj, 32);
        }
}

static void AMX_FN_BF16(const struct pk_args *a) {
    const enum dtype t = a->type;
    const bool direct = t == DTYPE_BF16; /* B tiles straight from the packed weight */
    const int ucols = a->codec ? (int)a->codec->info.blck_size : pk_unit_cols(t);
    const int64_t nbk = a->n_units * (ucols / 32); /* blocks of 32 columns */
    const int m = a->m, np = (m + 31) / 32;
    const int64_t sb = NM_MIN(nbk, (int64_t)AMX_BF_SLAB);
    const size_t panel = (size_t)sb * 1024; /* one group's slab */
    int64_t gb = NM_MIN(a->n_groups, NM_MAX((int64_t)2, (int64_t)(AMX_BF_PANEL / panel)));
    if (gb > 1) gb &= ~(int64_t)1; /* pairs of groups */
    const int64_t gp = (gb + 1) / 2;  /* pairs per batch */
    const bool slabs = sb < nbk, chunked = a->chunk_end != NULL;
    NM_ASSERT(!chunked || (a->yd && a->n_chunk_ends > 0 && a->chunk_end[a->n_chunk_ends - 1] == nbk));
    const size_t kbytes = (size_t)nbk * 64; /* one activation row's bf16 */
    const size_t accb = slabs ? (size_t)np * (size_t)gp * 4096 : 0; /* [tile pair][group pair][4 C tiles] */
    const size_t daccb = chunked ? (size_t)np * (size_t)gp * 1024 * sizeof(double) : 0; /* [tile pair][group pair][32][32] */
    uint8_t *scr = amx_scratch((direct ? 0 : (size_t)gb * panel) + 4096 + 1024 + 16 * kbytes + accb + daccb + 64);
    uint8_t *pnl = scr;
    float *cbuf = (float *)(scr + (direct ? 0 : (size_t)gb * panel));
    uint8_t *tmp = (uint8_t *)cbuf + 4096;
    uint8_t *tail = tmp + 1024;
    float *accbuf = (float *)(tail + 16 * kbytes);
    double *daccbuf = (double *)((uint8_t *)accbuf + accb);
    /* the last 16-row tile when m is not a multiple of 16: zero-padded, once per call */
    const int tail_rows = m % 16, tail_m0 = m - tail_rows;
    if (tail_rows) {
        memset(tail, 0, 16 * kbytes);
        for (int r = 0; r < tail_rows; r++)
            memcpy(tail + (size_t)r * kbytes, a->act + (size_t)(tail_m0 + r) * a->act_stride, kbytes);
    }

    struct amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) amx_cfg_set(&cfg, i, 16, 64);
    TILE_CFG(&cfg);

    for (int64_t g0 = 0; g0 < a->n_groups; g0 += gb) {
        const int64_t ng = NM_MIN(gb, a->n_groups - g0);
        const int32_t *ce0 = a->chunk_end;
        for (int64_t k0 = 0; k0 < nbk; k0 += sb) {
            const int64_t kb = NM_MIN(sb, nbk - k0);
            const bool first = k0 == 0, last = k0 + kb == nbk;
            while (chunked && *ce0 <= k0) ce0++; /* the first chunk that ends in this slab or later */
            if (!direct)
                for (int64_t j = 0; j < ng; j++)
                    for (int64_t b = 0; b < kb; b++) {
                        uint8_t *dst = pnl + (size_t)j * panel + (size_t)b * 1024;
                        if (a->codec) amx_bf_rows_block(a, g0 + j, k0 + b, dst, tmp);
                        else amx_bf_block(t, a->w + (size_t)(g0 + j) * a->group_stride, k0 + b, dst, tmp);
                    }
            for (int p = 0; p < np; p++) {
                const int m0 = 32 * p, mt = m - m0 > 16 ? 2 : 1;
                const uint8_t *ab[2];
                size_t ast[2];
                for (int i = 0; i < mt; i++) {
                    const int r0 = m0 + 16 * i;
                    const bool is_tail = r0 == tail_m0 && tail_rows;
                    ab[i] = (is_tail ? tail : a->act + (size_t)r0 * a->act_stride) + (size_t)k0 * 64;
                    ast[i] = is_tail ? kbytes : a->act_stride;
                }
                for (int64_t j = 0; j < ng; j += 2) {
                    const bool two = j + 1 < ng;
                    const uint8_t *bt[2];
                    for (int i = 0; i < 2; i++) {
                        const int64_t jj = NM_MIN(j + i, ng - 1);
                        bt[i] = direct ? a->w + (size_t)(g0 + jj) * a->group_stride + (size_t)k0 * 1024
                                       : pnl + (size_t)jj * panel;
                    }
                    float *sav = accbuf + ((size_t)p * (size_t)gp + (size_t)(j / 2)) * 1024; /* 4 C tiles */
                    double *dacc = chunked ? daccbuf + ((size_t)p * (size_t)gp + (size_t)(j / 2)) * 1024 : NULL;
                    if (chunked && first) memset(dacc, 0, 1024 * sizeof *dacc);
                    if (first) {
                        TILE_ZERO(4);
                        TILE_ZERO(5);
                        TILE_ZERO(6);
                        TILE_ZERO(7);
                    } else {
                        TILE_LOAD(4, sav, 64);
                        TILE_LOAD(5, sav + 256, 64);
                        TILE_LOAD(6, sav + 512, 64);
                        TILE_LOAD(7, sav + 768, 64);
                    }
                    const int32_t *ce = chunked ? ce0 : NULL;
                    for (int64_t b = 0; b < kb; b++) {
                        TILE_LOAD(0, ab[0] + (size_t)b * 64, ast[0]);
                        TILE_LOAD(2, bt[0] + (size_t)b * 1024, 64);
                        TILE_DPBF16PS(4, 0, 2);
                        if (two) {
                            TILE_LOAD(3, bt[1] + (size_t)b * 1024, 64);
                            TILE_DPBF16PS(5, 0, 3);
                        }
                        if (mt == 2) {
                            TILE_LOAD(1, ab[1] + (size_t)b * 64, ast[1]);
                            TILE_DPBF16PS(6, 1, 2);
                            if (two) TILE_DPBF16PS(7, 1, 3);
                        }
                        if (ce && k0 + b + 1 == *ce) { /* a chunk ends: its partial into dacc, C from 0 */
                            TILE_STORE(4, cbuf, 64);
                            TILE_STORE(5, cbuf + 256, 64);
                            TILE_STORE(6, cbuf + 512, 64);
                            TILE_STORE(7, cbuf + 768, 64);
                            TILE_ZERO(4);
                            TILE_ZERO(5);
                            TILE_ZERO(6);
                            TILE_ZERO(7);
                            amx_bf_fold(cbuf, dacc);
                            ce++;
                        }
                    }
                    if (!last) {
                        TILE_STORE(4, sav, 64);
                        TILE_STORE(5, sav + 256, 64);
                        TILE_STORE(6, sav + 512, 64);
                        TILE_STORE(7, sav + 768, 64);
                    } else if (!chunked) {
                        amx_bf_out(a, cbuf, g0 + j, two, m0, mt);
                    } else {
                        amx_bf_dout(a, dacc, g0 + j, two, m0, mt);
                    }
                }
            }
        }
    }
}

void AMX_FN(const struct pk_args *a) {
    if (a->m == 0 || a->n_groups == 0) return;
    if (a->type == DTYPE_F16 || a->type == DTYPE_BF16 || a->bf16_tiles) AMX_FN_BF16(a);
    else AMX_FN_INT8(a);
    TILE_RELEASE();
}
