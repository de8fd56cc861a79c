/* Element types of GGUF tensors: the table of supported types, the names of every ggml type id,
 * and exact fp16/bf16 scalar conversions in plain C (no F16C: this is the reference path). */
#include "types.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "blocks/block.h"
#include "quant.h"

static const struct dtype_info g_dtypes[DTYPE_COUNT] = {
    [DTYPE_F32] = {.name = "f32", .blck_size = 1, .type_size = 4, .quantized = false},
    [DTYPE_F16] = {.name = "f16", .blck_size = 1, .type_size = 2, .quantized = false},
    [DTYPE_Q4_0] = {.name = "q4_0", .blck_size = QK4_0, .type_size = sizeof(block_q4_0), .quantized = true},
    [DTYPE_Q4_1] = {.name = "q4_1", .blck_size = QK4_1, .type_size = sizeof(block_q4_1), .quantized = true},
    [DTYPE_Q8_0] = {.name = "q8_0", .blck_size = QK8_0, .type_size = sizeof(block_q8_0), .quantized = true},
    [DTYPE_Q4_K] = {.name = "q4_k", .blck_size = QK_K, .type_size = sizeof(block_q4_K), .quantized = true},
    [DTYPE_Q5_K] = {.name = "q5_k", .blck_size = QK_K, .type_size = sizeof(block_q5_K), .quantized = true},
    [DTYPE_Q6_K] = {.name = "q6_k", .blck_size = QK_K, .type_size = sizeof(block_q6_K), .quantized = true},
    [DTYPE_BF16] = {.name = "bf16", .blck_size = 1, .type_size = 2, .quantized = false},
};

/* Every id of ggml's enum ggml_type (include/ggml.h), lower case. Ids 4/5 (q4_2/q4_3), 31-33
 * and 36-38 (the online-repack types) are retired upstream but keep their names so an old or
 * odd file still gets a readable error. */
static const char *const g_ggml_names[] = {
    [0] = "f32",         [1] = "f16",         [2] = "q4_0",        [3] = "q4_1",
    [4] = "q4_2",        [5] = "q4_3",        [6] = "q5_0",        [7] = "q5_1",
    [8] = "q8_0",        [9] = "q8_1",        [10] = "q2_k",       [11] = "q3_k",
    [12] = "q4_k",       [13] = "q5_k",       [14] = "q6_k",       [15] = "q8_k",
    [16] = "iq2_xxs",    [17] = "iq2_xs",     [18] = "iq3_xxs",    [19] = "iq1_s",
    [20] = "iq4_nl",     [21] = "iq3_s",      [22] = "iq2_s",      [23] = "iq4_xs",
    [24] = "i8",         [25] = "i16",        [26] = "i32",        [27] = "i64",
    [28] = "f64",        [29] = "iq1_m",      [30] = "bf16",       [31] = "q4_0_4_4",
    [32] = "q4_0_4_8",   [33] = "q4_0_8_8",   [34] = "tq1_0",      [35] = "tq2_0",
    [36] = "iq4_nl_4_4", [37] = "iq4_nl_4_8", [38] = "iq4_nl_8_8", [39] = "mxfp4",
    [40] = "nvfp4",      [41] = "q1_0",       [42] = "q2_0",
};

const struct dtype_info *dtype_get(uint32_t id) {
    if (id >= DTYPE_COUNT) return NULL;
    if (g_dtypes[id].name != NULL) return &g_dtypes[id];
    const struct block_codec *c = block_codec_get((enum dtype)id);
    return c ? &c->info : NULL;
}

static char g_supported[512];
static pthread_once_t g_supported_once = PTHREAD_ONCE_INIT;

static void supported_fill(void) {
    size_t len = 0;
    static const uint32_t order[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16}; /* float types first */
    for (size_t i = 0; i < NM_ARRAY_LEN(order); i++)
        len += (size_t)snprintf(g_supported + len, sizeof g_supported - len, "%s%s", len ? ", " : "",
                                dtype_get(order[i])->name);
    for (uint32_t id = 0; id < DTYPE_COUNT; id++) {
        const struct dtype_info *info = dtype_get(id);
        if (!info || !info->quantized) continue;
        len += (size_t)snprintf(g_supported + len, sizeof g_supported - len, ", %s", info->name);
        NM_ASSERT(len < sizeof g_supported);
    }
}

const char *dtype_supported_list(void) {
    pthread_once(&g_supported_once, supported_fill);
    return g_supported;
}

const char *dtype_ggml_name(uint32_t id) {
    if (id >= NM_ARRAY_LEN(g_ggml_names) || g_ggml_names[id] == NULL) return "unknown";
    return g_ggml_names[id];
}

/* Only supported types parse: a caller that gets an id back can use it. Names of unsupported
 * ggml types ("q5_0") return -1 like any unknown word. */
int dtype_from_name(const char *name) {
    if (name == NULL) return -1;
    for (int id = 0; id < DTYPE_COUNT; id++) {
        const struct dtype_info *info = dtype_get((uint32_t)id);
        if (info && strcasecmp(name, info->name) == 0) return id;
    }
    return -1;
}

size_t dtype_row_size(enum dtype t, int64_t n) {
    const struct dtype_info *info = dtype_get((uint32_t)t);
    NM_ASSERT(info != NULL);
    NM_ASSERT(n >= 0 && n % info->blck_size == 0);
    return (size_t)(n / info->blck_size) * (size_t)info->type_size;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Exact: every fp16 value is an fp32 value. Subnormals are normalized; inf stays inf; a NaN
 * keeps its sign and payload (shifted into the top of the fp32 mantissa) and comes out quiet,
 * like vcvtph2ps. Branch-free (hot: the attention reads the f16 KV cache through it), after
 * ggml's generic converter (Maratea's fp16 library): a normal or inf/NaN input is rebiased with
 * one exact float multiply by 2^-112 (which also quiets a NaN); a subnormal input m * 2^-24 is
 * the float 0.5 * (1 + m * 2^-23) minus 0.5, also exact. Needs IEEE arithmetic without
 * flush-to-zero, the C default. */
float fp16_to_fp32(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w; /* exponent and mantissa, sign shifted out */
    const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t bits = two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized);
    return f32_from_bits(sign | bits);
}

/* Round to nearest even, as vcvtps2ph with imm 0 (ggml's GGML_FP32_TO_FP16 on x86): overflow
 * goes to inf, values below half the smallest subnormal to signed zero, NaN stays NaN (quieted,
 * top payload bits kept). */
uint16_t fp32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
    if (abs >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520: rounds to inf */
    if (abs >= 0x38800000u) {
        /* Normal result (>= 2^-14): drop 13 mantissa bits with round-half-even; a carry out
         * of the mantissa bumps the exponent, which is the correct rounded value. */
        uint32_t r = abs + 0xFFFu + ((abs >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (abs < 0x33000000u) return sign; /* < 2^-25: rounds to zero (2^-25 ties to even 0) */
    /* Subnormal result: value / 2^-24 rounded to an integer in [0, 1024]. */
    uint32_t e = abs >> 23;                       /* 102 .. 112 */
    uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u; /* 24-bit significand */
    uint32_t shift = 126u - e;                     /* 14 .. 24 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal, also correct */
}

float bf16_to_fp32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* ggml_compute_fp32_to_bf16: NaN keeps its sign and top payload and is forced quiet; every
 * other value (subnormals included) rounds to nearest even, overflowing to inf. */
uint16_t fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

void fp32_to_bf16_row_ref(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fp32_to_bf16(x[i]);
}
