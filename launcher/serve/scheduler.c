/* Continuous batching over the engine's slots (see scheduler.h). */
#include "scheduler.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"
#include "pool.h"

/* ---- requests ---------------------------------------------------------------------------- */

struct serve_request *serve_request_new(void) {
    struct serve_request *r = calloc(1, sizeof *r);
    NM_ASSERT(r);
    static atomic_uint_fast64_t count;
    r->sp = sampler_default_params();
    r->sp.seed = (uint64_t)time(NULL) * 1000003u + atomic_fetch_add(&count, 1); /* no "seed": one of its own */
    r->refs = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return r;
}

void serve_request_release(struct serve_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    const bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->text);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void serve_request_cancel(struct serve_request *r) {
    pthread_mutex_lock(&r->mu);
    r->cancelled = true;
    pthread_mutex_unlock(&r->mu);
}

static bool request_cancelled(struct serve_request *r) {
    pthread_mutex_lock(&r->mu);
    const bool c = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* Release text to the reader and, with finish != NONE, end the request. */
static void request_publish(struct serve_request *r, const char *text, size_t len, enum serve_finish finish) {
    pthread_mutex_lock(&r->mu);
    if (len > 0) {
        if (r->text_len + len + 1 > r->text_cap) {
            r->text_cap = NM_MAX(2 * r->text_cap, r->text_len + len + 1);
            r->text = realloc(r->text, r->text_cap);
            NM_ASSERT(r->text);
        }
        memcpy(r->text + r->text_len, text, len);
        r->text_len += len;
        r->text[r->text_len] = 0;
    }
    if (finish != SERVE_FINISH_NONE) r->finish = finish;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the step message: what rank 0 broadcasts --------------------------------------------- */

/* A slot taking a new request: keep the first `keep` positions it holds, start a sampler with sp
 * that has seen the prompt's last n_hist tokens (hist[hist_off ..]). */
struct step_start {
    int32_t slot;
    int32_t n_hist;
    int64_t keep;
    int64_t hist_off;
    struct sampler_params sp;
};

/* A row to sample: the out-th row of the logits, for slot. */
struct step_sample {
    int32_t slot;
    int32_t out;
};

struct step_head {
    int32_t n_rows, n_starts, n_samples, n_hist;
    int32_t stop; /* the loop ends */
};

struct step {
    struct step_head h;
    int32_t *token;  /* [n_batch] */
    int64_t *pos;    /* [n_batch] */
    int32_t *seq;    /* [n_batch] */
    uint8_t *want;   /* [n_batch] logits wanted (bool travels as a byte) */
    bool *want_b;    /* [n_batch] the same, as the engine takes it */
    struct step_start *starts; /* [n_slots] */
    struct step_sample *samples; /* [n_batch] */
    /* every rank: the samples' samplers, logits rows and tokens, as engine_sample_rows takes them */
    struct sampler **smp; /* [n_batch] */
    int *out;             /* [n_batch] */
    int32_t *tok;         /* [n_batch] */
    int32_t *hist;   /* [n_hist] tokens the new samplers have seen */
    int64_t hist_cap;
    uint8_t *msg;    /* the arrays above packed for the broadcast */
    size_t msg_cap;
};

/* ---- slots and the scheduler ------------------------------------------------------------- */

enum slot_state {
    SLOT_IDLE,    /* no request; its KV holds `tokens` for prefix reuse */
    SLOT_PREFILL, /* evaluating the prompt (n_done < n_prompt) */
    SLOT_DECODE,  /* `next` sampled, to be evaluated */
};

struct slot {
    enum slot_state state;
    struct serve_request *req;
    struct sampler *smp;      /* every rank: this slot's sampler */
    int32_t *tokens;          /* [n_ctx_slot] what its KV cache holds (rank 0) */
    int64_t n_tokens;
    int64_t n_prefill;        /* how many of them were evaluated as prompt rows (rank 0): reusable */
    int64_t n_done;           /* prompt tokens in the cache (rank 0) */
    int32_t next;             /* SLOT_DECODE: the token to evaluate next */
    struct tok_stream *ts;    /* rank 0: detokenizer of the request's output */
    char *pending;            /* rank 0: text held back (it may be the start of a stop string) */
    size_t n_pending, cap_pending;
    double t_start, t_first;  /* rank 0: when the request got the slot, when its prompt was done */
};

struct serve_sched {
    struct session *s;
    struct engine *e;
    int rank, nranks;
    int n_slots, n_batch, max_queue;
    int64_t n_ctx_slot;
    struct slot *slots;
    struct step st;
    float *logits;            /* [n_batch][this rank's vocabulary slice] */
    int32_t eos;
    /* rank 0: the queue of requests waiting for a slot, in arrival order */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* a request arrived */
    struct serve_request **queue;
    int n_queue;
    uint64_t next_id;
    volatile sig_atomic_t stop;
    bool stopping;            /* under mu: no new requests */
    struct serve_metrics met; /* under mu */
};

struct serve_sched *serve_sched_init(struct session *s, const struct serve_sched_params *p) {
    struct serve_sched *sc = calloc(1, sizeof *sc);
    NM_ASSERT(sc);
    sc->s = s;
    sc->e = s->e;
    sc->rank = s->rank;
    sc->nranks = s->nranks;
    sc->n_slots = p->n_slots;
    NM_ASSERT(engine_n_seq(s->e) == p->n_slots);
    sc->n_batch = NM_MAX(p->n_batch, p->n_slots); /* one decode row per slot fits every step */
    sc->max_queue = p->max_queue;
    sc->n_ctx_slot = engine_n_ctx(s->e);
    sc->slots = calloc((size_t)sc->n_slots, sizeof *sc->slots);
    NM_ASSERT(sc->slots);
    const struct sampler_params greedy = {.temp = 0, .repeat_penalty = 1};
    for (int i = 0; i < sc->n_slots; i++) {
        struct slot *sl = &sc->slots[i];
        sl->smp = sampler_init(&greedy, s->m->cfg.n_vocab);
        if (sc->rank == 0) {
            sl->tokens = malloc((size_t)sc->n_ctx_slot * sizeof *sl->tokens);
            NM_ASSERT(sl->tokens);
            if (s->tok) sl->ts = tok_stream_init(s->tok, 0);
        }
    }
    const int B = sc->n_batch;
    sc->st.token = calloc((size_t)B, sizeof *sc->st.token);
    sc->st.pos = calloc((size_t)B, sizeof *sc->st.pos);
    sc->st.seq = calloc((size_t)B, sizeof *sc->st.seq);
    sc->st.want = calloc((size_t)B, 1);
    sc->st.want_b = calloc((size_t)B, sizeof(bool));
    sc->st.starts = calloc((size_t)sc->n_slots, sizeof *sc->st.starts);
    sc->st.samples = calloc((size_t)B, sizeof *sc->st.samples);
    sc->st.smp = calloc((size_t)B, sizeof *sc->st.smp);
    sc->st.out = calloc((size_t)B, sizeof *sc->st.out);
    sc->st.tok = calloc((size_t)B, sizeof *sc->st.tok);
    NM_ASSERT(sc->st.token && sc->st.pos && sc->st.seq && sc->st.want && sc->st.want_b && sc->st.starts &&
              sc->st.samples && sc->st.smp && sc->st.out && sc->st.tok);
    /* a step's rows that ask for logits: one per slot at most (form_batch) */
    sc->logits = engine_logits_buffer(sc->e, NM_MIN(B, sc->n_slots));
    int64_t eos = -1;
    if (gguf_get_int(s->m->file, "tokenizer.ggml.eos_token_id", &eos, NULL, 0) != NM_OK) eos = -1;
    sc->eos = (int32_t)eos;
    pthread_mutex_init(&sc->mu, NULL);
    pthread_cond_init(&sc->cv, NULL);
    sc->queue = calloc((size_t)NM_MAX(p->max_queue, 1), sizeof *sc->queue);
    NM_ASSERT(sc->queue);
    sc->next_id = 1;
    sc->met.n_slots = sc->n_slots;
    sc->met.n_ctx_slot = sc->n_ctx_slot;
    return sc;
}

void serve_sched_free(struct serve_sched *sc) {
    if (!sc) return;
    for (int i = 0; i < sc->n_slots; i++) {
        struct slot *sl = &sc->slots[i];
        sampler_free(sl->smp);
        free(sl->tokens);
        tok_stream_free(sl->ts);
        free(sl->pending);
        serve_request_release(sl->req);
    }
    for (int i = 0; i < sc->n_queue; i++) serve_request_release(sc->queue[i]);
    free(sc->queue);
    free(sc->slots);
    free(sc->st.token);
    free(sc->st.pos);
    free(sc->st.seq);
    free(sc->st.want);
    free(sc->st.want_b);
    free(sc->st.starts);
    free(sc->st.samples);
    free(sc->st.smp);
    free(sc->st.out);
    free(sc->st.tok);
    free(sc->st.hist);
    free(sc->st.msg);
    pthread_mutex_destroy(&sc->mu);
    pthread_cond_destroy(&sc->cv);
    free(sc);
}

void serve_sched_stop(struct serve_sched *sc) { sc->stop = 1; }

int64_t serve_sched_n_ctx_slot(const struct serve_sched *sc) { return sc->n_ctx_slot; }

enum serve_submit_status serve_sched_submit(struct serve_sched *sc, struct serve_request *r, char *err,
                                            size_t errlen) {
    if (r->n_prompt < 1) {
        snprintf(err, errlen, "the prompt has no tokens");
        return SERVE_SUBMIT_EMPTY;
    }
    if (r->n_prompt >= sc->n_ctx_slot) {
        snprintf(err, errlen,
                 "the prompt has %lld tokens; a slot holds %lld positions (-c / -np), and at least one must be left "
                 "to generate",
                 (long long)r->n_prompt, (long long)sc->n_ctx_slot);
        return SERVE_SUBMIT_TOO_LONG;
    }
    pthread_mutex_lock(&sc->mu);
    enum serve_submit_status st = SERVE_SUBMIT_OK;
    if (sc->stopping || sc->stop) {
        snprintf(err, errlen, "the server is shutting down");
        st = SERVE_SUBMIT_STOPPING;
    } else if (sc->n_queue >= sc->max_queue) {
        snprintf(err, errlen, "%d requests are waiting for a slot already; try again later", sc->n_queue);
        st = SERVE_SUBMIT_QUEUE_FULL;
    } else {
        r->id = sc->next_id++;
        pthread_mutex_lock(&r->mu);
        r->refs++;
        pthread_mutex_unlock(&r->mu);
        sc->queue[sc->n_queue++] = r;
        sc->met.requests_total++;
        pthread_cond_signal(&sc->cv);
    }
    pthread_mutex_unlock(&sc->mu);
    return st;
}

void serve_sched_metrics(struct serve_sched *sc, struct serve_metrics *out) {
    pthread_mutex_lock(&sc->mu);
    *out = sc->met;
    out->requests_deferred = sc->n_queue;
    pthread_mutex_unlock(&sc->mu);
}

/* ---- rank 0: finishing requests and turning tokens into text ----------------------------- */

/* End the slot's request. With flush, the text held back (a partial stop string that did not
 * complete, an incomplete UTF-8 character) is released first; after a stop string, or for a
 * client gone, it is dropped. */
static void slot_finish(struct serve_sched *sc, struct slot *sl, enum serve_finish why, bool flush) {
    struct serve_request *r = sl->req;
    size_t n = 0;
    const char *tail = sl->ts ? tok_stream_flush(sl->ts, &n) : "";
    if (flush) {
        request_publish(r, sl->pending, sl->n_pending, SERVE_FINISH_NONE);
        request_publish(r, tail, n, SERVE_FINISH_NONE);
    }
    sl->n_pending = 0;
    const double now = nm_time_s();
    pthread_mutex_lock(&sc->mu);
    sc->met.requests_processing--;
    sc->met.requests_cancelled += why == SERVE_FINISH_CANCEL;
    if (sl->t_first > 0) sc->met.predicted_seconds_total += now - sl->t_first;
    pthread_mutex_unlock(&sc->mu);
    request_publish(r, NULL, 0, why);
    serve_request_release(r);
    sl->req = NULL;
    sl->state = SLOT_IDLE;
}

/* Where the first stop string starts in text[0..n), or n when none does. */
static size_t find_stop(const struct serve_request *r, const char *text, size_t n) {
    size_t at = n;
    for (int i = 0; i < r->n_stop; i++) {
        const size_t len = strlen(r->stop[i]);
        for (size_t p = 0; len > 0 && p + len <= n && p < at; p++)
            if (memcmp(text + p, r->stop[i], len) == 0) at = p;
    }
    return at;
}

/* How many bytes at the end of text[0..n) could be the start of a stop string: held back until
 * the next token says. */
static size_t stop_prefix_len(const struct serve_request *r, const char *text, size_t n) {
    size_t hold = 0;
    for (int i = 0; i < r->n_stop; i++) {
        const size_t len = strlen(r->stop[i]);
        for (size_t k = NM_MIN(len - 1, n); k > hold; k--)
            if (memcmp(text + n - k, r->stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* The token sampled for the slot's request: end it, or add its text. */
static void slot_deliver(struct serve_sched *sc, struct slot *sl, int32_t tok) {
    struct serve_request *r = sl->req;
    const bool eog = sc->s->tok ? tok_is_eog(sc->s->tok, tok) : tok == sc->eos;
    pthread_mutex_lock(&r->mu);
    r->n_gen++;
    const int64_t n_gen = r->n_gen;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&sc->mu);
    sc->met.tokens_predicted_total++;
    pthread_mutex_unlock(&sc->mu);
    if (eog && !r->ignore_eos) {
        slot_finish(sc, sl, SERVE_FINISH_STOP, true);
        return;
    }
    size_t n = 0;
    const char *piece = sl->ts ? tok_stream_feed(sl->ts, tok, &n) : "";
    if (sl->n_pending + n > sl->cap_pending) {
        sl->cap_pending = NM_MAX(2 * sl->cap_pending, sl->n_pending + n + 64);
        sl->pending = realloc(sl->pending, sl->cap_pending);
        NM_ASSERT(sl->pending);
    }
    memcpy(sl->pending + sl->n_pending, piece, n);
    sl->n_pending += n;
    const size_t at = find_stop(r, sl->pending, sl->n_pending);
    if (at < sl->n_pending) { /* the text ends before the stop string */
        request_publish(r, sl->pending, at, SERVE_FINISH_NONE);
        slot_finish(sc, sl, SERVE_FINISH_STOP, false);
        return;
    }
    const size_t hold = stop_prefix_len(r, sl->pending, sl->n_pending);
    request_publish(r, sl->pending, sl->n_pending - hold, SERVE_FINISH_NONE);
    memmove(sl->pending, sl->pending + sl->n_pending - hold, hold);
    sl->n_pending = hold;
    /* The token is evaluated next step unless the request has all it may have. */
    if ((r->max_tokens > 0 && n_gen >= r->max_tokens) || sl->n_tokens >= sc->n_ctx_slot) {
        slot_finish(sc, sl, SERVE_FINISH_LENGTH, true);
        return;
    }
    sl->state = SLOT_DECODE;
    sl->next = tok;
}

/* ---- rank 0: forming a step -------------------------------------------------------------- */

/* Common prefix of what the slot holds and the prompt, capped so that at least two prompt
 * tokens run (or the one of a one-token prompt), and to positions the slot evaluated as prompt
 * rows: a generated token's K and V came from a decode row, whose attention kernel is not the
 * prompt's (forward.h), so reusing them would change the bits. See scheduler.h. */
static int64_t reusable(const struct slot *sl, const struct serve_request *r) {
    int64_t k = 0;
    while (k < sl->n_prefill && k < sl->n_tokens && k < r->n_prompt && sl->tokens[k] == r->prompt[k]) k++;
    return NM_MIN(k, NM_MAX(r->n_prompt - 2, 0));
}

static void hist_push(struct step *st, const int32_t *t, int64_t n) {
    if (st->h.n_hist + n > st->hist_cap) {
        st->hist_cap = NM_MAX(2 * st->hist_cap, st->h.n_hist + n);
        st->hist = realloc(st->hist, (size_t)st->hist_cap * sizeof *st->hist);
        NM_ASSERT(st->hist);
    }
    memcpy(st->hist + st->h.n_hist, t, (size_t)n * sizeof *t);
    st->h.n_hist += (int32_t)n;
}

/* Give waiting requests free slots (the one holding the longest prefix of the prompt). */
static void assign_slots(struct serve_sched *sc) {
    struct step *st = &sc->st;
    pthread_mutex_lock(&sc->mu);
    /* Requests whose client left while they waited leave the queue. */
    int w = 0;
    for (int i = 0; i < sc->n_queue; i++) {
        if (request_cancelled(sc->queue[i])) {
            sc->met.requests_cancelled++;
            request_publish(sc->queue[i], NULL, 0, SERVE_FINISH_CANCEL);
            serve_request_release(sc->queue[i]);
        } else {
            sc->queue[w++] = sc->queue[i];
        }
    }
    sc->n_queue = w;
    int taken = 0;
    for (; taken < sc->n_queue; taken++) {
        struct serve_request *r = sc->queue[taken];
        int best = -1;
        int64_t best_keep = -1;
        for (int i = 0; i < sc->n_slots; i++) {
            if (sc->slots[i].state != SLOT_IDLE || sc->slots[i].req) continue;
            const int64_t k = reusable(&sc->slots[i], r);
            if (k > best_keep) best = i, best_keep = k;
        }
        if (best < 0) break;
        struct slot *sl = &sc->slots[best];
        sl->req = r; /* the queue's reference moves to the slot */
        sl->state = SLOT_PREFILL;
        sl->n_done = best_keep;
        sl->n_tokens = best_keep;
        sl->n_prefill = r->n_prompt; /* the rest of the prompt runs as prompt rows */
        sl->n_pending = 0;
        sl->t_start = nm_time_s();
        sl->t_first = 0;
        pthread_mutex_lock(&r->mu);
        r->n_cached = best_keep;
        pthread_mutex_unlock(&r->mu);
        const int64_t n_hist = NM_MIN(r->n_prompt, (int64_t)NM_MAX(r->sp.repeat_last_n, 0));
        st->starts[st->h.n_starts++] = (struct step_start){
            .slot = best, .keep = best_keep, .sp = r->sp, .n_hist = (int32_t)n_hist, .hist_off = st->h.n_hist};
        hist_push(st, r->prompt + r->n_prompt - n_hist, n_hist);
        sc->met.requests_processing++;
        sc->met.prompt_tokens_total += (uint64_t)r->n_prompt;
        sc->met.prompt_tokens_cached_total += (uint64_t)best_keep;
    }
    memmove(sc->queue, sc->queue + taken, (size_t)(sc->n_queue - taken) * sizeof *sc->queue);
    sc->n_queue -= taken;
    pthread_mutex_unlock(&sc->mu);
}

static void add_row(struct step *st, int32_t tok, int64_t pos, int32_t seq, bool want) {
    const int i = st->h.n_rows++;
    st->token[i] = tok;
    st->pos[i] = pos;
    st->seq[i] = seq;
    st->want[i] = want;
}

/* One decode row per generating slot, then prompt pieces (oldest request first) under the
 * budget; a prompt is cut only where both sides keep 2 or more rows (scheduler.h). */
static void form_batch(struct serve_sched *sc) {
    struct step *st = &sc->st;
    int n_out = 0;
    for (int i = 0; i < sc->n_slots; i++) {
        struct slot *sl = &sc->slots[i];
        if (sl->state != SLOT_DECODE) continue;
        add_row(st, sl->next, sl->n_tokens, i, true);
        st->samples[st->h.n_samples++] = (struct step_sample){.slot = i, .out = n_out++};
        sl->tokens[sl->n_tokens++] = sl->next;
    }
    for (;;) {
        struct slot *first = NULL; /* the filling slot whose request is oldest */
        int fi = -1;
        for (int i = 0; i < sc->n_slots; i++) {
            struct slot *sl = &sc->slots[i];
            if (sl->state == SLOT_PREFILL && sl->n_done < sl->req->n_prompt && (!first || sl->req->id < first->req->id) &&
                !(sl->n_tokens > sl->n_done)) /* not already in this batch */
                first = sl, fi = i;
        }
        const int budget = sc->n_batch - st->h.n_rows;
        if (!first || budget < 1) break;
        const struct serve_request *r = first->req;
        const int64_t left = r->n_prompt - first->n_done;
        int64_t piece = NM_MIN(left, (int64_t)budget);
        if (left > 1) {
            if (piece == left - 1) piece--;
            if (piece < 2) break;
        }
        for (int64_t k = 0; k < piece; k++) {
            const int64_t p = first->n_done + k;
            const bool last = p + 1 == r->n_prompt;
            add_row(st, r->prompt[p], p, fi, last);
            first->tokens[p] = r->prompt[p];
            if (last) st->samples[st->h.n_samples++] = (struct step_sample){.slot = fi, .out = n_out++};
        }
        first->n_tokens = first->n_done + piece; /* marks the slot as in this batch */
    }
    /* Prompt pieces count as done once the batch is formed. */
    for (int i = 0; i < sc->n_slots; i++) {
        struct slot *sl = &sc->slots[i];
        if (sl->state == SLOT_PREFILL) sl->n_done = sl->n_tokens;
    }
}

/* Wait for work, then make the step: new requests into free slots, the batch. */
static void plan_step(struct serve_sched *sc) {
    struct step *st = &sc->st;
    memset(&st->h, 0, sizeof st->h);
    for (;;) {
        /* Slots whose client went away are freed first. */
        for (int i = 0; i < sc->n_slots; i++) {
            struct slot *sl = &sc->slots[i];
            if (sl->req && request_cancelled(sl->req)) slot_finish(sc, sl, SERVE_FINISH_CANCEL, false);
        }
        if (sc->stop) {
            st->h.stop = 1;
            return;
        }
        assign_slots(sc);
        form_batch(sc);
        if (st->h.n_rows > 0) return;
        /* Nothing to do: sleep until a request comes (or 100 ms, to see a stop or a client gone). */
        pthread_mutex_lock(&sc->mu);
        if (sc->n_queue == 0 && !sc->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&sc->cv, &sc->mu, &ts);
        }
        pthread_mutex_unlock(&sc->mu);
    }
}

/* ---- every rank: the step's broadcast and its evaluation ---------------------------------- */

/* The step in two broadcasts: the header (its counts size the rest), then the arrays packed
 * into one message. */
static void bcast_step(struct serve_sched *sc) {
    struct step *st = &sc->st;
    if (sc->nranks == 1) return;
    struct coll *c = sc->s->coll;
    coll_bcast(c, &st->h, sizeof st->h, 0);
    if (st->h.stop) return;
    if (sc->rank != 0 && st->h.n_hist > st->hist_cap) {
        st->hist_cap = st->h.n_hist;
        st->hist = realloc(st->hist, (size_t)st->hist_cap * sizeof *st->hist);
        NM_ASSERT(st->hist);
    }
    const size_t n = (size_t)st->h.n_rows;
    const struct {
        void *p;
        size_t bytes;
    } f[] = {{st->token, n * sizeof *st->token},
             {st->pos, n * sizeof *st->pos},
             {st->seq, n * sizeof *st->seq},
             {st->want, n},
             {st->starts, (size_t)st->h.n_starts * sizeof *st->starts},
             {st->samples, (size_t)st->h.n_samples * sizeof *st->samples},
             {st->hist, (size_t)st->h.n_hist * sizeof *st->hist}};
    size_t total = 0;
    for (size_t i = 0; i < NM_ARRAY_LEN(f); i++) total += f[i].bytes;
    if (total > st->msg_cap) {
        st->msg_cap = NM_MAX(total, 2 * st->msg_cap);
        st->msg = realloc(st->msg, st->msg_cap);
        NM_ASSERT(st->msg);
    }
    for (size_t i = 0, at = 0; sc->rank == 0 && i < NM_ARRAY_LEN(f); at += f[i].bytes, i++)
        if (f[i].bytes) memcpy(st->msg + at, f[i].p, f[i].bytes);
    coll_bcast(c, st->msg, total, 0);
    for (size_t i = 0, at = 0; sc->rank != 0 && i < NM_ARRAY_LEN(f); at += f[i].bytes, i++)
        if (f[i].bytes) memcpy(f[i].p, st->msg + at, f[i].bytes);
}

/* New requests' slots: the cache keeps the reused prefix, the sampler starts over. */
static void apply_starts(struct serve_sched *sc) {
    const struct step *st = &sc->st;
    for (int i = 0; i < st->h.n_starts; i++) {
        const struct step_start *s = &st->starts[i];
        struct slot *sl = &sc->slots[s->slot];
        engine_seq_keep(sc->e, s->slot, s->keep);
        sampler_free(sl->smp);
        sl->smp = sampler_init(&s->sp, sc->s->m->cfg.n_vocab);
        for (int j = 0; j < s->n_hist; j++) sampler_accept(sl->smp, st->hist[s->hist_off + j]);
    }
}

void serve_sched_run(struct serve_sched *sc) {
    struct step *st = &sc->st;
    char err[512];
    /* Ranks other than 0 wait in the broadcast while no request comes: no timeout applies. */
    const double timeout = coll_timeout(sc->s->coll);
    coll_set_timeout(sc->s->coll, 1e9);
    for (;;) {
        if (sc->rank == 0) plan_step(sc);
        bcast_step(sc);
        if (st->h.stop) break;
        apply_starts(sc);
        for (int i = 0; i < st->h.n_rows; i++) st->want_b[i] = st->want[i];
        const struct engine_batch b = {.n = st->h.n_rows, .token = st->token, .pos = st->pos, .seq = st->seq,
                                       .logits = st->want_b};
        const int ns = st->h.n_samples;
        for (int i = 0; i < ns; i++) {
            st->smp[i] = sc->slots[st->samples[i].slot].smp;
            st->out[i] = st->samples[i].out;
        }
        /* with the head on the GPU and samplers that need only their top k, the logits stay there */
        float *logits = engine_rows_on_stage(sc->e, st->smp, ns, ns) ? NULL : sc->logits;
        const double t0 = nm_time_s();
        if (engine_eval_batch(sc->e, &b, logits, err, sizeof err)) nm_fatal("serve: %s", err); /* a bug */
        const double t1 = nm_time_s();
        /* the threads' cores go to the readers the tokens wake (measured: serve's delivery
         * figures in RESULTS.md, session 22) */
        pool_rest(sc->s->pool);
        engine_sample_rows(sc->e, st->smp, st->out, ns, logits, st->tok);
        const double t2 = nm_time_s();
        for (int i = 0; i < ns; i++) {
            struct slot *sl = &sc->slots[st->samples[i].slot];
            const int32_t tok = st->tok[i];
            sampler_accept(sl->smp, tok);
            if (sc->rank != 0) continue;
            if (sl->t_first == 0) {
                sl->t_first = nm_time_s();
                pthread_mutex_lock(&sc->mu);
                sc->met.prompt_seconds_total += sl->t_first - sl->t_start;
                pthread_mutex_unlock(&sc->mu);
            }
            slot_deliver(sc, sl, tok);
        }
        if (sc->rank == 0) {
            pthread_mutex_lock(&sc->mu);
            sc->met.steps_total++;
            sc->met.batch_rows_total += (uint64_t)st->h.n_rows;
            sc->met.forward_seconds_total += t1 - t0;
            sc->met.sample_seconds_total += t2 - t1;
            sc->met.deliver_seconds_total += nm_time_s() - t2;
            pthread_mutex_unlock(&sc->mu);
        }
    }
    coll_set_timeout(sc->s->coll, timeout);
    if (sc->rank != 0) return;
    /* Stopping: every request ends, running or waiting; no new one is taken. */
    for (int i = 0; i < sc->n_slots; i++)
        if (sc->slots[i].req) slot_finish(sc, &sc->slots[i], SERVE_FINISH_CANCEL, false);
    pthread_mutex_lock(&sc->mu);
    sc->stopping = true;
    for (int i = 0; i < sc->n_queue; i++) {
        request_publish(sc->queue[i], NULL, 0, SERVE_FINISH_CANCEL);
        serve_request_release(sc->queue[i]);
    }
    sc->n_queue = 0;
    pthread_mutex_unlock(&sc->mu);
}
