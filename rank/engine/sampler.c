/* Sampling (see sampler.h). Candidates are (id, logit) pairs narrowed step by step; the
 * random generator is splitmix64-seeded xoshiro256**, so a seed fixes the draws. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "coll.h"
#include "ops.h"

struct cand {
    int32_t id;
    float logit;
    float p;
};

struct sampler {
    struct sampler_params p;
    int64_t n_vocab;
    struct cand *cands;
    int32_t *recent; /* ring of the last repeat_last_n tokens */
    int n_recent, recent_pos;
    uint64_t rng[4];
};

struct sampler_params sampler_default_params(void) {
    return (struct sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                   .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0x5eed};
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

struct sampler *sampler_init(const struct sampler_params *p, int64_t n_vocab) {
    struct sampler *s = calloc(1, sizeof *s);
    NM_ASSERT(s);
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->recent = calloc((size_t)NM_MAX(p->repeat_last_n, 1), sizeof *s->recent);
    NM_ASSERT(s->cands && s->recent);
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void sampler_free(struct sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->recent);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t token) {
    if (s->p.repeat_last_n <= 0) return;
    s->recent[s->recent_pos] = token;
    s->recent_pos = (s->recent_pos + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

int32_t sampler_argmax(const float *logits, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

static int cmp_cand_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* Reorder c[0..n) so that its k best candidates (in cmp_cand_desc order) come first, by
 * quickselect with median-of-three pivots. */
static void select_top(struct cand *c, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cmp_cand_desc(&c[mid], &c[lo]) < 0) { struct cand t = c[mid]; c[mid] = c[lo]; c[lo] = t; }
        if (cmp_cand_desc(&c[hi], &c[lo]) < 0) { struct cand t = c[hi]; c[hi] = c[lo]; c[lo] = t; }
        if (cmp_cand_desc(&c[hi], &c[mid]) < 0) { struct cand t = c[hi]; c[hi] = c[mid]; c[mid] = t; }
        const struct cand pivot = c[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand_desc(&c[i], &pivot) < 0) i++;
            while (cmp_cand_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* Softmax of the first n candidates' logits into p (they are sorted, so [0] is the max). */
static void softmax_cands(struct cand *c, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - c[0].logit);
        sum += c[i].p;
    }
    for (int64_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* Step 1, on each rank's slice: repetition penalty (as llama.cpp: divide positive logits,
 * multiply negative ones) and presence/frequency penalties (as llama.cpp and OpenAI: subtract
 * count * frequency + presence from a token seen count > 0 times), then keep the slice's best candidates: 1 for greedy, top_k when set,
 * else all. Returns the count written to s->cands. */
static int64_t local_candidates(struct sampler *s, const float *logits, int64_t v0, int64_t n) {
    const struct sampler_params *p = &s->p;
    const bool penalties = p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (p->temp <= 0 && !penalties && n > 0) {
        /* greedy without penalties: the argmax of the logits themselves, without copying the
         * vocabulary into the candidate list, in cmp_cand_desc's order (op_argmax: vectors) */
        const int64_t best = op_argmax(logits, n);
        s->cands[0] = (struct cand){.id = (int32_t)(v0 + best), .logit = logits[best], .p = 0};
        return 1;
    }
    for (int64_t i = 0; i < n; i++) s->cands[i] = (struct cand){.id = (int32_t)(v0 + i), .logit = logits[i]};
    if (penalties) {
        for (int r = 0; r < s->n_recent; r++) {
            const int64_t i = s->recent[r] - v0;
            if (i < 0 || i >= n) continue;
            struct cand *c = &s->cands[i];
            if (c->p != 0) continue; /* already penalized: p doubles as a visited mark here */
            int count = 0;
            for (int r2 = 0; r2 < s->n_recent; r2++) count += s->recent[r2] == s->recent[r];
            if (p->repeat_penalty != 1.0f)
                c->logit = c->logit > 0 ? c->logit / p->repeat_penalty : c->logit * p->repeat_penalty;
            c->logit -= (float)count * p->frequency_penalty + p->presence_penalty;
            c->p = 1;
        }
    }
    int64_t keep = n;
    if (p->temp <= 0) keep = 1;
    else if (p->top_k > 0 && p->top_k < n) keep = p->top_k;
    if (keep == 1) {
        int64_t best = 0; /* greedy: one scan (ties: the lowest id, as everywhere) */
        for (int64_t i = 1; i < n; i++)
            if (cmp_cand_desc(&s->cands[i], &s->cands[best]) < 0) best = i;
        s->cands[0] = s->cands[best];
    } else if (keep < n) {
        select_top(s->cands, n, keep); /* O(n): a full sort of 150k logits costs ~10 ms */
    }
    for (int64_t i = 0; i < keep; i++) s->cands[i].p = 0;
    return keep;
}

/* Step 2, on the gathered candidates: top-k, top-p, min-p, temperature, draw. */
static int32_t pick(struct sampler *s, struct cand *c, int64_t n) {
    const struct sampler_params *p = &s->p;
    if (p->temp <= 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (cmp_cand_desc(&c[i], &c[best]) < 0) best = i;
        return c[best].id;
    }
    if (p->top_k > 0 && p->top_k < n) {
        select_top(c, n, p->top_k);
        n = p->top_k;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_cand_desc);
    softmax_cands(c, n);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int64_t keep = n;
        for (int64_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        const float floor = c[0].p * p->min_p;
        int64_t keep = 1;
        while (keep < n && c[keep].p >= floor) keep++;
        n = keep;
    }
    for (int64_t i = 0; i < n; i++) c[i].logit /= p->temp;
    softmax_cands(c, n);
    double r = rng_uniform(s->rng), cum = 0;
    for (int64_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) return c[i].id;
    }
    return c[n - 1].id;
}

int32_t sampler_sample(struct sampler *s, const float *logits) {
    return pick(s, s->cands, local_candidates(s, logits, 0, s->n_vocab));
}

/* Gather every rank's n candidates (in s->cands), pick on rank 0, broadcast. */
static int32_t gather_and_pick(struct sampler *s, struct coll *c, int64_t n) {
    const int nr = coll_size(c), rank = coll_rank(c);
    int64_t *counts = malloc((size_t)nr * sizeof *counts);
    size_t *bytes = malloc((size_t)nr * sizeof *bytes);
    NM_ASSERT(counts && bytes);
    coll_allgather(c, &n, sizeof n, counts);
    int64_t total = 0;
    for (int r = 0; r < nr; r++) {
        bytes[r] = (size_t)counts[r] * sizeof(struct cand);
        total += counts[r];
    }
    struct cand *all = malloc((size_t)total * sizeof *all);
    NM_ASSERT(all);
    coll_allgatherv(c, s->cands, bytes, all);
    int32_t token = 0;
    if (rank == 0) token = pick(s, all, total);
    coll_bcast(c, &token, sizeof token, 0);
    free(all);
    free(bytes);
    free(counts);
    return token;
}

int32_t sampler_sample_dist(struct sampler *s, struct coll *c, const float *local, int64_t v0, int64_t n_local) {
    return gather_and_pick(s, c, local_candidates(s, local, v0, n_local));
}

int32_t sampler_sample_candidates(struct sampler *s, struct coll *c, const int32_t *ids, const float *logits, int64_t n) {
    NM_ASSERT(n >= 0 && n <= s->n_vocab);
    for (int64_t i = 0; i < n; i++) s->cands[i] = (struct cand){.id = ids[i], .logit = logits[i]};
    return gather_and_pick(s, c, n);
}

int sampler_candidates_needed(const struct sampler *s, int max_k) {
    if (s->p.presence_penalty != 0 || s->p.frequency_penalty != 0) return 0; /* the stage knows only repeat_penalty */
    if (s->p.temp <= 0) return 1;
    if (s->p.top_k > 0 && s->p.top_k <= max_k && s->p.top_k <= s->n_vocab) return s->p.top_k;
    return 0;
}

const int32_t *sampler_penalty_tokens(const struct sampler *s, int *n, float *penalty) {
    *n = s->p.repeat_penalty != 1.0f ? s->n_recent : 0;
    *penalty = s->p.repeat_penalty;
    return s->recent;
}
