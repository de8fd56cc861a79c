/* The AVX-512 kernels of IQ2_XXS and IQ3_XXS with their grid lookups in registers (AVX512_VBMI:
 * vpermi2b, vpermb, vpmultishiftqb), in place of dot_iq.c's gathers where the CPU has VBMI.
 * Same hooks, same codes and sign masks, so the same bits as the gathers (dot_blk.h).
 *
 * How, per group of 256 values and weight row (the head; the 4 steps then read what it left in
 * struct nm_blk_gs):
 *  - Each grid entry is re-coded once at start-up as its value codes: 2 bits per value for
 *    IQ2_XXS (values 8, 25, 43), 3 bits for IQ3_XXS (8 values), 16 bits per entry, kept as two
 *    byte planes (low and high byte) of 256 bytes. The codes are derived from the grids of
 *    kernels/blocks/iq_grids.h at start-up (vb_build); a grid they could not hold would leave the
 *    gathers in place.
 *  - The group's 32 (IQ2_XXS) or 64 (IQ3_XXS) indices, read straight from the block bytes, look
 *    up each plane in two vpermi2b (128 entries each: an index's low 7 bits), merged by index
 *    bit 7 (vpblendmb).
 *  - A step's 8 (IQ2) or 16 (IQ3) codes go to one qword or dword each (vpermi2b with zeroing),
 *    vpmultishiftqb puts value j's code in the low bits of byte j, and vpermb maps it to the
 *    value (a 64-byte table whose entry i is the value of code i mod 4 or i mod 8).
 *  - Signs: ggml's 7-bit sign fields to bytes by vpmultishiftqb, then one vpermi2b through the
 *    128-entry table i | parity(i) << 7.
 * Measured on the device Xeon (RESULTS.md, issue 15): IQ3_XXS 1.1-1.5x, IQ2_XXS 1.0-1.15x the
 * GB/s of the gathers. The grids of 512 and 1024 entries took 4 and 8 vpermi2b per plane this
 * way and read 0.5-0.9x (IQ2_XS, IQ2_S) and 0.8-1.3x (IQ3_S) the gathers' GB/s, so they keep the
 * gathers, as IQ1_S and IQ1_M (2048 entries) do. */
#include <stdlib.h>

#include "dot_iq.h"

/* A grid's value codes and the tables its steps use. */
struct vb_grid {
    uint8_t lo[256] __attribute__((aligned(64))); /* entry e's codes, bits 0..7 */
    uint8_t hi[256] __attribute__((aligned(64))); /* bits 8..15 */
    uint8_t map[64] __attribute__((aligned(64)));  /* byte i: the value of code i mod 2^bits */
    uint8_t pick[4][64] __attribute__((aligned(64))); /* step z: where its entries' codes are */
};

static struct vb_grid g_vb_iq2xxs, g_vb_iq3xxs;
static uint8_t g_vb_signs[128] __attribute__((aligned(64))); /* i | parity(i) << 7 */

/* vpmultishiftqb controls: byte j of each qword takes bits 2j.. (IQ2: one 16-bit code per
 * qword), 3j.. of each dword (IQ3: one 12-bit code per dword), and the four 7-bit sign fields of
 * a dword (bits 0, 7, 14, 21; IQ2_XXS's dword is the qword's high one). */
#define VB_REP8(a, b, c, d, e, f, g, h)                                                          \
    a, b, c, d, e, f, g, h, a, b, c, d, e, f, g, h, a, b, c, d, e, f, g, h, a, b, c, d, e, f, g, h, \
        a, b, c, d, e, f, g, h, a, b, c, d, e, f, g, h, a, b, c, d, e, f, g, h, a, b, c, d, e, f, g, h
static const uint8_t k_vb_sh2[64] __attribute__((aligned(64))) = {VB_REP8(0, 2, 4, 6, 8, 10, 12, 14)};
static const uint8_t k_vb_sh3[64] __attribute__((aligned(64))) = {VB_REP8(0, 3, 6, 9, 32, 35, 38, 41)};
static const uint8_t k_vb_f7[64] __attribute__((aligned(64))) = {VB_REP8(0, 7, 14, 21, 32, 39, 46, 53)};
static const uint8_t k_vb_f7hi[64] __attribute__((aligned(64))) = {VB_REP8(32, 39, 46, 53, 32, 39, 46, 53)};
/* vpermb: bytes 0..3 of each qword packed (IQ2_XXS's sign bytes) */
static const uint8_t k_vb_pack4[64] __attribute__((aligned(64))) = {
    0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27, 32, 33, 34, 35, 40, 41, 42, 43, 48, 49, 50, 51, 56, 57, 58, 59};

/* ---- start-up: the codes of a grid ---------------------------------------------------------- */

/* Codes of the 256 entries of grid (entries of width 8 or 4 bytes), bits per value; pos(e): the
 * byte of the group's index vector where entry e's index sits (IQ2_XXS: 8 (e / 4) + e % 4;
 * IQ3_XXS: e). false if the grid has more distinct values than the codes can hold. */
/* Byte j of grid entry e (entries of width 8 or 4 bytes). */
static uint8_t vb_grid_byte(const void *grid, int width, int e, int j) {
    return width == 8 ? (uint8_t)(((const uint64_t *)grid)[e] >> (8 * j)) : (uint8_t)(((const uint32_t *)grid)[e] >> (8 * j));
}

static bool vb_build(struct vb_grid *t, const void *grid, int width, int bits, int (*pos)(int)) {
    const int n = 256;
    uint8_t vals[8];
    int nv = 0;
    for (int e = 0; e < n; e++)
        for (int j = 0; j < width; j++) {
            const uint8_t b = vb_grid_byte(grid, width, e, j);
            int c = 0;
            while (c < nv && vals[c] != b) c++;
            if (c == nv) {
                if (nv == (1 << bits)) return false;
                vals[nv++] = b;
            }
        }
    for (int e = 0; e < n; e++) {
        unsigned code = 0;
        for (int j = 0; j < width; j++) {
            const uint8_t b = vb_grid_byte(grid, width, e, j);
            int c = 0;
            while (vals[c] != b) c++;
            code |= (unsigned)c << (bits * j);
        }
        if (code > 0xFFFF) return false;
        t->lo[e] = (uint8_t)code;
        t->hi[e] = (uint8_t)(code >> 8);
    }
    for (int i = 0; i < 64; i++) t->map[i] = vals[(i & ((1 << bits) - 1)) % nv];
    /* step z: 64 / width entries, each code's two bytes at the start of its qword (width 8) or
     * dword (width 4) */
    const int per = 64 / width;
    memset(t->pick, 0, sizeof t->pick);
    for (int z = 0; z < 4; z++)
        for (int q = 0; q < per; q++) {
            const int p = pos(per * z + q);
            t->pick[z][width * q] = (uint8_t)p;
            t->pick[z][width * q + 1] = (uint8_t)(64 + p);
        }
    return true;
}

static int vb_pos_xxs(int e) { return 8 * (e / 4) + e % 4; }
static int vb_pos_id(int e) { return e; }

static const char *vb_init(void) {
    for (int i = 0; i < 128; i++) g_vb_signs[i] = (uint8_t)(i | (__builtin_parity((unsigned)i) << 7));
    if (!vb_build(&g_vb_iq2xxs, iq_grid_iq2xxs, 8, 2, vb_pos_xxs) ||
        !vb_build(&g_vb_iq3xxs, iq_grid_iq3xxs, 4, 3, vb_pos_id))
        return "IQ2_XXS/IQ3_XXS grid lookups by gathers: a grid has more values than its codes hold";
    return NULL;
}

/* ---- the lookups ------------------------------------------------------------------------------ */

/* plane[i] for each byte lane's index i (bits 0..6 in the lane, bit 7 in b7) of a 256-entry plane. */
NM_INLINE __m512i vb_lookup(const uint8_t *plane, __m512i idx, __mmask64 b7) {
    const __m512i r0 = _mm512_permutex2var_epi8(_mm512_load_si512(plane), idx, _mm512_load_si512(plane + 64));
    const __m512i r1 = _mm512_permutex2var_epi8(_mm512_load_si512(plane + 128), idx, _mm512_load_si512(plane + 192));
    return _mm512_mask_blend_epi8(b7, r0, r1);
}

/* The 4 steps' values from the looked-up code bytes lo, hi (qword codes: IQ2, dword: IQ3). */
NM_INLINE void vb_expand(struct nm_blk_gs *gs, const struct vb_grid *t, __m512i lo, __m512i hi, const int width) {
    const __mmask64 keep = width == 8 ? 0x0303030303030303ull : 0x3333333333333333ull;
    const __m512i sh = _mm512_load_si512(width == 8 ? k_vb_sh2 : k_vb_sh3);
    const __m512i map = _mm512_load_si512(t->map);
    NM_UNROLL for (int z = 0; z < 4; z++) {
        const __m512i w = _mm512_maskz_permutex2var_epi8(keep, lo, _mm512_load_si512(t->pick[z]), hi);
        gs->u[z] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(sh, w), map);
    }
}

/* The 32 sign bytes (8 per step) from 7-bit sign fields in the low 7 bits of byte lanes f,
 * packed by vpermb pack (NULL: f's first 32 lanes as they are). */
NM_INLINE void vb_signs7(struct nm_blk_gs *gs, __m512i f, const uint8_t *pack) {
    const __m512i s = _mm512_permutex2var_epi8(_mm512_load_si512(g_vb_signs), f, _mm512_load_si512(g_vb_signs + 64));
    const __m512i p = pack ? _mm512_permutexvar_epi8(_mm512_load_si512(pack), s) : s;
    _mm256_storeu_si256((__m256i *)gs->neg, _mm512_castsi512_si256(p));
}

#define VB_STEP(t)                                                                                 \
    NM_INLINE __m512i t##_vb_step(const uint8_t *g, int z, int nblk, __mmask64 *neg,              \
                                  const struct nm_blk_gs *gs) {                                    \
        *neg = gs->neg[z];                                                                         \
        return gs->u[z];                                                                           \
    }

/* IQ2_XXS: per sub-block 4 index bytes and a dword of 4 sign fields and the scale. */
NM_INLINE void iq2_xxs_vb_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    iq2_xxs_head(g, nblk, sc, off, gs);
    const __m512i v = _mm512_loadu_si512(g + 2);
    const __mmask64 b7 = _mm512_movepi8_mask(v);
    vb_expand(gs, &g_vb_iq2xxs, vb_lookup(g_vb_iq2xxs.lo, v, b7), vb_lookup(g_vb_iq2xxs.hi, v, b7), 8);
    vb_signs7(gs, _mm512_multishift_epi64_epi8(_mm512_load_si512(k_vb_f7hi), v), k_vb_pack4);
}
VB_STEP(iq2_xxs)

/* IQ3_XXS: 64 index bytes, then 8 dwords of 4 sign fields and the scale. */
NM_INLINE void iq3_xxs_vb_head(const uint8_t *g, int nblk, __m512 *sc, __m512 *off, struct nm_blk_gs *gs) {
    iq3_xxs_head(g, nblk, sc, off, gs);
    const __m512i v = _mm512_loadu_si512(g + 2);
    const __mmask64 b7 = _mm512_movepi8_mask(v);
    vb_expand(gs, &g_vb_iq3xxs, vb_lookup(g_vb_iq3xxs.lo, v, b7), vb_lookup(g_vb_iq3xxs.hi, v, b7), 4);
    const __m512i sv = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(g + 66)));
    vb_signs7(gs, _mm512_multishift_epi64_epi8(_mm512_load_si512(k_vb_f7), sv), NULL);
}
VB_STEP(iq3_xxs)

NM_BLK_DEFINE(iq2_xxs_vb, 66, NM_BLK_SIGNS)
NM_BLK_DEFINE(iq3_xxs_vb, 98, NM_BLK_SIGNS)

const char *avx512_fill_iq_vbmi(struct kern_isa *t) {
    const struct cpu_features *f = cpu_features_get();
    if (!f->avx512vbmi) return "IQ2_XXS/IQ3_XXS grid lookups by gathers: no AVX512_VBMI";
    const char *off = getenv("NM_IQ_VBMI");
    if (off && strcmp(off, "0") == 0) return "IQ2_XXS/IQ3_XXS grid lookups by gathers: NM_IQ_VBMI=0";
    const char *why = vb_init();
    if (why) return why;
    t->vec_dot[DTYPE_IQ2_XXS] = vec_dot_iq2_xxs_vb;
    t->gemm[DTYPE_IQ2_XXS] = gemm_iq2_xxs_vb;
    t->vec_dot[DTYPE_IQ3_XXS] = vec_dot_iq3_xxs_vb;
    t->gemm[DTYPE_IQ3_XXS] = gemm_iq3_xxs_vb;
    return NULL;
}
