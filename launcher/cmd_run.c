/* numallm run: load a model, evaluate a prompt, generate tokens (or chat, with --chat), print a
 * summary. Every rank of an mpirun job runs this same command; rank 0 reads the input and
 * prints the output. Without mpirun it is the single-rank fallback: one process, no MPI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "cli.h"
#include "coll.h"
#include "dump.h"
#include "sampler.h"
#include "session.h"

struct run_opts {
    struct session_opts so;
    struct launch_request launch;
    const char *prompt;      /* -p TEXT */
    const char *prompt_file; /* -f FILE */
    const char *tokens;      /* --tokens "1,2,3" */
    const char *system;      /* -sys TEXT (chat) */
    const char *chat_template;
    bool chat;
    long long n_predict;
    long long n_ctx;
    bool ignore_eos;
    bool show_special;
    struct sampler_params sp;
    const char *dump_logits;
    const char *dump_layers;
};

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: numallm run [-m MODEL.gguf] [-p TEXT | -f FILE | --tokens IDS] [-n N] [-c CTX] [-t THREADS]\n"
            "                   [-b BATCH] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
            "                   [--repeat-last-n N] [-s SEED] [--ignore-eos] [-ctk f16|f32] [--special]\n"
            "                   [--chat [--chat-template auto|chatml|llama3|llama2] [-sys TEXT]]\n"
            "                   [--dump-logits FILE] [--dump-layers DIR] [--strict]\n"
            "                   [--ranks auto|N] [--dry-run] [--topology FILE.xml]\n"
            "\n"
            "  -m, --model        GGUF model (default: a synthetic qwen2.5-0.5b-shaped Q4_0 model, made once\n"
            "                     into the cache directory, $NUMALLM_CACHE or ~/.cache/numallm)\n"
            "  -p, --prompt TEXT  the prompt (special tokens such as <|im_start|> written in it are parsed)\n"
            "  -f, --file FILE    read the prompt from FILE\n"
            "  --tokens IDS       the prompt as comma-separated token ids; ids are printed instead of text\n"
            "                     (default prompt: the BOS token)\n"
            "  -n, --n-predict    tokens to generate (default 128; per answer with --chat; 0 = prompt only)\n"
            "  -c, --ctx-size     context size (default: prompt + n-predict; with --chat the model's, at most 4096)\n"
            "  -t, --threads      threads per rank (default: the cores of the rank's NUMA node)\n"
            "  -b, --batch-size   prompt tokens per forward chunk (default 512)\n"
            "  --temp             temperature (default 0.8; 0 = greedy)\n"
            "  --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, -s/--seed: as llama.cpp\n"
            "  -ctk, --cache-type KV cache type, f16 (default) or f32\n"
            "  --special          print special tokens (e.g. <|im_end|>) in the output\n"
            "  --chat             interactive chat on standard input, keeping the KV cache between turns\n"
            "  --chat-template    auto (from the file's tokenizer.chat_template), chatml, llama3 or llama2\n"
            "  -sys, --system-prompt  system message for --chat\n"
            "  --dump-logits FILE logits of every prompt position and generated step (format in README)\n"
            "  --dump-layers DIR  the residual stream after every layer, for the prompt\n"
            "  --strict           a failed start-up check or any downgrade is an error\n"
            "%s",
            launch_flags_help());
}

static int parse_run(int argc, char **argv, struct run_opts *o) {
    *o = (struct run_opts){.so = {.n_batch = 512, .kv_type = DTYPE_F16}, .n_predict = 128,
                           .chat_template = "auto", .sp = sampler_default_params()};
    launch_request_init(&o->launch, argc, argv);
    long long ll;
    double d;
    const char *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int lr = launch_parse_flag(argc, argv, &i, &o->launch); /* --ranks, -t, --dry-run, ... */
        if (lr < 0) return 1;
        if (lr > 0) continue;
#define IS(x) (strcmp(a, x) == 0)
        if (IS("-h") || IS("--help")) {
            run_usage(stdout);
            return 0;
        }
        if (IS("--strict")) { o->so.strict = true; continue; }
        if (IS("--ignore-eos")) { o->ignore_eos = true; continue; }
        if (IS("--chat") || IS("-cnv") || IS("--conversation")) { o->chat = true; continue; }
        if (IS("--special")) { o->show_special = true; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (IS("-m") || IS("--model")) o->launch.model = v;
        else if (IS("-p") || IS("--prompt")) o->prompt = v;
        else if (IS("-f") || IS("--file")) o->prompt_file = v;
        else if (IS("--tokens")) o->tokens = v;
        else if (IS("-sys") || IS("--system-prompt")) o->system = v;
        else if (IS("--chat-template")) o->chat_template = v;
        else if (IS("-n") || IS("--n-predict")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_predict)) return 1; }
        else if (IS("-c") || IS("--ctx-size")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_ctx)) return 1; }
        else if (IS("-b") || IS("--batch-size") || IS("-ub") || IS("--ubatch-size")) {
            if (!cli_int(a, v, 1, 1 << 16, &ll)) return 1;
            o->so.n_batch = (int)ll;
        } else if (IS("--temp")) { if (!cli_float(a, v, 0, 100, &d)) return 1; o->sp.temp = (float)d; }
        else if (IS("--top-k")) { if (!cli_int(a, v, 0, 1 << 30, &ll)) return 1; o->sp.top_k = (int)ll; }
        else if (IS("--top-p")) { if (!cli_float(a, v, 0, 1, &d)) return 1; o->sp.top_p = (float)d; }
        else if (IS("--min-p")) { if (!cli_float(a, v, 0, 1, &d)) return 1; o->sp.min_p = (float)d; }
        else if (IS("--repeat-penalty")) { if (!cli_float(a, v, 0.01, 100, &d)) return 1; o->sp.repeat_penalty = (float)d; }
        else if (IS("--repeat-last-n")) { if (!cli_int(a, v, 0, 1 << 20, &ll)) return 1; o->sp.repeat_last_n = (int)ll; }
        else if (IS("-s") || IS("--seed")) { if (!cli_int(a, v, 0, INT64_MAX, &ll)) return 1; o->sp.seed = (uint64_t)ll; }
        else if (IS("-ctk") || IS("-ctv") || IS("--cache-type") || IS("--cache-type-k") || IS("--cache-type-v")) {
            if (strcmp(v, "f16") == 0) o->so.kv_type = DTYPE_F16;
            else if (strcmp(v, "f32") == 0) o->so.kv_type = DTYPE_F32;
            else {
                fprintf(stderr, "error: invalid value '%s' for %s: expected f16 or f32\n", v, a);
                return 1;
            }
        } else if (IS("--dump-logits")) o->dump_logits = v;
        else if (IS("--dump-layers")) o->dump_layers = v;
        else {
            fprintf(stderr, "error: unknown option '%s' for run (numallm run --help lists them)\n", a);
            return 1;
        }
#undef IS
    }
    if (!!o->prompt + !!o->prompt_file + !!o->tokens > 1) {
        fprintf(stderr, "error: give the prompt once: -p, -f or --tokens\n");
        return 1;
    }
    if (o->chat && (o->tokens || o->dump_logits || o->dump_layers)) {
        fprintf(stderr, "error: --chat takes text on standard input; --tokens and the dumps do not apply\n");
        return 1;
    }
    return -1; /* parsed; go on */
}

/* Generation state shared by a single prompt and by chat turns. */
struct gen {
    struct session *s;
    const struct run_opts *o;
    struct sampler *smp;
    struct tok_stream *ts;  /* NULL: print ids */
    float *logits;          /* [vocab_local] of the last evaluated position */
    float *full;            /* [n_vocab] when dumping logits */
    bool dump;              /* --dump-logits: every rank takes part in gathering the logits */
    struct dump_logits *dl; /* the file, on rank 0 */
    int32_t eos;
    int n_eval;             /* forward passes made while generating */
    double t_gen;
    struct engine_times ph_prompt, ph_gen; /* engine phase times (NM_PROFILE) */
};

static bool is_end(const struct gen *g, int32_t tok) {
    if (g->s->tok) return tok_is_eog(g->s->tok, tok);
    return tok == g->eos;
}

static void emit(struct gen *g, int32_t tok) {
    if (g->s->rank != 0) return;
    if (!g->ts) {
        printf(" %d", tok);
    } else {
        size_t n;
        const char *p = tok_stream_feed(g->ts, tok, &n);
        fwrite(p, 1, n, stdout);
    }
    fflush(stdout);
}

/* Sample and evaluate up to n_predict tokens after the engine's state; the last sampled token
 * is not evaluated (its logits are not needed). Appends the tokens to *out when out != NULL.
 * Stops at an end-of-generation token unless --ignore-eos. */
static enum nm_status generate(struct gen *g, int32_t **out, size_t *n_out, char *err, size_t errlen) {
    struct session *s = g->s;
    /* With the head on the GPU and a top-k sampler, only the candidates come back (no logits). */
    const bool on_stage = engine_samples_on_stage(s->e, g->smp) && !g->dump;
    const double t0 = nm_time_s();
    struct engine_times ph0, ph1;
    engine_phase_seconds(s->e, &ph0);
    for (long long i = 0; i < g->o->n_predict; i++) {
        const int32_t tok = engine_sample(s->e, g->smp, g->logits);
        sampler_accept(g->smp, tok);
        const bool end = is_end(g, tok) && !g->o->ignore_eos;
        if (!end || g->o->show_special) emit(g, tok);
        if (out) {
            *out = realloc(*out, (*n_out + 1) * sizeof **out);
            NM_ASSERT(*out);
            (*out)[(*n_out)++] = tok;
        }
        if (end || i + 1 == g->o->n_predict) break;
        if (engine_n_past(s->e) + 1 > engine_n_ctx(s->e)) {
            if (s->rank == 0) nm_log_warn("context of %lld tokens is full; stopping", (long long)engine_n_ctx(s->e));
            break;
        }
        const int64_t pos = engine_n_past(s->e);
        enum nm_status st = engine_eval(s->e, &tok, 1, false, on_stage ? NULL : g->logits, err, errlen);
        if (st) return st;
        g->n_eval++;
        if (g->dump) {
            engine_gather_logits(s->e, g->logits, g->full, 1);
            if (s->rank == 0 && (st = dump_logits_row(g->dl, DUMP_KIND_GENERATED, pos, tok, g->full, err, errlen)))
                return st;
        }
    }
    if (g->ts && s->rank == 0) {
        size_t n;
        const char *p = tok_stream_flush(g->ts, &n);
        fwrite(p, 1, n, stdout);
    }
    g->t_gen += nm_time_s() - t0;
    engine_phase_seconds(s->e, &ph1);
    engine_times_add_diff(&g->ph_gen, &ph0, &ph1);
    return NM_OK;
}

static void print_summary(const struct gen *g, int n_prompt, double t_prompt, double coll_prompt) {
    const struct session *s = g->s;
    if (s->rank != 0) return;
    const double coll_gen = engine_coll_seconds(s->e) - coll_prompt;
    nm_log_info("load time   %8.2f ms", s->t_load * 1e3);
    if (n_prompt > 0)
        nm_log_info("prompt eval %8.2f ms / %4d tokens (%8.2f ms per token, %8.2f tokens per second)", t_prompt * 1e3,
                    n_prompt, t_prompt * 1e3 / n_prompt, n_prompt / t_prompt);
    if (g->n_eval > 0) {
        /* Each decode step reads every weight of this rank's shard once (the embedding: one row;
         * MoE: the chosen experts only). */
        const double bytes = (double)s->m->token_bytes, tps = g->n_eval / g->t_gen;
        nm_log_info("generation  %8.2f ms / %4d runs   (%8.2f ms per token, %8.2f tokens per second)",
                    g->t_gen * 1e3, g->n_eval, g->t_gen * 1e3 / g->n_eval, tps);
        nm_log_info("generation reads %.1f MiB of weights per token per rank: %.2f GB/s per rank", bytes / (1 << 20),
                    bytes * tps / 1e9);
    }
    if (engine_profile_requested()) { /* time by forward-pass phase, prompt and generation */
        char line[512];
        if (n_prompt > 0) {
            engine_phase_report(NULL, &g->ph_prompt, t_prompt, line, sizeof line);
            nm_log_info("profile, prompt:     %s", line);
        }
        if (g->n_eval > 0) {
            engine_phase_report(NULL, &g->ph_gen, g->t_gen, line, sizeof line);
            nm_log_info("profile, generation: %s", line);
        }
    }
    if (s->nranks > 1)
        nm_log_info("allreduce share: prompt %.1f%%, generation %.1f%% (transport %s)",
                    t_prompt > 0 ? 100 * coll_prompt / t_prompt : 0.0, g->t_gen > 0 ? 100 * coll_gen / g->t_gen : 0.0,
                    coll_transport_name(s->coll));
}

/* The prompt's ids: from --tokens, the text of -p/-f, or the BOS token. */
static enum nm_status prompt_ids(struct session *s, const struct run_opts *o, int32_t **ids, size_t *n, char *err,
                                 size_t errlen) {
    if (o->tokens) {
        int cnt;
        if (!cli_int_list("--tokens", o->tokens, ids, &cnt)) return nm_errf(err, errlen, NM_ERR_ARGS, "bad --tokens");
        *n = (size_t)cnt;
        return NM_OK;
    }
    if (o->prompt || o->prompt_file) {
        size_t len = 0;
        char *text = NULL;
        if (o->prompt) {
            text = strdup(o->prompt);
            len = strlen(text);
        } else if (!(text = session_read_file(o->prompt_file, &len))) {
            return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot read the prompt file", o->prompt_file);
        }
        enum nm_status st = session_tokenize(s, text, len, true, ids, n, err, errlen);
        free(text);
        return st;
    }
    int64_t bos = 1;
    if (s->tok && tok_bos(s->tok) >= 0) bos = tok_bos(s->tok);
    else gguf_get_int(s->m->file, "tokenizer.ggml.bos_token_id", &bos, NULL, 0);
    *ids = malloc(sizeof **ids);
    (*ids)[0] = (int32_t)(bos >= 0 && bos < s->m->cfg.n_vocab ? bos : 0);
    *n = 1;
    return NM_OK;
}

static int32_t eos_id(const struct session *s) {
    int64_t v = -1;
    if (gguf_get_int(s->m->file, "tokenizer.ggml.eos_token_id", &v, NULL, 0) != NM_OK) v = -1;
    return (int32_t)v;
}

/* One prompt, one answer. */
static enum nm_status run_once(struct session *s, const struct run_opts *o, char *err, size_t errlen) {
    const struct model_config *c = &s->m->cfg;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    float *logits = NULL, *full = NULL;
    struct dump_logits dl = {0};
    struct dump_layers dly = {0};
    struct dump_routes drt = {0};
    struct gen g = {.s = s, .o = o, .eos = eos_id(s)};
    enum nm_status st = prompt_ids(s, o, &prompt, &n_prompt, err, errlen);
    if (st) goto out;
    const int64_t n_ctx = o->n_ctx > 0 ? o->n_ctx : NM_MIN((int64_t)n_prompt + o->n_predict, c->n_ctx_train);
    if ((int64_t)n_prompt > n_ctx) {
        st = nm_errf(err, errlen, NM_ERR_ARGS, "the prompt has %zu tokens, more than the context size %lld (raise -c)",
                     n_prompt, (long long)n_ctx);
        goto out;
    }
    if ((st = session_engine(s, &o->so, n_ctx, err, errlen))) goto out;

    const bool all = o->dump_logits != NULL;
    const int64_t n_local = range_len(s->m->shard.vocab);
    logits = engine_logits_buffer(s->e, all ? (int)n_prompt : 1);
    if (all) full = nm_alloc(n_prompt * (size_t)c->n_vocab * sizeof(float), 64, "full logits");
    if (s->rank == 0 && all && (st = dump_logits_open(&dl, o->dump_logits, c->n_vocab, err, errlen))) goto out;
    if (s->rank == 0 && o->dump_layers) {
        if ((st = dump_layers_open(&dly, o->dump_layers, (int)c->n_layer, (int64_t)n_prompt, c->n_embd, err, errlen)))
            goto out;
        engine_set_layer_hook(s->e, dump_layers_hook, &dly);
        if (c->n_expert > 0) {
            if ((st = dump_routes_open(&drt, o->dump_layers, err, errlen))) goto out;
            engine_set_route_hook(s->e, dump_routes_hook, &drt);
        }
    }

    g.smp = sampler_init(&o->sp, c->n_vocab);
    if (!o->tokens && s->tok) g.ts = tok_stream_init(s->tok, o->show_special ? TOK_DECODE_SPECIAL : 0);
    for (size_t i = 0; i < n_prompt; i++) sampler_accept(g.smp, prompt[i]);
    if (s->rank == 0) {
        /* Echo the prompt as the user wrote it (text) or as ids. */
        if (g.ts) {
            char *text = NULL;
            size_t len = 0;
            if (o->prompt) fputs(o->prompt, stdout);
            else if (o->prompt_file && (text = session_read_file(o->prompt_file, &len))) fwrite(text, 1, len, stdout);
            free(text);
        } else {
            for (size_t i = 0; i < n_prompt; i++) printf("%s%d", i ? " " : "", prompt[i]);
            printf(" |");
        }
        fflush(stdout);
    }

    const double t0 = nm_time_s();
    struct engine_times ph0, ph1;
    engine_phase_seconds(s->e, &ph0);
    if ((st = engine_eval(s->e, prompt, (int)n_prompt, all, logits, err, errlen))) goto out;
    const double t_prompt = nm_time_s() - t0, coll_prompt = engine_coll_seconds(s->e);
    engine_phase_seconds(s->e, &ph1);
    engine_times_add_diff(&g.ph_prompt, &ph0, &ph1);
    engine_set_layer_hook(s->e, NULL, NULL);
    engine_set_route_hook(s->e, NULL, NULL);
    dump_routes_close(&drt);
    if (dly.files && (st = dump_layers_close(&dly, err, errlen))) goto out;
    if (all) {
        engine_gather_logits(s->e, logits, full, (int)n_prompt);
        for (size_t i = 0; s->rank == 0 && i < n_prompt; i++)
            if ((st = dump_logits_row(&dl, DUMP_KIND_PROMPT, (int64_t)i, prompt[i], full + i * (size_t)c->n_vocab, err,
                                      errlen)))
                goto out;
        memmove(logits, logits + (n_prompt - 1) * (size_t)n_local, (size_t)n_local * sizeof(float));
    }
    g.logits = logits;
    g.full = full;
    g.dump = all;
    g.dl = dl.fp ? &dl : NULL;
    if ((st = generate(&g, NULL, NULL, err, errlen))) goto out;
    if (s->rank == 0) printf("\n");
    if (dl.fp && (st = dump_logits_close(&dl, err, errlen))) goto out;
    print_summary(&g, (int)n_prompt, t_prompt, coll_prompt);
out:
    if (dl.fp) dump_logits_close(&dl, NULL, 0);
    if (dly.files) dump_layers_close(&dly, NULL, 0);
    dump_routes_close(&drt);
    tok_stream_free(g.ts);
    sampler_free(g.smp);
    nm_free(full);
    free(prompt);
    return st;
}

/* Interactive chat: rank 0 reads a line per turn; the conversation is formatted with the chat
 * template and only the tokens after what the KV cache already holds are evaluated. */
static enum nm_status run_chat(struct session *s, const struct run_opts *o, char *err, size_t errlen) {
    const struct model_config *c = &s->m->cfg;
    enum chat_template tmpl;
    enum nm_status st;
    if (!s->tok) return nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "--chat needs the model's tokenizer");
    if ((st = chat_template_resolve(o->chat_template, s->m->file, &tmpl, err, errlen))) return st;
    if (s->rank == 0) nm_log_info("chat template: %s; type a message, an empty line or end of input ends the chat",
                                  chat_template_name(tmpl));
    const int64_t n_ctx = o->n_ctx > 0 ? o->n_ctx : NM_MIN(c->n_ctx_train, 4096);
    if ((st = session_engine(s, &o->so, n_ctx, err, errlen))) return st;

    struct chat_msg *msgs = NULL;
    size_t n_msgs = 0;
    int32_t *hist = NULL; /* tokens in the KV cache, in order */
    size_t n_hist = 0;
    float *logits = engine_logits_buffer(s->e, 1);
    struct gen g = {.s = s, .o = o, .eos = eos_id(s), .logits = logits};
    g.smp = sampler_init(&o->sp, c->n_vocab);
    g.ts = tok_stream_init(s->tok, o->show_special ? TOK_DECODE_SPECIAL : 0);
    if (o->system) {
        msgs = realloc(msgs, (n_msgs + 1) * sizeof *msgs);
        msgs[n_msgs++] = (struct chat_msg){.role = "system", .content = strdup(o->system)};
    }
    for (;;) {
        char *line = NULL;
        size_t len = 0;
        if (s->rank == 0) {
            fprintf(stdout, "\n> ");
            fflush(stdout);
            size_t cap = 0;
            ssize_t r = getline(&line, &cap, stdin);
            len = r > 0 ? (size_t)r : 0;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (!line) line = strdup("");
        }
        session_bcast_text(s, &line, &len);
        if (len == 0) {
            free(line);
            break;
        }
        msgs = realloc(msgs, (n_msgs + 2) * sizeof *msgs);
        msgs[n_msgs++] = (struct chat_msg){.role = "user", .content = line};
        char *text;
        size_t tlen, n_ids;
        int32_t *ids;
        if ((st = chat_format(tmpl, msgs, n_msgs, true, &text, &tlen, err, errlen))) break;
        st = session_tokenize(s, text, tlen, true, &ids, &n_ids, err, errlen);
        free(text);
        if (st) break;
        /* Keep the longest prefix the cache already holds; evaluate the rest. */
        size_t keep = 0;
        while (keep < n_hist && keep < n_ids && hist[keep] == ids[keep]) keep++;
        if (keep == n_ids) keep--; /* at least one token must run to get logits */
        if ((int64_t)n_ids >= n_ctx) {
            free(ids);
            st = nm_errf(err, errlen, NM_ERR_ARGS, "the conversation (%zu tokens) no longer fits the context of %lld "
                         "tokens (raise -c)", n_ids, (long long)n_ctx);
            break;
        }
        engine_truncate(s->e, (int64_t)keep);
        if (s->rank == 0)
            nm_log_info("chat: %zu tokens of the conversation reused from the KV cache, %zu new", keep, n_ids - keep);
        for (size_t i = keep; i < n_ids; i++) sampler_accept(g.smp, ids[i]);
        st = engine_eval(s->e, ids + keep, (int)(n_ids - keep), false, logits, err, errlen);
        free(hist);
        hist = ids;
        n_hist = n_ids;
        if (st) break;
        int32_t *answer = NULL;
        size_t n_answer = 0;
        if ((st = generate(&g, &answer, &n_answer, err, errlen))) break;
        /* The answer's tokens before its end marker are in the cache (the last one is not). */
        size_t n_in_cache = n_answer > 0 ? n_answer - 1 : 0;
        hist = realloc(hist, (n_hist + n_answer + 1) * sizeof *hist);
        memcpy(hist + n_hist, answer, n_in_cache * sizeof *hist);
        n_hist += n_in_cache;
        size_t n_text = n_answer;
        while (n_text > 0 && is_end(&g, answer[n_text - 1])) n_text--;
        size_t alen = tok_decode(s->tok, answer, n_text, 0, NULL, 0);
        char *atext = malloc(alen + 1);
        tok_decode(s->tok, answer, n_text, 0, atext, alen);
        atext[alen] = 0;
        free(answer);
        msgs = realloc(msgs, (n_msgs + 1) * sizeof *msgs);
        msgs[n_msgs++] = (struct chat_msg){.role = "assistant", .content = atext};
    }
    if (s->rank == 0) printf("\n");
    print_summary(&g, 0, 0, 0);
    for (size_t i = 0; i < n_msgs; i++) free((char *)msgs[i].content);
    free(msgs);
    free(hist);
    tok_stream_free(g.ts);
    sampler_free(g.smp);
    return st;
}

int cmd_run(int argc, char **argv) {
    struct run_opts o;
    int rc = parse_run(argc, argv, &o);
    if (rc >= 0) return rc;
    /* In-process (one rank), or exec mpirun whose ranks come back here. */
    if ((rc = session_launch(&o.launch, &o.so)) >= 0) return rc;
    struct session s;
    char err[1024];
    enum nm_status st = session_open(&s, &o.so, err, sizeof err);
    if (!st) st = o.chat ? run_chat(&s, &o, err, sizeof err) : run_once(&s, &o, err, sizeof err);
    /* Every rank meets the same error (same file, same flags); rank 0 reports it. */
    if (st && s.rank == 0) fprintf(stderr, "error: %s\n", err);
    session_close(&s);
    return st ? 1 : 0;
}
