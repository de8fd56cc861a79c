/* numallm perplexity: llama.cpp's method, so the numbers compare with its perplexity tool. The
 * text is tokenized once (with BOS when the model adds one), cut into chunks of n_ctx tokens;
 * each chunk is evaluated from an empty KV cache (its first token replaced by BOS when the model
 * adds one), and the second half of each chunk is scored: the negative log-likelihood of token
 * j+1 given the logits at j, for j from n_ctx/2 to n_ctx-2. The running estimate is printed per
 * chunk, then PPL = exp(mean NLL) with the uncertainty ppl * sd(NLL) / sqrt(count - 1).
 *
 * With the output head split by vocabulary, each rank computes its slice's max, sum of
 * exponentials and (when it owns it) the target logit; three collectives per batch combine them,
 * so full logits never cross ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "coll.h"
#include "session.h"

static void ppl_usage(FILE *f) {
    fprintf(f,
            "usage: numallm perplexity [-m MODEL.gguf] -f TEXT [-c CTX] [-b BATCH] [-t THREADS] [--chunks N]\n"
            "                          [--ranks auto|N] [--dry-run]\n"
            "\n"
            "  -f, --file     the text to score\n"
            "  -c, --ctx-size tokens per chunk (default 512); the second half of each chunk is scored\n"
            "  -b, --batch-size tokens per forward pass (default: min(512, CTX))\n"
            "  --chunks N     score at most N chunks (default: all)\n%s", launch_flags_help());
}

struct nll {
    double sum, sum2;
    long count;
};

/* Score rows [0, rows) of one batch: logits local [rows][vl] predict targets[0..rows). */
static void score(struct session *s, const float *local, const int32_t *targets, int rows, struct nll *acc) {
    const struct range v = s->m->shard.vocab;
    const int64_t vl = range_len(v);
    const int nr = s->nranks;
    float *maxes = malloc((size_t)rows * (size_t)nr * sizeof(float));
    float *sums = malloc((size_t)rows * 2 * sizeof(float));
    float *mine = malloc((size_t)rows * sizeof(float));
    NM_ASSERT(maxes && sums && mine);
    for (int j = 0; j < rows; j++) {
        const float *l = local + (int64_t)j * vl;
        float m = -INFINITY; /* an empty slice (the head on the GPU rank) has no maximum */
        for (int64_t i = 0; i < vl; i++) m = l[i] > m ? l[i] : m;
        mine[j] = m;
    }
    coll_allgather(s->coll, mine, (size_t)rows * sizeof(float), maxes); /* [rank][rows] */
    for (int j = 0; j < rows; j++) {
        float m = maxes[j];
        for (int r = 1; r < nr; r++) m = maxes[(size_t)r * rows + j] > m ? maxes[(size_t)r * rows + j] : m;
        const float *l = local + (int64_t)j * vl;
        double se = 0;
        for (int64_t i = 0; i < vl; i++) se += exp((double)l[i] - m);
        const int64_t t = targets[j] - v.begin;
        sums[2 * j] = (float)se;
        sums[2 * j + 1] = t >= 0 && t < vl ? l[t] - m : 0.0f; /* exactly one rank owns the target */
        mine[j] = m;
    }
    coll_allreduce_sum_f32(s->coll, sums, sums, (size_t)rows * 2);
    for (int j = 0; j < rows; j++) {
        const double nll = -((double)sums[2 * j + 1] - log((double)sums[2 * j]));
        acc->sum += nll;
        acc->sum2 += nll * nll;
        acc->count++;
    }
    free(maxes);
    free(sums);
    free(mine);
}

int cmd_perplexity(int argc, char **argv) {
    struct session_opts so = {.n_batch = 0, .kv_type = DTYPE_F16};
    const char *file = NULL, *v;
    long long n_ctx = 512, n_batch = 0, max_chunks = -1;
    struct launch_request launch;
    launch_request_init(&launch, argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int lr = launch_parse_flag(argc, argv, &i, &launch); /* --ranks, -t, --dry-run, ... */
        if (lr < 0) return 1;
        if (lr > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            ppl_usage(stdout);
            return 0;
        }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) launch.model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 8, 1 << 20, &n_ctx)) return 1; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (!cli_int(a, v, 1, 1 << 16, &n_batch)) return 1; }
        else if (!strcmp(a, "--chunks")) { if (!cli_int(a, v, 1, 1 << 30, &max_chunks)) return 1; }
        else {
            fprintf(stderr, "error: unknown option '%s' for perplexity\n", a);
            return 1;
        }
    }
    if (!file) {
        fprintf(stderr, "error: perplexity needs -f TEXT\n\n");
        ppl_usage(stderr);
        return 1;
    }
    so.n_batch = (int)(n_batch > 0 ? NM_MIN(n_batch, n_ctx) : NM_MIN(512, n_ctx));
    int rc = session_launch(&launch, &so);
    if (rc >= 0) return rc;

    struct session s;
    char err[1024];
    int32_t *tokens = NULL;
    size_t n_tokens = 0, len = 0;
    char *text = NULL;
    float *logits = NULL;
    enum nm_status st = session_open(&s, &so, err, sizeof err);
    if (st) goto out;
    if (!(text = session_read_file(file, &len))) {
        st = nm_errf(err, sizeof err, NM_ERR_IO, "%s: cannot read", file);
        goto out;
    }
    if ((st = session_tokenize(&s, text, len, true, &tokens, &n_tokens, err, sizeof err))) goto out;
    if ((long long)n_tokens < 2 * n_ctx) {
        st = nm_errf(err, sizeof err, NM_ERR_ARGS,
                     "%s has %zu tokens; perplexity with a context of %lld needs at least %lld (lower -c)", file,
                     n_tokens, n_ctx, 2 * n_ctx);
        goto out;
    }
    if ((st = session_engine(&s, &so, n_ctx, err, sizeof err))) goto out;
    const bool add_bos = tok_add_bos(s.tok) && tok_bos(s.tok) >= 0;
    long n_chunks = (long)(n_tokens / (size_t)n_ctx);
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = (long)max_chunks;
    const int first = (int)(n_ctx / 2);
    logits = engine_logits_buffer(s.e, so.n_batch);
    if (s.rank == 0)
        nm_log_info("perplexity: %zu tokens, %ld chunks of %lld, batch %d, scoring positions %d..%lld of each", n_tokens,
                    n_chunks, n_ctx, so.n_batch, first, n_ctx - 2);
    struct nll acc = {0};
    const double t0 = nm_time_s();
    for (long c = 0; c < n_chunks; c++) {
        int32_t *chunk = tokens + (size_t)c * (size_t)n_ctx;
        const int32_t saved = chunk[0];
        if (add_bos) chunk[0] = tok_bos(s.tok);
        engine_truncate(s.e, 0);
        for (int b0 = 0; b0 < n_ctx && !st; b0 += so.n_batch) {
            const int nb = (int)NM_MIN((long long)so.n_batch, n_ctx - b0);
            st = engine_eval(s.e, chunk + b0, nb, true, logits, err, sizeof err);
            /* Rows j of this batch predict chunk[b0 + j + 1]; score j in [first, n_ctx - 1). */
            const int lo = NM_MAX(first, b0), hi = (int)NM_MIN((long long)b0 + nb, n_ctx - 1);
            if (!st && lo < hi) {
                score(&s, logits + (size_t)(lo - b0) * (size_t)range_len(s.m->shard.vocab), chunk + lo + 1, hi - lo,
                      &acc);
            }
        }
        chunk[0] = saved;
        if (st) goto out;
        if (s.rank == 0) {
            if (c == 0) {
                const double per = nm_time_s() - t0;
                nm_log_info("perplexity: %.2f s per chunk, about %.1f minutes in all", per, per * (double)n_chunks / 60);
            }
            printf("[%ld]%.4f,", c + 1, exp(acc.sum / (double)acc.count));
            fflush(stdout);
        }
    }
    if (s.rank == 0) {
        const double mean = acc.sum / (double)acc.count, ppl = exp(mean);
        double var = acc.sum2 / (double)acc.count - mean * mean, unc = 0;
        if (var > 0 && acc.count > 1) unc = ppl * sqrt(var / (double)(acc.count - 1));
        printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
        nm_log_info("perplexity: %ld tokens scored in %.2f s (%.1f tokens/s evaluated)", acc.count, nm_time_s() - t0,
                    (double)n_chunks * (double)n_ctx / (nm_time_s() - t0));
    }
out:
    if (st && s.rank == 0) fprintf(stderr, "error: %s\n", err);
    free(tokens);
    free(text);
    session_close(&s);
    return st ? 1 : 0;
}
