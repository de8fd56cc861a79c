/* coll_reduce_sum (the blocked, vectorized rank-order sum under every allreduce, in the build
 * this CPU uses, and the baseline build) against its one-element-at-a-time twin
 * coll_reduce_sum_ref: f32 and bf16, 1 to 9 sources, odd lengths around the vector group and
 * block sizes, out aliasing a source, bit-exact. No MPI. */
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

typedef void reduce_fn(float *, const void *const *, int, bool, size_t);

/* Every length and source count, f32 and bf16, against the _ref; returns the checks made. */
static size_t check_build(reduce_fn *fn, const char *name) {
    static const size_t lens[] = {1, 2, 15, 16, 17, 31, 1023, 1024, 1025, 3000, 4099};
    enum { MAXS = 9, MAXN = 4099 };
    size_t checks = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        size_t es = bf16 ? 2 : 4;
        for (int nsrc = 1; nsrc <= MAXS; nsrc++) {
            for (size_t li = 0; li < NM_ARRAY_LEN(lens); li++) {
                size_t n = lens[li];
                void *src[MAXS];
                for (int r = 0; r < nsrc; r++) {
                    src[r] = nm_alloc(MAXN * 4, 64, "src");
                    for (size_t i = 0; i < n * es / 2; i++) {
                        uint16_t h = (uint16_t)rng();
                        if ((h & 0x7f80) == 0x7f80) h &= 0xbfff; /* no inf/NaN exponents */
                        ((uint16_t *)src[r])[i] = h;
                    }
                }
                float *got = nm_alloc(MAXN * 4, 64, "got"), *want = nm_alloc(MAXN * 4, 64, "want");
                fn(got, (const void *const *)src, nsrc, bf16, n);
                coll_reduce_sum_ref(want, (const void *const *)src, nsrc, bf16, n);
                if (memcmp(got, want, n * 4))
                    nm_fatal("coll_reduce_sum (%s) differs from _ref: %s, %d sources, n %zu", name,
                             bf16 ? "bf16" : "f32", nsrc, n);
                checks++;
                if (!bf16) { /* out aliasing the last source (an in-place allreduce) */
                    fn(src[nsrc - 1], (const void *const *)src, nsrc, false, n);
                    if (memcmp(src[nsrc - 1], want, n * 4))
                        nm_fatal("coll_reduce_sum (%s) in place differs from _ref: %d sources, "
                                 "n %zu",
                                 name, nsrc, n);
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

int main(void) {
    /* The oracle folds left in rank order: (2^24 + 1) + 1 rounds to 2^24 twice, whereas
     * 2^24 + (1 + 1) would be 2^24 + 2. */
    float a = 16777216.0f, b = 1.0f, w;
    const void *s3[3] = {&a, &b, &b};
    coll_reduce_sum_ref(&w, s3, 3, false, 1);
    NM_ASSERT(w == 16777216.0f);
    size_t checks = check_build(coll_reduce_sum, coll_reduce_isa());
    checks += check_build(coll_reduce_sum_generic, "generic");
    nm_log_info("test_coll_reduce: %zu checks passed (%s and generic builds)", checks,
                coll_reduce_isa());
    return 0;
}
