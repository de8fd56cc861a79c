/* Token sampling from logits: repetition, presence and frequency penalties, top-k, top-p, min-p, temperature, then a
 * draw from a seeded generator (the same seed gives the same tokens), or greedy argmax when
 * temp <= 0. The order follows llama.cpp's default chain so settings mean the same.
 *
 * With the output head split by vocabulary over ranks, each rank turns its slice of the logits
 * into candidates (penalty, then its own top-k: one candidate for greedy), the candidates are
 * gathered, rank 0 picks and broadcasts the token. Full logits cross ranks only when top-k is
 * off. One rank is the same path with one slice. */
#ifndef NM_SAMPLER_H
#define NM_SAMPLER_H

#include <stdint.h>

struct coll;

struct sampler_params {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;    /* how many recent tokens the penalties look at */
    float presence_penalty;  /* OpenAI's: subtracted once from a token seen among them; 0: off */
    float frequency_penalty; /* OpenAI's: subtracted per occurrence among them; 0: off */
    uint64_t seed;
};

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.0 over
 * the last 64 tokens. */
struct sampler_params sampler_default_params(void);

struct sampler;
struct sampler *sampler_init(const struct sampler_params *p, int64_t n_vocab);
void sampler_free(struct sampler *s);
/* Record a token of the context (prompt or generated) for the repetition penalty. */
void sampler_accept(struct sampler *s, int32_t token);
/* Choose the next token from logits[n_vocab] (not modified), on one rank. */
int32_t sampler_sample(struct sampler *s, const float *logits);

/* Collective: choose the next token from every rank's slice local[n_local] (vocabulary ids
 * v0 .. v0+n_local-1); every rank returns the same token. Every rank's sampler must have
 * accepted the same tokens. */
int32_t sampler_sample_dist(struct sampler *s, struct coll *c, const float *local, int64_t v0, int64_t n_local);
/* Candidates made elsewhere (the GPU stage's top-k, penalty applied): ids[n], logits[n] on
 * rank 0, n = 0 on the others. Collective: rank 0 picks with the remaining steps (top-k, top-p,
 * min-p, temperature, draw) and every rank returns its token. */
int32_t sampler_sample_candidates(struct sampler *s, struct coll *c, const int32_t *ids, const float *logits, int64_t n);
/* How many candidates a top-k made before sampling must hold for the same result as the full
 * logits: 1 for greedy, top_k when it is set and at most max_k; 0 when no such k exists. */
int sampler_candidates_needed(const struct sampler *s, int max_k);
/* The tokens the repetition penalty looks at (*n of them, in ring order) and its factor. */
const int32_t *sampler_penalty_tokens(const struct sampler *s, int *n, float *penalty);

/* Index of the largest logit (ties: the lowest index). */
int32_t sampler_argmax(const float *logits, int64_t n);

#endif
