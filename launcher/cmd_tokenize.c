/* numallm tokenize: tokenize a text with the tokenizer of a GGUF file and print ids and pieces
 * (see cmd_tokenize.h). */
#include "cmd_tokenize.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "session.h"
#include "tokenizer.h"
#include "unicode.h"

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: numallm tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--parse-special] [--ids-only]\n"
               "\n"
               "  -m, --model       GGUF file (a vocabulary-only file is enough)\n"
               "  -p, --prompt      text to tokenize\n"
               "  -f, --file        read the text from FILE\n"
               "  --no-bos          add no BOS/EOS even where the model asks for them\n"
               "  --parse-special   control tokens written in the text (e.g. <|im_start|>) become their ids\n"
               "  --ids-only        print only the ids, as [id, id, ...]\n");
}

/* Print a piece between quotes: valid printable UTF-8 as is, everything else escaped. */
static void print_piece(const char *p, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = uni_decode((const uint8_t *)p + i, n - i, &l);
        if (cp == '\n') fputs("\\n", stdout);
        else if (cp == '\r') fputs("\\r", stdout);
        else if (cp == '\t') fputs("\\t", stdout);
        else if (cp == '\'' || cp == '\\') printf("\\%c", (char)cp);
        else if (cp == UNI_INVALID || cp < 0x20 || cp == 0x7F || (uni_flags(cp) & UNI_C))
            for (size_t j = 0; j < l; j++) printf("\\x%02x", (uint8_t)p[i + j]);
        else fwrite(p + i, 1, l, stdout);
        i += l;
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool add_special = true, parse_special = false, ids_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tokenize_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-bos")) { add_special = false; continue; }
        if (!strcmp(a, "--parse-special")) { parse_special = true; continue; }
        if (!strcmp(a, "--ids-only")) { ids_only = true; continue; }
        bool takes_value = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-p") || !strcmp(a, "--prompt") ||
                           !strcmp(a, "-f") || !strcmp(a, "--file");
        if (!takes_value) {
            fprintf(stderr, "error: unknown option '%s' for tokenize\n\n", a);
            tokenize_usage(stderr);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: option '%s' needs a value\n", a);
            return 1;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else file = v;
    }
    if (!model || (!prompt == !file)) {
        fprintf(stderr, "error: tokenize needs -m MODEL and one of -p TEXT or -f FILE\n\n");
        tokenize_usage(stderr);
        return 1;
    }
    char *text = NULL;
    size_t len;
    if (file) {
        if (!(text = session_read_file(file, &len))) {
            fprintf(stderr, "error: cannot read '%s' (-f): %s\n", file, nm_strerror_errno());
            return 1;
        }
    } else {
        len = strlen(prompt);
    }

    char err[1024];
    struct gguf_file *g = NULL;
    struct tokenizer *tok = NULL;
    int rc = 1;
    enum nm_status st = gguf_open(model, &g, err, sizeof err);
    if (st == NM_OK) st = tok_init(&tok, g, err, sizeof err);
    if (st != NM_OK) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    size_t n;
    int32_t *ids = tok_encode_alloc(tok, file ? text : prompt, len, add_special, parse_special, &n);
    if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        puts("]");
    } else {
        size_t cap = tok_max_piece_len(tok) + 1;
        char *piece = malloc(cap);
        for (size_t i = 0; i < n && piece; i++) {
            size_t pl = tok_piece(tok, ids[i], true, piece, cap);
            printf("%6d -> ", ids[i]);
            print_piece(piece, pl);
            putchar('\n');
        }
        free(piece);
        printf("%zu tokens\n", n);
    }
    free(ids);
    rc = 0;
done:
    tok_free(tok);
    if (g) gguf_close(g);
    free(text);
    return rc;
}
