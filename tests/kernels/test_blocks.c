/* The types of the block decoder interface (kernels/blocks: Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL,
 * IQ4_XS):
 *  (1) dequantize_row_ref pinned bit for bit (the sign of zeros included) with hand-built blocks.
 *      Every expected value was worked out by hand from kernels/blocks/FORMATS.md (the arithmetic
 *      is next to each value), not with the code under test. Covered per type: every field, the
 *      nibble order, Q5_0/Q5_1's high bits in each byte of qh, Q2_K's four shifts in both
 *      128-value halves and all 16 scale/min nibble pairs, Q3_K's 16 packed 6-bit scales (each
 *      2-bit high field of bytes 8..11 distinct) and every hmask bit set and clear, the IQ4 value
 *      table entry by entry, IQ4_XS's scales_l/scales_h for all 8 sub-blocks;
 *  (2) the codec's quantizer: dequantize(quantize(x)) within a per-type bound of the block's
 *      largest magnitude (derived below from the quantizer), and a relative RMS error bound;
 *  (3) vec_dot_ref against the float64 dot product of the dequantized row with the q8x
 *      activations' dequantized values, on rows of random bytes (every code pattern);
 *  (4) the codec table: each type's row is its own and agrees with dtype_get. */
#include "blocks/block.h"
#include "blocks/iq4_nl.h"
#include "blocks/iq4_xs.h"
#include "blocks/q2_k.h"
#include "blocks/q3_k.h"
#include "blocks/q5_0.h"
#include "blocks/q5_1.h"
#include "ktest.h"

/* Compare n dequantized values with want, bit for bit (so -0.0 differs from 0.0). */
static void expect_row(const char *what, enum dtype t, const void *blk, const float *want, int n) {
    float got[512];
    NM_ASSERT(n <= 512);
    dequantize_row_ref(t, blk, got, n);
    for (int i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], 4) != 0) {
            ktest_fail("%s: value %d is %.9g (%a), want %.9g (%a)", what, i, (double)got[i],
                       (double)got[i], (double)want[i], (double)want[i]);
            return;
        }
    }
}

/* ---- (1) hand-built blocks ------------------------------------------------------------- */

static void test_q5_0(void) {
    block_q5_0 b[2];
    float want[64];
    /* block 0: d = 0.5 (0x3800); value = (q - 16) * d, q = low nibble | qh bit << 4.
     * qh = bits 0, 9, 15, 16, 26, 31 = 0x84018201, little-endian bytes 01 82 01 84 */
    b[0].d = 0x3800;
    b[0].qh[0] = 0x01, b[0].qh[1] = 0x82, b[0].qh[2] = 0x01, b[0].qh[3] = 0x84;
    memset(b[0].qs, 0, 16);
    for (int i = 0; i < 32; i++) want[i] = -8.0f; /* (0 - 16) * 0.5 */
    b[0].qs[0] = 0x30; want[0] = 0.0f;   /* 0 | 16 (bit 0): 0 * 0.5 */
    /*             */  want[16] = 1.5f;  /* 3 | 16 (bit 16): 3 * 0.5 */
    b[0].qs[7] = 0xF1; want[7] = -7.5f;  /* 1: -15 * 0.5 */
    /*             */  want[23] = -0.5f; /* 15, bit 23 clear: -1 * 0.5 */
    /*                */ want[9] = 0.0f; /* qs[9] = 0, bit 9 (qh[1] bit 1): 16 -> 0 */
    b[0].qs[10] = 0xA5; want[10] = -5.5f; /* 5, bit 10 clear: -11 * 0.5 */
    /*              */  want[26] = 5.0f;  /* 10 | 16 (bit 26, qh[3] bit 2): 10 * 0.5 */
    b[0].qs[15] = 0x0F; want[15] = 7.5f;  /* 15 | 16 (bit 15): 15 * 0.5 */
    /*              */  want[31] = 0.0f;  /* 0 | 16 (bit 31) */
    /* block 1: d = -2.0 (0xC000), every qh bit but 12 and 28 set, so q = 16 and the value is
     * 0 * -2.0 = -0.0 unless noted */
    b[1].d = 0xC000;
    b[1].qh[0] = 0xFF, b[1].qh[1] = 0xEF, b[1].qh[2] = 0xFF, b[1].qh[3] = 0xEF;
    memset(b[1].qs, 0, 16);
    for (int i = 32; i < 64; i++) want[i] = -0.0f;
    b[1].qs[3] = 0x1F; want[32 + 3] = -30.0f; /* 15 | 16 = 31: 15 * -2 */
    /*             */  want[32 + 19] = -2.0f; /* 1 | 16 = 17: 1 * -2 */
    want[32 + 12] = 32.0f; /* bit 12 clear: q = 0: -16 * -2 */
    want[32 + 28] = 32.0f; /* bit 28 clear */
    expect_row("q5_0", DTYPE_Q5_0, b, want, 64);
}

static void test_q5_1(void) {
    block_q5_1 b[2];
    float want[64];
    /* block 0: d = 0.5 (0x3800), m = -4.0 (0xC400); value = q * d + m.
     * qh = bits 0, 8, 20, 23, 31 = 0x80900101, bytes 01 01 90 80 */
    b[0].d = 0x3800;
    b[0].m = 0xC400;
    b[0].qh[0] = 0x01, b[0].qh[1] = 0x01, b[0].qh[2] = 0x90, b[0].qh[3] = 0x80;
    memset(b[0].qs, 0, 16);
    for (int i = 0; i < 32; i++) want[i] = -4.0f; /* 0 * 0.5 - 4 */
    b[0].qs[0] = 0xF0; want[0] = 4.0f;    /* 0 | 16 (bit 0): 8 - 4 */
    /*             */  want[16] = 3.5f;   /* 15, bit 16 clear: 7.5 - 4 */
    b[0].qs[7] = 0x21; want[7] = -3.5f;   /* 1: 0.5 - 4 */
    /*             */  want[23] = 5.0f;   /* 2 | 16 (bit 23, qh[2] bit 7): 9 - 4 */
    /*                */ want[8] = 4.0f;  /* 0 | 16 (bit 8, qh[1] bit 0): 8 - 4 */
    /*                */ want[20] = 4.0f; /* 0 | 16 (bit 20, qh[2] bit 4) */
    b[0].qs[15] = 0xF3; want[15] = -2.5f; /* 3: 1.5 - 4 */
    /*              */  want[31] = 11.5f; /* 15 | 16 = 31 (bit 31): 15.5 - 4 */
    /* block 1: d = 0x3555 = 1365/4096, m = 0x2E66 = 1638/16384; all qs and qh bits set: q = 31,
     * 31 * 1365/4096 + 1638/16384 = (169260 + 1638)/16384 = 170898/16384 (exact in f32) */
    b[1].d = 0x3555;
    b[1].m = 0x2E66;
    memset(b[1].qh, 0xFF, 4);
    memset(b[1].qs, 0xFF, 16);
    for (int i = 32; i < 64; i++) want[i] = 10.4307861328125f;
    b[1].qs[4] = 0xF0;
    b[1].qh[0] = 0xEF; /* bit 4 clear */
    want[32 + 4] = 0.0999755859375f;   /* q = 0: m = 1638/16384 */
    want[32 + 20] = 10.4307861328125f; /* 15 | 16 (bit 20) = 31 */
    expect_row("q5_1", DTYPE_Q5_1, b, want, 64);
}

static void test_q2_k(void) {
    block_q2_K b[2];
    float want[512];
    /* block 0: d = 0.5 (0x3800), dmin = 0.25 (0x3400), both after the codes.
     * scales[k] = k << 4 | (15 - k): group k (values 16k..16k+15) has sc = 15 - k, mn = k,
     * so dl = 0.5 * (15 - k) and ml = 0.25 * k; value = dl * q - ml.
     * qs = 0xE4 = 11 10 01 00b everywhere: shift 0 -> 0, 2 -> 1, 4 -> 2, 6 -> 3, so sub-block j
     * (groups 2j, 2j + 1) has code j % 4 */
    b[0].d = 0x3800;
    b[0].dmin = 0x3400;
    for (int k = 0; k < 16; k++) b[0].scales[k] = (uint8_t)(k << 4 | (15 - k));
    memset(b[0].qs, 0xE4, 64);
    const float base[16] = {
        0.0f,   /* k0: 7.5 * 0 - 0 */
        -0.25f, /* k1: 7.0 * 0 - 0.25 */
        6.0f,   /* k2: 6.5 * 1 - 0.5 */
        5.25f,  /* k3: 6.0 * 1 - 0.75 */
        10.0f,  /* k4: 5.5 * 2 - 1.0 */
        8.75f,  /* k5: 5.0 * 2 - 1.25 */
        12.0f,  /* k6: 4.5 * 3 - 1.5 */
        10.25f, /* k7: 4.0 * 3 - 1.75 */
        -2.0f,  /* k8: 3.5 * 0 - 2.0 */
        -2.25f, /* k9: 3.0 * 0 - 2.25 */
        0.0f,   /* k10: 2.5 * 1 - 2.5 */
        -0.75f, /* k11: 2.0 * 1 - 2.75 */
        0.0f,   /* k12: 1.5 * 2 - 3.0 */
        -1.25f, /* k13: 1.0 * 2 - 3.25 */
        -2.0f,  /* k14: 0.5 * 3 - 3.5 */
        -3.75f, /* k15: 0.0 * 3 - 3.75 */
    };
    for (int i = 0; i < 256; i++) want[i] = base[i / 16];
    /* 0x1B = 00 01 10 11b: shift 0 -> 3, 2 -> 2, 4 -> 1, 6 -> 0 */
    b[0].qs[0] = 0x1B;  /* half 0, l = 0: values 0, 32, 64, 96 (first group of sub-blocks 0..3) */
    want[0] = 22.5f;    /* k0 q=3: 7.5 * 3 - 0 */
    want[32] = 12.5f;   /* k2 q=2: 6.5 * 2 - 0.5 */
    want[64] = 4.5f;    /* k4 q=1: 5.5 * 1 - 1.0 */
    want[96] = -1.5f;   /* k6 q=0: 0 - 1.5 */
    b[0].qs[16] = 0x00; /* half 0, l = 16: values 16, 48, 80, 112 (second groups), all q = 0 */
    want[16] = -0.25f;  /* k1: 0 - 0.25 */
    want[48] = -0.75f;  /* k3: 0 - 0.75 */
    want[80] = -1.25f;  /* k5: 0 - 1.25 */
    want[112] = -1.75f; /* k7: 0 - 1.75 */
    b[0].qs[37] = 0x1B; /* half 1, l = 5: values 133, 165, 197, 229 */
    want[133] = 8.5f;   /* k8 q=3: 3.5 * 3 - 2.0 */
    want[165] = 2.5f;   /* k10 q=2: 2.5 * 2 - 2.5 */
    want[197] = -1.5f;  /* k12 q=1: 1.5 * 1 - 3.0 */
    want[229] = -3.5f;  /* k14 q=0: 0 - 3.5 */
    b[0].qs[63] = 0x1B; /* half 1, l = 31: values 159, 191, 223, 255 */
    want[159] = 6.75f;  /* k9 q=3: 3.0 * 3 - 2.25 */
    want[191] = 1.25f;  /* k11 q=2: 2.0 * 2 - 2.75 */
    want[223] = -2.25f; /* k13 q=1: 1.0 * 1 - 3.25 */
    want[255] = -3.75f; /* k15 q=0: 0 - 3.75 */
    /* block 1: d = -1.0 (0xBC00), dmin = 1.0 (0x3C00), scales 0x01 (sc 1, mn 0), codes 0:
     * (-1 * 1) * 0 - 1 * 0 = -0.0 - 0.0 = -0.0 */
    b[1].d = 0xBC00;
    b[1].dmin = 0x3C00;
    memset(b[1].scales, 0x01, 16);
    memset(b[1].qs, 0, 64);
    for (int i = 256; i < 512; i++) want[i] = -0.0f;
    b[1].scales[15] = 0x2F; /* group 15 (values 240..255): sc 15, mn 2 */
    for (int i = 240; i < 256; i++) want[256 + i] = -2.0f; /* -15 * 0 - 2 */
    b[1].qs[63] = 0xC0;      /* shift 6 (sub-block 7), l = 31: q = 3 */
    want[256 + 255] = -47.0f; /* -15 * 3 - 2 */
    expect_row("q2_k", DTYPE_Q2_K, b, want, 512);
}

static void test_q3_k(void) {
    block_q3_K b;
    float want[256];
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5, the last two bytes */
    /* 16 6-bit scales k6 = L + 16 H, L = low nibble, H = 2-bit high field:
     *   L = 1 15 2 14  3 13 4 12  5 11 6 10  7 9 8 0   (all 16 nibble values)
     *   H = 2  3 0  1  0  1 3  2  1  2 2  3  3 0 1 0   (each of bytes 8..11 holds 0..3 once)
     *   k6 = 33 63 2 30  3 29 52 44  21 43 38 58  55 9 24 0, s = k6 - 32 =
     *         1 31 -30 -2  -29 -3 20 12  -11 11 6 26  23 -23 -8 -32
     * bytes 0..7: L[i] | L[i + 8] << 4; byte 8 + i: H[i] | H[i+4] << 2 | H[i+8] << 4 | H[i+12] << 6 */
    const uint8_t sc[12] = {
        0x51, /* 1 | 5 << 4 */
        0xBF, /* 15 | 11 << 4 */
        0x62, /* 2 | 6 << 4 */
        0xAE, /* 14 | 10 << 4 */
        0x73, /* 3 | 7 << 4 */
        0x9D, /* 13 | 9 << 4 */
        0x84, /* 4 | 8 << 4 */
        0x0C, /* 12 | 0 << 4 */
        0xD2, /* H0 2 | H4 0 << 2 | H8 1 << 4 | H12 3 << 6 = 2 + 16 + 192 */
        0x27, /* H1 3 | H5 1 << 2 | H9 2 << 4 | H13 0 << 6 = 3 + 4 + 32 */
        0x6C, /* H2 0 | H6 3 << 2 | H10 2 << 4 | H14 1 << 6 = 12 + 32 + 64 */
        0x39, /* H3 1 | H7 2 << 2 | H11 3 << 4 | H15 0 << 6 = 1 + 8 + 48 */
    };
    memcpy(b.scales, sc, 12);
    /* dl = 0.5 * s. With qs = 0 and hmask = 0 every code is 0 - 4 = -4: value = -4 dl = -2 s */
    const float base[16] = {
        -2.0f,  /* s 1 */   -62.0f, /* s 31 */  60.0f,  /* s -30 */ 4.0f,   /* s -2 */
        58.0f,  /* s -29 */ 6.0f,   /* s -3 */  -40.0f, /* s 20 */  -24.0f, /* s 12 */
        22.0f,  /* s -11 */ -22.0f, /* s 11 */  -12.0f, /* s 6 */   -52.0f, /* s 26 */
        -46.0f, /* s 23 */  46.0f,  /* s -23 */ 16.0f,  /* s -8 */  64.0f,  /* s -32 */
    };
    for (int i = 0; i < 256; i++) want[i] = base[i / 16];
    /* hmask[0] = 0xFF: value 32j (first group of sub-block j) has its high bit set, low bits 0:
     * code 0, value dl * 0, a zero with dl's sign */
    b.hmask[0] = 0xFF;
    want[0] = 0.0f;    /* k0 dl 0.5 */
    want[32] = -0.0f;  /* k2 dl -15 */
    want[64] = -0.0f;  /* k4 dl -14.5 */
    want[96] = 0.0f;   /* k6 dl 10 */
    want[128] = -0.0f; /* k8 dl -5.5 */
    want[160] = 0.0f;  /* k10 dl 3 */
    want[192] = 0.0f;  /* k12 dl 11.5 */
    want[224] = -0.0f; /* k14 dl -4 */
    /* l = 31 (second groups): qs[31] = 0x1B (shifts 0,2,4,6 -> 3,2,1,0), qs[63] = 0xE4
     * (-> 0,1,2,3), hmask[31] = 0x35 = 00110101b (bits 0, 2, 4, 5 set; 1, 3, 6, 7 clear) */
    b.qs[31] = 0x1B;
    b.qs[63] = 0xE4;
    b.hmask[31] = 0x35;
    want[31] = 46.5f;   /* j0 k1 dl 15.5: low 3, bit 0 set: 3 */
    want[63] = 2.0f;    /* j1 k3 dl -1: low 2, bit 1 clear: -2 */
    want[95] = -1.5f;   /* j2 k5 dl -1.5: low 1, bit 2 set: 1 */
    want[127] = -24.0f; /* j3 k7 dl 6: low 0, bit 3 clear: -4 */
    want[159] = 0.0f;   /* j4 k9 dl 5.5: low 0, bit 4 set: 0 */
    want[191] = 13.0f;  /* j5 k11 dl 13: low 1, bit 5 set: 1 */
    want[223] = 23.0f;  /* j6 k13 dl -11.5: low 2, bit 6 clear: -2 */
    want[255] = 16.0f;  /* j7 k15 dl -16: low 3, bit 7 clear: -1 */
    /* hmask[5] = 0x80: only sub-block 7's value 224 + 5 has its high bit: code 0 */
    b.hmask[5] = 0x80;
    want[229] = -0.0f; /* k14 dl -4: -4 * 0 */
    /* qs[48] = 0xFF (half 1, l = 16): sub-blocks 4..7, second groups, low 3, high clear: -1 */
    b.qs[48] = 0xFF;
    want[144] = -5.5f;  /* k9 dl 5.5 */
    want[176] = -13.0f; /* k11 dl 13 */
    want[208] = 11.5f;  /* k13 dl -11.5 */
    want[240] = 16.0f;  /* k15 dl -16 */
    expect_row("q3_k", DTYPE_Q3_K, &b, want, 256);
}

/* The 16 IQ4 values, written out again here from ggml-common.h's kvalues_iq4nl (not taken from
 * the header under test). */
static const int k_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void test_iq4_nl(void) {
    block_iq4_nl b[2];
    float want[64];
    /* block 0: d = 0.5; qs[i] = i | (15 - i) << 4: value i is 0.5 * k_iq4[i], value 16 + i is
     * 0.5 * k_iq4[15 - i], so every index appears in both nibbles */
    b[0].d = 0x3800;
    for (int i = 0; i < 16; i++) b[0].qs[i] = (uint8_t)(i | (15 - i) << 4);
    const float half_values[16] = {-63.5f, -52.0f, -41.5f, -32.5f, -24.5f, -17.5f, -11.0f, -5.0f,
                                   0.5f,   6.5f,   12.5f,  19.0f,  26.5f,  34.5f,  44.5f,  56.5f};
    for (int i = 0; i < 16; i++) {
        if (half_values[i] * 2.0f != (float)k_iq4[i]) ktest_fail("iq4_nl: test table typo at %d", i);
        want[i] = half_values[i];
        want[16 + i] = half_values[15 - i];
    }
    /* block 1: d = -1.0 (0xBC00), index 8 (value 1) everywhere: -1.0 */
    b[1].d = 0xBC00;
    memset(b[1].qs, 0x88, 16);
    for (int i = 32; i < 64; i++) want[i] = -1.0f;
    b[1].qs[2] = 0x0F;
    want[32 + 2] = -113.0f; /* index 15: 113 * -1 */
    want[32 + 18] = 127.0f; /* index 0: -127 * -1 */
    expect_row("iq4_nl", DTYPE_IQ4_NL, b, want, 64);
}

static void test_iq4_xs(void) {
    block_iq4_xs b;
    float want[256];
    /* d = 0.5 (0x3800). Sub-block scales ls = L + 16 H:
     *   L = 1 14 2 13 4 11 8 7, H = 2 1 0 3 1 2 3 0 -> ls = 33 30 2 61 20 43 56 7,
     *   s = ls - 32 = 1 -2 -30 29 -12 11 24 -25, dl = 0.5 s = 0.5 -1 -15 14.5 -6 5.5 12 -12.5
     * scales_l[i] = L[2i] | L[2i+1] << 4 = E1 D2 B4 78;
     * scales_h = sum H[j] << 2j = 2 + 1*4 + 0*16 + 3*64 + 1*256 + 2*1024 + 3*4096 + 0 = 0x39C6 */
    b.d = 0x3800;
    b.scales_h = 0x39C6;
    b.scales_l[0] = 0xE1, b.scales_l[1] = 0xD2, b.scales_l[2] = 0xB4, b.scales_l[3] = 0x78;
    memset(b.qs, 0x88, 128); /* index 8, value 1: value = dl */
    const float base[8] = {0.5f, -1.0f, -15.0f, 14.5f, -6.0f, 5.5f, 12.0f, -12.5f};
    for (int i = 0; i < 256; i++) want[i] = base[i / 32];
    b.qs[0] = 0xF0;  want[0] = -63.5f;   /* j0, index 0: 0.5 * -127 */
    /*           */  want[16] = 56.5f;   /* j0, index 15: 0.5 * 113 */
    b.qs[36] = 0x31; want[68] = 1560.0f; /* j2 (qs 32..47), l 4, index 1: -15 * -104 */
    /*            */ want[84] = 975.0f;  /* index 3: -15 * -65 */
    b.qs[63] = 0x7A; want[111] = 362.5f; /* j3, l 15, index 10: 14.5 * 25 */
    /*            */ want[127] = -145.0f; /* index 7: 14.5 * -10 */
    b.qs[119] = 0x0F; want[231] = -1412.5f; /* j7 (qs 112..127), l 7, index 15: -12.5 * 113 */
    /*             */ want[247] = 1587.5f;  /* index 0: -12.5 * -127 */
    expect_row("iq4_xs", DTYPE_IQ4_XS, &b, want, 256);
}

/* ---- (2) round trips through the codec's quantizer -------------------------------------- */

/* Bound on |dequantize(quantize(x)) - x| as a multiple of the block's max |x| (amax), from each
 * quantizer (kernels/blocks/<type>.c); f16 rounding of the stored scales adds about 2^-11 relative
 * per scale:
 *  - Q5_0: d = v/-16 for the largest-magnitude v, codes -16..15: half a step (amax/32) except
 *    at -v, which clamps to 15 (one step, amax/16). Bound amax * (1/16 + 2^-10).
 *  - Q5_1: step (max - min)/31 <= 2 amax/31, error half a step = amax/31. Bound (1/31 + 2^-9).
 *  - Q2_K: per 16 values the step s = (max - lo)/3 <= 2 amax/3 (lo = min(0, min)); half a step
 *    is amax/3, the 4-bit scale adds <= d/4 with d = max s/15 (amax/90), the 4-bit min <= dmin/2
 *    = amax/30 at the ends. Bound 0.35.
 *  - Q3_K: per 16 values the scale v/-4 (|v| = that group's amax), codes -4..3: half a step
 *    (amax/8), but -v clamps to code 3 (one step, amax/4); the 6-bit scale is off by <= d with
 *    d = amax/128, times |code| <= 3 at that end. Bound 0.28.
 *  - IQ4_NL: d = v/-127; the widest gap of the table is 24 (89..113) and 113..127 leaves 14:
 *    14/127 = 0.110. Bound (14/127 + 2^-10).
 *  - IQ4_XS: as IQ4_NL per 32 values, plus the 6-bit sub-block scale off by <= d (d = amax/4064)
 *    times the code (<= 127 + 14): 0.110 + 0.035. Bound 0.15. */
static const struct {
    enum dtype t;
    double amax_bound;
    /* Relative RMS error on normal data (std 1, krng_normal): a uniform step s gives s/sqrt(12),
     * with a block's amax about 2.1 (32 values) or 1.85 (16 values) and a range about twice that:
     *  - Q5_0: s = 2.1/16 -> 0.038; Q5_1: s = 4.0/31 -> 0.037; allowed 0.045 (measured 0.040,
     *    0.036).
     *  - Q2_K: s = 3.5/3 (the range of 16 with the offset at min(0, min)) -> 0.34; allowed 0.36
     *    (measured 0.32).
     *  - Q3_K: s = 1.85/4 -> 0.13, plus the clamp at +3 and the 6-bit scales; allowed 0.17
     *    (measured 0.15).
     *  - IQ4_NL/IQ4_XS: mean table gap about 16 in units of amax/127 -> 0.076; allowed 0.09
     *    (measured 0.078). */
    double rms_bound;
} k_trips[] = {
    {DTYPE_Q5_0, 1.0 / 16 + 1.0 / 1024, 0.045},    {DTYPE_Q5_1, 1.0 / 31 + 1.0 / 512, 0.045},
    {DTYPE_Q2_K, 0.35, 0.36},                      {DTYPE_Q3_K, 0.28, 0.17},
    {DTYPE_IQ4_NL, 14.0 / 127 + 1.0 / 1024, 0.09}, {DTYPE_IQ4_XS, 0.15, 0.09},
};

static void test_round_trips(krng *r) {
    enum { N = 4096 };
    static float x[N], back[N];
    static uint8_t q[N * 2];
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_trips); ti++) {
        const enum dtype t = k_trips[ti].t;
        const int blk = dtype_get(t)->blck_size;
        double err2 = 0.0, x2 = 0.0, worst = 0.0;
        for (int trial = 0; trial < 5; trial++) {
            /* trials 0..3: normal rows with a random scale, outliers and sometimes a zero block
             * (krng_acts), one of them positive-only (Q2_K/Q5_1 then have no negative offset),
             * each with one constant block and one all-zero block; trial 4: plain normal data
             * (std 1), the only one the RMS bound is for */
            if (trial < 4) {
                krng_acts(r, x, N);
                if (trial == 3)
                    for (int i = 0; i < N; i++) x[i] = fabsf(x[i]) + 0.5f;
                for (int i = 0; i < blk; i++) x[i] = trial == 1 ? -3.0f : 7.0f, x[N - blk + i] = 0.0f;
            } else {
                for (int i = 0; i < N; i++) x[i] = krng_normal(r);
            }
            quantize_row_ref(t, x, q, N);
            dequantize_row_ref(t, q, back, N);
            for (int b0 = 0; b0 < N; b0 += blk) {
                float amax = 0.0f;
                for (int i = b0; i < b0 + blk; i++) amax = fmaxf(amax, fabsf(x[i]));
                for (int i = b0; i < b0 + blk; i++) {
                    const double e = fabs((double)back[i] - (double)x[i]);
                    if (!isfinite(back[i]) || e > k_trips[ti].amax_bound * amax) {
                        ktest_fail("%s round trip trial %d: value %d is %.9g, was %.9g (block amax %.6g, "
                                   "bound %.4f amax)", dtype_get(t)->name, trial, i, (double)back[i],
                                   (double)x[i], (double)amax, k_trips[ti].amax_bound);
                        return;
                    }
                    if (amax > 0.0f && e / amax > worst) worst = e / amax;
                    if (trial == 4) err2 += e * e, x2 += (double)x[i] * x[i];
                }
            }
        }
        const double rms = sqrt(err2 / x2);
        printf("  %-6s round trip: worst %.4f amax (bound %.4f), relative RMS %.4f (bound %.3f)\n",
               dtype_get(t)->name, worst, k_trips[ti].amax_bound, rms, k_trips[ti].rms_bound);
        if (rms > k_trips[ti].rms_bound)
            ktest_fail("%s round trip: relative RMS error %.4f over %.3f", dtype_get(t)->name, rms,
                       k_trips[ti].rms_bound);
    }
}

/* ---- (3) vec_dot_ref --------------------------------------------------------------------- */

/* vec_dot_ref sums exact integer sub-block sums in float: a few roundings per 32 values and one
 * per addition, error <= ~(n/32 + 4) * 2^-24 * mag; for n <= 2048 that is < 5e-6. */
#define TOL_REF_DOT 1e-5

/* Where each type keeps its f16 fields (byte offsets in the block; -1: none): random bytes there
 * could be inf or NaN, so the test writes small finite values. */
static const struct { enum dtype t; int f16_at[2]; } k_f16_fields[] = {
    {DTYPE_Q5_0, {0, -1}},  {DTYPE_Q5_1, {0, 2}},    {DTYPE_Q2_K, {80, 82}},
    {DTYPE_Q3_K, {108, -1}}, {DTYPE_IQ4_NL, {0, -1}}, {DTYPE_IQ4_XS, {0, -1}},
};

static void test_vec_dot(krng *r) {
    enum { NMAX = 2048 };
    static uint8_t w[NMAX * 2];
    static float x[NMAX], a[NMAX], wf[NMAX];
    static block_q8x q8[NMAX / QK8X];
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_f16_fields); ti++) {
        const enum dtype t = k_f16_fields[ti].t;
        const struct dtype_info *info = dtype_get(t);
        ktest_worst_err = 0.0;
        for (int trial = 0; trial < 50; trial++) {
            const int64_t n = (int64_t)info->blck_size * (1 + krng_int(r, NMAX / info->blck_size));
            const int64_t nb = n / info->blck_size;
            for (size_t i = 0; i < dtype_row_size(t, n); i++) w[i] = (uint8_t)krng_u64(r);
            for (int64_t b = 0; b < nb; b++)
                for (int f = 0; f < 2; f++)
                    if (k_f16_fields[ti].f16_at[f] >= 0) {
                        const uint16_t h = krng_fp16_scale(r, 0.05f);
                        memcpy(w + b * info->type_size + k_f16_fields[ti].f16_at[f], &h, 2);
                    }
            krng_acts(r, x, n);
            quantize_act_q8x_ref(x, q8, n);
            kact_values(t, x, q8, a, n);
            dequantize_row_ref(t, w, wf, n);
            double want = 0.0;
            for (int64_t i = 0; i < n; i++) want += (double)wf[i] * (double)a[i];
            const float got = vec_dot_ref(t, n, w, q8), wantf = (float)want;
            const double mag = kmag(wf, a, n);
            kcheck(&got, &wantf, &mag, 1, TOL_REF_DOT, "vec_dot_ref %s n=%" PRId64 " trial %d", info->name, n, trial);
        }
        printf("  %-6s vec_dot_ref: worst normalized error %.2e (tolerance %.0e)\n", info->name,
               ktest_worst_err, TOL_REF_DOT);
    }
}

/* ---- (4) the codec table ------------------------------------------------------------------ */

static void test_codecs(void) {
    const enum dtype types[] = {DTYPE_Q5_0, DTYPE_Q5_1, DTYPE_Q2_K, DTYPE_Q3_K, DTYPE_IQ4_NL, DTYPE_IQ4_XS};
    for (size_t i = 0; i < NM_ARRAY_LEN(types); i++) {
        const struct block_codec *c = block_codec_get(types[i]);
        if (!c || c->type != types[i] || dtype_get(types[i]) != &c->info || c->info.blck_size % BLK_SUB ||
            !c->decode32 || !c->quantize || !c->source)
            ktest_fail("block_codec_get(%d): missing or inconsistent row", (int)types[i]);
    }
    if (block_codec_get(DTYPE_Q4_K) || block_codec_get(DTYPE_F32) || block_codec_get((enum dtype)34) ||
        block_codec_get((enum dtype)1000))
        ktest_fail("block_codec_get: a row for a type outside the interface");
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    test_q5_0();
    test_q5_1();
    test_q2_k();
    test_q3_k();
    test_iq4_nl();
    test_iq4_xs();
    krng r = {ktest_seed};
    test_round_trips(&r);
    test_vec_dot(&r);
    test_codecs();
    return ktest_finish("test_blocks");
}
