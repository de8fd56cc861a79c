/* Token sampling from logits: repetition penalty, top-k, top-p, min-p, temperature, then a
 * draw from a seeded generator (the same seed gives the same tokens), or greedy argmax when
 * temp <= 0. The order follows llama.cpp's default chain so settings mean the same. */
#ifndef NM_SAMPLER_H
#define NM_SAMPLER_H

#include <stdint.h>

struct sampler_params {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;    /* how many recent tokens the penalty looks at */
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
/* Choose the next token from logits[n_vocab] (not modified). */
int32_t sampler_sample(struct sampler *s, const float *logits);
/* Index of the largest logit (ties: the lowest index). */
int32_t sampler_argmax(const float *logits, int64_t n);

#endif
