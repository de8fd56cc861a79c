/* coll_reduce_sum (the blocked, vectorized rank-order sum under every allreduce, in the build
 * this CPU uses, and the baseline build) against its one-element-at-a-time twin
 * coll_reduce_sum_ref: f32, bf16 and f64, 1 to 9 sources, odd lengths around the vector group
 * and block sizes, out aliasing a source, bit-exact. Also the cache-hint helpers of the shm
 * transport (the streaming copy against memcpy at every alignment, hint names). No MPI. */
#include <string.h>

#include "base.h"
#include "coll_impl.h"

static uint32_t rng_state = 12345;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

typedef void reduce_fn(void *, const void *const *, int, enum coll_dtype, size_t);
static const char *const dtype_names[] = {
    [COLL_DTYPE_F32] = "f32", [COLL_DTYPE_BF16] = "bf16", [COLL_DTYPE_F64] = "f64"};

/* Random bits for n elements of dt, never an inf/NaN exponent (a NaN's payload may depend on
 * operand order); every other exponent, denormals and both zeros are possible. */
static void fill(void *dst, enum coll_dtype dt, size_t n) {
    if (dt == COLL_DTYPE_F64) {
        for (size_t i = 0; i < n; i++) {
            uint64_t u = (uint64_t)rng() << 32 | rng();
            if ((u >> 52 & 0x7ff) == 0x7ff) u &= ~(1ull << 62);
            /* Half the elements within 2^+-40 of 1, where sums of a few terms round often */
            if (rng() & 1)
                u = (u & 0x800fffffffffffffull) | (uint64_t)(1023 - 40 + rng() % 80) << 52;
            ((uint64_t *)dst)[i] = u;
        }
        return;
    }
    for (size_t i = 0; i < n * coll_dtype_in_bytes(dt) / 2; i++) {
        uint16_t h = (uint16_t)rng();
        if ((h & 0x7f80) == 0x7f80) h &= 0xbfff; /* no inf/NaN exponents */
        ((uint16_t *)dst)[i] = h;
    }
}

/* Every length and source count, every dtype, against the _ref; returns the checks made. */
static size_t check_build(reduce_fn *fn, const char *name) {
    static const size_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 511, 512, 513, 1023, 1024, 1025,
                                  3000, 4099};
    enum { MAXS = 9, MAXN = 4099 };
    size_t checks = 0;
    for (int dt = 0; dt < 3; dt++) {
        size_t os = coll_dtype_out_bytes((enum coll_dtype)dt);
        for (int nsrc = 1; nsrc <= MAXS; nsrc++) {
            for (size_t li = 0; li < NM_ARRAY_LEN(lens); li++) {
                size_t n = lens[li];
                void *src[MAXS];
                for (int r = 0; r < nsrc; r++) {
                    src[r] = nm_alloc(MAXN * 8, 64, "src");
                    fill(src[r], (enum coll_dtype)dt, n);
                }
                void *got = nm_alloc(MAXN * 8, 64, "got"), *want = nm_alloc(MAXN * 8, 64, "want");
                fn(got, (const void *const *)src, nsrc, (enum coll_dtype)dt, n);
                coll_reduce_sum_ref(want, (const void *const *)src, nsrc, (enum coll_dtype)dt, n);
                if (memcmp(got, want, n * os))
                    nm_fatal("coll_reduce_sum (%s) differs from _ref: %s, %d sources, n %zu", name,
                             dtype_names[dt], nsrc, n);
                checks++;
                if (dt != COLL_DTYPE_BF16) { /* out aliasing the last source (in place) */
                    fn(src[nsrc - 1], (const void *const *)src, nsrc, (enum coll_dtype)dt, n);
                    if (memcmp(src[nsrc - 1], want, n * os))
                        nm_fatal("coll_reduce_sum (%s) in place differs from _ref: %s, %d "
                                 "sources, n %zu",
                                 name, dtype_names[dt], nsrc, n);
                    checks++;
                }
                for (int r = 0; r < nsrc; r++) nm_free(src[r]);
                nm_free(got);
                nm_free(want);
            }
        }
    }
    return checks;
}

/* coll_cache_copy_stream == memcpy for every head/tail alignment (the bytes around dst stay);
 * hint names round-trip. */
static size_t check_cache_helpers(void) {
    enum { MAXB = 1000 };
    unsigned char *a = nm_alloc(MAXB + 128, 64, "src"), *b = nm_alloc(MAXB + 256, 64, "dst"),
                  *w = nm_alloc(MAXB + 256, 64, "want");
    size_t checks = 0;
    for (size_t i = 0; i < MAXB + 128; i++) a[i] = (unsigned char)rng();
    static const size_t lens[] = {0, 1, 15, 63, 64, 65, 127, 128, 200, 640, 1000};
    for (size_t so = 0; so < 64; so += 7)
        for (size_t doff = 0; doff < 64; doff += 5)
            for (size_t li = 0; li < NM_ARRAY_LEN(lens); li++) {
                size_t n = lens[li];
                memset(b, 0x5a, MAXB + 256);
                memset(w, 0x5a, MAXB + 256);
                memcpy(w + 64 + doff, a + so, n);
                coll_cache_copy_stream(b + 64 + doff, a + so, n);
                coll_cache_stream_fence();
                if (memcmp(b, w, MAXB + 256))
                    nm_fatal("coll_cache_copy_stream differs from memcpy: %zu bytes, source "
                             "offset %zu, destination offset %zu",
                             n, so, doff);
                checks++;
            }
    char buf[64];
    unsigned all = COLL_SHM_HINT_NT_OUT | COLL_SHM_HINT_NT_SLOT | COLL_SHM_HINT_NT_SLOT_MID;
    coll_shm_hints_str(all, buf, sizeof buf);
    NM_ASSERT(coll_shm_hints_parse(buf) == all && coll_shm_hints_parse("none") == 0);
    NM_ASSERT(coll_shm_hints_parse("nt-slot,nt-out") ==
              (COLL_SHM_HINT_NT_SLOT | COLL_SHM_HINT_NT_OUT));
    nm_free(a);
    nm_free(b);
    nm_free(w);
    return checks + 3;
}

int main(void) {
    /* The oracle folds left in rank order: (2^24 + 1) + 1 rounds to 2^24 twice, whereas
     * 2^24 + (1 + 1) would be 2^24 + 2; the same in f64 with 2^53. */
    float a = 16777216.0f, b = 1.0f, w;
    const void *s3[3] = {&a, &b, &b};
    coll_reduce_sum_ref(&w, s3, 3, COLL_DTYPE_F32, 1);
    NM_ASSERT(w == 16777216.0f);
    double da = 9007199254740992.0, db = 1.0, dw;
    const void *d3[3] = {&da, &db, &db};
    coll_reduce_sum_ref(&dw, d3, 3, COLL_DTYPE_F64, 1);
    NM_ASSERT(dw == 9007199254740992.0);
    size_t checks = check_build(coll_reduce_sum, coll_reduce_isa());
    checks += check_build(coll_reduce_sum_generic, "generic");
    checks += check_cache_helpers();
    nm_log_info("test_coll_reduce: %zu checks passed (%s and generic builds, f32/bf16/f64; cache "
                "helpers)",
                checks, coll_reduce_isa());
    return 0;
}
