/* Sampler: greedy picks the argmax; the same seed gives the same draws and another seed other
 * draws; top-k/top-p/min-p never return a token outside the set they keep; the repetition
 * penalty lowers recent tokens; draws follow the softmax distribution. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

static int failures;
#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            failures++;                                                                     \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                          \
            printf(__VA_ARGS__);                                                            \
            printf("\n  repro: ctest -R test_sampler --output-on-failure\n");              \
        }                                                                                   \
    } while (0)

#define NV 1000

static void fill_logits(float *l, unsigned seed) {
    srand(seed);
    for (int i = 0; i < NV; i++) l[i] = (float)rand() / (float)RAND_MAX * 10.0f - 5.0f;
}

static int rank_of(const float *l, int id) {
    int r = 0;
    for (int i = 0; i < NV; i++)
        if (l[i] > l[id] || (l[i] == l[id] && i < id)) r++;
    return r;
}

int main(void) {
    static float l[NV];
    fill_logits(l, 1);

    /* Greedy. */
    struct sampler_params p = sampler_default_params();
    p.temp = 0;
    struct sampler *s = sampler_init(&p, NV);
    int am = sampler_argmax(l, NV);
    CHECK(sampler_sample(s, l) == am, "greedy gave %d, argmax %d", sampler_sample(s, l), am);
    sampler_free(s);

    /* Same seed, same tokens; another seed, other tokens. */
    p = sampler_default_params();
    p.temp = 1.5f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    int a[64], b[64], c[64];
    for (int run = 0; run < 3; run++) {
        p.seed = run == 2 ? 99 : 42;
        s = sampler_init(&p, NV);
        for (int i = 0; i < 64; i++) (run == 0 ? a : run == 1 ? b : c)[i] = sampler_sample(s, l);
        sampler_free(s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0, "the same seed gave different tokens");
    CHECK(memcmp(a, c, sizeof a) != 0, "seeds 42 and 99 gave the same 64 tokens");

    /* top-k keeps the k best. */
    p = sampler_default_params();
    p.temp = 5.0f;
    p.top_k = 3;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    s = sampler_init(&p, NV);
    for (int i = 0; i < 500; i++) {
        int t = sampler_sample(s, l);
        CHECK(rank_of(l, t) < 3, "top-k 3 returned token %d of rank %d", t, rank_of(l, t));
    }
    sampler_free(s);

    /* min-p: nothing below min_p * p(best) at temperature 1. */
    p.top_k = 0;
    p.temp = 1.0f;
    p.min_p = 0.5f;
    s = sampler_init(&p, NV);
    float mx = l[am];
    for (int i = 0; i < 500; i++) {
        int t = sampler_sample(s, l);
        CHECK(expf(l[t] - mx) >= 0.5f - 1e-6f, "min-p 0.5 returned token %d with p/p_max %g", t, expf(l[t] - mx));
    }
    sampler_free(s);

    /* top-p: a token is kept only if the mass of better tokens is below top_p. */
    {
        float q[4] = {2.0f, 1.0f, 0.0f, -1.0f};
        double z = 0;
        for (int i = 0; i < 4; i++) z += exp(q[i]);
        double p0 = exp(2.0) / z; /* ~0.64 */
        struct sampler_params pp = {.temp = 1.0f, .top_k = 0, .top_p = (float)(p0 - 0.01), .min_p = 0,
                                    .repeat_penalty = 1.0f, .repeat_last_n = 0, .seed = 7};
        s = sampler_init(&pp, 4);
        for (int i = 0; i < 200; i++) CHECK(sampler_sample(s, q) == 0, "top-p below p(best) must keep only the best");
        sampler_free(s);
    }

    /* Draw frequencies follow the softmax (4 tokens, temperature 1, 20000 draws). */
    {
        float q[4] = {1.0f, 0.5f, 0.0f, -0.5f};
        double z = 0, expect[4];
        for (int i = 0; i < 4; i++) z += exp(q[i]);
        for (int i = 0; i < 4; i++) expect[i] = exp(q[i]) / z;
        struct sampler_params pp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0, .repeat_penalty = 1.0f,
                                    .repeat_last_n = 0, .seed = 3};
        s = sampler_init(&pp, 4);
        int cnt[4] = {0};
        const int N = 20000;
        for (int i = 0; i < N; i++) cnt[sampler_sample(s, q)]++;
        for (int i = 0; i < 4; i++) {
            double f = (double)cnt[i] / N, sd = sqrt(expect[i] * (1 - expect[i]) / N);
            CHECK(fabs(f - expect[i]) < 5 * sd, "token %d drawn %.4f of the time, softmax says %.4f", i, f, expect[i]);
        }
        sampler_free(s);
    }

    /* Repetition penalty turns the greedy choice away from a recent token. */
    {
        float q[3] = {2.0f, 1.9f, 0.0f};
        struct sampler_params pp = {.temp = 0, .repeat_penalty = 1.5f, .repeat_last_n = 8};
        s = sampler_init(&pp, 3);
        CHECK(sampler_sample(s, q) == 0, "without history greedy picks 0");
        sampler_accept(s, 0);
        CHECK(sampler_sample(s, q) == 1, "after token 0, penalty 1.5 makes 2.0/1.5 < 1.9: expect 1");
        sampler_free(s);
    }

    printf("%s: test_sampler (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
