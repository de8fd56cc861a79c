/* Models split into several files, as llama.cpp's gguf-split writes them (gguf_open, gguf.h):
 * part i of n is PREFIX-%05d-of-%05d.gguf (i + 1, n), holding split.no = i, split.count = n and
 * split.tensors.count; the first part holds the model's keys.
 *
 *   test_gguf_split                          the cases below, in a temporary directory
 *   test_gguf_split --split SRC PREFIX N [--empty-first]
 *                                            write SRC as N parts PREFIX-0000i-of-0000N.gguf (the
 *                                            tensors in N runs; --empty-first: the first part
 *                                            holds the keys only, as gguf-split's
 *                                            --no-tensor-first-split), for split_test.sh
 *
 * Cases: a tiny model split 2, 3 and 5 ways, and with an empty first part, opens from every one
 * of its parts with the source's keys and every tensor's name, type, shape and bytes. Each fault
 * (a part missing, renamed, from another split, without split keys, with a duplicate tensor; the
 * tensor count wrong or missing; split.no or split.count out of range) is an error that names
 * the file and the reason. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_tmpdir.h"
#include "mkmodel.h"
#include "pool.h"

static const char *g_tmpdir;
static int g_failures;

#define CHECK(cond, ...)                                                                                    \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                     \
            printf(__VA_ARGS__);                                                                            \
            printf("\n");                                                                                   \
            g_failures++;                                                                                   \
        }                                                                                                   \
    } while (0)

/* What write_split does wrong, in part `part` (0-based), with value v where one is needed. */
enum fault {
    F_NONE,
    F_SPLIT_NO,        /* split.no = v */
    F_SPLIT_COUNT,     /* split.count = v */
    F_NO_SPLIT_KEYS,   /* none of the split keys */
    F_NO_TENSOR_COUNT, /* no split.tensors.count in any part */
    F_TENSOR_COUNT,    /* split.tensors.count = v in every part */
    F_DUP_TENSOR,      /* the source's first tensor again */
};
struct fault_at {
    enum fault what;
    int part;
    int64_t v;
};

static void part_path(char *buf, size_t len, const char *prefix, int i, int n) {
    snprintf(buf, len, "%s-%05d-of-%05d.gguf", prefix, i + 1, n);
}

static bool is_split_key(const struct gguf_kv *kv) {
    return kv->key.len > 6 && memcmp(kv->key.ptr, "split.", 6) == 0;
}

/* Write src as n parts (see the header); 0 on success. */
static int write_split(const struct gguf_file *src, const char *prefix, int n, bool empty_first, struct fault_at f) {
    const int with_tensors = empty_first ? n - 1 : n, first = empty_first ? 1 : 0;
    NM_ASSERT(with_tensors >= 1);
    for (int p = 0; p < n; p++) {
        struct gguf_writer *w = gguf_writer_init();
        if (p == 0)
            for (uint64_t i = 0; i < src->n_kv; i++)
                if (!is_split_key(&src->kv[i])) gguf_writer_copy_kv(w, &src->kv[i]);
        if (!(f.what == F_NO_SPLIT_KEYS && f.part == p)) {
            gguf_writer_set_u16(w, "split.no", (uint16_t)(f.what == F_SPLIT_NO && f.part == p ? f.v : p));
            gguf_writer_set_u16(w, "split.count", (uint16_t)(f.what == F_SPLIT_COUNT && f.part == p ? f.v : n));
            if (f.what != F_NO_TENSOR_COUNT)
                gguf_writer_set_i32(w, "split.tensors.count",
                                    (int32_t)(f.what == F_TENSOR_COUNT ? f.v : (int64_t)src->n_tensors));
        }
        /* this part's run of tensors: [lo, hi) of the source's, in file order */
        uint64_t lo = 0, hi = 0;
        if (p >= first) {
            lo = src->n_tensors * (uint64_t)(p - first) / (uint64_t)with_tensors;
            hi = src->n_tensors * (uint64_t)(p - first + 1) / (uint64_t)with_tensors;
        }
        const bool dup = f.what == F_DUP_TENSOR && f.part == p;
        const struct gguf_tensor *ts[4096];
        int nt = 0;
        for (uint64_t i = lo; i < hi; i++) ts[nt++] = &src->tensors[i];
        if (dup) ts[nt++] = &src->tensors[0];
        NM_ASSERT(nt <= (int)(sizeof ts / sizeof ts[0]));
        for (int i = 0; i < nt; i++) gguf_writer_add_tensor(w, ts[i]->name, ts[i]->n_dims, ts[i]->ne, ts[i]->type);
        char path[1024], err[512];
        part_path(path, sizeof path, prefix, p, n);
        enum nm_status st = gguf_writer_begin(w, path, err, sizeof err);
        for (int i = 0; i < nt && !st; i++) st = gguf_writer_write_data(w, (uint64_t)i, ts[i]->data, ts[i]->size, err, sizeof err);
        if (!st) st = gguf_writer_end(w, err, sizeof err);
        gguf_writer_free(w);
        if (st) {
            fprintf(stderr, "test_gguf_split: writing %s: %s\n", path, err);
            return 1;
        }
    }
    return 0;
}

/* f (opened from a part) against the unsplit source: its keys, and every tensor's name, type,
 * shape and bytes. */
static void check_same(const struct gguf_file *src, const struct gguf_file *f, int n, const char *what) {
    CHECK(f->n_parts == (uint32_t)n, "%s: %u parts, expected %d", what, f->n_parts, n);
    CHECK(f->n_tensors == src->n_tensors, "%s: %llu tensors, expected %llu", what, (unsigned long long)f->n_tensors,
          (unsigned long long)src->n_tensors);
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const struct gguf_kv *a = &src->kv[i];
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)a->key.len, a->key.ptr);
        const struct gguf_kv *b = gguf_find_kv(f, key);
        CHECK(b && b->type == a->type && b->n == a->n, "%s: key %s missing or different", what, key);
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const struct gguf_tensor *a = &src->tensors[i], *b = gguf_find_tensor(f, a->name);
        CHECK(b != NULL, "%s: tensor %s missing", what, a->name);
        if (!b) continue;
        CHECK(b->type == a->type && b->n_dims == a->n_dims && memcmp(b->ne, a->ne, sizeof a->ne) == 0 &&
                  b->size == a->size,
              "%s: tensor %s has another type or shape", what, a->name);
        CHECK(b->size == a->size && memcmp(b->data, a->data, a->size) == 0, "%s: tensor %s has other bytes", what,
              a->name);
        CHECK(b->part < (uint32_t)n, "%s: tensor %s in part %u of %d", what, a->name, b->part, n);
    }
}

/* Open `path`, expecting a failure whose message holds every one of the substrings. */
static void expect_error(const char *path, const char *case_name, const char *s1, const char *s2) {
    struct gguf_file *f = NULL;
    char err[1024] = "";
    const enum nm_status st = gguf_open(path, &f, err, sizeof err);
    CHECK(st != NM_OK && f == NULL, "%s: opened, expected an error", case_name);
    if (st == NM_OK) {
        gguf_close(f);
        return;
    }
    CHECK(strstr(err, s1) != NULL, "%s: message \"%s\" lacks \"%s\"", case_name, err, s1);
    CHECK(!s2 || strstr(err, s2) != NULL, "%s: message \"%s\" lacks \"%s\"", case_name, err, s2);
    printf("  %-22s %s\n", case_name, err);
}

static void run_cases(const struct gguf_file *src) {
    char prefix[700], path[1024], path2[1024];
    /* split 2, 3 and 5 ways, with and without an empty first part: open from every part */
    static const struct {
        int n;
        bool empty_first;
    } k_splits[] = {{2, false}, {3, false}, {5, false}, {3, true}, {2, true}};
    for (size_t s = 0; s < sizeof k_splits / sizeof k_splits[0]; s++) {
        const int n = k_splits[s].n;
        snprintf(prefix, sizeof prefix, "%s/ok%zu", g_tmpdir, s);
        if (write_split(src, prefix, n, k_splits[s].empty_first, (struct fault_at){F_NONE, 0, 0})) {
            g_failures++;
            continue;
        }
        for (int p = 0; p < n; p++) {
            part_path(path, sizeof path, prefix, p, n);
            struct gguf_file *f = NULL;
            char err[1024];
            const enum nm_status st = gguf_open(path, &f, err, sizeof err);
            CHECK(st == NM_OK, "%s: %s", path, err);
            if (st) continue;
            check_same(src, f, n, path);
            gguf_close(f);
        }
        printf("  split %d ways%s: opens from each part, the source's keys and tensors\n", n,
               k_splits[s].empty_first ? " (first part: keys only)" : "");
    }

    /* a part missing */
    snprintf(prefix, sizeof prefix, "%s/missing", g_tmpdir);
    if (!write_split(src, prefix, 3, false, (struct fault_at){F_NONE, 0, 0})) {
        part_path(path, sizeof path, prefix, 1, 3);
        unlink(path);
        part_path(path2, sizeof path2, prefix, 0, 3);
        expect_error(path2, "part missing", "missing-00002-of-00003.gguf: cannot open", "(part 2 of the 3 files of");
    }
    /* a part renamed: its name no longer says where the others are */
    snprintf(prefix, sizeof prefix, "%s/renamed", g_tmpdir);
    if (!write_split(src, prefix, 3, false, (struct fault_at){F_NONE, 0, 0})) {
        part_path(path, sizeof path, prefix, 1, 3);
        snprintf(path2, sizeof path2, "%s/renamed-part2.gguf", g_tmpdir);
        CHECK(rename(path, path2) == 0, "rename %s: %s", path, strerror(errno));
        expect_error(path2, "part renamed", "part 2 of a model split into 3 files", "-00002-of-00003.gguf");
        part_path(path, sizeof path, prefix, 0, 3);
        expect_error(path, "part renamed (first)", "renamed-00002-of-00003.gguf: cannot open", NULL);
    }
    /* faults written into the parts */
    static const struct {
        const char *name;
        struct fault_at f;
        int open_part; /* the part named to gguf_open */
        const char *s1, *s2;
    } k_faults[] = {
        {"split.no of another", {F_SPLIT_NO, 2, 0}, 0, "its keys say part 1 of 3", "its name part 3 of 3"},
        {"split.count of another", {F_SPLIT_COUNT, 1, 4}, 0, "its keys say part 2 of 4", "another model, or renamed"},
        {"no split keys", {F_NO_SPLIT_KEYS, 2, 0}, 0, "not a part of a split model", "part 3 of 3"},
        {"no tensor count", {F_NO_TENSOR_COUNT, 0, 0}, 1, "has no split.tensors.count", NULL},
        {"tensor count", {F_TENSOR_COUNT, 0, 5}, 0, "split.tensors.count is 5", "parts hold"},
        {"duplicate tensor", {F_DUP_TENSOR, 2, 0}, 2, "duplicate tensor name", "(in parts 1 and 3 of 3)"},
        {"split.no too large", {F_SPLIT_NO, 0, 7}, 0, "split.no is 7; allowed are 0..2", NULL},
        {"split.count zero", {F_SPLIT_COUNT, 1, 0}, 1, "split.count is 0; allowed are 1..", NULL},
    };
    for (size_t i = 0; i < sizeof k_faults / sizeof k_faults[0]; i++) {
        snprintf(prefix, sizeof prefix, "%s/fault%zu", g_tmpdir, i);
        if (write_split(src, prefix, 3, false, k_faults[i].f)) {
            g_failures++;
            continue;
        }
        part_path(path, sizeof path, prefix, k_faults[i].open_part, 3);
        expect_error(path, k_faults[i].name, k_faults[i].s1, k_faults[i].s2);
    }
    /* one part (split.count 1, as gguf-split writes a small model): a plain file, any name */
    snprintf(prefix, sizeof prefix, "%s/single", g_tmpdir);
    if (!write_split(src, prefix, 1, false, (struct fault_at){F_NONE, 0, 0})) {
        part_path(path, sizeof path, prefix, 0, 1);
        snprintf(path2, sizeof path2, "%s/single.gguf", g_tmpdir);
        CHECK(rename(path, path2) == 0, "rename %s: %s", path, strerror(errno));
        struct gguf_file *f = NULL;
        char err[1024];
        CHECK(gguf_open(path2, &f, err, sizeof err) == NM_OK, "one part: %s", err);
        if (f) check_same(src, f, 1, "one part");
        gguf_close(f);
        printf("  one part (split.count 1) opens as a plain file\n");
    }
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "--split") == 0) {
        struct gguf_file *src;
        char err[1024];
        if (gguf_open(argv[2], &src, err, sizeof err)) {
            fprintf(stderr, "test_gguf_split: %s\n", err);
            return 1;
        }
        const int n = atoi(argv[4]);
        const bool empty_first = argc >= 6 && strcmp(argv[5], "--empty-first") == 0;
        const int rc = n < 1 || n > 99 || (empty_first && n < 2)
                           ? (fprintf(stderr, "test_gguf_split: N must be 1..99 (2.. with --empty-first)\n"), 2)
                           : write_split(src, argv[3], n, empty_first, (struct fault_at){F_NONE, 0, 0});
        gguf_close(src);
        return rc;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: %s [--split SRC PREFIX N [--empty-first]]\n", argv[0]);
        return 2;
    }
    g_tmpdir = gguf_tmpdir_make("nm_gguf_split");
    /* the source: a tiny llama in Q4_K (blocks of 256) with an F32 norm per layer */
    char src_path[1024], err[1024];
    snprintf(src_path, sizeof src_path, "%s/src.gguf", g_tmpdir);
    struct pool *pool = pool_init(1, NULL);
    const struct mkmodel_params mp = {.preset = mkmodel_find_preset("tiny-llama"), .type = DTYPE_Q4_K, .output_type = -1,
                                      .seed = 7};
    NM_ASSERT(mp.preset);
    if (mkmodel_write(&mp, src_path, pool, err, sizeof err)) nm_fatal("mkmodel: %s", err);
    pool_free(pool);
    struct gguf_file *src;
    if (gguf_open(src_path, &src, err, sizeof err)) nm_fatal("%s", err);
    printf("test_gguf_split: %s, %llu tensors, %llu keys\n", src_path, (unsigned long long)src->n_tensors,
           (unsigned long long)src->n_kv);
    run_cases(src);
    gguf_close(src);
    printf(g_failures ? "test_gguf_split: %d FAILED\n" : "test_gguf_split: all passed\n", g_failures);
    return g_failures ? 1 : 0;
}
