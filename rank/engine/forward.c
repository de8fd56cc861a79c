/* The forward pass (see forward.h), written to be read top to bottom: engine_eval_batch ->
 * eval_batch -> attention block and FFN block per layer -> output head. */
#define _GNU_SOURCE /* CPU sets: the oneDNN threads' affinity */
#include "forward.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "matmul.h"
#include "onednn.h"
#include "ops.h"
#include "sampler.h"

/* A piece of a batch's attention: rows row0 .. row0+n-1, all of sequence seq, at positions
 * pos0 .. pos0+n-1, for the local query heads h0 .. h0+nh-1. */
struct attn_item {
    int row0, n;
    int32_t seq;
    int h0, nh;
    int64_t pos0;
    bool alone; /* the sequence's only row in the batch (decode): the one-query kernel */
};

struct engine {
    const struct model *m;
    struct pool *pool;
    struct coll *coll;
    struct engine_times t;       /* per phase since engine_init (engine_phase_seconds) */
    bool profile;                /* NM_PROFILE: the pool's busy time per phase too */
    struct pool_stats ps_last;   /* the pool's accounting at the last phase_end */
    struct kv_cache kv;
    /* This rank's sizes (shard.h): heads, KV heads, n_ff columns, vocabulary rows, and the
     * attn_output input: wo_k columns of which the rank's heads start at wo_off. */
    int64_t n_head_l, n_head_kv_l, n_ff_l, n_vocab_l, wo_k, wo_off;
    size_t *vocab_bytes; /* [nranks] bytes of every rank's logits slice (all on rank 0 with -ngl) */
    int n_batch;
    int n_seq;
    int last_asking; /* rows that asked for logits in the last engine_eval_batch */
    int64_t *seq_pos;   /* [n_seq] positions each sequence holds (engine_seq_pos) */
    uint8_t *seq_seen;  /* [n_seq] scratch: the sequence has a row in the batch being checked */
    engine_layer_hook hook;
    void *hook_ctx;
    engine_route_hook route_hook;
    void *route_hook_ctx;
    struct pipeline_stage stage; /* rank 0 with the head on the GPU rank: the layers after ours */
    struct pipeline_logits logits; /* engine_logits_buffer's */
    bool onednn;     /* F32 prompt matmuls through oneDNN (engine_init says when) */
    bool onednn_force; /* NM_ONEDNN=force: every F32 matmul of 2+ rows (tests) */
    bool onednn_widen; /* the pool is bound: give oneDNN's threads all its cores (onednn_cpus) */
    cpu_set_t onednn_cpus;

    /* The batch being evaluated and its attention work (attn_plan). */
    const struct engine_batch *b;
    struct attn_item *attn_items; /* [n_batch * n_head_l] */
    int n_attn_items;
    /* engine_eval's batches: one sequence's rows. */
    int64_t *eval_pos;  /* [n_batch] */
    int32_t *eval_seq;  /* [n_batch] zeros */
    bool *eval_logits;  /* [n_batch] */

    /* Scratch for one batch of up to n_batch rows. */
    float *x;        /* [n_batch][n_embd] residual stream */
    float *xn;       /* [n_batch][n_embd] normalized input of a block */
    float *q;        /* [n_batch][n_head_l * head_dim] */
    float *k;        /* [n_batch][n_head_kv_l * head_dim] */
    float *v;        /* [n_batch][n_head_kv_l * head_dim_v] */
    float *att;      /* [n_batch][wo_k] attention output; columns outside the rank's heads stay 0 */
    float *proj;     /* [n_batch][n_embd] output of attn_output / ffn_down, summed over ranks */
    double *part;    /* [n_batch][n_embd] row-parallel partial sums, exact in double, then their
                        allreduce (folded in rank order) */
    struct kern_chunk *wo_chunks, *down_chunks; /* canonical chunks of the row-parallel matmuls */
    int n_wo_chunks, n_down_chunks;
    float *gate;     /* [n_batch][n_ff_l] */
    float *up;       /* [n_batch][n_ff_l] */
    float *rope;     /* [n_batch][n_rot] cos/sin pairs per token */
    /* qwen3moe: router output and each expert's batch of tokens (gathered rows). */
    float *router;   /* [n_batch][n_expert] router logits */
    int32_t *exp_tok;  /* [n_expert][n_batch] tokens routed to each expert, ascending */
    float *exp_w;      /* [n_expert][n_batch] their renormalized gate weights */
    int *exp_n;        /* [n_expert] tokens per expert in this chunk */
    int64_t *exp_sel;  /* [n_expert_used] one token's chosen experts */
    float *xg;         /* [n_batch][n_embd] an expert's gathered inputs */
    double *exp_part;  /* [n_batch][n_embd] an expert's row-parallel partials */
    float *scores;   /* [n_threads][scores_stride] attention scratch: decode's probabilities over
                        n_ctx positions for up to ATTN_HEADS_PASS query heads of a KV group, or a
                        prompt block's online-softmax state */
    int64_t scores_stride;
    block_q8x *q8;   /* quantized activations, largest input of any matmul */
};

static float *alloc_f32(int64_t n, const char *what) { return nm_alloc((size_t)n * sizeof(float), 64, what); }

/* Phase clock: the calling thread's wall time between phase_begin and phase_end is added to the
 * phase (pool jobs run inside, so this is the time the forward pass spends in it). */
static uint64_t phase_begin(void) { return nm_time_ns(); }
static void phase_end(struct engine *e, enum engine_phase ph, uint64_t t0) {
    e->t.s[ph] += (double)(nm_time_ns() - t0) * 1e-9;
    if (e->profile) { /* pool jobs since the last phase_end belong to this phase */
        struct pool_stats ps;
        pool_get_stats(e->pool, &ps);
        e->t.busy[ph] += (double)(ps.busy_ns - e->ps_last.busy_ns) * 1e-9;
        e->t.jobs[ph] += (double)(ps.wall_ns - e->ps_last.wall_ns) * 1e-9 * pool_size(e->pool);
        e->ps_last = ps;
    }
}

/* oneDNN, where tests/bench/RESULTS.md ("oneDNN as a candidate") measured it faster than
 * numallm's kernels: F32 weights (plain rows either way) in prompts of 64+ rows on matrices of
 * 2048 x 8192 or more, and of 512+ rows on 896 x 4864 or more (1.4-2.1x with 2 threads); never in
 * decode (numallm 1.6-2.5x faster there), nor for BF16 (it would need the GGUF rows next to
 * numallm's packed copy: twice the memory). One rank only: its blocking depends on the matrix
 * shape, so a slice's rows would not keep their bits across rank counts (shard.h, Exactness).
 * NM_ONEDNN=0 turns it off; NM_ONEDNN=force sends every F32 matmul of 2+ rows through it (tests). */
static bool onednn_worth(const struct engine *e, const struct weight *w, int m) {
    const double kn = (double)w->k * (double)w->n;
    if (w->layout != WEIGHT_LAYOUT_ROWS || w->type != DTYPE_F32 || m < 2) return false;
    return e->onednn_force || (m >= 64 && kn >= 2048.0 * 8192) || (m >= 512 && kn >= 896.0 * 4864);
}

static void engine_onednn_init(struct engine *e, struct pool *pool) {
    const char *env = getenv("NM_ONEDNN");
    bool f32 = false; /* any matmul weight of F32 this rank multiplies? */
    for (int64_t il = 0; il < e->m->n_layer_local && !f32; il++) {
        const struct layer_weights *L = &e->m->layers[il];
        f32 = L->wq.type == DTYPE_F32 || L->wo.type == DTYPE_F32 || (e->m->cfg.n_expert == 0 && L->w_up.type == DTYPE_F32);
    }
    if (!f32 || e->m->shard.nranks != 1 || (env && strcmp(env, "0") == 0)) return;
    char why[256];
    if (!kern_onednn_available(why, sizeof why)) {
        nm_log_info("oneDNN not used for the F32 prompt matmuls: %s", why);
        return;
    }
    e->onednn = true;
    e->onednn_force = env && strcmp(env, "force") == 0;
    CPU_ZERO(&e->onednn_cpus);
    e->onednn_widen = true;
    for (int i = 0; i < pool_size(pool) && e->onednn_widen; i++) {
        const int cpu = pool_cpu(pool, i);
        if (cpu < 0) e->onednn_widen = false;
        else CPU_SET(cpu, &e->onednn_cpus);
    }
    nm_log_info("%s: %s", kern_onednn_describe(why, sizeof why),
                e->onednn_force ? "every F32 matmul of 2 or more rows (NM_ONEDNN=force)"
                                : "the F32 prompt matmuls where it measured faster (NM_ONEDNN=0: numallm's kernels)");
}

/* Several sequences share batches, so a row's bits must not depend on how many rows come with
 * it (forward.h, batch invariance). Two paths would break that and stay off: oneDNN (its
 * blocking depends on the row count; engine_onednn_init is not called) and the AMX-BF16 tiles of
 * F16/BF16 weights, which round activations to bf16 from kern_matmul_amx_min_m rows on while the
 * VNNI kernel keeps them f32. With such weights on an AMX machine every matmul takes the VNNI
 * kernels (the int8 tiles would give the same bits, but the choice is one for the process). */
static void engine_keep_rows_invariant(struct engine *e) {
    bool pair16 = false;
    for (int64_t il = 0; il < e->m->n_layer_local && !pair16; il++) {
        const struct layer_weights *L = &e->m->layers[il];
        const struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < NM_ARRAY_LEN(ws); i++) pair16 |= ws[i]->layout == WEIGHT_LAYOUT_F_PAIR16;
        for (int64_t x = 0; x < e->m->cfg.n_expert; x++)
            pair16 |= L->gate_exps[x].layout == WEIGHT_LAYOUT_F_PAIR16 || L->up_exps[x].layout == WEIGHT_LAYOUT_F_PAIR16 ||
                      L->down_exps[x].layout == WEIGHT_LAYOUT_F_PAIR16;
    }
    pair16 |= !e->m->head_remote && e->m->output.layout == WEIGHT_LAYOUT_F_PAIR16;
    if (pair16 && kern_amx_available()) {
        kern_matmul_force_path(KERN_PATH_VNNI);
        nm_log_warn("several sequences with F16/BF16 weights: the AVX-512 VNNI kernels for every matmul, since the "
                    "AMX-BF16 tiles would make a row's bits depend on the rows batched with it");
    }
}

/* One sequence (run, bench, perplexity): the prompt matmuls of quantized weights may take the
 * AMX-BF16 tiles (kern_matmul_allow_bf16_tiles: activations rounded to bf16; 1.5x the 8B Q4_0
 * prompt speed of the int8 tiles, 2.6-5x for the block types; a row's bits depending on the
 * rows in its call). Several sequences (the server)
 * never: a row must get the same bits whatever shares its batch. NM_AMX_BF16=0 keeps the int8
 * tiles for one sequence too. */
static void engine_bf16_tiles_init(struct engine *e, bool one_seq) {
    const char *env = getenv("NM_AMX_BF16");
    const bool on = one_seq && !(env && strcmp(env, "0") == 0);
    kern_matmul_allow_bf16_tiles(on);
    if (!on || !kern_amx_available() || e->m->shard.rank != 0) return;
    nm_log_info("prompt matmuls of quantized weights: AMX-BF16 tiles from %d rows (activations rounded to bf16; "
                "NM_AMX_BF16=0: the AMX-INT8 tiles, whose rows' bits do not depend on the batch)",
                kern_matmul_bf16_min_m(DTYPE_Q4_0));
}

/* A prompt matmul through oneDNN; false (said once, then numallm's kernels for good) when it
 * refuses or fails. Its OpenMP threads inherit the calling thread's CPU set when they start,
 * and the caller (pool worker 0) is bound to one core: widen it to the pool's cores for the call. */
static bool matmul_onednn(struct engine *e, const struct weight *w, struct act *in, float *y) {
    cpu_set_t mine;
    const bool widen = e->onednn_widen && pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) == 0;
    if (widen) pthread_setaffinity_np(pthread_self(), sizeof e->onednn_cpus, &e->onednn_cpus);
    char why[256];
    const enum kern_onednn_status st = kern_onednn_matmul(w, in, y, w->n, pool_size(e->pool), why, sizeof why);
    if (widen) pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
    if (st == KERN_ONEDNN_OK) return true;
    nm_log_warn("oneDNN: %s (%s); numallm's kernels from now on", kern_onednn_status_str(st), why);
    e->onednn = false;
    return false;
}

enum nm_status engine_init(struct engine **out, const struct model *m, struct pool *pool, struct coll *coll,
                           const struct engine_params *p, char *err, size_t errlen) {
    const struct model_config *c = &m->cfg;
    const struct shard *sh = &m->shard;
    *out = NULL;
    NM_ASSERT(coll_size(coll) == sh->nranks && coll_rank(coll) == sh->rank);
    int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : c->n_ctx_train;
    const int n_seq = p->n_seq > 0 ? p->n_seq : 1;
    if (n_ctx < 1 || n_ctx > (int64_t)1 << 24)
        return nm_errf(err, errlen, NM_ERR_ARGS, "context size %lld; allowed are 1..16777216", (long long)n_ctx);
    if (p->n_batch < 1)
        return nm_errf(err, errlen, NM_ERR_ARGS, "batch size %d; it must be >= 1", p->n_batch);
    if (n_seq > 4096 || n_seq > n_ctx)
        return nm_errf(err, errlen, NM_ERR_ARGS, "%d sequences in a context of %lld positions; allowed are 1..%lld",
                       n_seq, (long long)n_ctx, (long long)NM_MIN(n_ctx, 4096));
    if (m->head_remote && sh->rank == 0 && !p->stage.ops)
        return nm_errf(err, errlen, NM_ERR_ARGS, "the model's last layers belong to a GPU stage, but none was given");
    struct engine *e = calloc(1, sizeof *e);
    NM_ASSERT(e);
    e->stage = p->stage;
    e->m = m;
    e->n_seq = n_seq;
    if (n_seq == 1) engine_onednn_init(e, pool);
    else engine_keep_rows_invariant(e);
    engine_bf16_tiles_init(e, n_seq == 1);
    e->pool = pool;
    e->coll = coll;
    e->profile = engine_profile_requested();
    if (e->profile) {
        pool_set_profile(pool, true);
        pool_get_stats(pool, &e->ps_last);
    }
    e->n_batch = (int)NM_MIN((int64_t)p->n_batch, n_ctx);
    e->seq_pos = calloc((size_t)n_seq, sizeof *e->seq_pos);
    e->seq_seen = calloc((size_t)n_seq, sizeof *e->seq_seen);
    e->attn_items = calloc((size_t)e->n_batch * (size_t)NM_MAX(range_len(sh->q_heads), 1), sizeof *e->attn_items);
    e->eval_pos = calloc((size_t)e->n_batch, sizeof *e->eval_pos);
    e->eval_seq = calloc((size_t)e->n_batch, sizeof *e->eval_seq);
    e->eval_logits = calloc((size_t)e->n_batch, sizeof *e->eval_logits);
    NM_ASSERT(e->seq_pos && e->seq_seen && e->attn_items && e->eval_pos && e->eval_seq && e->eval_logits);
    e->n_head_l = range_len(sh->q_heads);
    e->n_head_kv_l = range_len(sh->kv_heads);
    e->n_ff_l = range_len(sh->ff);
    e->n_vocab_l = range_len(sh->vocab);
    e->wo_k = range_len(sh->wo_cols);
    e->wo_off = sh->wo_owned.begin - sh->wo_cols.begin;
    e->vocab_bytes = malloc((size_t)sh->nranks * sizeof *e->vocab_bytes);
    NM_ASSERT(e->vocab_bytes);
    const size_t mine = (size_t)e->n_vocab_l * sizeof(float);
    coll_allgather(coll, &mine, sizeof mine, e->vocab_bytes);
    /* Only the layers this rank computes: the GPU stage keeps its own cache for the others. */
    enum nm_status st = kv_cache_init(&e->kv, p->kv_type, m->n_layer_local, n_ctx, n_seq, e->n_head_kv_l * c->head_dim,
                                      e->n_head_kv_l * c->head_dim_v, err, errlen);
    if (st) {
        free(e->vocab_bytes);
        free(e->seq_pos);
        free(e->seq_seen);
        free(e->attn_items);
        free(e->eval_pos);
        free(e->eval_seq);
        free(e->eval_logits);
        free(e);
        return st;
    }
    const int64_t B = e->n_batch;
    e->x = alloc_f32(B * c->n_embd, "x");
    e->xn = alloc_f32(B * c->n_embd, "xn");
    e->q = alloc_f32(B * e->n_head_l * c->head_dim, "q");
    e->k = alloc_f32(B * e->n_head_kv_l * c->head_dim, "k");
    e->v = alloc_f32(B * e->n_head_kv_l * c->head_dim_v, "v");
    e->att = alloc_f32(B * e->wo_k, "att");
    e->proj = alloc_f32(B * c->n_embd, "proj");
    e->part = nm_alloc((size_t)(B * c->n_embd) * sizeof(double), 64, "row-parallel partials");
    e->wo_chunks = calloc((size_t)NM_MAX(e->n_head_l, 1), sizeof *e->wo_chunks);
    e->down_chunks = calloc((size_t)(e->n_ff_l / sh->ff_unit + 1), sizeof *e->down_chunks);
    NM_ASSERT(e->wo_chunks && e->down_chunks);
    e->n_wo_chunks = shard_wo_chunks(sh, c, m->layers[0].wo.type, e->wo_chunks);
    e->n_down_chunks = shard_down_chunks(sh, e->down_chunks);
    e->gate = alloc_f32(B * e->n_ff_l, "gate");
    e->up = alloc_f32(B * e->n_ff_l, "up");
    e->rope = alloc_f32(B * c->n_rot, "rope");
    if (c->n_expert > 0) {
        e->router = alloc_f32(B * c->n_expert, "router logits");
        e->exp_tok = nm_alloc((size_t)(B * c->n_expert) * sizeof(int32_t), 64, "expert tokens");
        e->exp_w = alloc_f32(B * c->n_expert, "expert weights");
        e->exp_n = nm_alloc((size_t)c->n_expert * sizeof(int), 64, "expert counts");
        e->exp_sel = nm_alloc((size_t)c->n_expert_used * sizeof(int64_t), 64, "chosen experts");
        e->xg = alloc_f32(B * c->n_embd, "expert inputs");
        e->exp_part = nm_alloc((size_t)(B * c->n_embd) * sizeof(double), 64, "expert partials");
    }
    /* decode: a KV group's query heads at once (op_attention_heads), up to ATTN_HEADS_PASS */
    const int64_t group = NM_MIN(ATTN_HEADS_PASS, NM_MAX(1, c->n_head / NM_MAX(1, c->n_head_kv)));
    e->scores_stride =
        (NM_MAX(e->kv.n_ctx_seq * group, (int64_t)op_attention_queries_scratch(c->head_dim, c->head_dim_v)) + 15) / 16 * 16;
    e->scores = alloc_f32((int64_t)pool_size(pool) * e->scores_stride, "attention scratch");
    int64_t k_max = NM_MAX(NM_MAX(c->n_embd, e->n_ff_l), e->wo_k);
    e->q8 = nm_alloc(act_q8_bytes((int)B, k_max), 64, "quantized activations");
    if (n_seq == 1)
        nm_log_info("KV cache: %lld tokens x %lld layers x %lld KV heads, %s, %.1f MiB", (long long)e->kv.n_ctx,
                    (long long)m->n_layer_local, (long long)e->n_head_kv_l, p->kv_type == DTYPE_F16 ? "f16" : "f32",
                    (double)e->kv.bytes / (1 << 20));
    else
        nm_log_info("KV cache: %lld sequences x %lld tokens x %lld layers x %lld KV heads, %s, %.1f MiB in one "
                    "allocation (%.2f MiB per sequence)", (long long)n_seq, (long long)e->kv.n_ctx_seq,
                    (long long)m->n_layer_local, (long long)e->n_head_kv_l, p->kv_type == DTYPE_F16 ? "f16" : "f32",
                    (double)e->kv.bytes / (1 << 20), (double)e->kv.bytes / (1 << 20) / (double)n_seq);
    *out = e;
    return NM_OK;
}

float *engine_logits_buffer(struct engine *e, int rows) {
    /* (64 bytes at least: a rank without a vocabulary slice still gets a buffer) */
    const size_t bytes = NM_MAX((size_t)NM_MAX(rows, 1) * (size_t)e->n_vocab_l * sizeof(float), 64);
    return pipeline_logits_get(&e->logits, bytes, e->stage.ops && e->stage.ops->pinned_logits);
}

void engine_free(struct engine *e) {
    if (!e) return;
    pipeline_logits_get(&e->logits, 0, false);
    pipeline_close(&e->stage);
    kv_cache_free(&e->kv);
    float *bufs[] = {e->x, e->xn, e->q, e->k, e->v, e->att, e->proj, e->gate, e->up, e->rope, e->scores,
                     e->router, e->exp_w, e->xg};
    for (size_t i = 0; i < NM_ARRAY_LEN(bufs); i++) nm_free(bufs[i]);
    free(e->seq_pos);
    free(e->seq_seen);
    free(e->attn_items);
    free(e->eval_pos);
    free(e->eval_seq);
    free(e->eval_logits);
    nm_free(e->exp_tok);
    nm_free(e->exp_n);
    nm_free(e->exp_sel);
    nm_free(e->exp_part);
    nm_free(e->q8);
    nm_free(e->part);
    free(e->wo_chunks);
    free(e->vocab_bytes);
    free(e->down_chunks);
    free(e);
}

/* gpu_stage_topk's limit on k. */
#define ENGINE_STAGE_MAX_K 1024

/* Whether the GPU stage can make smp's candidates: the head is there and smp needs only its top k. */
static bool stage_takes(const struct engine *e, const struct sampler *smp) {
    return e->m->head_remote && sampler_candidates_needed(smp, ENGINE_STAGE_MAX_K) > 0;
}

bool engine_samples_on_stage(const struct engine *e, const struct sampler *smp) {
    /* the stage keeps the last row's logits: one sequence's next token */
    return e->n_seq == 1 && stage_takes(e, smp);
}

/* Rows' tokens from candidates the stage makes (rows as in stage_topk), collective. */
static void stage_sample(struct engine *e, struct sampler *const *smp, const int *rows, int n, int32_t *tokens) {
    int *k = calloc((size_t)NM_MAX(n, 1), sizeof *k);
    NM_ASSERT(k);
    int32_t *ids = NULL;
    float *vals = NULL;
    const bool r0 = e->stage.ops != NULL;
    if (r0) { /* rank 0: every row's candidates in one round trip */
        struct stage_topk *q = malloc((size_t)NM_MAX(n, 1) * sizeof *q);
        NM_ASSERT(q);
        int64_t total = 0;
        for (int i = 0; i < n; i++) {
            k[i] = sampler_candidates_needed(smp[i], ENGINE_STAGE_MAX_K);
            q[i] = (struct stage_topk){.row = rows[i], .k = k[i]};
            q[i].tokens = sampler_penalty_tokens(smp[i], &q[i].n_tokens, &q[i].penalty);
            total += k[i];
        }
        ids = malloc((size_t)NM_MAX(total, 1) * sizeof *ids);
        vals = malloc((size_t)NM_MAX(total, 1) * sizeof *vals);
        NM_ASSERT(ids && vals);
        char err[512];
        if (e->stage.ops->topk(e->stage.ctx, n, q, ids, vals, err, sizeof err)) nm_fatal("%s", err);
        free(q);
    }
    for (int i = 0, at = 0; i < n; at += k[i], i++)
        tokens[i] = sampler_sample_candidates(smp[i], e->coll, r0 ? ids + at : NULL, r0 ? vals + at : NULL,
                                              r0 ? k[i] : 0);
    free(ids);
    free(vals);
    free(k);
}

int32_t engine_sample(struct engine *e, struct sampler *smp, const float *local) {
    if (!engine_samples_on_stage(e, smp))
        return sampler_sample_dist(smp, e->coll, local, e->m->shard.vocab.begin, e->n_vocab_l);
    int32_t tok;
    const int last = -1; /* the stage keeps the last row's logits */
    stage_sample(e, &smp, &last, 1, &tok);
    return tok;
}

bool engine_rows_on_stage(const struct engine *e, struct sampler *const *smp, int n, int n_asking) {
    /* the stage keeps the logits of up to PIPELINE_KEPT_ROWS asked rows (a batch is one chunk) */
    if (!e->m->head_remote || n_asking > PIPELINE_KEPT_ROWS) return false;
    for (int i = 0; i < n; i++)
        if (!stage_takes(e, smp[i])) return false;
    return true;
}

void engine_sample_rows(struct engine *e, struct sampler *const *smp, const int *rows, int n, const float *local,
                        int32_t *tokens) {
    if (n < 1) return; /* (a step of prompt rows only: nothing to ask the stage) */
    if (engine_rows_on_stage(e, smp, n, e->last_asking)) {
        stage_sample(e, smp, rows, n, tokens);
        return;
    }
    NM_ASSERT(local || e->n_vocab_l == 0);
    for (int i = 0; i < n; i++)
        tokens[i] = sampler_sample_dist(smp[i], e->coll, local + (int64_t)rows[i] * e->n_vocab_l,
                                        e->m->shard.vocab.begin, e->n_vocab_l);
}

int engine_n_seq(const struct engine *e) { return e->n_seq; }
int64_t engine_n_ctx(const struct engine *e) { return e->kv.n_ctx_seq; }
int64_t engine_seq_pos(const struct engine *e, int seq) {
    NM_ASSERT(seq >= 0 && seq < e->n_seq);
    return e->seq_pos[seq];
}
void engine_seq_keep(struct engine *e, int seq, int64_t n) {
    NM_ASSERT(seq >= 0 && seq < e->n_seq && n >= 0 && n <= e->seq_pos[seq]);
    e->seq_pos[seq] = n; /* the cells after n are rewritten before any row reads them */
    if (e->stage.ops) e->stage.ops->keep(e->stage.ctx, seq, n);
}
void engine_seq_clear(struct engine *e, int seq) { engine_seq_keep(e, seq, 0); }
int64_t engine_n_past(const struct engine *e) { return engine_seq_pos(e, 0); }
void engine_truncate(struct engine *e, int64_t n_past) { engine_seq_keep(e, 0, n_past); }
const struct kv_cache *engine_kv(const struct engine *e) { return &e->kv; }
void engine_set_layer_hook(struct engine *e, engine_layer_hook hook, void *ctx) {
    e->hook = hook;
    e->hook_ctx = ctx;
}
void engine_set_route_hook(struct engine *e, engine_route_hook hook, void *ctx) {
    e->route_hook = hook;
    e->route_hook_ctx = ctx;
}
double engine_coll_seconds(const struct engine *e) { return e->t.s[ENGINE_PH_COLL]; }

void engine_phase_seconds(const struct engine *e, struct engine_times *out) { *out = e->t; }

void engine_times_add_diff(struct engine_times *acc, const struct engine_times *before, const struct engine_times *after) {
    for (int i = 0; i < ENGINE_PH_N; i++) {
        acc->s[i] += after->s[i] - before->s[i];
        acc->busy[i] += after->busy[i] - before->busy[i];
        acc->jobs[i] += after->jobs[i] - before->jobs[i];
    }
}

bool engine_profile_requested(void) {
    const char *e = getenv("NM_PROFILE");
    return e && *e && strcmp(e, "0") != 0;
}

const char *engine_phase_name(enum engine_phase ph) {
    static const char *names[ENGINE_PH_N] = {"matmul", "attention", "row-wise", "allreduce", "head", "gpu stage"};
    return ph < ENGINE_PH_N ? names[ph] : "?";
}

size_t engine_phase_report(const struct engine_times *before, const struct engine_times *after, double total_s,
                           char *buf, size_t len) {
    static const struct engine_times zero;
    if (!before) before = &zero;
    size_t used = 0;
    double sum = 0;
    buf[0] = 0;
    for (int i = 0; i < ENGINE_PH_N; i++) {
        const double d = after->s[i] - before->s[i];
        const double busy = after->busy[i] - before->busy[i], jobs = after->jobs[i] - before->jobs[i];
        sum += d;
        if (d > 0 && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s %.1f%%", used ? ", " : "",
                                     engine_phase_name((enum engine_phase)i), total_s > 0 ? 100 * d / total_s : 0.0);
        if (d > 0 && jobs > 0 && used < len)
            used += (size_t)snprintf(buf + used, len - used, " (threads busy %.0f%%)", 100 * busy / jobs);
    }
    if (used < len)
        snprintf(buf + used, len - used, "%sother %.1f%%", used ? ", " : "",
                 total_s > 0 ? 100 * (total_s - sum) / total_s : 0.0);
    return used;
}

void engine_gather_logits(struct engine *e, const float *local, float *full, int rows) {
    for (int i = 0; i < rows; i++)
        coll_allgatherv(e->coll, local + (int64_t)i * e->n_vocab_l, e->vocab_bytes, full + (int64_t)i * e->m->cfg.n_vocab);
}

/* Below this many values a prompt's row-wise step runs inline (a pool wake-up costs more). */
#define ROWS_INLINE_VALUES (16 * 1024)

struct round_job {
    const double *src;
    float *dst;
    int64_t n;
};
static void round_worker(void *ctx, int ith, int nth) {
    const struct round_job *j = ctx;
    long lo, hi;
    pool_split((long)j->n, 1024, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) j->dst[i] = (float)j->src[i];
}

static void allreduce_partials(struct engine *e, int64_t n, float *out) {
    const uint64_t t0 = phase_begin();
    coll_allreduce_sum_f64(e->coll, e->part, e->part, (size_t)n);
    struct round_job j = {.src = e->part, .dst = out, .n = n};
    if (n >= ROWS_INLINE_VALUES) pool_run(e->pool, round_worker, &j); /* a prompt's rows: over the pool */
    else round_worker(&j, 0, 1);
    phase_end(e, ENGINE_PH_COLL, t0);
}

/* A row-parallel matmul and its allreduce: out = sum over ranks of this rank's columns of W
 * times its slice of the input. Each rank's partial is a double sum of canonical chunks
 * (shard.h, "Exactness"); the allreduce adds the partials in double in rank order and the sum
 * is rounded to f32 once, so every rank count gives the same bits. */
static void matmul_rowpar_allreduce(struct engine *e, const struct weight *w, struct act *in,
                                    const struct kern_chunk *chunks, int n_chunks, float *out) {
    const uint64_t t0 = phase_begin();
    kern_matmul_chunked_f64(e->pool, w, in, chunks, n_chunks, e->part, w->n);
    phase_end(e, ENGINE_PH_MATMUL, t0);
    allreduce_partials(e, (int64_t)in->m * w->n, out);
}

/* y = W x for a chunk: the input is wrapped so that its int8 quantization is made once. */
static void matmul(struct engine *e, const struct weight *w, struct act *in, float *y) {
    const uint64_t t0 = phase_begin();
    if (!(e->onednn && onednn_worth(e, w, in->m) && matmul_onednn(e, w, in, y))) kern_matmul(e->pool, w, in, y, w->n);
    phase_end(e, ENGINE_PH_MATMUL, t0);
}

/* y[i] = W[i] in for weights that share their input (q, k, v; gate, up): one kern_matmul_multi
 * (the same bits as one matmul each), or one matmul each where oneDNN may take one. */
static void matmul_shared_input(struct engine *e, int nw, const struct weight *const *w, struct act *in,
                                float *const *y) {
    for (int i = 0; i < nw; i++)
        if (e->onednn && onednn_worth(e, w[i], in->m)) {
            for (int k = 0; k < nw; k++) matmul(e, w[k], in, y[k]);
            return;
        }
    const uint64_t t0 = phase_begin();
    kern_matmul_multi(e->pool, nw, w, in, y);
    phase_end(e, ENGINE_PH_MATMUL, t0);
}

static struct act act_of(struct engine *e, const float *x, int n, int64_t k) {
    return (struct act){.m = n, .k = k, .f32 = x, .q8 = e->q8, .q8_ready = false};
}

/* Row-wise work of a chunk (norms, RoPE, SwiGLU, residual adds), split over the pool by rows
 * for prompts; inline when it is small (a pool wake-up costs more). Rows are independent, so
 * the split changes no value. */
typedef void (*rows_fn)(struct engine *e, const void *arg, int lo, int hi);
struct rows_job {
    struct engine *e;
    rows_fn fn;
    const void *arg;
    int n;
};

static void rows_worker(void *ctx, int ith, int nth) {
    const struct rows_job *j = ctx;
    long lo, hi;
    pool_split(j->n, 1, ith, nth, &lo, &hi);
    if (lo < hi) j->fn(j->e, j->arg, (int)lo, (int)hi);
}

static void run_rows(struct engine *e, rows_fn fn, const void *arg, int n, int64_t values_per_row) {
    const uint64_t t0 = phase_begin();
    if (n < 2 || (int64_t)n * values_per_row < ROWS_INLINE_VALUES) {
        fn(e, arg, 0, n);
    } else {
        struct rows_job j = {.e = e, .fn = fn, .arg = arg, .n = n};
        pool_run(e->pool, rows_worker, &j);
    }
    phase_end(e, ENGINE_PH_ROWS, t0);
}

/* y[i] = rmsnorm(x[i]) * w over rows; y (+)= x for the residual; silu(gate) * up. */
struct norm_arg {
    float *y;
    const float *x, *w;
    int64_t dim;
    float eps;
};
static void norm_fn(struct engine *e, const void *arg, int lo, int hi) {
    const struct norm_arg *a = arg;
    for (int i = lo; i < hi; i++) op_rmsnorm(a->y + i * a->dim, a->x + i * a->dim, a->w, a->dim, a->eps);
}
static void norm_rows(struct engine *e, float *y, const float *x, const float *w, int n, int64_t dim, float eps) {
    const struct norm_arg a = {.y = y, .x = x, .w = w, .dim = dim, .eps = eps};
    run_rows(e, norm_fn, &a, n, dim);
}
struct pair_arg {
    float *y;
    const float *x;
    int64_t dim;
};
static void add_fn(struct engine *e, const void *arg, int lo, int hi) {
    const struct pair_arg *a = arg;
    op_add(a->y + lo * a->dim, a->x + lo * a->dim, (int64_t)(hi - lo) * a->dim);
}
static void residual_add(struct engine *e, float *y, const float *x, int n, int64_t dim) {
    const struct pair_arg a = {.y = y, .x = x, .dim = dim};
    run_rows(e, add_fn, &a, n, dim);
}
static void swiglu_fn(struct engine *e, const void *arg, int lo, int hi) {
    const struct pair_arg *a = arg; /* y = gate (in place), x = up */
    op_swiglu(a->y + lo * a->dim, a->y + lo * a->dim, a->x + lo * a->dim, (int64_t)(hi - lo) * a->dim);
}
static void swiglu_rows(struct engine *e, float *gate, const float *up, int n, int64_t dim) {
    const struct pair_arg a = {.y = gate, .x = up, .dim = dim};
    run_rows(e, swiglu_fn, &a, n, dim);
}

static void add_bias(float *y, const float *b, int n, int64_t dim) {
    if (!b) return;
    for (int i = 0; i < n; i++) op_add(y + (int64_t)i * dim, b, dim);
}

/* ---- attention ------------------------------------------------------------------------- */

/* The local KV head of local query head h. */
static int64_t attn_kv_head(const struct engine *e, int64_t h) {
    const struct model_config *c = &e->m->cfg;
    const struct shard *sh = &e->m->shard;
    return (sh->q_heads.begin + h) / (c->n_head / c->n_head_kv) - sh->kv_heads.begin;
}

/* The batch's attention work (e->attn_items), dealt to the threads in turn. A sequence's run of
 * adjacent rows, when it is a single row (decode: op_attention_heads), gives one item per KV head
 * where that makes enough items for the threads: the query heads that share it go to one
 * op_attention_heads call, which reads each block of keys once for them (a 16-sequence decode
 * step of an 8B model spent 11% of its time here when each query head read its KV head). With fewer single rows (one sequence decoding), a KV head's query heads are split over
 * several items, down to one head each, so that no thread idles. Longer runs give blocks of
 * ATTN_Q_BLOCK consecutive queries (op_attention_queries: the kernel's block, enough to reuse
 * every K/V value loaded, few enough for several items per thread), one item per query head.
 * Each head's result is the same whichever item computes it. Made once per batch; every layer
 * uses it. */
static void attn_plan(struct engine *e) {
    const struct engine_batch *b = e->b;
    const int nh = (int)e->n_head_l, nth = pool_size(e->pool);
    int n_alone = 0;
    for (int r = 0; r < b->n; r++)
        n_alone += (r == 0 || b->seq[r] != b->seq[r - 1]) && (r + 1 == b->n || b->seq[r + 1] != b->seq[r]);
    /* query heads per single-row item: a whole KV group when the groups alone keep every thread busy */
    const int per = n_alone * e->n_head_kv_l >= nth ? nh : NM_MAX(1, n_alone * nh / nth);
    e->n_attn_items = 0;
    for (int r0 = 0, r1; r0 < b->n; r0 = r1) {
        for (r1 = r0 + 1; r1 < b->n && b->seq[r1] == b->seq[r0];) r1++;
        const bool alone = r1 - r0 == 1;
        for (int i0 = r0; i0 < r1; i0 += ATTN_Q_BLOCK)
            for (int h0 = 0, h1; h0 < nh; h0 = h1) {
                h1 = h0 + 1;
                if (alone)
                    while (h1 < nh && h1 - h0 < per && attn_kv_head(e, h1) == attn_kv_head(e, h0)) h1++;
                e->attn_items[e->n_attn_items++] =
                    (struct attn_item){.row0 = i0, .n = NM_MIN(ATTN_Q_BLOCK, r1 - i0), .seq = b->seq[r0], .h0 = h0,
                                       .nh = h1 - h0, .pos0 = b->pos[i0], .alone = alone};
            }
    }
}

struct attn_job {
    struct engine *e;
    int layer;
    atomic_int next; /* items claimed so far */
};

/* Row i of sequence s at position p attends to positions 0 .. p of s's region of the KV cache.
 * The threads claim the items (attn_plan) one at a time from the last (a prompt's last queries
 * see the most keys: the longest items go first, the shortest fill the end), so a thread that
 * runs slower takes fewer of them. op_attention_queries is flash-style: key blocks with an online
 * softmax, no score matrix. */
static void attn_worker(void *ctx, int ith, int nth) {
    struct attn_job *j = ctx;
    struct engine *e = j->e;
    const struct model_config *c = &e->m->cfg;
    const int64_t nh = e->n_head_l, hd = c->head_dim, hdv = c->head_dim_v;
    const size_t es = e->kv.type == DTYPE_F16 ? 2 : 4;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scratch = e->scores + (int64_t)ith * e->scores_stride;
    (void)nth;
    for (;;) {
        const int i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= e->n_attn_items) break;
        const struct attn_item *it = &e->attn_items[e->n_attn_items - 1 - i];
        const int64_t cell0 = kv_cell(&e->kv, it->seq, 0); /* the sequence's position 0 */
        /* an item's heads share one KV head when it is a single row's (attn_plan) */
        for (int64_t h = it->h0; h < it->h0 + it->nh; h += it->alone ? it->nh : 1) {
            const int64_t hk = attn_kv_head(e, h); /* local KV head */
            const float *q = e->q + (int64_t)it->row0 * nh * hd + h * hd;
            float *out = e->att + (int64_t)it->row0 * e->wo_k + e->wo_off + h * hdv;
            const void *k0 = (const uint8_t *)kv_k(&e->kv, j->layer, cell0) + (size_t)(hk * hd) * es;
            const void *v0 = (const uint8_t *)kv_v(&e->kv, j->layer, cell0) + (size_t)(hk * hdv) * es;
            if (it->alone)
                op_attention_heads(out, hdv, q, hd, it->nh, k0, v0, e->kv.type, it->pos0 + 1, e->kv.k_row, e->kv.v_row,
                                   hd, hdv, scale, scratch);
            else
                op_attention_queries(out, e->wo_k, q, nh * hd, it->n, it->pos0, k0, v0, e->kv.type, e->kv.k_row,
                                     e->kv.v_row, hd, hdv, scale, scratch);
        }
    }
}

/* Per row: Q/K norms (qwen3), RoPE, and K, V into the cache at the row's sequence and position. */
struct rope_arg {
    int il;
};
static void rope_fn(struct engine *e, const void *arg, int lo, int hi) {
    const struct rope_arg *a = arg;
    const struct model_config *c = &e->m->cfg;
    const struct layer_weights *L = &e->m->layers[a->il];
    const int64_t qd = e->n_head_l * c->head_dim, kd = e->n_head_kv_l * c->head_dim,
                  vd = e->n_head_kv_l * c->head_dim_v;
    const int neox = c->rope_type == ROPE_TYPE_NEOX;
    for (int i = lo; i < hi; i++) {
        float *q = e->q + i * qd, *k = e->k + i * kd;
        const float *cs = e->rope + (int64_t)i * c->n_rot;
        for (int64_t h = 0; h < e->n_head_l; h++) {
            if (L->q_norm) op_rmsnorm(q + h * c->head_dim, q + h * c->head_dim, L->q_norm, c->head_dim, c->rms_eps);
            op_rope(q + h * c->head_dim, cs, c->n_rot, neox);
        }
        for (int64_t h = 0; h < e->n_head_kv_l; h++) {
            if (L->k_norm) op_rmsnorm(k + h * c->head_dim, k + h * c->head_dim, L->k_norm, c->head_dim, c->rms_eps);
            op_rope(k + h * c->head_dim, cs, c->n_rot, neox);
        }
        const int64_t cell = kv_cell(&e->kv, e->b->seq[i], e->b->pos[i]);
        op_store_kv(kv_k(&e->kv, a->il, cell), k, kd, e->kv.type);
        op_store_kv(kv_v(&e->kv, a->il, cell), e->v + i * vd, vd, e->kv.type);
    }
}

/* x += attn_output(attention(rope(q), rope(k), v)) for the batch's n rows; xn holds
 * attn_norm(x). Q, K, V are column-parallel (this rank's heads); attn_output is row-parallel:
 * each rank multiplies its heads' columns and the allreduce sums the partial outputs. */
static void attention_block(struct engine *e, int il, int n) {
    const struct model_config *c = &e->m->cfg;
    const struct layer_weights *L = &e->m->layers[il];
    const int64_t qd = e->n_head_l * c->head_dim, kd = e->n_head_kv_l * c->head_dim,
                  vd = e->n_head_kv_l * c->head_dim_v;

    struct act in = act_of(e, e->xn, n, c->n_embd);
    matmul_shared_input(e, 3, (const struct weight *const[]){&L->wq, &L->wk, &L->wv}, &in,
                        (float *const[]){e->q, e->k, e->v});
    add_bias(e->q, L->bq, n, qd);
    add_bias(e->k, L->bk, n, kd);
    add_bias(e->v, L->bv, n, vd);

    const struct rope_arg ra = {.il = il};
    run_rows(e, rope_fn, &ra, n, qd + kd);

    struct attn_job job = {.e = e, .layer = il};
    atomic_init(&job.next, 0);
    const uint64_t t0 = phase_begin();
    pool_run(e->pool, attn_worker, &job);
    phase_end(e, ENGINE_PH_ATTN, t0);

    struct act att = act_of(e, e->att, n, e->wo_k);
    matmul_rowpar_allreduce(e, &L->wo, &att, e->wo_chunks, e->n_wo_chunks, e->proj);
    add_bias(e->proj, L->bo, n, c->n_embd);
    residual_add(e, e->x, e->proj, n, c->n_embd);
}

/* x += ffn_down(silu(ffn_gate(xn)) * ffn_up(xn)); xn holds ffn_norm(x). gate/up are
 * column-parallel over n_ff, ffn_down row-parallel, then the allreduce. */
static void ffn_block(struct engine *e, int il, int n) {
    const struct model_config *c = &e->m->cfg;
    const struct layer_weights *L = &e->m->layers[il];
    struct act in = act_of(e, e->xn, n, c->n_embd);
    matmul_shared_input(e, 2, (const struct weight *const[]){&L->w_gate, &L->w_up}, &in,
                        (float *const[]){e->gate, e->up});
    swiglu_rows(e, e->gate, e->up, n, e->n_ff_l);
    struct act hid = act_of(e, e->gate, n, e->n_ff_l);
    matmul_rowpar_allreduce(e, &L->w_down, &hid, e->down_chunks, e->n_down_chunks, e->proj);
    residual_add(e, e->x, e->proj, n, c->n_embd);
}

/* qwen3moe: route each token of the chunk to its expert_used_count experts (largest router
 * logits, ties to the lower index) with weights softmax-renormalized over the chosen ones (the
 * full softmax's denominator cancels), and list the tokens of each expert in token order. The
 * router is replicated, so every rank makes the same choices. */
static void moe_route(struct engine *e, int il, int n) {
    const struct model_config *c = &e->m->cfg;
    const int64_t ne = c->n_expert, nu = c->n_expert_used;
    for (int64_t x = 0; x < ne; x++) e->exp_n[x] = 0;
    int64_t *sel = e->exp_sel;
    for (int t = 0; t < n; t++) {
        const float *l = e->router + (int64_t)t * ne;
        for (int64_t j = 0; j < nu; j++) { /* selection: nu is small (8 of 128) */
            int64_t best = -1;
            for (int64_t x = 0; x < ne; x++) {
                bool taken = false;
                for (int64_t i = 0; i < j && !taken; i++) taken = sel[i] == x;
                if (!taken && (best < 0 || l[x] > l[best])) best = x;
            }
            sel[j] = best;
        }
        if (e->route_hook) e->route_hook(e->route_hook_ctx, il, e->b->pos[t], sel, (int)nu);
        double sum = 0;
        for (int64_t j = 0; j < nu; j++) sum += exp((double)l[sel[j]] - (double)l[sel[0]]);
        for (int64_t j = 0; j < nu; j++) {
            const int64_t x = sel[j];
            const int slot = e->exp_n[x]++;
            e->exp_tok[x * e->n_batch + slot] = t;
            e->exp_w[x * e->n_batch + slot] = (float)(exp((double)l[x] - (double)l[sel[0]]) / sum);
        }
    }
}

/* x += sum over each token's chosen experts of w * down_e(silu(gate_e(xn)) * up_e(xn)); xn holds
 * ffn_norm(x). Expert by expert (ascending), the tokens routed to it are gathered into one
 * matrix, so a prompt runs each expert as a GEMM over its tokens and decode runs only the chosen
 * experts' GEMVs. gate/up are column-parallel over this rank's slice of n_ff_exp, down is
 * row-parallel; the weighted partials of all experts go through one allreduce, as for a dense
 * FFN. */
static void moe_block(struct engine *e, int il, int n) {
    const struct model_config *c = &e->m->cfg;
    const struct layer_weights *L = &e->m->layers[il];
    const int64_t E = c->n_embd;
    struct act in = act_of(e, e->xn, n, E);
    matmul(e, &L->router, &in, e->router);
    moe_route(e, il, n);
    memset(e->part, 0, (size_t)n * (size_t)E * sizeof *e->part);
    for (int64_t x = 0; x < c->n_expert; x++) {
        const int m = e->exp_n[x];
        if (m == 0) continue;
        const int32_t *tok = e->exp_tok + x * e->n_batch;
        const float *w = e->exp_w + x * e->n_batch;
        for (int i = 0; i < m; i++) memcpy(e->xg + (int64_t)i * E, e->xn + (int64_t)tok[i] * E, (size_t)E * sizeof(float));
        struct act xg = act_of(e, e->xg, m, E);
        matmul_shared_input(e, 2, (const struct weight *const[]){&L->gate_exps[x], &L->up_exps[x]}, &xg,
                            (float *const[]){e->gate, e->up});
        swiglu_rows(e, e->gate, e->up, m, e->n_ff_l);
        struct act hid = act_of(e, e->gate, m, e->n_ff_l);
        kern_matmul_chunked_f64(e->pool, &L->down_exps[x], &hid, e->down_chunks, e->n_down_chunks, e->exp_part, E);
        for (int i = 0; i < m; i++) {
            double *dst = e->part + (int64_t)tok[i] * E;
            const double *src = e->exp_part + (int64_t)i * E;
            for (int64_t j = 0; j < E; j++) dst[j] += (double)w[i] * src[j];
        }
    }
    allreduce_partials(e, (int64_t)n * E, e->proj);
    residual_add(e, e->x, e->proj, n, E);
}


static void hook(struct engine *e, int layer, int64_t pos0, const float *x, int n) {
    if (e->hook) e->hook(e->hook_ctx, layer, pos0, x, n, e->m->cfg.n_embd);
}

/* Move the rows of xn that asked for logits to its front, in order; returns how many. */
static int head_rows(struct engine *e) {
    const struct engine_batch *b = e->b;
    const int64_t E = e->m->cfg.n_embd;
    int n_out = 0;
    for (int i = 0; i < b->n; i++) {
        if (!b->logits[i]) continue;
        if (n_out != i) memcpy(e->xn + (int64_t)n_out * E, e->xn + (int64_t)i * E, (size_t)E * sizeof(float));
        n_out++;
    }
    return n_out;
}

static bool any_logits(const struct engine_batch *b) {
    for (int i = 0; i < b->n; i++)
        if (b->logits[i]) return true;
    return false;
}

/* The batch e->b (checked): every layer over all its rows, then the output head over the rows
 * that asked for logits. */
static void eval_batch(struct engine *e, float *logits) {
    const struct engine_batch *b = e->b;
    const struct model *m = e->m;
    const struct model_config *c = &m->cfg;
    const int64_t E = c->n_embd;
    const int n = b->n;

    for (int i = 0; i < n; i++) {
        model_embed_row(m, b->token[i], e->x + i * E);
        op_rope_cache(e->rope + (int64_t)i * c->n_rot, b->pos[i], c->n_rot, c->rope_freq_base, c->rope_freq_scale,
                      m->rope_freqs);
    }
    attn_plan(e);
    hook(e, -1, b->pos[0], e->x, n);

    for (int il = 0; il < m->n_layer_local; il++) {
        const struct layer_weights *L = &m->layers[il];
        norm_rows(e, e->xn, e->x, L->attn_norm, n, E, c->rms_eps);
        attention_block(e, il, n);
        norm_rows(e, e->xn, e->x, L->ffn_norm, n, E, c->rms_eps);
        if (c->n_expert > 0) moe_block(e, il, n);
        else ffn_block(e, il, n);
        hook(e, il, b->pos[0], e->x, n);
    }

    if (m->head_remote) { /* the GPU rank's layers and head; rank 0 alone talks to it */
        const struct stage_batch sb = {.n = n, .hidden = e->x, .seq = b->seq, .pos = b->pos, .logits = b->logits};
        char err[512];
        const uint64_t t0 = phase_begin();
        if (e->stage.ops && e->stage.ops->eval(e->stage.ctx, &sb, logits, err, sizeof err)) nm_fatal("%s", err);
        phase_end(e, ENGINE_PH_STAGE, t0);
        return;
    }
    if (!any_logits(b) && !e->hook) return;
    /* The head's norm and matmul count as the head, not as layer work. */
    const struct engine_times layers = e->t;
    const struct pool_stats ps_layers = e->ps_last;
    const uint64_t t0 = phase_begin();
    norm_rows(e, e->xn, e->x, m->output_norm, n, E, c->rms_eps);
    hook(e, c->n_layer, b->pos[0], e->xn, n);
    const int rows = head_rows(e);
    if (rows > 0) {
        struct act out = act_of(e, e->xn, rows, E);
        matmul(e, &m->output, &out, logits);
        add_bias(logits, m->output_bias, rows, e->n_vocab_l);
    }
    e->t = layers;
    e->ps_last = ps_layers;
    phase_end(e, ENGINE_PH_HEAD, t0);
}

/* The batch rules of forward.h, checked before anything changes. */
static enum nm_status batch_check(struct engine *e, const struct engine_batch *b, float *logits, int *n_asking,
                                  char *err, size_t errlen) {
    const int64_t n_vocab = e->m->cfg.n_vocab;
    if (b->n < 1 || b->n > e->n_batch)
        return nm_errf(err, errlen, NM_ERR_ARGS, "a batch of %d rows; allowed are 1..%d (the batch size)", b->n,
                       e->n_batch);
    int n_out = 0;
    for (int i = 0; i < b->n; i++) {
        n_out += b->logits[i];
        if (b->token[i] < 0 || b->token[i] >= n_vocab)
            return nm_errf(err, errlen, NM_ERR_ARGS, "row %d: token id %d is outside the vocabulary 0..%lld", i,
                           b->token[i], (long long)n_vocab - 1);
    }
    enum nm_status st = kv_batch_check(b->n, b->seq, b->pos, e->n_seq, e->seq_pos, e->kv.n_ctx_seq, e->seq_seen,
                                       "the engine", err, errlen);
    if (st) return st;
    if (n_out > 0 && !logits && !e->m->head_remote) /* the stage may keep them (engine_sample) */
        return nm_errf(err, errlen, NM_ERR_ARGS, "%d rows ask for logits but no buffer was given", n_out);
    *n_asking = n_out;
    return NM_OK;
}

enum nm_status engine_eval_batch(struct engine *e, const struct engine_batch *b, float *logits, char *err,
                                 size_t errlen) {
    int n_asking = 0;
    enum nm_status st = batch_check(e, b, logits, &n_asking, err, errlen);
    if (st) return st;
    e->b = b;
    eval_batch(e, logits);
    e->b = NULL;
    e->last_asking = n_asking;
    for (int i = 0; i < b->n; i++) e->seq_pos[b->seq[i]] = b->pos[i] + 1;
    return NM_OK;
}

enum nm_status engine_eval(struct engine *e, const int32_t *tokens, int n, bool logits_all, float *logits,
                           char *err, size_t errlen) {
    const struct model_config *c = &e->m->cfg;
    if (n < 1) return nm_errf(err, errlen, NM_ERR_ARGS, "no tokens to evaluate");
    if (e->seq_pos[0] + n > e->kv.n_ctx_seq)
        return nm_errf(err, errlen, NM_ERR_ARGS,
                       "%lld tokens at position %lld do not fit in the context of %lld tokens (raise -c)", (long long)n,
                       (long long)e->seq_pos[0], (long long)e->kv.n_ctx_seq);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return nm_errf(err, errlen, NM_ERR_ARGS, "token id %d at index %d is outside the vocabulary 0..%lld",
                           tokens[i], i, (long long)c->n_vocab - 1);
    for (int done = 0; done < n;) {
        const int chunk = NM_MIN(e->n_batch, n - done);
        const bool last = done + chunk == n;
        for (int i = 0; i < chunk; i++) {
            e->eval_pos[i] = e->seq_pos[0] + i;
            /* Only the final chunk's last row produces logits unless every position's are wanted. */
            e->eval_logits[i] = logits_all || (last && i == chunk - 1);
        }
        const struct engine_batch b = {.n = chunk, .token = tokens + done, .pos = e->eval_pos, .seq = e->eval_seq,
                                       .logits = e->eval_logits};
        float *dst = logits_all ? logits + (int64_t)done * e->n_vocab_l : last ? logits : NULL;
        enum nm_status st = engine_eval_batch(e, &b, dst, err, errlen);
        NM_ASSERT(st == NM_OK); /* checked above */
        done += chunk;
    }
    return NM_OK;
}
