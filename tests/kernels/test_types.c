/* dtype table and names, and fp16/bf16 conversions: edge cases pinned by hand (zero signs,
 * subnormals, the largest finite values, overflow, ties to even, inf, NaN), exhaustive fp16
 * round trips, and, where the CPU has F16C, agreement with vcvtph2ps/vcvtps2ph bit for bit. */
#include <cpuid.h>
#include <immintrin.h>

#include "ktest.h"

static float f_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_f(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_table(void) {
    static const struct { uint32_t id; const char *name; int blck, size; bool q; } want[] = {
        {0, "f32", 1, 4, false},     {1, "f16", 1, 2, false},     {2, "q4_0", 32, 18, true},
        {3, "q4_1", 32, 20, true},   {8, "q8_0", 32, 34, true},   {12, "q4_k", 256, 144, true},
        {13, "q5_k", 256, 176, true}, {14, "q6_k", 256, 210, true}, {30, "bf16", 1, 2, false},
        /* the block decoder interface's types (kernels/blocks), sizes as ggml's type traits */
        {6, "q5_0", 32, 22, true},    {7, "q5_1", 32, 24, true},     {10, "q2_k", 256, 84, true},
        {11, "q3_k", 256, 110, true}, {20, "iq4_nl", 32, 18, true},  {23, "iq4_xs", 256, 136, true},
        {16, "iq2_xxs", 256, 66, true}, {17, "iq2_xs", 256, 74, true}, {18, "iq3_xxs", 256, 98, true},
        {19, "iq1_s", 256, 50, true},   {21, "iq3_s", 256, 110, true}, {22, "iq2_s", 256, 82, true},
        {29, "iq1_m", 256, 56, true},
    };
    int supported = 0;
    for (uint32_t id = 0; id < 64; id++) supported += dtype_get(id) != NULL;
    if (supported != (int)NM_ARRAY_LEN(want)) ktest_fail("dtype_get: %d supported ids, want %d", supported, (int)NM_ARRAY_LEN(want));
    for (size_t i = 0; i < NM_ARRAY_LEN(want); i++) {
        const struct dtype_info *d = dtype_get(want[i].id);
        if (!d || strcmp(d->name, want[i].name) || d->blck_size != want[i].blck ||
            d->type_size != want[i].size || d->quantized != want[i].q)
            ktest_fail("dtype_get(%u) does not match %s", want[i].id, want[i].name);
        if (dtype_from_name(want[i].name) != (int)want[i].id)
            ktest_fail("dtype_from_name(%s)", want[i].name);
        if (strcmp(dtype_ggml_name(want[i].id), want[i].name))
            ktest_fail("dtype_ggml_name(%u)", want[i].id);
    }
    if (dtype_from_name("Q4_K") != 12 || dtype_from_name("BF16") != 30 || dtype_from_name("q4_K") != 12)
        ktest_fail("dtype_from_name is not case-insensitive");
    if (dtype_from_name("tq1_0") != -1 || dtype_from_name("mxfp4") != -1 || dtype_from_name("") != -1 || dtype_from_name("q4") != -1 ||
        dtype_from_name(NULL) != -1)
        ktest_fail("dtype_from_name accepts an unsupported name");
    static const struct { uint32_t id; const char *name; } ggml[] = {
        {6, "q5_0"}, {7, "q5_1"}, {9, "q8_1"}, {10, "q2_k"}, {11, "q3_k"}, {15, "q8_k"},
        {16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"}, {19, "iq1_s"}, {20, "iq4_nl"},
        {21, "iq3_s"}, {22, "iq2_s"}, {23, "iq4_xs"}, {24, "i8"}, {25, "i16"}, {26, "i32"},
        {27, "i64"}, {28, "f64"}, {29, "iq1_m"}, {34, "tq1_0"}, {35, "tq2_0"}, {39, "mxfp4"},
        {40, "nvfp4"}, {41, "q1_0"}, {42, "q2_0"}, {43, "unknown"}, {1000, "unknown"},
    };
    for (size_t i = 0; i < NM_ARRAY_LEN(ggml); i++)
        if (strcmp(dtype_ggml_name(ggml[i].id), ggml[i].name))
            ktest_fail("dtype_ggml_name(%u) = %s, want %s", ggml[i].id, dtype_ggml_name(ggml[i].id),
                       ggml[i].name);
    if (dtype_row_size(DTYPE_Q4_K, 512) != 288 || dtype_row_size(DTYPE_Q6_K, 4096) != 16 * 210 ||
        dtype_row_size(DTYPE_F16, 7) != 14 || dtype_row_size(DTYPE_Q8_0, 64) != 68)
        ktest_fail("dtype_row_size");
}

static void test_fp16_pinned(void) {
    static const struct { uint16_t h; uint32_t f; } to32[] = {
        {0x0000, 0x00000000}, {0x8000, 0x80000000}, /* signed zeros */
        {0x0001, 0x33800000},                       /* smallest subnormal 2^-24 */
        {0x03FF, 0x387FC000},                       /* largest subnormal 1023 * 2^-24 */
        {0x8200, 0xB8000000},                       /* -2^-15 */
        {0x0400, 0x38800000},                       /* smallest normal 2^-14 */
        {0x3C00, 0x3F800000}, {0xC000, 0xC0000000}, {0x3555, 0x3EAAA000},
        {0x7BFF, 0x477FE000},                       /* 65504 */
        {0x7C00, 0x7F800000}, {0xFC00, 0xFF800000}, /* infinities */
        {0x7E00, 0x7FC00000}, {0xFE01, 0xFFC02000}, /* NaN keeps sign and payload */
        {0x7C01, 0x7FC02000},                       /* signalling NaN comes out quiet */
    };
    for (size_t i = 0; i < NM_ARRAY_LEN(to32); i++) {
        uint32_t got = bits_f(fp16_to_fp32(to32[i].h));
        if (got != to32[i].f) ktest_fail("fp16_to_fp32(0x%04x) = 0x%08x, want 0x%08x", to32[i].h, got, to32[i].f);
    }
    static const struct { uint32_t f; uint16_t h; } to16[] = {
        {0x3F800000, 0x3C00},                      /* 1 */
        {0x80000000, 0x8000},                      /* -0 */
        {0x477FE000, 0x7BFF},                      /* 65504 */
        {0x477FEFFF, 0x7BFF},                      /* just below the tie to 65536 */
        {0x477FF000, 0x7C00},                      /* 65520: tie, rounds to even = inf */
        {0x49742400, 0x7C00}, {0xC9742400, 0xFC00}, /* +-1e6 overflow */
        {0x7F800000, 0x7C00}, {0xFF800000, 0xFC00},
        {0x33800000, 0x0001},                      /* 2^-24 */
        {0x33000000, 0x0000},                      /* 2^-25: tie between 0 and 2^-24 -> 0 */
        {0x33000001, 0x0001},                      /* just above the tie */
        {0x33C00000, 0x0002},                      /* 1.5 * 2^-24 -> 2 (even) */
        {0x34200000, 0x0002},                      /* 2.5 * 2^-24 -> 2 (even) */
        {0x387FE000, 0x0400},                      /* 1023.5 * 2^-24 -> smallest normal */
        {0x38800000, 0x0400},                      /* 2^-14 */
        {0x3F801000, 0x3C00},                      /* 1 + 2^-11: tie -> 1 */
        {0x3F803000, 0x3C02},                      /* 1 + 3 * 2^-11: tie -> even 0x3C02 */
        {0x3F801001, 0x3C01},                      /* just above the tie */
        {0x3DCCCCCD, 0x2E66},                      /* 0.1 */
        {0x00000001, 0x0000}, {0x80000001, 0x8000}, /* fp32 subnormals vanish with their sign */
    };
    for (size_t i = 0; i < NM_ARRAY_LEN(to16); i++) {
        uint16_t got = fp32_to_fp16(f_bits(to16[i].f));
        if (got != to16[i].h) ktest_fail("fp32_to_fp16(0x%08x) = 0x%04x, want 0x%04x", to16[i].f, got, to16[i].h);
    }
    /* NaN stays NaN (quiet) with its sign, including a signalling NaN whose payload would
     * truncate to zero */
    static const uint32_t nans[] = {0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000};
    for (size_t i = 0; i < NM_ARRAY_LEN(nans); i++) {
        uint16_t h = fp32_to_fp16(f_bits(nans[i]));
        if ((h & 0x7C00) != 0x7C00 || !(h & 0x0200) || (h >> 15) != (nans[i] >> 31))
            ktest_fail("fp32_to_fp16(NaN 0x%08x) = 0x%04x is not a quiet NaN of that sign", nans[i], h);
    }
    /* every non-NaN fp16 survives fp16 -> fp32 -> fp16 */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
        uint16_t back = fp32_to_fp16(fp16_to_fp32((uint16_t)h));
        if (back != h) {
            ktest_fail("fp16 round trip 0x%04x -> 0x%04x", h, back);
            break;
        }
    }
}

static void test_bf16_pinned(void) {
    static const struct { uint32_t f; uint16_t h; } to16[] = {
        {0x3F800000, 0x3F80}, {0x80000000, 0x8000},
        {0x3F808000, 0x3F80},                      /* 1 + 2^-8: tie -> even */
        {0x3F818000, 0x3F82},                      /* 1 + 3 * 2^-8: tie -> even */
        {0x3F808001, 0x3F81},                      /* just above the tie */
        {0x7F7FFFFF, 0x7F80},                      /* FLT_MAX rounds to inf */
        {0x7F7F7FFF, 0x7F7F},                      /* largest that stays finite */
        {0x7F800000, 0x7F80}, {0xFF800000, 0xFF80},
        {0x7F800001, 0x7FC0},                      /* signalling NaN -> quiet */
        {0xFFC00001, 0xFFC0},
        {0x00010000, 0x0001},                      /* fp32 subnormal kept exactly */
        {0x00018000, 0x0002},                      /* subnormal tie -> even */
        {0x00008000, 0x0000},                      /* subnormal tie -> even 0 */
        {0x00000200, 0x0000},
    };
    for (size_t i = 0; i < NM_ARRAY_LEN(to16); i++) {
        uint16_t got = fp32_to_bf16(f_bits(to16[i].f));
        if (got != to16[i].h) ktest_fail("fp32_to_bf16(0x%08x) = 0x%04x, want 0x%04x", to16[i].f, got, to16[i].h);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t f = bits_f(bf16_to_fp32((uint16_t)h));
        if (f != h << 16) {
            ktest_fail("bf16_to_fp32(0x%04x) = 0x%08x", h, f);
            break;
        }
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) continue; /* NaN: quieted on the way back */
        if (fp32_to_bf16(f_bits(f)) != h) {
            ktest_fail("bf16 round trip 0x%04x", h);
            break;
        }
    }
}

/* The hardware conversions (F16C) are ggml's GGML_FP32_TO_FP16 on x86; ours must equal them. */
__attribute__((target("f16c"))) static void test_fp16_vs_f16c(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float hw = _cvtsh_ss((unsigned short)h);
        if (bits_f(hw) != bits_f(fp16_to_fp32((uint16_t)h))) {
            ktest_fail("fp16_to_fp32(0x%04x) = 0x%08x, F16C says 0x%08x", h,
                       bits_f(fp16_to_fp32((uint16_t)h)), bits_f(hw));
            return;
        }
    }
    krng r = {ktest_seed};
    for (int i = 0; i < 4000000; i++) {
        uint32_t u = (uint32_t)krng_u64(&r);
        /* bias towards the fp16 range and its edges */
        if (i & 1) u = (u & 0x807FFFFFu) | ((uint32_t)(96 + krng_int(&r, 50)) << 23);
        uint16_t hw = _cvtss_sh(f_bits(u), 0);
        uint16_t ours = fp32_to_fp16(f_bits(u));
        if (hw != ours) {
            ktest_fail("fp32_to_fp16(0x%08x) = 0x%04x, F16C says 0x%04x", u, ours, hw);
            return;
        }
    }
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    test_table();
    test_fp16_pinned();
    test_bf16_pinned();
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1))
        test_fp16_vs_f16c();
    else
        printf("test_types: no F16C on this CPU, hardware fp16 comparison skipped\n");
    return ktest_finish("test_types");
}
