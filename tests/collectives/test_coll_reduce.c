/* coll_reduce_sum (the blocked, vectorizable rank-order sum under every allreduce) against its
 * one-element-at-a-time twin coll_reduce_sum_ref: f32 and bf16, 1 to 9 sources, odd lengths
 * around the block size, out aliasing a source, bit-exact. No MPI. */
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

int main(void) {
    static const size_t lens[] = {1, 2, 15, 16, 17, 1023, 1024, 1025, 3000, 4099};
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
                coll_reduce_sum(got, (const void *const *)src, nsrc, bf16, n);
                coll_reduce_sum_ref(want, (const void *const *)src, nsrc, bf16, n);
                if (memcmp(got, want, n * 4))
                    nm_fatal("coll_reduce_sum differs from _ref: %s, %d sources, n %zu",
                             bf16 ? "bf16" : "f32", nsrc, n);
                checks++;
                if (!bf16) { /* out aliasing the last source (an in-place allreduce) */
                    coll_reduce_sum(src[nsrc - 1], (const void *const *)src, nsrc, false, n);
                    if (memcmp(src[nsrc - 1], want, n * 4))
                        nm_fatal("coll_reduce_sum in place differs from _ref: %d sources, n %zu",
                                 nsrc, n);
                    checks++;
                }
                for (int r = 0; r < nsrc; r++) nm_free(src[r]);
                nm_free(got);
                nm_free(want);
            }
        }
    }
    /* The oracle folds left in rank order: (2^24 + 1) + 1 rounds to 2^24 twice, whereas
     * 2^24 + (1 + 1) would be 2^24 + 2. */
    float a = 16777216.0f, b = 1.0f, w;
    const void *s3[3] = {&a, &b, &b};
    coll_reduce_sum_ref(&w, s3, 3, false, 1);
    NM_ASSERT(w == 16777216.0f);
    coll_reduce_sum(&w, s3, 3, false, 1);
    NM_ASSERT(w == 16777216.0f);
    nm_log_info("test_coll_reduce: %zu checks passed", checks);
    return 0;
}
