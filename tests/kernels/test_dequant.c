/* dequantize_row_ref pinned bit for bit with hand-built blocks. Every expected value below was
 * worked out by hand from the formulas of shared FORMATS.md (written next to each value), not
 * with the code under test. Covered: Q4_0 nibble order (low nibbles = first 16 values) and a
 * negative d, Q4_1's min, Q8_0 extremes, Q4_K scale/min indices j < 4 and j >= 4 (the high bits
 * taken from s[j-4] and s[j]), Q5_K's fifth bit per sub-block, Q6_K's d-last layout, ql/qh
 * split and signed scales (including -128), F16/BF16 rows, and multi-block rows. */
#include "ktest.h"

/* Compare n dequantized values with want, exactly. */
static void expect_row(const char *what, enum dtype t, const void *blk, const float *want, int n) {
    float got[512];
    NM_ASSERT(n <= 512);
    dequantize_row_ref(t, blk, got, n);
    for (int i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], 4) != 0) {
            ktest_fail("%s: value %d is %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
            return;
        }
    }
}

static void test_q4_0(void) {
    block_q4_0 b[2];
    float want[64];
    /* block 0: d = 2.0 (0x4000); qs = 0x88 everywhere except the bytes set below */
    b[0].d = 0x4000;
    memset(b[0].qs, 0x88, 16);
    for (int i = 0; i < 32; i++) want[i] = 0.0f; /* (8 - 8) * 2 */
    b[0].qs[0] = 0x1F; want[0] = 14.0f;  /* low 0xF: (15-8)*2 */
    /*             */  want[16] = -14.0f; /* high 0x1: (1-8)*2 */
    b[0].qs[5] = 0x80; want[5] = -16.0f; /* low 0: (0-8)*2 */
    /*             */  want[21] = 0.0f;   /* high 8 */
    b[0].qs[15] = 0x07; want[15] = -2.0f; /* low 7: (7-8)*2 */
    /*              */  want[31] = -16.0f; /* high 0 */
    /* block 1: d = -0.5 (0xB800) */
    b[1].d = 0xB800;
    memset(b[1].qs, 0x88, 16);
    for (int i = 32; i < 64; i++) want[i] = -0.0f; /* 0 * -0.5 = -0 */
    b[1].qs[15] = 0x3C; want[32 + 15] = -2.0f; /* low 0xC: (12-8)*-0.5 */
    /*              */  want[32 + 31] = 2.5f;  /* high 3: (3-8)*-0.5 */
    expect_row("q4_0", DTYPE_Q4_0, b, want, 64);
}

static void test_q4_1(void) {
    block_q4_1 b;
    float want[32];
    b.d = 0x3800;  /* 0.5 */
    b.m = 0xC000;  /* -2.0 */
    memset(b.qs, 0, 16);
    for (int i = 0; i < 32; i++) want[i] = -2.0f; /* 0*0.5 - 2 */
    b.qs[0] = 0xA3; want[0] = -0.5f; /* 3*0.5 - 2 */
    /*           */ want[16] = 3.0f; /* 10*0.5 - 2 */
    b.qs[9] = 0xF0; want[9] = -2.0f;
    /*           */ want[25] = 5.5f; /* 15*0.5 - 2 */
    expect_row("q4_1", DTYPE_Q4_1, &b, want, 32);
}

static void test_q8_0(void) {
    block_q8_0 b;
    float want[32];
    b.d = 0x3400; /* 0.25 */
    for (int i = 0; i < 32; i++) {
        b.qs[i] = (int8_t)(i - 16);
        want[i] = (float)(i - 16) * 0.25f; /* exact: small multiples of 1/4 */
    }
    b.qs[0] = -128; want[0] = -32.0f;
    b.qs[31] = 127; want[31] = 31.75f;
    b.qs[7] = -3; want[7] = -0.75f;
    expect_row("q8_0", DTYPE_Q8_0, &b, want, 32);
}

static void test_q4_K(void) {
    block_q4_K b;
    float want[256];
    memset(&b, 0, sizeof b);
    b.d = 0x3C00;    /* 1.0 */
    b.dmin = 0x3800; /* 0.5 */
    /* j < 4: sc = s[j] & 63, m = s[j+4] & 63
     * j >= 4: sc = (s[j+4] & 0xF) | ((s[j-4] >> 6) << 4), m = (s[j+4] >> 4) | ((s[j] >> 6) << 4) */
    b.scales[0] = 0x05;  /* sc0 = 5 */
    b.scales[4] = 0x03;  /* m0 = 3 */
    b.scales[1] = 0xC2;  /* sc1 = 2; top bits 3 -> sc5 high = 48 */
    b.scales[5] = 0x41;  /* m1 = 1; top bits 1 -> m5 high = 16 */
    b.scales[9] = 0x72;  /* sc5 = 2 | 48 = 50, m5 = 7 | 16 = 23 */
    b.scales[3] = 0x80;  /* sc3 = 0; top bits 2 -> sc7 high = 32 */
    b.scales[11] = 0x31; /* sc7 = 1 | 32 = 33, m7 = 3 | (s[7] >> 6 = 0) = 3 */
    /* sub-block j covers values 32j..32j+31; value = d*sc*q - dmin*m; with q = 0:
     * sb0 -1.5, sb1 -0.5, sb2 0 (sc2 = m2 = 0), sb3 0, sb4 0 (s[8] = 0), sb5 -11.5, sb6 0,
     * sb7 -1.5 */
    const float base[8] = {-1.5f, -0.5f, 0.0f, 0.0f, 0.0f, -11.5f, 0.0f, -1.5f};
    for (int i = 0; i < 256; i++) want[i] = base[i / 32];
    /* chunk c = byte/32 holds sub-block 2c in the low nibbles and 2c+1 in the high ones */
    b.qs[0] = 0x4A;   want[0] = 48.5f;    /* sb0 q=10: 5*10 - 1.5 */
    /*           */   want[32] = 7.5f;    /* sb1 q=4: 2*4 - 0.5 */
    b.qs[70] = 0x9F;  want[128 + 6] = 0.0f; /* sb4 q=15: 0*15 - 0 */
    /*            */  want[160 + 6] = 438.5f; /* sb5 q=9: 50*9 - 11.5 */
    b.qs[127] = 0xE0; want[192 + 31] = 0.0f;  /* sb6 q=0 */
    /*             */ want[224 + 31] = 460.5f; /* sb7 q=14: 33*14 - 1.5 */
    b.qs[100] = 0x21; want[192 + 4] = 0.0f;    /* sb6 sc6 = 0: 0*1 - 0 */
    /*             */ want[224 + 4] = 64.5f;   /* sb7 q=2: 33*2 - 1.5 */
    expect_row("q4_k", DTYPE_Q4_K, &b, want, 256);
}

static void test_q5_K(void) {
    block_q5_K b;
    float want[256];
    memset(&b, 0, sizeof b);
    b.d = 0x3C00;    /* 1.0 */
    b.dmin = 0x3C00; /* 1.0 */
    b.scales[0] = 0x01;  /* sc0 = 1 */
    b.scales[4] = 0x02;  /* m0 = 2 */
    b.scales[1] = 0x01;  /* sc1 = 1, m1 = s[5] & 63 = 0 */
    b.scales[10] = 0x21; /* sc6 = 1 | (s[2] >> 6 = 0) = 1, m6 = 2 | (s[6] >> 6 = 0) = 2 */
    /* defaults (q = 0, no high bit): sb0 -2, sb1 0, sb2..5 0, sb6 -2, sb7 0 */
    const float base[8] = {-2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -2.0f, 0.0f};
    for (int i = 0; i < 256; i++) want[i] = base[i / 32];
    /* qh[l] bit j is the fifth bit of value l of sub-block j (masks 1,2 shifted by 2 per chunk) */
    b.qh[3] = 0x41;  /* bit 0 (sb0, l=3) and bit 6 (sb6, l=3) */
    b.qs[3] = 0x05;  want[3] = 19.0f;      /* sb0: 1*(5+16) - 2 */
    /*          */   want[32 + 3] = 0.0f;  /* sb1: high nibble 0, bit 1 clear: 0 - 0 */
    b.qs[96 + 3] = 0x70; want[192 + 3] = 14.0f; /* sb6: low nibble 0 + 16: 1*16 - 2 */
    /*              */   want[224 + 3] = 0.0f;  /* sb7: sc7 = m7 = 0 */
    b.qh[31] = 0x02; /* bit 1: sb1, l=31 */
    b.qs[31] = 0xF0; want[63] = 31.0f;     /* sb1: 1*(15+16) - 0 */
    /*           */  want[31] = -2.0f;     /* sb0: 1*0 - 2 */
    b.qh[0] = 0x80;  /* bit 7: sb7, l=0, but sc7 = m7 = 0 */
    want[224] = 0.0f;
    expect_row("q5_k", DTYPE_Q5_K, &b, want, 256);
}

static void test_q6_K(void) {
    block_q6_K b;
    float want[256];
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5, stored last (byte 208) */
    const int8_t sc[16] = {1, -2, 3, 0, 4, 0, -1, 0, 0, 2, 0, 1, 0, -3, 0, -128};
    memcpy(b.scales, sc, 16);
    /* value v has group v/16 and, with all bits zero, q = 0 - 32: y = 0.5 * sc * -32 = -16 sc */
    for (int v = 0; v < 256; v++) want[v] = -16.0f * (float)sc[v / 16];
    /* half 0, l = 0: ql[0] = 0x21, ql[32] = 0xF0, qh[0] = 0xE4 = 11 10 01 00b */
    b.ql[0] = 0x21;
    b.ql[32] = 0xF0;
    b.qh[0] = 0xE4;
    want[0] = -15.5f;  /* q1 = 1 | 0<<4 = 1 -> -31; 0.5 * sc0(1) * -31 */
    want[32] = -24.0f; /* q2 = 0 | 1<<4 = 16 -> -16; 0.5 * sc2(3) * -16 */
    want[64] = 4.0f;   /* q3 = 2 | 2<<4 = 34 -> 2; 0.5 * sc4(4) * 2 */
    want[96] = -15.5f; /* q4 = 15 | 3<<4 = 63 -> 31; 0.5 * sc6(-1) * 31 */
    /* half 0, l = 17 (second group of each quarter): ql[17] = 0x05, qh[17] = 0xAA (2 in each) */
    b.ql[17] = 0x05;
    b.qh[17] = 0xAA;
    want[17] = -5.0f; /* q1 = 5 | 32 = 37 -> 5; 0.5 * sc1(-2) * 5 */
    want[49] = 0.0f;  /* q2 = 0 | 32 -> 0 */
    want[81] = 0.0f;  /* q3 = 0 | 32 -> 0 */
    want[113] = 0.0f; /* q4 = 0 | 32 -> 0 */
    /* half 1 (ql += 64, qh += 32, sc += 8), l = 31: ql[95] = 0x3F, ql[127] = 0x00, qh[63] = 0xC3 */
    b.ql[95] = 0x3F;
    b.qh[63] = 0xC3;
    want[128 + 31] = 31.0f;   /* q1 = 15 | 3<<4 = 63 -> 31; 0.5 * sc9(2) * 31 */
    want[128 + 63] = -16.0f;  /* q2 = 0 | 0 -> -32; 0.5 * sc11(1) * -32 */
    want[128 + 95] = 43.5f;   /* q3 = 3 | 0 -> -29; 0.5 * sc13(-3) * -29 */
    want[128 + 127] = -1024.0f; /* q4 = 0 | 3<<4 = 48 -> 16; 0.5 * sc15(-128) * 16 */
    expect_row("q6_k", DTYPE_Q6_K, &b, want, 256);

    /* the same block with d moved: a reader that takes d from the front gets other values */
    uint8_t raw[210];
    memcpy(raw, &b, 210);
    if (raw[208] != 0x00 || raw[209] != 0x38) ktest_fail("q6_k: d is not the last two bytes");
}

static void test_float_rows(void) {
    const uint16_t h[4] = {0x3C00, 0xC500, 0x0001, 0x7C00}; /* 1, -5, 2^-24, inf */
    const float wh[4] = {1.0f, -5.0f, 5.9604644775390625e-08f, INFINITY};
    expect_row("f16", DTYPE_F16, h, wh, 4);
    const uint16_t bf[3] = {0x3F80, 0xC0A0, 0x4049}; /* 1, -5, 3.140625 */
    const float wb[3] = {1.0f, -5.0f, 3.140625f};
    expect_row("bf16", DTYPE_BF16, bf, wb, 3);
    const float f[3] = {1.5f, -0.0f, 7.0f};
    expect_row("f32", DTYPE_F32, f, f, 3);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    test_q4_0();
    test_q4_1();
    test_q8_0();
    test_q4_K();
    test_q5_K();
    test_q6_K();
    test_float_rows();
    return ktest_finish("test_dequant");
}
