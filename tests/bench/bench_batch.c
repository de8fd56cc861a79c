/* Batched decode (rank/engine/forward.h, engine_eval_batch): generation throughput of B sequences that
 * each decode one row per step, for B = 1, 2, 4, 8, 16, 32, 64: what continuous batching buys a
 * server. One rank, a synthetic model of a preset and type; each sequence first evaluates a
 * 64-token prompt, then 32 steps are timed (after 2 of warm-up), greedy sampling included.
 * Prints one row per B: ms per step, the forward pass's share of it (engine_eval_batch alone, the
 * sampling left out) and its ratio to B = 1's, generated tokens per second, and the speed-up over
 * B = 1;
 * with NM_PROFILE=1, each B's decode steps by forward-pass phase (engine_phase_report) on stderr.
 *
 * usage: bench_batch PRESET TYPE DIR [THREADS [MAX_B]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cpu.h"
#include "forward.h"
#include "model.h"
#include "sampler.h"
#include "synth_model.h"

enum { MAX_SEQ = 64, N_PROMPT = 64, N_WARM = 2, N_STEPS = 32 };

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PRESET TYPE DIR [THREADS [MAX_B]]\n", argv[0]);
        return 2;
    }
    const int threads = argc > 4 ? atoi(argv[4]) : 2;
    const int max_b = argc > 5 ? NM_MAX(1, NM_MIN(MAX_SEQ, atoi(argv[5]))) : MAX_SEQ;
    char err[512];
    struct pool *pool = pool_init(threads, NULL);
    struct coll_options co = {.transport = COLL_TRANSPORT_SINGLE, .quiet = true};
    struct coll *coll = coll_init(&co);
    struct synth_model sm; /* made once in DIR, then reused */
    const int st = synth_model_open(argv[1], argv[2], argv[3], 1, true, pool, NULL, &sm);
    if (st) return st;
    struct model *m = sm.m;
    const int64_t V = m->cfg.n_vocab;
    struct engine *e;
    const struct engine_params ep = {.n_ctx = MAX_SEQ * 128, .n_seq = MAX_SEQ, .n_batch = MAX_SEQ * N_PROMPT,
                                     .kv_type = DTYPE_F16};
    if (engine_init(&e, m, pool, coll, &ep, err, sizeof err)) {
        fprintf(stderr, "engine_init: %s\n", err);
        return 1;
    }
    struct sampler_params sp = sampler_default_params();
    sp.temp = 0;
    struct sampler *smp = sampler_init(&sp, V);
    const int R = MAX_SEQ * N_PROMPT;
    int32_t *tok = malloc((size_t)R * sizeof *tok), *seq = malloc((size_t)R * sizeof *seq), next[MAX_SEQ];
    int64_t *pos = malloc((size_t)R * sizeof *pos);
    bool *want = malloc((size_t)R * sizeof *want);
    float *logits = malloc((size_t)MAX_SEQ * (size_t)V * sizeof(float));
    printf("# bench_batch: %s %s, kernels %s, %d threads; %d-token prompts, %d timed decode steps\n", argv[1],
           argv[2], kern_isa_get()->name, threads, N_PROMPT, N_STEPS);
    printf("| B (sequences) | ms per step | forward ms | forward vs B=1 | generated t/s | vs B=1 |\n"
           "|---:|---:|---:|---:|---:|---:|\n");
    double tps1 = 0, fwd1 = 0;
    for (int B = 1; B <= max_b; B *= 2) {
        for (int s = 0; s < MAX_SEQ; s++) engine_seq_clear(e, s);
        int n = 0;
        for (int s = 0; s < B; s++)
            for (int i = 0; i < N_PROMPT; i++, n++) {
                tok[n] = (int32_t)((s * 7919 + i * 104729) % V);
                pos[n] = i;
                seq[n] = s;
                want[n] = i == N_PROMPT - 1;
            }
        struct engine_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .logits = want};
        if (engine_eval_batch(e, &b, logits, err, sizeof err)) {
            fprintf(stderr, "prompt: %s\n", err);
            return 1;
        }
        for (int s = 0; s < B; s++) next[s] = engine_sample(e, smp, logits + (size_t)s * (size_t)V);
        double t0 = 0, fwd = 0;
        struct engine_times ph0, ph1;
        for (int step = 0; step < N_WARM + N_STEPS; step++) {
            if (step == N_WARM) {
                t0 = nm_time_s();
                engine_phase_seconds(e, &ph0);
            }
            for (int s = 0; s < B; s++) {
                tok[s] = next[s];
                pos[s] = N_PROMPT + step;
                seq[s] = s;
                want[s] = true;
            }
            b.n = B;
            const double f0 = nm_time_s();
            if (engine_eval_batch(e, &b, logits, err, sizeof err)) {
                fprintf(stderr, "decode: %s\n", err);
                return 1;
            }
            if (step >= N_WARM) fwd += nm_time_s() - f0;
            for (int s = 0; s < B; s++) next[s] = engine_sample(e, smp, logits + (size_t)s * (size_t)V);
        }
        const double t = nm_time_s() - t0, tps = (double)B * N_STEPS / t;
        if (engine_profile_requested()) {
            char line[512];
            engine_phase_seconds(e, &ph1);
            engine_phase_report(&ph0, &ph1, t, line, sizeof line);
            fprintf(stderr, "profile: B=%d: %s\n", B, line);
        }
        if (B == 1) tps1 = tps, fwd1 = fwd;
        printf("| %d | %.2f | %.2f | %.2fx | %.1f | %.2fx |\n", B, 1e3 * t / N_STEPS, 1e3 * fwd / N_STEPS, fwd / fwd1,
               tps, tps / tps1);
        fflush(stdout);
    }
    free(tok);
    free(seq);
    free(pos);
    free(want);
    free(logits);
    sampler_free(smp);
    engine_free(e);
    model_free(m);
    pool_free(pool);
    coll_free(coll);
    return 0;
}
