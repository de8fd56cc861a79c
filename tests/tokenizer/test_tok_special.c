/* Special tokens, token types, pieces and metadata flags on the real vocabularies: control tokens
 * only with parse_special, user-defined tokens always, Phi-3's right-stripping specials, BOS from
 * add_bos_token, EOG sets.
 *
 * usage: test_tok_special DATA_DIR   (exit 77 without the data) */
#include "tok_test_util.h"


static void expect_ids(const struct tokenizer *t, const char *text, bool add_special, bool parse_special,
                       const int32_t *want, size_t n_want, const char *what) {
    size_t n;
    int32_t *got = tok_encode_alloc(t, text, strlen(text), add_special, parse_special, &n);
    bool ok = n == n_want && memcmp(got, want, n * sizeof *got) == 0;
    CHECK(ok, "%s", what);
    if (!ok) {
        fprintf(stderr, "  want ");
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

static void expect_piece(const struct tokenizer *t, int32_t id, bool special, const char *want) {
    char buf[256];
    size_t n = tok_piece(t, id, special, buf, sizeof buf);
    CHECK(n == strlen(want) && !memcmp(buf, want, n), "piece of %d", id);
}

static struct tokenizer *load(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    FILE *probe = fopen(path, "rb");
    if (!probe) return NULL;
    fclose(probe);
    struct tokenizer *t = tt_load(path);
    if (!t) exit(1);
    return t;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
        return 2;
    }
    nm_log_level = 0;
    int found = 0;
    struct tokenizer *t;

    if ((t = load(argv[1], "llama-spm"))) {
        found++;
        CHECK(tok_model(t) == TOK_MODEL_SPM && tok_n_vocab(t) == 32000, "llama-spm model");
        CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_add_bos(t) && !tok_add_eos(t), "llama-spm special ids");
        CHECK(tok_token_type(t, 0) == TOK_TYPE_UNKNOWN && tok_token_type(t, 1) == TOK_TYPE_CONTROL &&
                  tok_token_type(t, 3) == TOK_TYPE_BYTE && tok_token_type(t, 15043) == TOK_TYPE_NORMAL,
              "llama-spm types");
        CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1) && !tok_is_eog(t, 15043), "llama-spm EOG");
        EXPECT(t, "</s><s>", false, true, "controls parsed", 2, 1);
        EXPECT(t, "Hello", true, false, "BOS added", 1, 15043);
        EXPECT(t, "Hello", false, false, "no BOS", 15043);
        EXPECT(t, "<s>Hello", true, true, "text after a special gets the space prefix", 1, 1, 15043);
        expect_piece(t, 15043, false, " Hello");
        expect_piece(t, 13, false, "\n"); /* <0x0A> */
        expect_piece(t, 1, false, "");
        expect_piece(t, 1, true, "<s>");
        size_t n;
        int32_t *ids = tok_encode_alloc(t, "</s>", 4, false, false, &n);
        CHECK(n > 1, "control text not parsed without parse_special (%zu ids)", n);
        free(ids);
        tok_free(t);
    }
    if ((t = load(argv[1], "phi-3"))) {
        found++;
        /* Phi-3 specials eat the whitespace on their right (llama.cpp, by general.name) */
        EXPECT(t, "<|user|>\nHello<|end|>\n<|assistant|>", false, true, "phi-3 chat markers", 32010, 15043, 32007,
               32001);
        /* "</s>" is user-defined in this file: matched even without parse_special */
        int32_t a = tok_find(t, "\xE2\x96\x81" "a", 4), b = tok_find(t, "\xE2\x96\x81" "b", 4);
        EXPECT(t, "a</s>b", false, false, "user-defined </s>", a, 2, b);
        CHECK(tok_eot(t) == 32007 && tok_is_eog(t, 32007) && tok_is_eog(t, 32000) && tok_eos(t) == 32000,
              "phi-3 eot %d", tok_eot(t));
        tok_free(t);
    }
    if ((t = load(argv[1], "gpt-2"))) {
        found++;
        EXPECT(t, "<|endoftext|>", false, true, "gpt-2 control parsed", 50256);
        EXPECT(t, "Hello world", true, false, "gpt-2 adds no BOS", 15496, 995);
        expect_piece(t, 995, false, " world");
        CHECK(tok_is_eog(t, 50256) && !tok_add_bos(t), "gpt-2 flags");
        CHECK(tok_pre(t) == TOK_PRE_GPT2, "gpt-2 pre");
        tok_free(t);
    }
    if ((t = load(argv[1], "deepseek-llm"))) {
        found++;
        CHECK(tok_pre(t) == TOK_PRE_DEEPSEEK_LLM && tok_add_bos(t) && tok_bos(t) == 100000, "deepseek flags");
        EXPECT(t, "\xC3\xB8", false, false, "user-defined 'ø' matched without parse_special", 100002);
        EXPECT(t, "Hi", true, false, "deepseek BOS", 100000, tok_find(t, "Hi", 2));
        tok_free(t);
    }
    if ((t = load(argv[1], "falcon"))) {
        found++;
        CHECK(tok_pre(t) == TOK_PRE_FALCON && tok_bos(t) == 11 && tok_eos(t) == 11 && tok_is_eog(t, 11), "falcon");
        EXPECT(t, ">>TITLE<<", false, true, "falcon control", 0);
        tok_free(t);
    }
    if ((t = load(argv[1], "starcoder"))) {
        found++;
        CHECK(tok_pre(t) == TOK_PRE_STARCODER && tok_eos(t) == 0 && tok_is_eog(t, 0), "starcoder");
        EXPECT(t, "<fim_prefix>x", false, true, "starcoder control", 1, tok_find(t, "x", 1));
        tok_free(t);
    }
    if (!found) {
        printf("SKIP: no ggml-vocab-*.gguf in %s (tokenizer test data not present)\n", argv[1]);
        return SKIP;
    }
    if (failures) fprintf(stderr, "%d failures; reproduce: %s %s\n", failures, argv[0], argv[1]);
    else printf("all special-token checks pass (%d vocabularies)\n", found);
    return failures ? 1 : 0;
}
