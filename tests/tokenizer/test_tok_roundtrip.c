/* Round trips under the tokenizer of one vocabulary file:
 *  1. every token: its text p (the piece, without SentencePiece's space prefix) decodes back
 *     from encode(p) (special tokens with parse_special), as llama.cpp's test-tokenizer-1;
 *  2. random Unicode text and random bytes: decode(encode(x)) == x, with and without BOS;
 *  3. throughput of encoding ~2 MB of mixed text (printed, not asserted), and its round trip;
 *  4. BPE: the word cache used for long texts gives the same ids as encoding piece by piece.
 *
 * usage: test_tok_roundtrip DATA_DIR NAME [N_RANDOM]   (exit 77 when the file is missing) */
#include "tok_test_util.h"
#include "unicode.h"

static const uint32_t pool_cps[] = {
    'a', 'b', 'e', 'n', 'o', 's', 't', 'A', 'Z', ' ', ' ', ' ', '\n', '\t', '\r', '0', '1', '7', '9', '\'', '.',
    ',', '!', '?', '-', '<', '>', '|', '(', ')', '"', '$', '_', 0xA0, 0x85, 0x3000, 0x2003, 0xE9, 0xFC, 0xDF, 0xF8,
    0x17F, 0x212A, 0x3B1, 0x3C9, 0x1F7D, 0x430, 0x44F, 0x5D0, 0x627, 0x915, 0x94D, 0x301, 0xE01, 0x1780, 0x17B6,
    0x4E00, 0x6211, 0x9FA5, 0x3042, 0x30AB, 0xAC00, 0xD55C, 0xFF01, 0xFF21, 0x2018, 0x201C, 0x2026, 0x20AC,
    0x1F999, 0x1F600, 0x1F680, 0x200D, 0xFE0F, 0x2705, 0x10400, 0xE000, 0x660, 0x2163, 0xB2, 0xBD,
};

/* Bytes that can round-trip: byte-level BPE drops a byte whose character is not in the
 * vocabulary (as llama.cpp and HF do; e.g. Falcon has no token for 0xF2), and a user-defined
 * token that spells a byte's character decodes to the character, not the byte (deepseek's
 * "ø"..."ÿ" for 0xF5..0xFF, bytes that never occur in valid UTF-8). */
static bool byte_ok[256];

static void find_byte_ok(const struct tokenizer *t, const char *name) {
    int n_bad = 0;
    char bad[256 * 5] = "";
    for (int b = 0; b < 256; b++) {
        byte_ok[b] = true;
        if (tok_model(t) != TOK_MODEL_BPE) continue;
        char u[4];
        size_t ul = uni_encode(uni_byte_to_cp((uint8_t)b), u);
        int32_t id = tok_find(t, u, ul);
        if (id < 0 || tok_token_type(t, id) != TOK_TYPE_NORMAL) {
            byte_ok[b] = false;
            n_bad++;
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " %02X", b);
        }
    }
    if (n_bad) printf("%s: %d bytes without a normal byte-level token, left out of random text:%s\n", name, n_bad, bad);
}

static size_t random_text(uint64_t *rng, char *buf, size_t max_chars, bool raw_bytes) {
    size_t n = 1 + tt_rand(rng) % max_chars, len = 0;
    for (size_t i = 0; i < n; i++) {
        if (raw_bytes) {
            uint8_t b = (uint8_t)(tt_rand(rng) & 0xFF);
            if (byte_ok[b]) buf[len++] = (char)b;
            continue;
        }
        uint64_t r = tt_rand(rng);
        uint32_t cp;
        if (r % 8 == 0) { /* any scalar value */
            do cp = (uint32_t)(tt_rand(rng) % 0x110000);
            while (cp >= 0xD800 && cp <= 0xDFFF);
        } else {
            cp = pool_cps[(r >> 8) % NM_ARRAY_LEN(pool_cps)];
        }
        char u[4];
        size_t ul = uni_encode(cp, u);
        bool ok = true;
        for (size_t j = 0; j < ul; j++) ok = ok && byte_ok[(uint8_t)u[j]];
        if (!ok) continue;
        memcpy(buf + len, u, ul);
        len += ul;
    }
    return len;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s DATA_DIR NAME [N_RANDOM]\n", argv[0]);
        return 2;
    }
    nm_log_level = 0;
    int n_random = argc > 3 ? atoi(argv[3]) : 2000;
    char path[4096];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", argv[1], argv[2]);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        printf("SKIP: %s is missing (tokenizer test data not present)\n", path);
        return SKIP;
    }
    fclose(probe);
    struct tokenizer *t = tt_load(path);
    if (!t) return 1;
    int failures = 0;
    size_t cap = 1 << 16;
    char *piece = malloc(cap), *back = malloc(cap), *text = malloc(cap);

    /* 1. every token */
    int n_checked = 0, n_single = 0;
    for (int32_t id = 0; id < tok_n_vocab(t); id++) {
        /* the token's text as llama.cpp's test-tokenizer-1 takes it: SentencePiece's space
         * prefix undone, since encoding adds it again */
        size_t pl = tok_decode(t, &id, 1, TOK_DECODE_SPECIAL | TOK_DECODE_STRIP_PREFIX, piece, cap);
        if (pl == 0) continue;
        size_t n;
        int32_t *ids = tok_encode_alloc(t, piece, pl, false, true, &n);
        size_t bl = tok_decode(t, ids, n, TOK_DECODE_SPECIAL | TOK_DECODE_STRIP_PREFIX, back, cap);
        n_checked++;
        n_single += n == 1 && ids[0] == id;
        if (bl != pl || memcmp(back, piece, pl) != 0) {
            if (++failures <= 10) {
                fprintf(stderr, "FAIL: %s token %d: piece ", argv[2], id);
                tt_print_str(stderr, piece, pl);
                fprintf(stderr, " encodes to ");
                tt_print_ids(stderr, ids, n);
                fprintf(stderr, " which decodes to ");
                tt_print_str(stderr, back, bl);
                fprintf(stderr, "\n");
            }
        }
        free(ids);
    }
    printf("%s: %d tokens: piece -> encode -> decode gives the piece back for %d (%d encode to the token itself)\n",
           argv[2], n_checked, n_checked - failures, n_single);

    /* 2. random text and random bytes */
    find_byte_ok(t, argv[2]);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int rt_fail = 0;
    for (int i = 0; i < n_random; i++) {
        bool raw = i % 4 == 3;
        size_t len = random_text(&rng, text, 60, raw);
        bool add_special = i % 2 == 0;
        size_t n;
        int32_t *ids = tok_encode_alloc(t, text, len, add_special, false, &n);
        size_t bl = tok_decode(t, ids, n, TOK_DECODE_STRIP_PREFIX, back, cap);
        if (bl != len || memcmp(back, text, len) != 0) {
            if (++rt_fail <= 10) {
                fprintf(stderr, "FAIL: %s random %s %d: ", argv[2], raw ? "bytes" : "text", i);
                tt_print_str(stderr, text, len);
                fprintf(stderr, " -> ");
                tt_print_ids(stderr, ids, n);
                fprintf(stderr, " -> ");
                tt_print_str(stderr, back, bl);
                fprintf(stderr, "\n");
            }
        }
        free(ids);
    }
    printf("%s: %d random strings (1 in 4 raw bytes): decode(encode(x)) == x for %d\n", argv[2], n_random,
           n_random - rt_fail);
    failures += rt_fail;

    /* 3. throughput */
    size_t big_len = 0, big_cap = 2u << 20;
    char *big = malloc(big_cap + 256);
    static const char *const words[] = {
        "The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ", "Numbers: 1234567, 3.14; ",
        "\n\n", "naïve café ", "日本語のテキスト ", "Привет, мир! ", "int main(void) { return 0; }\n",
        "    indented\n", "🦙🚀 "};
    while (big_len < big_cap) {
        const char *w = words[tt_rand(&rng) % NM_ARRAY_LEN(words)];
        size_t wl = strlen(w);
        memcpy(big + big_len, w, wl);
        big_len += wl;
    }
    double t0 = nm_time_s();
    size_t n_big;
    int32_t *ids = tok_encode_alloc(t, big, big_len, false, false, &n_big);
    double dt = nm_time_s() - t0;
    printf("%s: encoded %.1f MB into %zu tokens in %.3f s (%.1f MB/s)\n", argv[2], big_len / 1e6, n_big, dt,
           big_len / 1e6 / dt);
    size_t bl_cap = big_len + 64;
    char *big_back = malloc(bl_cap);
    size_t bl = tok_decode(t, ids, n_big, TOK_DECODE_STRIP_PREFIX, big_back, bl_cap);
    if (bl != big_len || memcmp(big_back, big, big_len) != 0) {
        fprintf(stderr, "FAIL: %s: the 2 MB text does not decode back to itself\n", argv[2]);
        failures++;
    }
    free(big_back);
    free(ids);

    /* 4. long texts go through a per-call word cache: the ids of 64 KB must equal the
     * concatenated ids of its pre-tokenizer pieces encoded one by one (short: no cache). */
    if (tok_model(t) == TOK_MODEL_BPE) {
        size_t part = 64u << 10, n_whole, n_pieces = 0, *ends;
        int32_t *whole = tok_encode_alloc(t, big, part, false, false, &n_whole);
        size_t k = tok_pre_split(tok_pre(t), big, part, &ends), start = 0;
        bool same = true;
        for (size_t i = 0; i < k && same; i++) {
            size_t n;
            int32_t *p = tok_encode_alloc(t, big + start, ends[i] - start, false, false, &n);
            same = n_pieces + n <= n_whole && memcmp(whole + n_pieces, p, n * sizeof *p) == 0;
            n_pieces += n;
            free(p);
            start = ends[i];
        }
        same = same && n_pieces == n_whole;
        if (!same) {
            fprintf(stderr, "FAIL: %s: 64 KB encoded whole (word cache) differs from its pieces encoded one by one\n",
                    argv[2]);
            failures++;
        }
        free(ends);
        free(whole);
    }
    free(big);

    if (failures) fprintf(stderr, "reproduce: %s %s %s %d\n", argv[0], argv[1], argv[2], n_random);
    free(piece);
    free(back);
    free(text);
    tok_free(t);
    return failures ? 1 : 0;
}
