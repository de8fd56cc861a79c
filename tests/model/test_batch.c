/* Batch invariance of the engine (rank/engine/forward.h): a row's logits must not depend on the other
 * rows of its batch. A tiny model of the given preset and type holds 16 sequences (16 slots of
 * one KV cache). Each sequence (prompts of 1 to 23 tokens) first runs alone, in a slot that is
 * not its own, with its whole prompt in one batch, then greedy decode one row per step; its
 * logits (every prompt row and every step) are kept. Then all 16 run together as a server would
 * run them: they arrive at different steps, each step's batch takes one decode row per running
 * sequence and prompt pieces of waiting ones under a budget that cycles through 1, 5, 16, 40 and
 * 23 rows (so batches of 1 to 40 rows, prompts cut at every place the budget falls), following
 * the contract of forward.h (a prompt piece of one row only when the whole prompt is one row).
 * Every row's logits must equal those of the run alone bit for bit, and the greedy tokens must
 * be the same. Runs on one rank, or on several under mpirun (each rank compares its vocabulary
 * slice). Self-check: two different sequences' logits must differ, or the comparison is vacuous.
 *
 * usage: test_batch PRESET TYPE DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "forward.h"
#include "model.h"
#include "sampler.h"
#include "synth_model.h"

enum { N_SEQ = 16, N_GEN = 8, N_BATCH = 64, MAX_PROMPT = 23 };

struct seq {
    int32_t tok[MAX_PROMPT + N_GEN]; /* prompt, then generated tokens */
    int n_prompt, n_tok;             /* n_tok: tokens known (prompt + generated so far) */
    int n_done;                      /* tokens evaluated */
    int arrive;                      /* the step at which it joins (batched run) */
    float *alone;                    /* [n_prompt + N_GEN - 1][n_local] logits of every row, run alone */
    int32_t gen_alone[N_GEN];
};

static int g_rank;
static char g_repro[600];

static int fail(const char *what) {
    fprintf(stderr, "[r%d] FAIL: %s\n  reproduce: %s\n", g_rank, what, g_repro);
    return 1;
}

/* Greedy next token from one row of this rank's logits slice (the sampler is greedy); collective. */
static int32_t greedy(struct engine *e, struct sampler *smp, const float *row) { return engine_sample(e, smp, row); }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PRESET TYPE DIR\n", argv[0]);
        return 2;
    }
    struct coll_options co = {.quiet = true};
    struct coll *coll = coll_init(&co);
    g_rank = coll_rank(coll);
    const int nranks = coll_size(coll);
    snprintf(g_repro, sizeof g_repro, "%s%s %s %s %s", nranks > 1 ? "mpirun -np 2 " : "", argv[0], argv[1], argv[2],
             argv[3]);
    char err[512];
    struct pool *pool = pool_init(nranks > 1 ? 1 : 2, NULL); /* 2 cores in CI */
    struct synth_model sm;
    const int st = synth_model_open(argv[1], argv[2], argv[3], 5, false, pool, coll, &sm);
    if (st) return st;
    struct model *m = sm.m;
    const enum dtype ti = sm.type;
    const int64_t V = m->cfg.n_vocab, nl = range_len(m->shard.vocab);
    struct engine *e;
    const struct engine_params ep = {.n_ctx = N_SEQ * 32, .n_seq = N_SEQ, .n_batch = N_BATCH,
                                     .kv_type = ti == DTYPE_F32 ? DTYPE_F32 : DTYPE_F16};
    if (engine_init(&e, m, pool, coll, &ep, err, sizeof err)) {
        fprintf(stderr, "engine_init: %s\n", err);
        return 1;
    }
    struct sampler_params sp = sampler_default_params();
    sp.temp = 0;
    struct sampler *smp = sampler_init(&sp, V);

    struct seq seqs[N_SEQ];
    uint64_t rng = 12345;
    for (int s = 0; s < N_SEQ; s++) {
        struct seq *q = &seqs[s];
        memset(q, 0, sizeof *q);
        q->n_prompt = 1 + (s * 7) % MAX_PROMPT; /* 1 .. 23, two of them 1 */
        q->arrive = s / 2;
        for (int i = 0; i < q->n_prompt; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            q->tok[i] = (int32_t)((rng >> 33) % (uint64_t)V);
        }
        q->alone = malloc((size_t)(q->n_prompt + N_GEN - 1) * (size_t)nl * sizeof(float));
    }
    float *logits = malloc((size_t)N_BATCH * (size_t)nl * sizeof(float));
    int32_t tok[N_BATCH], seq[N_BATCH];
    int64_t pos[N_BATCH];
    bool want[N_BATCH];
    int row_seq[N_BATCH], row_idx[N_BATCH];

    /* ---- alone: sequence s in slot (s + 1) % N_SEQ, the whole prompt in one batch ---- */
    for (int s = 0; s < N_SEQ; s++) {
        struct seq *q = &seqs[s];
        const int slot = (s + 1) % N_SEQ;
        for (int i = 0; i < q->n_prompt + N_GEN - 1; i++) {
            const int n = i == 0 ? q->n_prompt : 1;
            for (int r = 0; r < n; r++) {
                tok[r] = q->tok[i + r];
                pos[r] = i + r;
                seq[r] = slot;
                want[r] = true;
            }
            const struct engine_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .logits = want};
            if (engine_eval_batch(e, &b, logits, err, sizeof err)) return fail(err);
            memcpy(q->alone + (size_t)i * (size_t)nl, logits, (size_t)n * (size_t)nl * sizeof(float));
            i += n - 1;
            const int32_t next = greedy(e, smp, logits + (size_t)(n - 1) * (size_t)nl);
            q->gen_alone[i + 1 - q->n_prompt] = next;
            if (i + 1 < q->n_prompt + N_GEN - 1) q->tok[i + 1] = next;
        }
        engine_seq_clear(e, slot);
    }

    /* ---- together: arrivals, decode rows and prompt pieces under a cycling budget ---- */
    static const int budgets[] = {1, 5, 16, 40, 23};
    int bad = 0, steps = 0, max_rows = 0, min_rows = N_BATCH;
    int32_t gen[N_SEQ][N_GEN];
    for (int s = 0; s < N_SEQ; s++) seqs[s].n_tok = seqs[s].n_prompt;
    for (int step = 0; step < 400; step++) {
        const int budget = budgets[step % 5];
        int n = 0;
        bool all_done = true;
        for (int s = 0; s < N_SEQ; s++) all_done &= seqs[s].n_done == seqs[s].n_prompt + N_GEN - 1;
        if (all_done) break;
        /* Decode rows first (one per running sequence), then prompt pieces. */
        for (int pass = 0; pass < 2; pass++) {
            for (int s = 0; s < N_SEQ && n < budget; s++) {
                struct seq *q = &seqs[s];
                const int total = q->n_prompt + N_GEN - 1; /* tokens ever evaluated */
                if (step < q->arrive || q->n_done >= total || q->n_done >= q->n_tok) continue;
                const bool prefill = q->n_done < q->n_prompt;
                if (prefill != (pass == 1)) continue;
                int piece = prefill ? NM_MIN(q->n_prompt - q->n_done, budget - n) : 1;
                const int left = q->n_prompt - q->n_done;
                if (prefill && left > 1) { /* forward.h: no one-row piece of a longer prompt */
                    if (piece == left - 1) piece--;
                    if (piece < 2) continue;
                }
                for (int r = 0; r < piece; r++, n++) {
                    tok[n] = q->tok[q->n_done + r];
                    pos[n] = q->n_done + r;
                    seq[n] = s;
                    want[n] = true;
                    row_seq[n] = s;
                    row_idx[n] = q->n_done + r;
                }
                q->n_done += piece;
            }
        }
        if (n == 0) continue;
        steps++;
        max_rows = NM_MAX(max_rows, n);
        min_rows = NM_MIN(min_rows, n);
        const struct engine_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .logits = want};
        if (engine_eval_batch(e, &b, logits, err, sizeof err)) return fail(err);
        for (int r = 0; r < n; r++) {
            struct seq *q = &seqs[row_seq[r]];
            const float *got = logits + (size_t)r * (size_t)nl, *ref = q->alone + (size_t)row_idx[r] * (size_t)nl;
            if (memcmp(got, ref, (size_t)nl * sizeof(float)) != 0) {
                float worst = 0;
                for (int64_t j = 0; j < nl; j++) worst = NM_MAX(worst, got[j] > ref[j] ? got[j] - ref[j] : ref[j] - got[j]);
                if (bad++ < 5)
                    fprintf(stderr, "[r%d] sequence %d position %d (batch of %d rows, row %d): logits differ from "
                            "the run alone (max |diff| %g)\n", g_rank, row_seq[r], row_idx[r], n, r, worst);
            }
            /* The row of a sequence's last evaluated token gives its next token. */
            if (row_idx[r] + 1 == q->n_tok && q->n_tok < q->n_prompt + N_GEN) {
                const int32_t next = greedy(e, smp, got);
                gen[row_seq[r]][q->n_tok - q->n_prompt] = next;
                if (q->n_tok < q->n_prompt + N_GEN - 1) q->tok[q->n_tok] = next;
                q->n_tok++;
            }
        }
    }
    for (int s = 0; s < N_SEQ; s++) {
        if (seqs[s].n_tok != seqs[s].n_prompt + N_GEN) return fail("the batched run did not finish every sequence");
        if (memcmp(gen[s], seqs[s].gen_alone, sizeof gen[s]) != 0) {
            fprintf(stderr, "[r%d] sequence %d: greedy tokens differ from the run alone\n", g_rank, s);
            bad++;
        }
    }
    /* Self-check: sequences 2 and 3 have different prompts; their first rows' logits differ. */
    const bool vacuous = memcmp(seqs[2].alone, seqs[3].alone, (size_t)nl * sizeof(float)) == 0;
    double flags[2] = {bad, vacuous};
    coll_allreduce_sum_f64(coll, flags, flags, 2);
    int rc = 0;
    if (flags[1] > 0) rc = fail("self-check: two different prompts gave the same logits; the comparison is vacuous");
    else if (flags[0] > 0) rc = fail("a row's logits depend on the rows batched with it");
    else if (g_rank == 0)
        printf("test_batch: PASS %s %s, %d ranks: %d sequences, %d steps of %d..%d rows, every row's logits "
               "bit-identical to the sequence alone\n", argv[1], argv[2], nranks, N_SEQ, steps, min_rows, max_rows);
    for (int s = 0; s < N_SEQ; s++) free(seqs[s].alone);
    free(logits);
    sampler_free(smp);
    engine_free(e);
    model_free(m);
    pool_free(pool);
    coll_free(coll);
    return rc;
}
