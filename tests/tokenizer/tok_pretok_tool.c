/* Exposes the pre-tokenizers and the Unicode tables to tests/tokenizer/pretok_vs_regex.py:
 *
 *   tok_pretok_tool split PRE   stdin: one string per line, hex-encoded UTF-8 bytes;
 *                               stdout: per line, the byte offsets where the pieces end
 *   tok_pretok_tool classes     stdout: "start end flags" runs of code points with equal
 *                               uni_flags(), then "fold cp letter" for every code point that
 *                               case-folds to an ASCII letter
 *
 * PRE is a tokenizer.ggml.pre value (llama-bpe, qwen2, gpt-2, deepseek-llm, ...). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "unicode.h"

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "classes")) {
        uint32_t start = 0;
        unsigned cur = uni_flags(0);
        for (uint32_t cp = 1; cp <= 0x110000; cp++) {
            unsigned f = cp < 0x110000 ? uni_flags(cp) : ~0u;
            if (f != cur) {
                printf("%u %u %u\n", start, cp - 1, cur);
                start = cp;
                cur = f;
            }
        }
        for (uint32_t cp = 0; cp < 0x110000; cp++)
            if (uni_fold_ascii(cp)) printf("fold %u %u\n", cp, uni_fold_ascii(cp));
        return 0;
    }
    enum tok_pre pre;
    if (argc != 3 || strcmp(argv[1], "split") || !tok_pre_from_name(argv[2], strlen(argv[2]), &pre)) {
        fprintf(stderr, "usage: %s split PRE | %s classes\n", argv[0], argv[0]);
        return 2;
    }
    size_t cap = 1 << 16;
    char *line = malloc(cap), *bytes = malloc(cap);
    size_t n = 0;
    int c;
    for (;;) {
        c = getchar();
        if (c == EOF && n == 0) break;
        if (c != '\n' && c != EOF) {
            if (n + 1 >= cap) {
                cap *= 2;
                line = realloc(line, cap);
                bytes = realloc(bytes, cap);
            }
            line[n++] = (char)c;
            continue;
        }
        size_t len = 0;
        for (size_t i = 0; i + 1 < n; i += 2) {
            int hi = hexval(line[i]), lo = hexval(line[i + 1]);
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "bad hex input\n");
                return 2;
            }
            bytes[len++] = (char)(hi << 4 | lo);
        }
        size_t *ends;
        size_t k = tok_pre_split(pre, bytes, len, &ends);
        for (size_t i = 0; i < k; i++) printf("%s%zu", i ? " " : "", ends[i]);
        putchar('\n');
        free(ends);
        n = 0;
        if (c == EOF) break;
    }
    free(line);
    free(bytes);
    return 0;
}
