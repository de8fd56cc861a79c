/* The worker pool's work division (kernels/pool.h): pool_split's even ranges and pool_claim's
 * guided claims. Every index of [0, n) must be handed out exactly once, ranges must start on the
 * alignment, no claim may exceed the batch, and, claimed in turn, the sizes must never grow and,
 * for more than one thread, end at the alignment (the shrinking that lets the threads end
 * together). The claims are
 * also taken by the threads of a real pool at once, each marking what it got. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"

static int g_fail = 0;
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fprintf(stderr, "\n");                                                                \
            g_fail++;                                                                             \
        }                                                                                         \
    } while (0)

static void split_case(long n, long align, int nth) {
    long next = 0;
    for (int i = 0; i < nth; i++) {
        long lo, hi;
        pool_split(n, align, i, nth, &lo, &hi);
        CHECK(lo == next && lo <= hi, "pool_split n=%ld align=%ld nth=%d: worker %d got [%ld, %ld), expected it to start at %ld",
              n, align, nth, i, lo, hi, next);
        CHECK(lo % align == 0 || lo == n, "pool_split n=%ld align=%ld: worker %d starts at %ld", n, align, i, lo);
        next = hi;
    }
    CHECK(next == n, "pool_split n=%ld align=%ld nth=%d: the ranges end at %ld", n, align, nth, next);
}

/* One thread takes every claim of a job planned for nth: ranges in order, aligned, within the
 * batch, never growing, the last one of the alignment's size (or what is left) when nth > 1. */
static void claim_serial_case(long n, long batch, long align, int nth) {
    struct pool_claims c;
    pool_claims_init(&c, n, batch, align, nth);
    long next = 0, prev = -1, lo, hi, last = 0;
    const long cap = batch < align ? align : (batch + align - 1) / align * align;
    while (pool_claim(&c, &lo, &hi)) {
        CHECK(lo == next && hi > lo && hi <= n, "claims n=%ld batch=%ld align=%ld nth=%d: [%ld, %ld) after %ld", n, batch,
              align, nth, lo, hi, next);
        CHECK(lo % align == 0, "claims n=%ld align=%ld: a range starts at %ld", n, align, lo);
        CHECK(hi - lo <= cap, "claims n=%ld batch=%ld align=%ld: a range of %ld", n, batch, align, hi - lo);
        CHECK(prev < 0 || hi - lo <= prev || hi == n, "claims n=%ld batch=%ld nth=%d: a range of %ld after one of %ld", n,
              batch, nth, hi - lo, prev);
        prev = hi - lo;
        last = hi - lo;
        next = hi;
    }
    CHECK(next == n, "claims n=%ld batch=%ld align=%ld nth=%d: the ranges end at %ld", n, batch, align, nth, next);
    CHECK(n == 0 || nth == 1 || last <= align, "claims n=%ld batch=%ld align=%ld nth=%d: the last range has %ld", n, batch, align,
          nth, last);
    CHECK(!pool_claim(&c, &lo, &hi), "claims n=%ld: a claim after the end", n);
}

/* The threads of a pool claim at once; each index must be marked once. */
struct claim_job {
    struct pool_claims c;
    atomic_int *hits;
    atomic_int ranges;
};
static void claim_worker(void *ctx, int ith, int nth) {
    (void)ith, (void)nth;
    struct claim_job *j = ctx;
    long lo, hi;
    while (pool_claim(&j->c, &lo, &hi)) {
        for (long i = lo; i < hi; i++) atomic_fetch_add_explicit(&j->hits[i], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&j->ranges, 1, memory_order_relaxed);
    }
}

static void claim_pool_case(struct pool *pool, long n, long batch, long align) {
    struct claim_job j;
    j.hits = calloc((size_t)n + 1, sizeof *j.hits);
    if (!j.hits) abort();
    for (long i = 0; i < n; i++) atomic_init(&j.hits[i], 0);
    atomic_init(&j.ranges, 0);
    pool_claims_init(&j.c, n, batch, align, pool_size(pool));
    pool_run(pool, claim_worker, &j);
    long bad = 0;
    for (long i = 0; i < n; i++) bad += atomic_load(&j.hits[i]) != 1;
    CHECK(bad == 0, "claims by %d threads, n=%ld batch=%ld align=%ld: %ld indices not handed out exactly once",
          pool_size(pool), n, batch, align, bad);
    free(j.hits);
}

int main(void) {
    const long ns[] = {0, 1, 2, 7, 16, 17, 100, 896, 1000, 4096, 14336};
    const long aligns[] = {1, 2, 16, 32};
    const int nths[] = {1, 2, 3, 16};
    for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (size_t t = 0; t < sizeof nths / sizeof *nths; t++) {
                const long n = ns[i], al = aligns[a];
                const int nth = nths[t];
                split_case(n, al, nth);
                claim_serial_case(n, n / (4L * nth), al, nth);
                claim_serial_case(n, 16, al, nth);
                claim_serial_case(n, 0, al, nth);
            }
    struct pool *pool = pool_init(4, NULL);
    for (int rep = 0; rep < 20; rep++)
        for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++)
            for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) claim_pool_case(pool, ns[i], ns[i] / 16, aligns[a]);
    pool_free(pool);
    if (g_fail) {
        fprintf(stderr, "test_pool: %d checks failed\n", g_fail);
        return 1;
    }
    printf("test_pool: pool_split and pool_claim hand out every index once, aligned, claims shrinking to the alignment\n");
    return 0;
}
