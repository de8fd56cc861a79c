/* The grid ("codebook") block types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M
 * (kernels/blocks/iq*.h, formats in kernels/blocks/FORMATS.md):
 *  (1) the codebooks: each table's SHA-256 against the digest gen_iq_grids.py wrote from ggml's
 *      header, every byte in the type's value set, no duplicate entries; the digest check fails
 *      on a table with one bit flipped;
 *  (2) the implied 8th sign bit against ggml's ksigns_iq2xs (pinned entries and the parity rule);
 *  (3) hand-built blocks, each expected value worked out from the format's formula (the
 *      arithmetic is next to it), placed to hit every field's bit positions: index high bits,
 *      sign bits and the implied one, both scale nibbles, IQ1's delta bit, IQ1_M's f16 scale
 *      spread over four nibbles; compared bit for bit;
 *  (4) every entry of every grid through each decoder that reads it, against the table;
 *  (5) quantize_row_ref -> dequantize_row_ref: the error of normal data under a bound per type,
 *      a zero row decodes to zeros;
 *  (6) vec_dot_ref against the float64 dot product of the dequantized row and the q8x row. */
#include "ktest.h"

#include "blocks/iq1_m.h"
#include "blocks/iq1_s.h"
#include "blocks/iq2_s.h"
#include "blocks/iq2_xs.h"
#include "blocks/iq2_xxs.h"
#include "blocks/iq3_s.h"
#include "blocks/iq3_xxs.h"

/* ---- SHA-256 (FIPS 180-4), for the tables' digests ------------------------------------------- */

static uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha256_block(uint32_t h[8], const uint8_t *p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    };
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, h, sizeof v);
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = v[7] + (rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25)) +
                            ((v[4] & v[5]) ^ (~v[4] & v[6])) + k[i] + w[i];
        const uint32_t t2 = (rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22)) +
                            ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += v[i];
}

/* Hex digest of n bytes into hex[65]. */
static void sha256_hex(const uint8_t *data, size_t n, char hex[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    uint8_t last[128] = {0};
    size_t i = 0;
    for (; i + 64 <= n; i += 64) sha256_block(h, data + i);
    const size_t rest = n - i, tail = rest < 56 ? 64 : 128;
    memcpy(last, data + i, rest);
    last[rest] = 0x80;
    for (int b = 0; b < 8; b++) last[tail - 1 - b] = (uint8_t)((uint64_t)n * 8 >> (8 * b));
    for (size_t o = 0; o < tail; o += 64) sha256_block(h, last + o);
    for (int b = 0; b < 8; b++) snprintf(hex + 8 * b, 9, "%08x", h[b]);
}

/* ---- (1) the codebooks ------------------------------------------------------------------------ */

struct grid {
    const char *name;
    const void *table;
    int entry_bytes; /* 8 (uint64_t entries) or 4 (uint32_t) */
    int n;
    const char *sha256;
    uint8_t allowed[8]; /* the byte values an entry may hold */
    int n_allowed;
};

static const struct grid k_grids[] = {
    {"iq2xxs", iq_grid_iq2xxs, 8, IQ_GRID_IQ2XXS_N, IQ_GRID_IQ2XXS_SHA256, {0x08, 0x19, 0x2b}, 3},
    {"iq2xs", iq_grid_iq2xs, 8, IQ_GRID_IQ2XS_N, IQ_GRID_IQ2XS_SHA256, {0x08, 0x19, 0x2b}, 3},
    {"iq2s", iq_grid_iq2s, 8, IQ_GRID_IQ2S_N, IQ_GRID_IQ2S_SHA256, {0x08, 0x19, 0x2b}, 3},
    {"iq3xxs", iq_grid_iq3xxs, 4, IQ_GRID_IQ3XXS_N, IQ_GRID_IQ3XXS_SHA256, {4, 12, 20, 28, 36, 44, 52, 62}, 8},
    {"iq3s", iq_grid_iq3s, 4, IQ_GRID_IQ3S_N, IQ_GRID_IQ3S_SHA256, {1, 3, 5, 7, 9, 11, 13, 15}, 8},
    {"iq1s", iq_grid_iq1s, 8, IQ_GRID_IQ1S_N, IQ_GRID_IQ1S_SHA256, {0xff, 0x00, 0x01}, 3},
};

/* Entry e as 8 little-endian bytes (4 for the IQ3 grids), independent of the host's order. */
static uint64_t grid_entry(const struct grid *g, int e) {
    return g->entry_bytes == 8 ? ((const uint64_t *)g->table)[e] : ((const uint32_t *)g->table)[e];
}

static void grid_bytes(const struct grid *g, uint8_t *out) {
    for (int e = 0; e < g->n; e++)
        for (int b = 0; b < g->entry_bytes; b++) out[e * g->entry_bytes + b] = (uint8_t)(grid_entry(g, e) >> (8 * b));
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_grids(void) {
    static uint8_t bytes[2048 * 8];
    static uint64_t sorted[2048];
    char hex[65];
    for (size_t gi = 0; gi < NM_ARRAY_LEN(k_grids); gi++) {
        const struct grid *g = &k_grids[gi];
        const size_t nbytes = (size_t)g->n * (size_t)g->entry_bytes;
        grid_bytes(g, bytes);
        sha256_hex(bytes, nbytes, hex);
        if (strcmp(hex, g->sha256)) ktest_fail("grid %s: SHA-256 %s, generator wrote %s", g->name, hex, g->sha256);
        bytes[nbytes / 3] ^= 0x10; /* the check's self-test: one flipped bit must change the digest */
        sha256_hex(bytes, nbytes, hex);
        if (!strcmp(hex, g->sha256)) ktest_fail("grid %s: a corrupted table has the same digest", g->name);
        bytes[nbytes / 3] ^= 0x10;
        int bad = 0;
        for (size_t i = 0; i < nbytes; i++) {
            int ok = 0;
            for (int a = 0; a < g->n_allowed; a++) ok |= bytes[i] == g->allowed[a];
            bad += !ok;
        }
        if (bad) ktest_fail("grid %s: %d bytes outside the allowed values", g->name, bad);
        for (int e = 0; e < g->n; e++) sorted[e] = grid_entry(g, e);
        qsort(sorted, (size_t)g->n, sizeof sorted[0], cmp_u64);
        for (int e = 1; e < g->n; e++)
            if (sorted[e] == sorted[e - 1]) ktest_fail("grid %s: entry 0x%016" PRIx64 " appears twice", g->name, sorted[e]);
    }
    /* SHA-256 itself, on FIPS 180-4's "abc" and a two-block message. */
    sha256_hex((const uint8_t *)"abc", 3, hex);
    if (strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")) ktest_fail("sha256(abc) = %s", hex);
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex((const uint8_t *)m2, strlen(m2), hex);
    if (strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")) ktest_fail("sha256(2 blocks) = %s", hex);
}

/* ---- (2) the implied sign ---------------------------------------------------------------------- */

static void test_sign_byte(void) {
    /* ggml's ksigns_iq2xs[i] for some i: 0 -> 0, 1 -> 129, 3 -> 3, 7 -> 135, 64 -> 192,
     * 100 -> 228, 126 -> 126, 127 -> 255. */
    static const uint32_t pinned[][2] = {{0, 0}, {1, 129}, {3, 3}, {7, 135}, {64, 192}, {100, 228}, {126, 126}, {127, 255}};
    for (size_t i = 0; i < NM_ARRAY_LEN(pinned); i++)
        if (iq_sign_byte(pinned[i][0]) != pinned[i][1])
            ktest_fail("iq_sign_byte(%u) = %u, want %u", pinned[i][0], iq_sign_byte(pinned[i][0]), pinned[i][1]);
    for (uint32_t i = 0; i < 128; i++) {
        const uint32_t s = iq_sign_byte(i);
        if ((s & 0x7F) != i || __builtin_popcount(s) % 2 != 0) ktest_fail("iq_sign_byte(%u) = %u: not i plus parity", i, s);
        if (iq_sign_byte(i | 0x80u << (i % 8)) != s) ktest_fail("iq_sign_byte(%u) reads bits above the 7 it owns", i);
    }
}

/* ---- (3) hand-built blocks --------------------------------------------------------------------- */

static float g_out[256];

static void decode(enum dtype t, const void *blk) { dequantize_row_ref(t, blk, g_out, 256); }

/* Value i of the last decoded block must be want, bit for bit. */
static void expect(const char *type, int i, float want) {
    uint32_t a, b;
    memcpy(&a, &g_out[i], 4);
    memcpy(&b, &want, 4);
    if (a != b) ktest_fail("%s hand-built block: value %d = %.9g (0x%08x), want %.9g (0x%08x)", type, i, (double)g_out[i], a, (double)want, b);
}

static void put_u32(uint8_t *p, uint32_t w) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(w >> (8 * i));
}

static void test_iq2_xxs_hand(void) {
    block_iq2_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3C00; /* 1.0 */
    uint8_t *q = (uint8_t *)b.qs;
    /* Sub-block 1 (values 32..63): entries 1, 0, 0, 255; s = 5; signs: group 0 stores bit 0
     * (odd: bit 7 implied), group 1 bit 6 (odd: bit 7), group 2 bits 0, 1 (even: none),
     * group 3 all 7 (odd: all 8 negative). db = 1 * (0.5 + 5) * 0.25 = 1.375. */
    q[8] = 1, q[9] = 0, q[10] = 0, q[11] = 255;
    put_u32(q + 12, 5u << 28 | 0x01u | 0x40u << 7 | 0x03u << 14 | 0x7Fu << 21);
    /* Sub-block 7: entry 0, s = 15: db = 15.5 * 0.25 = 3.875. Sub-block 0: all zero bytes. */
    put_u32(q + 60, 15u << 28);
    decode(DTYPE_IQ2_XXS, &b);
    expect("iq2_xxs", 0, 1.0f);        /* entry 0 (all 8), s = 0: 8 * 0.5 * 0.25 = 1 */
    expect("iq2_xxs", 32, -59.125f);   /* entry 1 value 0 = 43, sign bit 0: -43 * 1.375 */
    expect("iq2_xxs", 33, 11.0f);      /* 8 * 1.375 */
    expect("iq2_xxs", 38, 11.0f);
    expect("iq2_xxs", 39, -11.0f);     /* implied 8th sign */
    expect("iq2_xxs", 40, 11.0f);      /* group 1, entry 0 */
    expect("iq2_xxs", 46, -11.0f);     /* stored bit 6 */
    expect("iq2_xxs", 47, -11.0f);     /* implied */
    expect("iq2_xxs", 48, -11.0f);     /* group 2: bits 0, 1 */
    expect("iq2_xxs", 49, -11.0f);
    expect("iq2_xxs", 55, 11.0f);      /* even: 8th positive */
    expect("iq2_xxs", 56, -11.0f);     /* entry 255 = 8, 25, 8, 8, 25, 43, 43, 43, all negative */
    expect("iq2_xxs", 57, -34.375f);   /* -25 * 1.375 */
    expect("iq2_xxs", 63, -59.125f);   /* -43 * 1.375 */
    expect("iq2_xxs", 255, 31.0f);     /* 8 * 3.875 */
}

static void test_iq2_xs_hand(void) {
    block_iq2_xs b;
    memset(&b, 0, sizeof b);
    b.d = 0x4000; /* 2.0 */
    /* Sub-block 2 (values 64..95), u16 = index | 7 sign bits << 9:
     *   group 0: entry 256 = 43, 25, 8, 8, 8, 8, 8, 25; sign bit 0 (odd: bit 7 implied);
     *   group 1: entry 511 = all 43; signs 0x7F (odd: all 8 negative);
     *   group 2: entry 300 = 8, 25, 25, 8, 8, 25, 8, 25; sign bit 6 (odd: bit 7);
     *   group 3: entry 1 = 43, 8 x 7; no signs.
     * scales[2] = 0x93: values 64..79: 2 * (0.5 + 3) * 0.25 = 1.75;
     *                   values 80..95: 2 * (0.5 + 9) * 0.25 = 4.75. */
    b.qs[8] = 0x100 | 0x01 << 9;
    b.qs[9] = 0x1FF | 0x7F << 9;
    b.qs[10] = 0x12C | 0x40 << 9;
    b.qs[11] = 1;
    b.scales[2] = 0x93;
    decode(DTYPE_IQ2_XS, &b);
    expect("iq2_xs", 0, 2.0f);       /* entry 0, s = 0: 8 * 2 * 0.5 * 0.25 */
    expect("iq2_xs", 64, -75.25f);   /* -43 * 1.75 */
    expect("iq2_xs", 65, 43.75f);    /* 25 * 1.75 */
    expect("iq2_xs", 66, 14.0f);     /* 8 * 1.75 */
    expect("iq2_xs", 71, -43.75f);   /* implied sign on 25 */
    expect("iq2_xs", 72, -75.25f);   /* group 1 */
    expect("iq2_xs", 79, -75.25f);
    expect("iq2_xs", 80, 38.0f);     /* group 2 uses the high nibble: 8 * 4.75 */
    expect("iq2_xs", 81, 118.75f);   /* 25 * 4.75 */
    expect("iq2_xs", 86, -38.0f);    /* stored bit 6 */
    expect("iq2_xs", 87, -118.75f);  /* implied */
    expect("iq2_xs", 88, 204.25f);   /* 43 * 4.75 */
    expect("iq2_xs", 95, 38.0f);
}

static void test_iq2_s_hand(void) {
    block_iq2_s b;
    memset(&b, 0, sizeof b);
    b.d = 0x3C00; /* 1.0 */
    /* Sub-block 5 (values 160..191); 10-bit indices: low byte in qs[20 + l], top 2 bits in
     * bits 2l, 2l + 1 of qh[5]; sign bytes qs[32 + 20 + l], all 8 stored:
     *   group 0: 0x100 = 25, 25, 25, 25, 25, 8, 25, 8; signs 0x80 (value 7 only: no parity);
     *   group 1: 0x2ab = 8, 43, 8, 25, 25, 8, 25, 25; signs 0x01;
     *   group 2: 0x3ff = all 43; signs 0xFF;
     *   group 3: 0x155 = 43, 25, 8, 8, 8, 43, 25, 8; no signs.
     * qh[5] = 1 | 2 << 2 | 3 << 4 | 1 << 6 = 0x79. scales[5] = 0xF0: values 160..175:
     * 0.5 * 0.25 = 0.125, values 176..191: 15.5 * 0.25 = 3.875. */
    const uint8_t lo[4] = {0x00, 0xab, 0xff, 0x55}, sg[4] = {0x80, 0x01, 0xFF, 0x00};
    for (int l = 0; l < 4; l++) b.qs[20 + l] = lo[l], b.qs[32 + 20 + l] = sg[l];
    b.qh[5] = 0x79;
    b.scales[5] = 0xF0;
    decode(DTYPE_IQ2_S, &b);
    expect("iq2_s", 0, 1.0f);         /* entry 0, s = 0: 8 * 0.125 */
    expect("iq2_s", 160, 3.125f);     /* 25 * 0.125 */
    expect("iq2_s", 165, 1.0f);       /* 8 * 0.125 */
    expect("iq2_s", 167, -1.0f);      /* sign bit 7 */
    expect("iq2_s", 168, -1.0f);      /* group 1 value 0 = 8, sign bit 0 */
    expect("iq2_s", 169, 5.375f);     /* 43 * 0.125 */
    expect("iq2_s", 175, 3.125f);     /* no implied sign: 25 * 0.125 */
    expect("iq2_s", 176, -166.625f);  /* group 2: -43 * 3.875 */
    expect("iq2_s", 183, -166.625f);
    expect("iq2_s", 184, 166.625f);   /* group 3: 43 * 3.875 */
    expect("iq2_s", 185, 96.875f);    /* 25 * 3.875 */
    expect("iq2_s", 191, 31.0f);      /* 8 * 3.875 */
}

static void test_iq3_xxs_hand(void) {
    block_iq3_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    /* Sub-block 3 (values 96..127): indices qs[24..31] = 1, 255, 7, 0, 0, 0, 0, 0
     * (entry 1 = 20, 4, 4, 4; 255 = 4, 28, 52, 62; 7 = 20, 20, 4, 4; 0 = 4, 4, 4, 4);
     * word at qs[64 + 12]: s = 9, group 0 sign bit 4 (odd: bit 7 implied), group 1 bits 0, 1
     * (even). db = 0.5 * (0.5 + 9) * 0.5 = 2.375. */
    const uint8_t idx[8] = {1, 255, 7, 0, 0, 0, 0, 0};
    memcpy(b.qs + 24, idx, 8);
    put_u32(b.qs + 64 + 12, 9u << 28 | 0x10u | 0x03u << 7);
    decode(DTYPE_IQ3_XXS, &b);
    expect("iq3_xxs", 0, 0.5f);       /* entry 0, s = 0: 4 * 0.5 * 0.5 * 0.5 */
    expect("iq3_xxs", 96, 47.5f);     /* 20 * 2.375 */
    expect("iq3_xxs", 99, 9.5f);      /* 4 * 2.375 */
    expect("iq3_xxs", 100, -9.5f);    /* second entry (255) value 0, sign bit 4 */
    expect("iq3_xxs", 101, 66.5f);    /* 28 * 2.375 */
    expect("iq3_xxs", 102, 123.5f);   /* 52 * 2.375 */
    expect("iq3_xxs", 103, -147.25f); /* implied: -62 * 2.375 */
    expect("iq3_xxs", 104, -47.5f);   /* group 1: entry 7, bits 0, 1 */
    expect("iq3_xxs", 105, -47.5f);
    expect("iq3_xxs", 106, 9.5f);
    expect("iq3_xxs", 111, 9.5f);     /* even parity: positive */
}

static void test_iq3_s_hand(void) {
    block_iq3_s b;
    memset(&b, 0, sizeof b);
    b.d = 0x3C00; /* 1.0 */
    /* Sub-block 3 (values 96..127), 9-bit indices: low byte qs[24 + k], bit 8 = bit k of qh[3]:
     *   k0: 0x100 = 7, 5, 9, 5;  k1: 0x1ff = 1, 1, 15, 15;  k2: 0x1a5 = 7, 5, 5, 11;
     *   k3: 0x001 = 3, 1, 1, 1;  k4..k6: 0 = 1, 1, 1, 1;  k7: 0x100.
     * qh[3] = bits 0, 1, 2, 7 = 0x87. Signs (all 8 stored): signs[12] = 0x81, signs[13] = 0x10.
     * Sub-block 3 is odd: its s is the high nibble of scales[1] = 2: db = 1 + 2 * 2 = 5. */
    const uint8_t lo[8] = {0x00, 0xff, 0xa5, 0x01, 0, 0, 0, 0x00};
    memcpy(b.qs + 24, lo, 8);
    b.qh[3] = 0x87;
    b.signs[12] = 0x81;
    b.signs[13] = 0x10;
    b.scales[1] = 0x20;
    decode(DTYPE_IQ3_S, &b);
    expect("iq3_s", 64, 1.0f);     /* sub-block 2: low nibble 0, db = 1, entry 0 */
    expect("iq3_s", 96, -35.0f);   /* -7 * 5 (sign bit 0) */
    expect("iq3_s", 97, 25.0f);    /* 5 * 5 */
    expect("iq3_s", 98, 45.0f);    /* 9 * 5 */
    expect("iq3_s", 100, 5.0f);    /* k1 value 0 = 1 */
    expect("iq3_s", 102, 75.0f);   /* 15 * 5 */
    expect("iq3_s", 103, -75.0f);  /* sign bit 7 */
    expect("iq3_s", 104, 35.0f);   /* k2: 7 * 5 */
    expect("iq3_s", 107, 55.0f);   /* 11 * 5 */
    expect("iq3_s", 108, -15.0f);  /* k3: -3 * 5 (signs[13] bit 4) */
    expect("iq3_s", 109, 5.0f);
    expect("iq3_s", 124, 35.0f);   /* k7 = 0x100: 7 * 5 */
    expect("iq3_s", 126, 45.0f);   /* 9 * 5 */
}

static void test_iq1_s_hand(void) {
    block_iq1_s b;
    memset(&b, 0, sizeof b);
    b.d = 0x3C00; /* 1.0 */
    /* Sub-block 4 (values 128..159): 11-bit indices, low byte qs[16 + l], top 3 bits in bits
     * 3l .. 3l + 2 of qh[4]: 0x100 = -1, 0, 1, 0, 1, -1, 0, -1;  0x7ff = all 1;
     * 0x400 = 0, 1, -1, 0, 0, 0, 0, 0;  0x2c3 = -1, 1, 1, 0, -1, 0, -1, 0.
     * s = 3 (bits 12..14): dl = 1 * (2 * 3 + 1) = 7; bit 15 set: delta = -1/8.
     * qh[4] = 1 | 7 << 3 | 4 << 6 | 2 << 9 | 3 << 12 | 1 << 15 = 0xB539.
     * Values: g = -1: 7 * -1.125 = -7.875; g = 0: 7 * -0.125 = -0.875; g = 1: 7 * 0.875 = 6.125. */
    const uint8_t lo[4] = {0x00, 0xff, 0x00, 0xc3};
    memcpy(b.qs + 16, lo, 4);
    b.qh[4] = 0xB539;
    decode(DTYPE_IQ1_S, &b);
    expect("iq1_s", 0, -0.875f);    /* sub-block 0: entry 0 (all -1), dl = 1, delta +1/8 */
    expect("iq1_s", 128, -7.875f);
    expect("iq1_s", 129, -0.875f);
    expect("iq1_s", 130, 6.125f);
    expect("iq1_s", 135, -7.875f);
    expect("iq1_s", 136, 6.125f);   /* 0x7ff */
    expect("iq1_s", 143, 6.125f);
    expect("iq1_s", 144, -0.875f);  /* 0x400 */
    expect("iq1_s", 145, 6.125f);
    expect("iq1_s", 146, -7.875f);
    expect("iq1_s", 152, -7.875f);  /* 0x2c3 */
    expect("iq1_s", 153, 6.125f);
    expect("iq1_s", 159, -0.875f);
}

static void test_iq1_m_hand(void) {
    block_iq1_m b;
    memset(&b, 0, sizeof b);
    /* f16 d = 0x4321 = 2 * (1 + 0x321 / 1024) = 3.564453125, its nibbles 1, 2, 3, 4 in the top
     * nibbles of the u16 sc[0], sc[1], sc[2], sc[3].
     * Sub-block 3 (values 96..127): sc[1] bits 6..8 = 1 (values 96..111: dl1 = 3d = 10.693359375),
     * bits 9..11 = 2 (values 112..127: dl2 = 5d = 17.822265625).
     * Sub-block 1: sc[0] bits 9..11 = 7 (values 48..63: dl = 15d = 53.466796875).
     * sc = 0x1E00, 0x2440, 0x3000, 0x4000.
     * Groups of sub-block 3: low bytes qs[12..15] = 0x00, 0xff, 0x00, 0xc3; qh[6] = 0xF1 (group 0:
     * top bits 1, delta +; group 1: top bits 7, delta -), qh[7] = 0x2C (group 2: 4, delta -;
     * group 3: 2, delta +): indices 0x100, 0x7ff, 0x400, 0x2c3 (grids as in the IQ1_S test). */
    const uint16_t sc[4] = {0x1E00, 0x2440, 0x3000, 0x4000};
    for (int k = 0; k < 4; k++) b.scales[2 * k] = (uint8_t)sc[k], b.scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
    const uint8_t lo[4] = {0x00, 0xff, 0x00, 0xc3};
    memcpy(b.qs + 12, lo, 4);
    b.qh[6] = 0xF1;
    b.qh[7] = 0x2C;
    decode(DTYPE_IQ1_M, &b);
    expect("iq1_m", 0, -3.118896484375f);    /* entry 0 = -1, dl = d, delta +: 3.564453125 * -0.875 */
    expect("iq1_m", 48, -46.783447265625f);  /* dl = 15d: 53.466796875 * -0.875 */
    expect("iq1_m", 64, -3.118896484375f);   /* sub-block 2: sc[1] bits 0..5 = 0 */
    expect("iq1_m", 96, -9.356689453125f);   /* g = -1, +1/8: 10.693359375 * -0.875 */
    expect("iq1_m", 97, 1.336669921875f);    /* g = 0: 10.693359375 * 0.125 */
    expect("iq1_m", 98, 12.030029296875f);   /* g = 1: 10.693359375 * 1.125 */
    expect("iq1_m", 104, 9.356689453125f);   /* group 1, g = 1, -1/8: 10.693359375 * 0.875 */
    expect("iq1_m", 112, -2.227783203125f);  /* group 2, g = 0, -1/8: 17.822265625 * -0.125 */
    expect("iq1_m", 113, 15.594482421875f);  /* g = 1: 17.822265625 * 0.875 */
    expect("iq1_m", 114, -20.050048828125f); /* g = -1: 17.822265625 * -1.125 */
    expect("iq1_m", 120, -15.594482421875f); /* group 3, g = -1, +1/8: 17.822265625 * -0.875 */
    expect("iq1_m", 121, 20.050048828125f);  /* g = 1: 17.822265625 * 1.125 */
}

/* ---- (4) every grid entry through its decoders ------------------------------------------------- */

/* Where a block holds the index of one group (8 values; 4 for the IQ3 types): set group k of
 * an all-zero block (d = 1, every scale field 0, no signs, delta +1/8) to entry e. */
typedef void (*place_fn)(uint8_t *blk, int k, int e);

static void place_iq2_xxs(uint8_t *blk, int k, int e) { blk[2 + 8 * (k / 4) + k % 4] = (uint8_t)e; }
static void place_iq2_xs(uint8_t *blk, int k, int e) { blk[2 + 2 * k] = (uint8_t)e, blk[3 + 2 * k] = (uint8_t)(e >> 8); }
static void place_iq2_s(uint8_t *blk, int k, int e) {
    block_iq2_s *b = (block_iq2_s *)blk;
    b->qs[k] = (uint8_t)e;
    b->qh[k / 4] |= (uint8_t)((e >> 8) << (2 * (k % 4)));
}
static void place_iq3_xxs(uint8_t *blk, int k, int e) { ((block_iq3_xxs *)blk)->qs[k] = (uint8_t)e; }
static void place_iq3_s(uint8_t *blk, int k, int e) {
    block_iq3_s *b = (block_iq3_s *)blk;
    b->qs[k] = (uint8_t)e;
    b->qh[k / 8] |= (uint8_t)((e >> 8) << (k % 8));
}
static void place_iq1_s(uint8_t *blk, int k, int e) {
    block_iq1_s *b = (block_iq1_s *)blk;
    b->qs[k] = (uint8_t)e;
    b->qh[k / 4] |= (uint16_t)((e >> 8) << (3 * (k % 4)));
}
static void place_iq1_m(uint8_t *blk, int k, int e) {
    block_iq1_m *b = (block_iq1_m *)blk;
    b->qs[k] = (uint8_t)e;
    b->qh[k / 2] |= (uint8_t)((e >> 8) << (4 * (k % 2)));
    /* d = 1.0 = f16 0x3C00: nibble 2 (0xC) in sc[2]'s top nibble, nibble 3 (0x3) in sc[3]'s */
    b->scales[5] = 0xC0;
    b->scales[7] = 0x30;
}

static void test_every_entry(void) {
    static const struct {
        enum dtype t;
        int grid;        /* index into k_grids */
        int per_group;   /* values per index: 8 or 4 */
        float scale;     /* the value of code 1 with every scale field 0 and d = 1 */
        place_fn place;
    } k_cases[] = {
        {DTYPE_IQ2_XXS, 0, 8, 0.125f, place_iq2_xxs}, /* 1 * 0.5 * 0.25 */
        {DTYPE_IQ2_XS, 1, 8, 0.125f, place_iq2_xs},
        {DTYPE_IQ2_S, 2, 8, 0.125f, place_iq2_s},
        {DTYPE_IQ3_XXS, 3, 4, 0.25f, place_iq3_xxs},  /* 1 * 0.5 * 0.5 */
        {DTYPE_IQ3_S, 4, 4, 1.0f, place_iq3_s},       /* 1 * (1 + 0) */
        {DTYPE_IQ1_S, 5, 8, 0.125f, place_iq1_s},     /* values (8 g + 1) / 8 */
        {DTYPE_IQ1_M, 5, 8, 0.125f, place_iq1_m},
    };
    _Alignas(8) uint8_t blk[128];
    for (size_t ci = 0; ci < NM_ARRAY_LEN(k_cases); ci++) {
        const struct grid *g = &k_grids[k_cases[ci].grid];
        const enum dtype t = k_cases[ci].t;
        const struct dtype_info *info = dtype_get(t);
        const int per = k_cases[ci].per_group, groups = 256 / per;
        const bool iq1 = k_cases[ci].grid == 5;
        int bad = 0;
        for (int e0 = 0; e0 < g->n; e0 += groups) {
            /* one block holds entries e0 .. e0 + groups - 1, entry e0 + k in group k */
            memset(blk, 0, sizeof blk);
            if (t != DTYPE_IQ1_M) blk[1] = 0x3C; /* d = 1.0 (f16 0x3C00, little-endian) */
            for (int k = 0; k < groups && e0 + k < g->n; k++) k_cases[ci].place(blk, k, e0 + k);
            decode(t, blk);
            const struct block_codec *c = block_codec_get(t);
            for (int k = 0; k < groups && e0 + k < g->n; k++) {
                struct block_sub32 s;
                c->decode32(blk, k * per / 32, &s);
                const uint64_t entry = grid_entry(g, e0 + k);
                for (int v = 0; v < per; v++) {
                    const int gval = iq1 ? (int8_t)(entry >> (8 * v)) : (int)(uint8_t)(entry >> (8 * v));
                    const int code = iq1 ? 8 * gval + 1 : gval;
                    const int at = k * per + v;
                    const float want = k_cases[ci].scale * (float)code;
                    if (s.q[at % 32] != code || g_out[at] != want) {
                        if (!bad)
                            ktest_fail("%s: entry %d value %d: code %d value %g, want code %d value %g", info->name,
                                       e0 + k, v, s.q[at % 32], (double)g_out[at], code, (double)want);
                        bad++;
                    }
                }
            }
        }
    }
}

/* ---- (5) quantize -> dequantize --------------------------------------------------------------- */

/* Bounds on the normalized squared error sum (x - back)^2 / sum x^2 of normal data, measured
 * (with ktest's normals, 4096 values, 4 seeds) and given about 20% room: a quantizer that
 * mixes up indices, signs or scales lands near 1 or above. The grids are coarse and numallm's
 * scale rule is simple (iq*.c), so these are far from llama.cpp's quality. */
static const struct { enum dtype t; double tol; } k_roundtrip[] = {
    {DTYPE_IQ2_XXS, 0.21}, {DTYPE_IQ2_XS, 0.16}, {DTYPE_IQ2_S, 0.12}, {DTYPE_IQ3_XXS, 0.055},
    {DTYPE_IQ3_S, 0.035},  {DTYPE_IQ1_S, 0.31},  {DTYPE_IQ1_M, 0.27},
};

static void test_roundtrip(krng *r) {
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    uint8_t *q = malloc((size_t)n);
    for (size_t ti = 0; ti < NM_ARRAY_LEN(k_roundtrip); ti++) {
        const enum dtype t = k_roundtrip[ti].t;
        double worst = 0.0;
        for (int trial = 0; trial < 4; trial++) {
            const float scale = trial == 1 ? 1e-3f : trial == 2 ? 300.0f : 1.0f;
            for (int64_t i = 0; i < n; i++) x[i] = scale * krng_normal(r);
            if (trial == 3) memset(x + 256, 0, 256 * sizeof(float)); /* a zero block: d = 0 */
            quantize_row_ref(t, x, q, n);
            dequantize_row_ref(t, q, back, n);
            double err = 0.0, sum = 0.0;
            for (int64_t i = 0; i < n; i++) {
                err += ((double)x[i] - back[i]) * ((double)x[i] - back[i]);
                sum += (double)x[i] * x[i];
            }
            worst = fmax(worst, err / sum);
            if (!(err / sum <= k_roundtrip[ti].tol))
                ktest_fail("%s round trip (scale %g): normalized squared error %.4f > %.3f", dtype_get(t)->name,
                           (double)scale, err / sum, k_roundtrip[ti].tol);
            if (trial == 3)
                for (int i = 256; i < 512; i++)
                    if (back[i] != 0.0f) {
                        ktest_fail("%s: a zero block decodes to %g at %d", dtype_get(t)->name, (double)back[i], i);
                        break;
                    }
        }
        printf("  %-8s round trip: worst normalized squared error %.4f (bound %.3f)\n", dtype_get(t)->name, worst,
               k_roundtrip[ti].tol);
    }
    free(x), free(back), free(q);
}

/* ---- (6) vec_dot_ref --------------------------------------------------------------------------- */

/* vec_dot_ref sums exact integer sub-block sums in float (block.h): per 32 values a few
 * roundings, error <= ~(nb32 + 8) * 2^-24 * mag for these rows; we allow 1e-5. */
#define TOL_REF_DOT 1e-5

static void test_vec_dot(krng *r) {
    static const enum dtype types[] = {DTYPE_IQ2_XXS, DTYPE_IQ2_XS, DTYPE_IQ2_S, DTYPE_IQ3_XXS,
                                       DTYPE_IQ3_S,   DTYPE_IQ1_S,  DTYPE_IQ1_M};
    const int64_t n = 1024;
    float *x = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
    uint8_t *q = malloc((size_t)n);
    block_q8x *act = malloc((size_t)(n / QK8X) * sizeof(block_q8x));
    for (size_t ti = 0; ti < NM_ARRAY_LEN(types); ti++) {
        const enum dtype t = types[ti];
        const struct dtype_info *info = dtype_get(t);
        for (int trial = 0; trial < 8; trial++) {
            if (trial % 2 == 0) { /* rows from the quantizer */
                for (int64_t i = 0; i < n; i++) x[i] = krng_normal(r);
                quantize_row_ref(t, x, q, n);
            } else { /* every byte random (all indices, signs, scales, deltas), small finite d */
                for (size_t i = 0; i < dtype_row_size(t, n); i++) q[i] = (uint8_t)krng_u64(r);
                for (int64_t b = 0; b < n / 256; b++) {
                    uint8_t *blk = q + b * info->type_size;
                    const uint16_t h = fp32_to_fp16(0.01f * krng_sym(r));
                    if (t == DTYPE_IQ1_M)
                        for (int k = 0; k < 4; k++) {
                            uint8_t *hi = blk + offsetof(block_iq1_m, scales) + 2 * k + 1;
                            *hi = (uint8_t)((*hi & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
                        }
                    else
                        memcpy(blk, &h, 2);
                }
            }
            dequantize_row_ref(t, q, w, n);
            krng_acts(r, x, n);
            quantize_act_q8x_ref(x, act, n);
            kact_values(t, x, act, a, n);
            double want = 0.0;
            for (int64_t i = 0; i < n; i++) want += (double)w[i] * a[i];
            const float got = vec_dot_ref(t, n, q, act), wantf = (float)want;
            const double mag = kmag(w, a, n);
            kcheck(&got, &wantf, &mag, 1, TOL_REF_DOT, "vec_dot_ref %s trial %d", info->name, trial);
        }
    }
    free(x), free(w), free(a), free(q), free(act);
}

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    krng r = {ktest_seed};
    test_grids();
    test_sign_byte();
    test_iq2_xxs_hand();
    test_iq2_xs_hand();
    test_iq2_s_hand();
    test_iq3_xxs_hand();
    test_iq3_s_hand();
    test_iq1_s_hand();
    test_iq1_m_hand();
    test_every_entry();
    test_roundtrip(&r);
    test_vec_dot(&r);
    return ktest_finish("test_blocks_iq");
}
