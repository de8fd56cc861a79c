/* Helpers shared by the tokenizer tests: a CHECK that counts failures, whole-file reads, loading
 * a tokenizer from a GGUF path, printing byte strings readably, a small deterministic PRNG. */
#ifndef NM_TOK_TEST_UTIL_H
#define NM_TOK_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#define SKIP 77

/* Failed CHECKs of this test program; main returns non-zero when it is not 0. */
static int failures __attribute__((unused));

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            failures++;                                                                     \
            fprintf(stderr, "FAIL: %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
        }                                                                                   \
    } while (0)

/* The whole file, NUL-terminated (malloc'ed), or NULL. */
static inline char *tt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

/* Load the tokenizer of a GGUF file; prints the error and returns NULL on failure. */
static inline struct tokenizer *tt_load(const char *path) {
    char err[1024];
    struct gguf_file *g = NULL;
    struct tokenizer *t = NULL;
    enum nm_status st = gguf_open(path, &g, err, sizeof err);
    if (st == NM_OK) st = tok_init(&t, g, err, sizeof err);
    if (g) gguf_close(g);
    if (st != NM_OK) {
        fprintf(stderr, "FAIL: loading %s: %s\n", path, err);
        return NULL;
    }
    return t;
}

/* Print s[0..n) as a C string literal. */
static inline void tt_print_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static inline void tt_print_ids(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? " " : "", ids[i]);
    fputc(']', f);
}

/* xorshift64*: reproducible across runs and platforms. */
static inline uint64_t tt_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

#endif
