/* Conformance: llama.cpp's tokenizer test vectors (ggml-vocab-NAME.gguf with .inp/.out pairs).
 * Every case is tokenized with no BOS and special tokens not parsed, and must give exactly the
 * ids of the .out line; its decoding must give the input back.
 *
 * usage: test_tok_vectors DATA_DIR NAME    (exit 77 when DATA_DIR or the files are missing) */
#include "tok_test_util.h"

#define SEP "\n__ggml_vocab_test__\n"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DATA_DIR NAME\n", argv[0]);
        return 2;
    }
    nm_log_level = 0;
    char path[4096], inp_path[4200], out_path[4200];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", argv[1], argv[2]);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    size_t inp_len, out_len;
    char *inp = tt_read_file(inp_path, &inp_len), *out = tt_read_file(out_path, &out_len);
    FILE *probe = fopen(path, "rb");
    if (!inp || !out || !probe) {
        printf("SKIP: %s, %s or %s is missing (tokenizer test data not present)\n", path, inp_path, out_path);
        return SKIP;
    }
    fclose(probe);
    struct tokenizer *t = tt_load(path);
    if (!t) return 1;

    int n_cases = 0, n_pass = 0, n_decode_fail = 0;
    char *cur = inp, *line = out;
    char *dec = malloc(inp_len * 4 + 64);
    while (*line) {
        char *sep = strstr(cur, SEP);
        if (!sep) {
            fprintf(stderr, "FAIL: %s has more .out lines than .inp cases\n", out_path);
            return 1;
        }
        size_t len = (size_t)(sep - cur);
        char *eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        /* expected ids */
        int32_t want[4096];
        size_t n_want = 0;
        for (char *p = line; p < eol;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            want[n_want++] = (int32_t)v;
            p = end;
        }
        size_t n_got;
        int32_t *got = tok_encode_alloc(t, cur, len, false, false, &n_got);
        bool ok = n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0;
        if (ok) {
            n_pass++;
        } else {
            fprintf(stderr, "FAIL: %s case %d: ", argv[2], n_cases);
            tt_print_str(stderr, cur, len);
            fprintf(stderr, "\n  want ");
            tt_print_ids(stderr, want, n_want);
            fprintf(stderr, "\n  got  ");
            tt_print_ids(stderr, got, n_got);
            fprintf(stderr, "\n");
        }
        size_t n_dec = tok_decode(t, got, n_got, TOK_DECODE_STRIP_PREFIX, dec, inp_len * 4 + 64);
        if (n_dec != len || memcmp(dec, cur, len) != 0) {
            n_decode_fail++;
            fprintf(stderr, "FAIL: %s case %d: decode(encode(x)) != x: ", argv[2], n_cases);
            tt_print_str(stderr, dec, n_dec);
            fprintf(stderr, "\n");
        }
        free(got);
        n_cases++;
        cur = sep + strlen(SEP);
        line = *eol ? eol + 1 : eol;
    }
    printf("%s: %d/%d vectors pass, %d decode round-trip failures (%s)\n", argv[2], n_pass, n_cases, n_decode_fail,
           path);
    if (n_pass != n_cases || n_decode_fail)
        fprintf(stderr, "reproduce: %s %s %s\n", argv[0], argv[1], argv[2]);
    free(dec);
    free(inp);
    free(out);
    tok_free(t);
    return n_pass == n_cases && n_decode_fail == 0 && n_cases > 0 ? 0 : 1;
}
