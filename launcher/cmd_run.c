/* numallm run: load a model, evaluate a prompt, generate tokens, print a summary. With one CPU
 * rank and no GPU this runs in-process, without MPI (the single-rank fallback). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "coll.h"
#include "cpu.h"
#include "dump.h"
#include "forward.h"
#include "model.h"
#include "sampler.h"

struct run_opts {
    const char *model;
    const char *tokens;      /* --tokens "1,2,3" */
    long long n_predict;
    long long n_ctx;
    long long n_threads;
    long long n_batch;
    int kv_type;
    bool ignore_eos;
    struct sampler_params sp;
    const char *dump_logits;
    const char *dump_layers;
};

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: numallm run [-m MODEL.gguf] [--tokens IDS] [-n N] [-c CTX] [-t THREADS] [-b BATCH]\n"
            "                   [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
            "                   [--repeat-last-n N] [-s SEED] [--ignore-eos] [-ctk f16|f32]\n"
            "                   [--dump-logits FILE] [--dump-layers DIR]\n"
            "\n"
            "  -m, --model        GGUF model (default: a synthetic qwen2.5-0.5b-shaped Q4_0 model, made once\n"
            "                     into the cache directory, $NUMALLM_CACHE or ~/.cache/numallm)\n"
            "  --tokens IDS       the prompt as comma-separated token ids (default: the BOS token)\n"
            "  -n, --n-predict    tokens to generate (default 128; 0 = prompt only)\n"
            "  -c, --ctx-size     context size (default: prompt + n-predict, at most the model's)\n"
            "  -t, --threads      threads, bound to the allowed CPUs in order (default: all allowed)\n"
            "  -b, --batch-size   prompt tokens per forward chunk (default 512)\n"
            "  --temp             temperature (default 0.8; 0 = greedy)\n"
            "  --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, -s/--seed: as llama.cpp\n"
            "  -ctk, --cache-type KV cache type, f16 (default) or f32\n"
            "  --dump-logits FILE logits of every prompt position and generated step (format in README)\n"
            "  --dump-layers DIR  the residual stream after every layer, for the prompt\n");
}

static int parse_run(int argc, char **argv, struct run_opts *o) {
    *o = (struct run_opts){.n_predict = 128, .n_batch = 512, .kv_type = DTYPE_F16, .sp = sampler_default_params()};
    long long ll;
    double d;
    const char *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(x) (strcmp(a, x) == 0)
        if (IS("-h") || IS("--help")) {
            run_usage(stdout);
            return 0;
        }
        if (IS("--ignore-eos")) {
            o->ignore_eos = true;
            continue;
        }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (IS("-m") || IS("--model")) o->model = v;
        else if (IS("--tokens")) o->tokens = v;
        else if (IS("-n") || IS("--n-predict")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_predict)) return 1; }
        else if (IS("-c") || IS("--ctx-size")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_ctx)) return 1; }
        else if (IS("-t") || IS("--threads")) { if (!cli_int(a, v, 1, 4096, &o->n_threads)) return 1; }
        else if (IS("-b") || IS("--batch-size") || IS("-ub") || IS("--ubatch-size")) {
            if (!cli_int(a, v, 1, 1 << 16, &o->n_batch)) return 1;
        } else if (IS("--temp")) { if (!cli_float(a, v, 0, 100, &d)) return 1; o->sp.temp = (float)d; }
        else if (IS("--top-k")) { if (!cli_int(a, v, 0, 1 << 30, &ll)) return 1; o->sp.top_k = (int)ll; }
        else if (IS("--top-p")) { if (!cli_float(a, v, 0, 1, &d)) return 1; o->sp.top_p = (float)d; }
        else if (IS("--min-p")) { if (!cli_float(a, v, 0, 1, &d)) return 1; o->sp.min_p = (float)d; }
        else if (IS("--repeat-penalty")) { if (!cli_float(a, v, 0.01, 100, &d)) return 1; o->sp.repeat_penalty = (float)d; }
        else if (IS("--repeat-last-n")) { if (!cli_int(a, v, 0, 1 << 20, &ll)) return 1; o->sp.repeat_last_n = (int)ll; }
        else if (IS("-s") || IS("--seed")) { if (!cli_int(a, v, 0, INT64_MAX, &ll)) return 1; o->sp.seed = (uint64_t)ll; }
        else if (IS("-ctk") || IS("-ctv") || IS("--cache-type") || IS("--cache-type-k") || IS("--cache-type-v")) {
            if (strcmp(v, "f16") == 0) o->kv_type = DTYPE_F16;
            else if (strcmp(v, "f32") == 0) o->kv_type = DTYPE_F32;
            else {
                fprintf(stderr, "error: invalid value '%s' for %s: expected f16 or f32\n", v, a);
                return 1;
            }
        } else if (IS("--dump-logits")) o->dump_logits = v;
        else if (IS("--dump-layers")) o->dump_layers = v;
        else if (IS("-p") || IS("--prompt")) {
            fprintf(stderr, "error: text prompts need the tokenizer, which this build does not have yet; "
                            "give the prompt as ids with --tokens\n");
            return 1;
        } else {
            fprintf(stderr, "error: unknown option '%s' for run (numallm run --help lists them)\n", a);
            return 1;
        }
#undef IS
    }
    return -1; /* parsed; go on */
}

static void print_model(const struct model *m, const struct pool *pool) {
    const struct model_config *c = &m->cfg;
    const struct shard *sh = &m->shard;
    char desc[128];
    model_describe(m, desc, sizeof desc);
    uint64_t pages;
    const double local = arena_local_fraction(m->arena, &pages);
    char where[64] = "the kernel cannot tell where its pages are";
    if (local >= 0) snprintf(where, sizeof where, "%.1f%% of %llu pages on node %d", 100 * local,
                             (unsigned long long)pages, arena_node(m->arena));
    nm_log_info("shard %d/%d: heads %lld-%lld, KV heads %lld-%lld, n_ff %lld-%lld, vocab %lld-%lld; loaded %.1f MiB "
                "in %.2f s (%.2f GB/s), %s",
                sh->rank, sh->nranks, (long long)sh->q_heads.begin, (long long)sh->q_heads.end - 1,
                (long long)sh->kv_heads.begin, (long long)sh->kv_heads.end - 1, (long long)sh->ff.begin,
                (long long)sh->ff.end - 1, (long long)sh->vocab.begin, (long long)sh->vocab.end - 1,
                (double)m->loaded_bytes / (1 << 20), m->load_seconds,
                (double)m->loaded_bytes / 1e9 / NM_MAX(m->load_seconds, 1e-9), where);
    if (sh->rank != 0) return;
    nm_log_info("model: %s (%s), %.2f GiB, %.2fB params", desc, m->path, (double)m->weight_bytes / (1 << 30),
                (double)m->n_params / 1e9);
    nm_log_info("  n_vocab %lld, n_embd %lld, n_layer %lld, n_ff %lld, n_head %lld, n_head_kv %lld, head_dim %lld, "
                "n_rot %lld, rope %s base %g scale %g%s, rms_eps %g",
                (long long)c->n_vocab, (long long)c->n_embd, (long long)c->n_layer, (long long)c->n_ff,
                (long long)c->n_head, (long long)c->n_head_kv, (long long)c->head_dim, (long long)c->n_rot,
                c->rope_type == ROPE_TYPE_NEOX ? "neox" : "norm", c->rope_freq_base, c->rope_freq_scale,
                m->rope_freqs ? " with rope_freqs" : "", c->rms_eps);
    nm_log_info("  threads %d, kernels %s, weight layout %s", pool_size(pool), kern_isa_get()->name,
                weight_layout_name(m->layers[0].wq.layout));
}

static int32_t token_id_or(const struct model *m, const char *key, int32_t def) {
    int64_t v;
    if (gguf_get_int(m->file, key, &v, NULL, 0) == NM_OK && v >= 0 && v < m->cfg.n_vocab) return (int32_t)v;
    return def;
}

int cmd_run(int argc, char **argv) {
    struct run_opts o;
    int rc = parse_run(argc, argv, &o);
    if (rc >= 0) return rc;

    /* One rank of the job: alone (no mpirun: the single-rank fallback, no MPI call) or one of
     * the ranks mpirun started, each running this same command. */
    struct coll *coll = coll_init(NULL);
    const int rank = coll_rank(coll), nranks = coll_size(coll);
    char err[1024], model_path[4200];
    struct pool *pool = cli_pool((int)o.n_threads);
    struct model *m = NULL;
    struct engine *e = NULL;
    struct sampler *smp = NULL;
    int32_t *prompt = NULL;
    float *logits = NULL, *full = NULL;
    struct dump_logits dl = {0};
    struct dump_layers dly = {0};
    enum nm_status st = NM_OK;
    rc = 1;

    const double timeout = coll_timeout(coll);
    if (!o.model) {
        /* Rank 0 makes the default model; the others wait for it. */
        bool ok = rank != 0 || cli_default_model(model_path, sizeof model_path, pool);
        coll_set_timeout(coll, 3600);
        coll_bcast(coll, &ok, sizeof ok, 0);
        if (!ok) goto out;
        if (rank != 0 && !cli_default_model(model_path, sizeof model_path, pool)) goto out;
        o.model = model_path;
    }
    /* Loading is unbalanced between ranks (page cache, node speed): wait longer meanwhile. */
    coll_set_timeout(coll, 600);
    const double t_load0 = nm_time_s();
    struct model_load_params lp = {.rank = rank, .nranks = nranks, .pool = pool, .coll = coll};
    if ((st = model_load(o.model, &lp, &m, err, sizeof err))) goto fail;
    const double t_load = nm_time_s() - t_load0;
    coll_barrier(coll);
    coll_set_timeout(coll, timeout);
    print_model(m, pool);
    const struct model_config *c = &m->cfg;
    const struct range vocab = m->shard.vocab;

    int n_prompt;
    if (o.tokens) {
        if (!cli_int_list("--tokens", o.tokens, &prompt, &n_prompt)) goto out;
    } else {
        prompt = malloc(sizeof *prompt);
        prompt[0] = token_id_or(m, "tokenizer.ggml.bos_token_id", 1);
        n_prompt = 1;
    }
    const int32_t eos = token_id_or(m, "tokenizer.ggml.eos_token_id", -1);

    /* Context: what this run needs, unless -c asks for more; never past the model's. */
    int64_t need = n_prompt + o.n_predict;
    int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : NM_MIN(need, c->n_ctx_train);
    if (o.n_ctx > c->n_ctx_train && rank == 0)
        nm_log_warn("-c %lld is more than the model was trained for (%lld)", o.n_ctx, (long long)c->n_ctx_train);
    if (n_prompt > n_ctx) {
        snprintf(err, sizeof err, "the prompt has %d tokens, more than the context size %lld (raise -c)", n_prompt,
                 (long long)n_ctx);
        goto fail;
    }
    struct engine_params ep = {.n_ctx = n_ctx, .n_batch = (int)o.n_batch, .kv_type = (enum dtype)o.kv_type};
    if ((st = engine_init(&e, m, pool, coll, &ep, err, sizeof err))) goto fail;

    const bool all = o.dump_logits != NULL;
    const int64_t n_local = range_len(vocab);
    logits = nm_alloc((size_t)(all ? n_prompt : 1) * (size_t)n_local * sizeof(float), 64, "logits");
    if (all) full = nm_alloc((size_t)n_prompt * (size_t)c->n_vocab * sizeof(float), 64, "full logits");
    if (rank == 0 && o.dump_logits && (st = dump_logits_open(&dl, o.dump_logits, c->n_vocab, err, sizeof err)))
        goto fail;
    if (rank == 0 && o.dump_layers) {
        if ((st = dump_layers_open(&dly, o.dump_layers, (int)c->n_layer, n_prompt, c->n_embd, err, sizeof err)))
            goto fail;
        engine_set_layer_hook(e, dump_layers_hook, &dly);
    }

    smp = sampler_init(&o.sp, c->n_vocab);
    for (int i = 0; i < n_prompt; i++) {
        sampler_accept(smp, prompt[i]);
        if (rank == 0) printf("%s%d", i ? " " : "", prompt[i]);
    }
    if (rank == 0) printf(" |");
    fflush(stdout);

    const double t_p0 = nm_time_s();
    if ((st = engine_eval(e, prompt, n_prompt, all, logits, err, sizeof err))) goto fail;
    const double t_prompt = nm_time_s() - t_p0;
    const double coll_prompt = engine_coll_seconds(e);
    engine_set_layer_hook(e, NULL, NULL);
    if (dly.files && (st = dump_layers_close(&dly, err, sizeof err))) goto fail;
    if (all) {
        engine_gather_logits(e, logits, full, n_prompt);
        for (int i = 0; rank == 0 && i < n_prompt; i++)
            if ((st = dump_logits_row(&dl, DUMP_KIND_PROMPT, i, prompt[i], full + (size_t)i * c->n_vocab, err,
                                      sizeof err)))
                goto fail;
    }
    const float *last = logits + (all ? (size_t)(n_prompt - 1) * n_local : 0);

    int n_gen = 0;
    const double t_g0 = nm_time_s();
    for (; n_gen < o.n_predict; n_gen++) {
        int32_t tok = sampler_sample_dist(smp, coll, last, vocab.begin, n_local);
        sampler_accept(smp, tok);
        if (rank == 0) {
            printf(" %d", tok);
            fflush(stdout);
        }
        if ((tok == eos && !o.ignore_eos) || n_gen + 1 == o.n_predict) {
            n_gen++;
            break;
        }
        const int64_t pos = engine_n_past(e);
        if ((st = engine_eval(e, &tok, 1, false, logits, err, sizeof err))) goto fail;
        last = logits;
        if (all) {
            engine_gather_logits(e, logits, full, 1);
            if (rank == 0 && (st = dump_logits_row(&dl, DUMP_KIND_GENERATED, pos, tok, full, err, sizeof err)))
                goto fail;
        }
    }
    const double t_gen = nm_time_s() - t_g0;
    if (rank == 0) printf("\n");
    if (dl.fp && (st = dump_logits_close(&dl, err, sizeof err))) goto fail;

    /* The last sampled token is not evaluated: generation speed counts the forward passes made. */
    const int n_eval = n_gen > 0 ? n_gen - 1 : 0;
    const double coll_gen = engine_coll_seconds(e) - coll_prompt;
    if (rank == 0) {
        nm_log_info("load time   %8.2f ms", t_load * 1e3);
        nm_log_info("prompt eval %8.2f ms / %4d tokens (%8.2f ms per token, %8.2f tokens per second)%s", t_prompt * 1e3,
                    n_prompt, t_prompt * 1e3 / n_prompt, n_prompt / t_prompt, "");
        if (n_eval > 0)
            nm_log_info("generation  %8.2f ms / %4d runs   (%8.2f ms per token, %8.2f tokens per second)",
                        t_gen * 1e3, n_eval, t_gen * 1e3 / n_eval, n_eval / t_gen);
        if (nranks > 1)
            nm_log_info("allreduce share: prompt %.1f%%, generation %.1f%% (transport %s)", 100 * coll_prompt / t_prompt,
                        n_eval > 0 ? 100 * coll_gen / t_gen : 0.0, coll_transport_name(coll));
    }
    rc = 0;
    goto out;
fail:
    /* Every rank reaches the same error (same file, same flags), so each reports and leaves. */
    if (rank == 0 || nranks == 1) fprintf(stderr, "error: %s\n", err);
out:
    if (dl.fp) dump_logits_close(&dl, err, sizeof err);
    if (dly.files) dump_layers_close(&dly, err, sizeof err);
    sampler_free(smp);
    nm_free(logits);
    nm_free(full);
    free(prompt);
    engine_free(e);
    model_free(m);
    pool_free(pool);
    coll_free(coll);
    (void)st;
    return rc;
}
