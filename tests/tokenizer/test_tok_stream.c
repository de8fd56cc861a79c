/* Streaming detokenizer: characters split across tokens are held back until complete, bytes that
 * cannot form a character become U+FFFD (one per maximal invalid subpart, as Python's
 * errors="replace"), the output is valid UTF-8 after every token, and for valid text the
 * concatenated output equals the text.
 *
 * usage: test_tok_stream DATA_DIR   (exit 77 when no vocabulary file is there) */
#include "tok_test_util.h"
#include "unicode.h"


static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l;
        if (uni_check_seq((const uint8_t *)s + i, n - i, &l) != UNI_SEQ_COMPLETE) return false;
        i += l;
    }
    return true;
}

static int32_t find(const struct tokenizer *t, const char *s) {
    int32_t id = tok_find(t, s, strlen(s));
    NM_ASSERT(id >= 0);
    return id;
}

/* Feed ids one by one; want[i] is the expected output after id i ("" = nothing yet); want[n]
 * is the expected flush output. */
static void expect_stream(const struct tokenizer *t, unsigned flags, const int32_t *ids, size_t n,
                          const char *const *want, const char *what) {
    struct tok_stream *s = tok_stream_init(t, flags);
    for (size_t i = 0; i <= n; i++) {
        size_t len;
        const char *out = i < n ? tok_stream_feed(s, ids[i], &len) : tok_stream_flush(s, &len);
        bool ok = len == strlen(want[i]) && memcmp(out, want[i], len) == 0;
        CHECK(ok, "%s: after %s %zu: got", what, i < n ? "token" : "flush, token", i);
        if (!ok) {
            tt_print_str(stderr, out, len);
            fprintf(stderr, " want ");
            tt_print_str(stderr, want[i], strlen(want[i]));
            fputc('\n', stderr);
        }
    }
    tok_stream_free(s);
}

static void spm_cases(const struct tokenizer *t) {
    const char *llama = "\xF0\x9F\xA6\x99"; /* U+1F999, 4 byte tokens in Llama 2 */
    size_t n;
    int32_t *ids = tok_encode_alloc(t, llama, 4, false, false, &n);
    CHECK(n == 5, "llama emoji: %zu tokens", n);
    if (n == 5) {
        const char *want[] = {" ", "", "", "", llama, ""};
        expect_stream(t, 0, ids, n, want, "U+1F999 in byte tokens");
        int32_t with_bos[6] = {tok_bos(t), ids[0], ids[1], ids[2], ids[3], ids[4]};
        const char *want2[] = {"", "", "", "", "", llama, ""};
        expect_stream(t, TOK_DECODE_STRIP_PREFIX, with_bos, 6, want2, "BOS + strip prefix");
    }
    free(ids);
    int32_t f0 = find(t, "<0xF0>"), x9f = find(t, "<0x9F>"), x80 = find(t, "<0x80>"), e2 = find(t, "<0xE2>"),
            x82 = find(t, "<0x82>"), c3 = find(t, "<0xC3>"), a9 = find(t, "<0xA9>"), ed = find(t, "<0xED>"),
            a0 = find(t, "<0xA0>"), A = find(t, "A");
    {
        int32_t v[] = {f0, A};
        const char *want[] = {"", ("\xEF\xBF\xBD" "A"), ""};
        expect_stream(t, 0, v, 2, want, "F0 then A");
    }
    {
        int32_t v[] = {f0, x9f, A};
        const char *want[] = {"", "", ("\xEF\xBF\xBD" "A"), ""};
        expect_stream(t, 0, v, 3, want, "F0 9F then A (one U+FFFD for the maximal subpart)");
    }
    {
        int32_t v[] = {x80};
        const char *want[] = {"\xEF\xBF\xBD", ""};
        expect_stream(t, 0, v, 1, want, "lone continuation byte");
    }
    {
        int32_t v[] = {e2, x82};
        const char *want[] = {"", "", "\xEF\xBF\xBD"};
        expect_stream(t, 0, v, 2, want, "E2 82 then end of stream");
    }
    {
        int32_t v[] = {c3, a9, c3};
        const char *want[] = {"", "\xC3\xA9", "", "\xEF\xBF\xBD"};
        expect_stream(t, 0, v, 3, want, "C3 A9 C3");
    }
    {
        int32_t v[] = {ed, a0, A};
        const char *want[] = {"", "\xEF\xBF\xBD\xEF\xBF\xBD", "A", ""};
        expect_stream(t, 0, v, 3, want, "ED A0 (surrogate) then A");
    }
    {
        int32_t v[] = {tok_eos(t), A};
        const char *want[] = {"", "A", ""};
        expect_stream(t, 0, v, 2, want, "control token hidden");
        const char *want2[] = {"</s>", "A", ""};
        expect_stream(t, TOK_DECODE_SPECIAL, v, 2, want2, "control token shown with TOK_DECODE_SPECIAL");
    }
}

static void gpt2_cases(const struct tokenizer *t) {
    /* " 🦙" is ' \xf0\x9f' + '\xa6' + '\x99' in GPT-2 */
    size_t n;
    int32_t *ids = tok_encode_alloc(t, " \xF0\x9F\xA6\x99", 5, false, false, &n);
    CHECK(n == 3, "gpt-2 llama emoji: %zu tokens", n);
    if (n == 3) {
        const char *want[] = {" ", "", "\xF0\x9F\xA6\x99", ""};
        expect_stream(t, 0, ids, n, want, "gpt-2 U+1F999 split over 3 tokens");
    }
    free(ids);
}

/* Random valid text: every chunk valid UTF-8, concatenation == text. */
static void random_cases(const struct tokenizer *t, const char *name) {
    static const uint32_t cps[] = {'a', 'Z', ' ', '\n', '7', '.', 0xE9, 0x3B1, 0x44F, 0x627, 0x915, 0x94D, 0x4E00,
                                   0x6211, 0xAC00, 0x3042, 0x1F999, 0x1F600, 0x200D, 0xFE0F, 0x2705, 0x10400, 0x17B6};
    uint64_t rng = 42;
    int bad = 0, held = 0;
    char text[512], cat[4096];
    for (int it = 0; it < 300; it++) {
        size_t len = 0, nc = 1 + tt_rand(&rng) % 40;
        for (size_t i = 0; i < nc; i++) len += uni_encode(cps[tt_rand(&rng) % NM_ARRAY_LEN(cps)], text + len);
        size_t n;
        int32_t *ids = tok_encode_alloc(t, text, len, true, false, &n);
        struct tok_stream *s = tok_stream_init(t, TOK_DECODE_STRIP_PREFIX);
        size_t cl = 0;
        for (size_t i = 0; i <= n; i++) {
            size_t ol;
            const char *o = i < n ? tok_stream_feed(s, ids[i], &ol) : tok_stream_flush(s, &ol);
            if (!valid_utf8(o, ol)) bad++;
            if (i < n) {
                char piece[256];
                size_t pl = tok_piece(t, ids[i], false, piece, sizeof piece);
                if (pl > 0 && ol == 0) held++; /* all of its bytes wait for the next token */
            }
            memcpy(cat + cl, o, ol);
            cl += ol;
        }
        if (cl != len || memcmp(cat, text, len) != 0) {
            bad++;
            fprintf(stderr, "FAIL: %s: stream of ", name);
            tt_print_str(stderr, text, len);
            fprintf(stderr, " gave ");
            tt_print_str(stderr, cat, cl);
            fputc('\n', stderr);
        }
        tok_stream_free(s);
        free(ids);
    }
    CHECK(bad == 0, "%s: %d bad streams", name, bad);
    printf("%s: 300 random texts streamed token by token: output valid UTF-8 after every token and equal to the "
           "text; %d tokens printed nothing, their bytes held back\n",
           name, held);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
        return 2;
    }
    nm_log_level = 0;
    static const char *const names[] = {"llama-spm", "gpt-2", "phi-3", "deepseek-llm", "falcon", "starcoder"};
    int found = 0;
    for (size_t i = 0; i < NM_ARRAY_LEN(names); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", argv[1], names[i]);
        FILE *probe = fopen(path, "rb");
        if (!probe) continue;
        fclose(probe);
        found++;
        struct tokenizer *t = tt_load(path);
        if (!t) return 1;
        if (!strcmp(names[i], "llama-spm")) spm_cases(t);
        if (!strcmp(names[i], "gpt-2")) gpt2_cases(t);
        random_cases(t, names[i]);
        tok_free(t);
    }
    if (!found) {
        printf("SKIP: no ggml-vocab-*.gguf in %s (tokenizer test data not present)\n", argv[1]);
        return SKIP;
    }
    if (failures) fprintf(stderr, "%d failures; reproduce: %s %s\n", failures, argv[0], argv[1]);
    else printf("all stream checks pass\n");
    return failures ? 1 : 0;
}
