/* The byte format of the packed weight layouts (matmul.h: WEIGHT_LAYOUT_Q_TILE16 and
 * WEIGHT_LAYOUT_F_PAIR16). Only weight_pack (pack.c) writes these bytes and only the matmul kernels
 * for these layouts read them; this header is the one description both follow (and the tests'
 * independent unpacker checks against the GGUF source).
 *
 * Common geometry. Output rows are taken in groups of 16 ("row groups"; rows past n are padding,
 * all bytes zero). A group is stored as consecutive units along K; a unit covers
 *   - 32 input columns for Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, F16, BF16 (one ggml block; floats pad K with zeros
 *     to a multiple of 32), or
 *   - 256 input columns for Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_XS (one super-block),
 * for all 16 rows of the group: group g, unit u starts at (g * n_units + u) * unit_bytes. So a
 * row's value is always computed in lane (row % 16) of a group, whatever the slice, and a column
 * range of whole units is a contiguous byte range of every group (the chunked matmul).
 *
 * Codes ("VNNI quads"). The 32 codes of one 32-column sub-block of 16 rows are 8 quads of 4
 * consecutive columns; quad q of row r is the 4 bytes at 4 * r of a 64-byte line, so one line
 * is an int8 AMX B tile row (16 columns x 4) and one vpdpbusd step (lane r = row r). Codes are
 * unsigned (u8 operand of vpdpbusd / TDPBSUD); the type's offset is applied by the kernel.
 *   nibble codes (Q4_0, Q4_1, Q4_K, Q5_K low 4 bits, Q6_K low 4 bits): 4 lines of 64 bytes;
 *     line j holds quad 2j in its low nibbles and quad 2j + 1 in its high nibbles (256 bytes).
 *   byte codes (Q8_0): 8 lines, quad q in line q, stored as q8_0 code + 128 (512 bytes).
 *   crumb codes (Q2_K, the low 2 bits of Q3_K): 2 lines of 64 bytes; line L holds quads 4L..4L+3,
 *     quad 4L + j in bits 2j, 2j + 1 of each byte (128 bytes).
 *   high-bit masks (Q5_K's fifth bit, Q3_K's third): hi[q] u64 per quad q of a sub-block, bit
 *     (4 r + i) the bit of row r, column i of the quad: the byte mask of that quad's line.
 *
 * Units by type (f16 = IEEE half bits, kept exactly as in the file; no scale is rounded):
 *   Q4_0  (288 B = 16 x 18): codes[256] nibbles, value q - 8; d f16[16] (one per row).
 *   Q4_1  (320 B = 16 x 20): codes[256] nibbles, value q; d f16[16]; m f16[16].
 *   Q8_0  (544 B = 16 x 34): codes[512] bytes, value code - 128; d f16[16].
 *   Q4_K  (2368 B = 16 x 144 + 64): codes[8][256] (sub-block s = columns 32s..32s+31, nibbles);
 *         sc u8[8][16]; mn u8[8][16] (6-bit scales and mins unpacked); d f16[16]; dmin f16[16].
 *         value = d * sc[s] * q - dmin * mn[s].
 *   Q5_K  (2880 B = 16 x 176 + 64): codes[8][256] low nibbles; hi[8][8] u64: bit (4 r + i) of
 *         hi[s][q] is the fifth bit of quad q, row r, column i of sub-block s; then sc, mn, d,
 *         dmin as Q4_K.
 *   Q6_K  (3360 B = 16 x 210): per sub-block s: lo[256] nibbles, then hh[4][32]: byte p of
 *         hh[j] holds, in its low nibble, the two high bits of line j's byte p (bits 0-1 for the
 *         low-nibble code, bits 2-3 for the high-nibble code), and in its high nibble the same
 *         for line j's byte p + 32. Then sc i8[16][16] (16-column group, row) and d f16[16].
 *         value = d * sc[g] * (q - 32), q the 6-bit code.
 *   Q5_0  (352 B = 16 x 22): codes[256] nibbles (low 4 bits); hi[8] u64 (fifth bits); d f16[16].
 *         value = d * (q - 16), q the 5-bit code.
 *   Q5_1  (384 B = 16 x 24): codes[256]; hi[8]; d f16[16]; m f16[16]. value = d * q + m.
 *   IQ4_NL (288 B = 16 x 18): codes[256] nibbles (the iq4nl index); d f16[16].
 *         value = d * iq4nl_value(q).
 *   Q2_K  (1344 B = 16 x 84): codes[8][128] crumbs; sc u8[16][16] (16-column group g, row r:
 *         the file's scale byte as is, low nibble sc, high nibble mn); d f16[16]; dmin f16[16].
 *         value = d * sc[g] * q - dmin * mn[g], q the 2-bit code.
 *   Q3_K  (1824 B = 16 x 114): codes[8][128] crumbs (low 2 bits); hi[8][8] u64 (third bits); sc
 *         i8[16][16] (the 6-bit scale minus 32, -32..31); d f16[16].
 *         value = d * sc[g] * (q - 4), q the 3-bit code (ggml's code + 4).
 *   IQ4_XS (2208 B = 16 x 138): codes[8][256] nibbles (the iq4nl index); ls i8[8][16] (the 6-bit
 *         sub-block scale minus 32); d f16[16]. value = d * ls[s] * iq4nl_value(q).
 *   F16, BF16 (1024 B): 16 lines of 64 bytes; line p holds columns 2p, 2p+1 of row r at bytes
 *         4r, 4r + 2 (the AMX bf16 B-tile / vdpbf16ps pair order), values as in the file (F16
 *         stays F16: no precision lost; the kernels widen it exactly, or round it to bf16 for
 *         AMX tiles, see matmul.h).
 */
#ifndef NM_PACKED_H
#define NM_PACKED_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "types.h"

struct block_codec;

#define PK_ROWS 16 /* rows per group: AMX tile columns, zmm lanes */

/* Columns per unit: 256 for K-quants, 32 for the others. */
static inline int pk_unit_cols(enum dtype t) {
    return (t == DTYPE_Q4_K || t == DTYPE_Q5_K || t == DTYPE_Q6_K || t == DTYPE_Q2_K || t == DTYPE_Q3_K ||
            t == DTYPE_IQ4_XS)
               ? 256
               : 32;
}

/* Bytes per unit (16 rows), 0 for a type without a packed layout. */
static inline size_t pk_unit_bytes(enum dtype t) {
    switch (t) {
    case DTYPE_Q4_0: return 288;
    case DTYPE_Q4_1: return 320;
    case DTYPE_Q8_0: return 544;
    case DTYPE_Q4_K: return 2368;
    case DTYPE_Q5_K: return 2880;
    case DTYPE_Q6_K: return 3360;
    case DTYPE_Q5_0: return 352;
    case DTYPE_Q5_1: return 384;
    case DTYPE_IQ4_NL: return 288;
    case DTYPE_Q2_K: return 1344;
    case DTYPE_Q3_K: return 1824;
    case DTYPE_IQ4_XS: return 2208;
    case DTYPE_F16:
    case DTYPE_BF16: return 1024;
    default: return 0;
    }
}

/* Offsets inside a unit. */
#define PK_Q4_0_D 256
#define PK_Q4_1_D 256
#define PK_Q4_1_M 288
#define PK_Q8_0_D 512
#define PK_K4_SC 2048 /* Q4_K */
#define PK_K4_MN 2176
#define PK_K4_D 2304
#define PK_K4_DMIN 2336
#define PK_K5_HI 2048 /* Q5_K */
#define PK_K5_SC 2560
#define PK_K5_MN 2688
#define PK_K5_D 2816
#define PK_K5_DMIN 2848
#define PK_K6_SUB 384 /* Q6_K: bytes per sub-block (lo[256] + hh[128]) */
#define PK_K6_SC 3072
#define PK_K6_D 3328
#define PK_Q5_HI 256 /* Q5_0, Q5_1 */
#define PK_Q5_D 320
#define PK_Q5_1_M 352
#define PK_NL_D 256 /* IQ4_NL */
#define PK_K2_SUB 128 /* Q2_K, Q3_K: crumb bytes per sub-block */
#define PK_K2_SC 1024 /* Q2_K */
#define PK_K2_D 1280
#define PK_K2_DMIN 1312
#define PK_K3_HI 1024 /* Q3_K */
#define PK_K3_SC 1536
#define PK_K3_D 1792
#define PK_XS_LS 2048 /* IQ4_XS */
#define PK_XS_D 2176

/* Units per row (K padded up to whole units for float types). */
static inline int64_t pk_units(enum dtype t, int64_t k) {
    const int uc = pk_unit_cols(t);
    return (k + uc - 1) / uc;
}
static inline int64_t pk_groups(int64_t n) { return (n + PK_ROWS - 1) / PK_ROWS; }

/* One call of a packed kernel: n_groups consecutive row groups x n_units consecutive units
 * (a column range of whole units) x m activation rows. Kernels write y[c * ldy + r] for
 * c < m and r < n_rows (or add to yd[c * ldy + r]; the rows of the groups that exist; the last
 * group's padding rows are never written) and read nothing outside the given units. Each output is the f32 sum over the
 * units, in order, starting from 0 (one per chunk for the chunked matmul). */
struct pk_args {
    enum dtype type;
    const uint8_t *w;    /* unit u0 of the first group */
    size_t group_stride; /* bytes between groups (n_units_total * unit_bytes) */
    int64_t n_groups, n_units;
    const uint8_t *act;  /* activation row 0 at unit u0: its q8x block (32 * u0 * unit_cols / 32)
                          * for quantized types, its f32 at column 32 * u0 for F16/BF16 (the rows
                          * zero-padded to whole units) */
    size_t act_stride;   /* bytes between activation rows */
    int m;
    float *y;            /* output of activation row 0, the first group's row 0 */
    double *yd;          /* instead of y when not NULL: yd[c * ldy + r] += (double)output (the
                          * chunked matmul adds each chunk's f32 partial in double) */
    int64_t ldy;
    int64_t n_rows;      /* rows to write, <= 16 * n_groups */
    /* With yd, optionally (the AMX tile kernels and the AVX2 kernels of the quantized types: ends
     * on any block; the AVX-512 GEMV, m = 1, but not F16: ends on units): the K range is
     * n_chunk_ends chunks, chunk c ending before block chunk_end[c] (32 columns per block,
     * counted from unit 0; the last is n_units * unit_cols / 32). Each chunk's f32 partial is
     * added to yd in double, in chunk order, exactly as one call per chunk (with the other
     * chunks' columns masked to zero) would, without restarting the kernel per chunk. */
    const int32_t *chunk_end;
    int n_chunk_ends;
    /* The AMX int8 kernel reads q8x activations in tile order (pk_act_tiles, made once per call by
     * the driver): act is tile 0, act_stride the bytes between 16-row tiles. */
    bool act_tiles;
    /* A quantized type on the AMX bf16 tiles (matmul.h, kern_matmul_allow_bf16_tiles): every
     * weight value rounded to bf16 (code x scale [+ min] in f32 first), act is bf16 rows as for
     * F16/BF16, and C accumulates f32 over K in the tiles. */
    bool bf16_tiles;
    /* Not NULL: a ROWS-layout weight of a block decoder type (blocks/block.h) on the bf16 tiles:
     * row r of group g is the GGUF row at w + g * group_stride + r * (group_stride / 16), a
     * unit is one of its blocks (codec->info: blck_size columns, type_size bytes), rows past
     * n_rows are never read. */
    const struct block_codec *codec;
};

/* q8x activations in the int8 tile order: per 16 activation rows (a tile), per 32-column block,
 * PK_ACT_TILE_B bytes: the 16 rows' codes (row r at 32 r: one TILELOADD of stride 32), then
 * their d (16 f32), their isum (16 int32), the sums of their first 16 codes (16 int32: Q2_K's
 * mins, which scale each 16-column half) and d * isum (16 f32, the product the offset term of
 * Q4_1, Q5_1, Q4_K and Q5_K scales by, made once per row and block instead of once per row group
 * in the tile kernel's f32 step). Rows past m are zero (they add nothing and are never stored). */
#define PK_ACT_TILE_B 768
#define PK_ACT_TILE_D 512
#define PK_ACT_TILE_ISUM 576
#define PK_ACT_TILE_LO 640
#define PK_ACT_TILE_DI 704

/* The plain-C packed kernel (the reference twin of the AVX-512 and AMX ones; matmul_packed.c).
 * With bf16_tiles, the twin of the bf16 tiles: the same bf16 weights and activations, summed in
 * f32 in column order (the tiles' order inside a TDPBF16PS is the hardware's: a tolerance, not
 * the bits). */
void pk_gemm_ref(const struct pk_args *a);

#endif
