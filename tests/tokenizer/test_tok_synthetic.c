/* Tokenizer behaviour on small hand-made vocabularies (written as GGUF files into a scratch
 * directory): BPE merge order and tie-breaking, ignore_merges, the byte fallback, SentencePiece
 * score order and byte fallback, special-token matching, EOG detection, add_bos, and the error
 * messages for malformed or unsupported tokenizer metadata. Needs no test data.
 *
 * usage: test_tok_synthetic [SCRATCH_DIR] */
#include "tok_test_util.h"
#include "unicode.h"

static char dir[4096] = ".";


/* A vocabulary under construction. */
struct vocab {
    const char *model, *pre;
    char *tok[600];
    int32_t type[600];
    float score[600];
    int n;
    const char *merges[64];
    int n_merges;
    int bos, eos; /* -1: no key */
    int add_bos;  /* -1: no key */
};

static int add(struct vocab *v, const char *s, int type, float score) {
    v->tok[v->n] = strdup(s);
    v->type[v->n] = type;
    v->score[v->n] = score;
    return v->n++;
}

static void vocab_bpe(struct vocab *v, const char *pre) {
    memset(v, 0, sizeof *v);
    v->model = "gpt2";
    v->pre = pre;
    v->bos = v->eos = v->add_bos = -1;
    for (int b = 0; b < 256; b++) { /* the 256 byte-level characters, ids 0..255 */
        char u[5] = {0};
        uni_encode(uni_byte_to_cp((uint8_t)b), u);
        add(v, u, TOK_TYPE_NORMAL, 0);
    }
}

static void vocab_spm(struct vocab *v) {
    memset(v, 0, sizeof *v);
    v->model = "llama";
    v->bos = v->eos = v->add_bos = -1;
    add(v, "<unk>", TOK_TYPE_UNKNOWN, 0);
    add(v, "<s>", TOK_TYPE_CONTROL, 0);
    add(v, "</s>", TOK_TYPE_CONTROL, 0);
    for (int b = 0; b < 256; b++) { /* ids 3..258 */
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        add(v, hex, TOK_TYPE_BYTE, 0);
    }
}

static void vocab_free(struct vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
}

/* Write v (plus `extra`, which may add or break keys) and load it. */
static enum nm_status load(const struct vocab *v, void (*extra)(struct gguf_writer *), struct tokenizer **t,
                           char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tok_synthetic.gguf", dir);
    struct gguf_writer *w = gguf_writer_init();
    if (v->model) gguf_writer_set_str(w, "tokenizer.ggml.model", v->model);
    if (v->pre) gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, (uint64_t)v->n);
    if (!strcmp(v->model ? v->model : "", "llama"))
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->score, (uint64_t)v->n);
    if (v->n_merges) gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merges, (uint64_t)v->n_merges);
    if (v->bos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->add_bos >= 0) gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    if (extra) extra(w);
    enum nm_status st = gguf_writer_begin(w, path, err, errlen);
    if (st == NM_OK) st = gguf_writer_end(w, err, errlen);
    gguf_writer_free(w);
    if (st != NM_OK) {
        fprintf(stderr, "FAIL: cannot write %s: %s\n", path, err);
        exit(1);
    }
    struct gguf_file *g;
    st = gguf_open(path, &g, err, errlen);
    if (st != NM_OK) {
        fprintf(stderr, "FAIL: cannot read back %s: %s\n", path, err);
        exit(1);
    }
    *t = NULL;
    st = tok_init(t, g, err, errlen);
    gguf_close(g);
    return st;
}

static struct tokenizer *must_load(const struct vocab *v) {
    char err[1024];
    struct tokenizer *t;
    if (load(v, NULL, &t, err, sizeof err) != NM_OK) {
        fprintf(stderr, "FAIL: loading a synthetic vocabulary: %s\n", err);
        exit(1);
    }
    return t;
}

static void expect_ids(const struct tokenizer *t, const char *text, bool add_special, bool parse_special,
                       const int32_t *want, size_t n_want, const char *what) {
    size_t n;
    int32_t *got = tok_encode_alloc(t, text, strlen(text), add_special, parse_special, &n);
    bool ok = n == n_want && memcmp(got, want, n * sizeof *got) == 0;
    CHECK(ok, "%s: ", what);
    if (!ok) {
        fprintf(stderr, "  text ");
        tt_print_str(stderr, text, strlen(text));
        fprintf(stderr, "\n  want ");
        tt_print_ids(stderr, want, n_want);
        fprintf(stderr, "\n  got  ");
        tt_print_ids(stderr, got, n);
        fputc('\n', stderr);
    }
    free(got);
}
#define EXPECT(t, text, add, parse, what, ...)                                              \
    do {                                                                                    \
        const int32_t want_[] = {__VA_ARGS__};                                              \
        expect_ids(t, text, add, parse, want_, NM_ARRAY_LEN(want_), what);                  \
    } while (0)
#define EXPECT_NONE(t, text, what) expect_ids(t, text, false, false, NULL, 0, what)

static void test_bpe(void) {
    struct vocab v;
    struct tokenizer *t;
    const int a = 'a', b = 'b', c = 'c'; /* byte-level 'a' is token 'a' (ids 0..255 = bytes) */

    /* merge order follows ranks */
    vocab_bpe(&v, "gpt-2");
    int ab = add(&v, "ab", 1, 0), bc = add(&v, "bc", 1, 0);
    v.merges[v.n_merges++] = "a b";
    v.merges[v.n_merges++] = "b c";
    t = must_load(&v);
    EXPECT(t, "abc", false, false, "rank 0 'a b' before rank 1 'b c'", ab, c);
    tok_free(t);
    v.merges[0] = "b c";
    v.merges[1] = "a b";
    t = must_load(&v);
    EXPECT(t, "abc", false, false, "rank 0 'b c' before rank 1 'a b'", a, bc);
    tok_free(t);
    vocab_free(&v);

    /* equal ranks: leftmost pair first */
    vocab_bpe(&v, "gpt-2");
    int aa = add(&v, "aa", 1, 0);
    v.merges[v.n_merges++] = "a a";
    t = must_load(&v);
    EXPECT(t, "aaa", false, false, "tie goes to the leftmost pair", aa, a);
    EXPECT(t, "aaaaa", false, false, "ties, repeatedly", aa, aa, a);
    EXPECT(t, " aa", false, false, "' ?\\p{L}+' keeps the space with the word", ' ', aa);
    tok_free(t);
    vocab_free(&v);

    /* a merge result that is not a token falls back to its bytes; chained merges */
    vocab_bpe(&v, "gpt-2");
    int abc = add(&v, "abc", 1, 0);
    ab = add(&v, "ab", 1, 0);
    v.merges[v.n_merges++] = "a b";
    v.merges[v.n_merges++] = "ab c";
    v.merges[v.n_merges++] = "\xC3\x83 \xC2\xA9"; /* byte-level "Ã ©" (the bytes of "é"); "Ã©" is no token */
    t = must_load(&v);
    EXPECT(t, "abc", false, false, "chained merges", abc);
    EXPECT(t, "abcd", false, false, "chained merges, then no merge", abc, 'd');
    EXPECT(t, "ab", false, false, "first merge only", ab);
    /* a merged symbol that is no token falls back to its single bytes where those are tokens:
     * here none ("\xC3" alone is not a token), so the character disappears, as in llama.cpp */
    EXPECT(t, "x\xC3\xA9", false, false, "merge result not a token", 'x');
    tok_free(t);
    vocab_free(&v);

    /* ignore_merges (llama-bpe): a whole word in the vocabulary is taken as is */
    vocab_bpe(&v, "llama-bpe");
    abc = add(&v, "abc", 1, 0);
    v.merges[v.n_merges++] = "a b";
    int bos = add(&v, "<|begin_of_text|>", TOK_TYPE_CONTROL, 0);
    int eot = add(&v, "<|eot_id|>", TOK_TYPE_NORMAL, 0); /* mistyped: must become CONTROL and EOG */
    int ud = add(&v, "<tag>", TOK_TYPE_USER_DEFINED, 0);
    v.bos = bos;
    t = must_load(&v);
    EXPECT(t, "abc", false, false, "ignore_merges: whole word", abc);
    EXPECT(t, "abc", true, false, "llama-bpe adds BOS", bos, abc);
    CHECK(tok_eot(t) == eot && tok_is_eog(t, eot) && tok_token_type(t, eot) == TOK_TYPE_CONTROL,
          "eot %d eog %d type %d", tok_eot(t), tok_is_eog(t, eot), tok_token_type(t, eot));
    CHECK(!tok_is_eog(t, abc), "abc is not EOG");
    EXPECT(t, "x<tag>y", false, false, "user-defined token matched without parse_special", 'x', ud, 'y');
    EXPECT(t, "<|eot_id|>", false, true, "control token with parse_special", eot);
    size_t n;
    int32_t *ids = tok_encode_alloc(t, "<|eot_id|>", 10, false, false, &n);
    CHECK(n > 1, "control token text without parse_special must not become the token (%zu ids)", n);
    free(ids);
    char piece[64];
    CHECK(tok_piece(t, eot, false, piece, sizeof piece) == 0, "control piece hidden");
    CHECK(tok_piece(t, eot, true, piece, sizeof piece) == 10 && !memcmp(piece, "<|eot_id|>", 10),
          "control piece shown");
    tok_free(t);
    /* the same vocabulary without ignore_merges splits the word */
    v.pre = "gpt-2";
    t = must_load(&v);
    EXPECT(t, "abc", false, false, "no ignore_merges, no merges: bytes", a, b, c);
    EXPECT(t, "abc", true, false, "gpt-2 adds no BOS by default", a, b, c);
    tok_free(t);
    vocab_free(&v);

    /* a byte without a byte-level token is dropped (llama.cpp and HF do the same) */
    vocab_bpe(&v, "gpt-2");
    v.merges[v.n_merges++] = "a b";
    free(v.tok[0xFF]);
    v.tok[0xFF] = strdup("[unused-255]");
    t = must_load(&v);
    EXPECT(t, "a\xFF" "b", false, false, "byte 0xFF has no token", a, b);
    tok_free(t);
    vocab_free(&v);

    /* longest special token first */
    vocab_bpe(&v, "gpt-2");
    v.merges[v.n_merges++] = "a b";
    int xy = add(&v, "<xy>", TOK_TYPE_CONTROL, 0), xyz = add(&v, "<xy>z", TOK_TYPE_CONTROL, 0);
    t = must_load(&v);
    EXPECT(t, "<xy>z<xy>", false, true, "longest special first", xyz, xy);
    tok_free(t);
    vocab_free(&v);
}

static void test_spm(void) {
    struct vocab v;
    struct tokenizer *t;
    vocab_spm(&v);
    int sp = add(&v, "\xE2\x96\x81", 1, -5), a = add(&v, "a", 1, -5), b = add(&v, "b", 1, -5);
    int spa = add(&v, "\xE2\x96\x81" "a", 1, -1), ab = add(&v, "ab", 1, -2);
    t = must_load(&v);
    EXPECT(t, "ab", false, false, "'_a' scores higher than 'ab'", spa, b);
    EXPECT(t, "ab", true, false, "add_bos by default for SentencePiece", 1, spa, b);
    EXPECT(t, "\xC3\xA9", false, false, "byte fallback", sp, 3 + 0xC3, 3 + 0xA9);
    EXPECT(t, " a", false, false, "leading space kept", sp, spa);
    char buf[64];
    int32_t ids[] = {1, spa, b};
    size_t len = tok_decode(t, ids, 3, TOK_DECODE_STRIP_PREFIX, buf, sizeof buf);
    CHECK(len == 2 && !memcmp(buf, "ab", 2), "decode with BOS and strip prefix");
    len = tok_decode(t, ids, 3, 0, buf, sizeof buf);
    CHECK(len == 3 && !memcmp(buf, " ab", 3), "decode without strip");
    tok_free(t);
    v.score[ab] = -0.5f;
    t = must_load(&v);
    EXPECT(t, "ab", false, false, "'ab' scores higher than '_a'", sp, ab);
    tok_free(t);
    (void)a;
    vocab_free(&v);
}

/* ---- malformed / unsupported metadata ---- */
static void add_bad_scores(struct gguf_writer *w) {
    float s[3] = {0};
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, s, 3);
}
static void add_merges_as_ints(struct gguf_writer *w) {
    int32_t m[2] = {1, 2};
    gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_TYPE_INT32, m, 2);
}

static void expect_error(const struct vocab *v, void (*extra)(struct gguf_writer *), enum nm_status want,
                         const char *must_mention, const char *what) {
    char err[1024] = "";
    struct tokenizer *t;
    enum nm_status st = load(v, extra, &t, err, sizeof err);
    CHECK(st == want && t == NULL && strstr(err, must_mention), "%s: got %s: %s", what, nm_status_str(st), err);
    tok_free(t);
}

static void test_errors(void) {
    struct vocab v;
    vocab_bpe(&v, "gpt-2");
    v.merges[v.n_merges++] = "a b";
    struct vocab w = v;
    w.model = NULL;
    expect_error(&w, NULL, NM_ERR_NOT_FOUND, "tokenizer.ggml.model", "no model key");
    w = v;
    w.model = "bert";
    expect_error(&w, NULL, NM_ERR_UNSUPPORTED, "'bert'", "WordPiece");
    w = v;
    w.pre = "tekken";
    expect_error(&w, NULL, NM_ERR_UNSUPPORTED, "'tekken'", "unknown pre-tokenizer");
    w = v;
    w.pre = "tekken";
    expect_error(&w, NULL, NM_ERR_UNSUPPORTED, "llama-bpe", "the message lists the supported ones");
    w = v;
    w.n_merges = 0;
    expect_error(&w, NULL, NM_ERR_NOT_FOUND, "tokenizer.ggml.merges", "BPE without merges");
    w = v;
    w.n_merges = 0;
    expect_error(&w, add_merges_as_ints, NM_ERR_FORMAT, "tokenizer.ggml.merges", "merges of the wrong type");
    w = v;
    expect_error(&w, add_bad_scores, NM_ERR_FORMAT, "tokenizer.ggml.scores", "scores of the wrong length");
    vocab_free(&v);

    /* out-of-range special id: warned about and ignored, not fatal */
    vocab_bpe(&v, "gpt-2");
    v.merges[v.n_merges++] = "a b";
    v.bos = 100000;
    struct tokenizer *t = must_load(&v);
    CHECK(tok_bos(t) == 11, "out-of-range BOS keeps the default (got %d)", tok_bos(t));
    tok_free(t);
    vocab_free(&v);
}

int main(int argc, char **argv) {
    if (argc > 1) snprintf(dir, sizeof dir, "%s", argv[1]);
    nm_log_level = 0;
    test_bpe();
    test_spm();
    test_errors();
    if (failures) fprintf(stderr, "%d failures; reproduce: %s %s\n", failures, argv[0], dir);
    else printf("all synthetic tokenizer checks pass\n");
    return failures ? 1 : 0;
}
