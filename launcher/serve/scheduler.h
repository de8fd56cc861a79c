/* The scheduler of numallm serve (DESIGN.md, "Serving"): continuous batching of requests over
 * the engine's sequences (slots). Every rank runs serve_sched_run, the engine loop; rank 0 alone
 * takes requests (from the HTTP threads, serve_sched_submit), forms each step's batch, and
 * broadcasts it to the other ranks through the collectives: the rows (token, position, sequence,
 * logits wanted), the slots that start a request (with its sampler's settings) and the rows to
 * sample. Every rank then evaluates the batch and samples the same tokens (the samplers are
 * collective); rank 0 turns them into text, applies the stop conditions and hands the text to
 * the request's reader.
 *
 * A step's batch holds one decode row for every slot that is generating, then pieces of the
 * prompts of slots that are filling, under a budget of n_batch rows (chunked prefill: a long
 * prompt does not stall the running streams). A prompt is never cut into a one-row piece unless
 * it has one row left in all, and a slot reuses at most all but two of a prompt's tokens from
 * what it already holds, and only positions it evaluated as prompt rows (not a previous answer),
 * so that a request gets the same tokens alone or in company, whatever the slot held before
 * (forward.h, batch invariance). */
#ifndef NM_SERVE_SCHED_H
#define NM_SERVE_SCHED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sampler.h"
#include "session.h"

#define SERVE_MAX_STOP 4

enum serve_finish {
    SERVE_FINISH_NONE,   /* still running */
    SERVE_FINISH_STOP,   /* an end-of-generation token or a stop string */
    SERVE_FINISH_LENGTH, /* max_tokens, or the slot's context is full */
    SERVE_FINISH_CANCEL, /* the client went away, or the server is stopping */
};

/* One request. The HTTP side fills the settings and submits it; from then on the fields under
 * "output" are shared with the scheduler and read or written under mu only. Reference counted:
 * the HTTP side and the scheduler each hold one (serve_request_release). */
struct serve_request {
    /* settings, read-only once submitted */
    int32_t *prompt;          /* [n_prompt] token ids, malloc'ed, owned */
    int64_t n_prompt;
    int64_t max_tokens;       /* most tokens to generate; <= 0: until the slot's context is full */
    struct sampler_params sp;
    char *stop[SERVE_MAX_STOP]; /* stop strings, malloc'ed, owned; the text ends before the first one */
    int n_stop;
    bool ignore_eos;
    uint64_t id;              /* set by serve_sched_submit */
    /* output, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled when text grows or the request finishes */
    char *text;               /* released text, text_len bytes (malloc'ed) */
    size_t text_len, text_cap;
    enum serve_finish finish;
    int64_t n_gen;            /* tokens generated */
    int64_t n_cached;         /* prompt tokens reused from the slot's KV cache */
    bool cancelled;           /* set by the HTTP side: the client went away */
    int refs;
};

/* A request with the defaults (llama-server's sampling defaults) and one reference. */
struct serve_request *serve_request_new(void);
/* Drop one reference; the last frees the request. */
void serve_request_release(struct serve_request *r);
/* Mark a request abandoned by its client: the scheduler frees its slot at the next step. */
void serve_request_cancel(struct serve_request *r);

struct serve_sched_params {
    int n_slots;    /* sequences of the engine (-np) */
    int n_batch;    /* rows per step (-b) */
    int max_queue;  /* requests waiting for a slot before serve_sched_submit refuses */
};

struct serve_sched;

/* On every rank, after session_engine with params->n_slots sequences: the scheduler over s's
 * engine and tokenizer (borrowed). */
struct serve_sched *serve_sched_init(struct session *s, const struct serve_sched_params *p);
void serve_sched_free(struct serve_sched *sc);

/* The engine loop, on every rank; returns when rank 0 was asked to stop (serve_sched_stop), after
 * finishing every request (as cancelled) and telling the other ranks. Collective. */
void serve_sched_run(struct serve_sched *sc);

/* Rank 0, any thread, async-signal-safe: ask the loop to stop. */
void serve_sched_stop(struct serve_sched *sc);

enum serve_submit_status {
    SERVE_SUBMIT_OK,
    SERVE_SUBMIT_TOO_LONG,   /* the prompt does not fit a slot's context */
    SERVE_SUBMIT_EMPTY,      /* no prompt tokens */
    SERVE_SUBMIT_QUEUE_FULL, /* max_queue requests wait already: try later */
    SERVE_SUBMIT_STOPPING,   /* the server is shutting down */
};
/* Rank 0, HTTP threads: queue r (the scheduler takes its own reference). On anything but OK the
 * request is not queued and err says why. */
enum serve_submit_status serve_sched_submit(struct serve_sched *sc, struct serve_request *r, char *err,
                                            size_t errlen);

/* Counters for GET /metrics (rank 0). */
struct serve_metrics {
    uint64_t requests_total, requests_cancelled, prompt_tokens_total, prompt_tokens_cached_total,
        tokens_predicted_total, steps_total, batch_rows_total;
    double prompt_seconds_total, predicted_seconds_total;
    /* rank 0's steps: the forward passes; sampling the rows; turning the tokens into text for
     * their requests (stop strings, the readers woken) */
    double forward_seconds_total, sample_seconds_total, deliver_seconds_total;
    int requests_processing, requests_deferred, n_slots;
    int64_t n_ctx_slot;
};
void serve_sched_metrics(struct serve_sched *sc, struct serve_metrics *out);

/* Positions a slot holds (the per-request context). */
int64_t serve_sched_n_ctx_slot(const struct serve_sched *sc);

#endif
