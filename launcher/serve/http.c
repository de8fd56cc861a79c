/* numallm serve's HTTP routes on libmicrohttpd (see http.h). */
#include "http.h"

#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BODY_MAX (16u << 20) /* larger request bodies get 413 */

struct serve_http {
    struct MHD_Daemon *d;
    const char *api_key;
    _Atomic(struct serve_sched *) sc; /* NULL while the model loads */
    const struct api_model *m;
    int64_t created;
};

/* One HTTP request's upload (libmicrohttpd's per-request pointer). */
struct upload {
    char *body;
    size_t len, cap;
    bool too_big;  /* over BODY_MAX (by its Content-Length, or as it came): the rest is dropped */
    bool refused;  /* no valid API key: the body is dropped as it comes, the answer is 401 */
};

/* ---- plain responses --------------------------------------------------------------------- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned code, char *body, const char *type,
                               bool retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    const enum MHD_Result ret = MHD_queue_response(c, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned code, char *body) {
    return respond(c, code, body, "application/json", false);
}

static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned code, const char *type, const char *msg) {
    return respond(c, code, api_error((int)code, type, NULL, msg), "application/json",
                   code == MHD_HTTP_SERVICE_UNAVAILABLE);
}

/* ---- completions: the response body comes from the request's output as it grows ----------- */

struct reader {
    struct serve_http *h;
    struct serve_request *r;
    struct MHD_Connection *c;
    enum api_kind kind;
    struct api_opts o;
    int64_t created;
    size_t text_read;  /* bytes of r->text already sent (streaming) */
    char *out;         /* bytes ready to send */
    size_t out_len, out_off;
    bool role_sent, ended;
    bool first_sent;   /* streaming: the chunk of the first generated token went out */
};

/* Whether the client closed its end: a peek at the socket reads end-of-file or a reset. */
static bool client_gone(struct MHD_Connection *c, uint64_t id) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    char b;
    const ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    const bool gone = k == 0 || (k < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN));
    if (gone) nm_log_info("serve: request %llu: the client went away (%s)", (unsigned long long)id,
                          k == 0 ? "end of stream" : strerror(errno));
    return gone;
}

static void out_add(struct reader *rd, const char *s, bool sse) {
    const size_t n = strlen(s), extra = sse ? 8 : 0; /* "data: " ... "\n\n" */
    rd->out = realloc(rd->out, rd->out_len + n + extra + 1);
    NM_ASSERT(rd->out);
    char *p = rd->out + rd->out_len;
    if (sse) p += sprintf(p, "data: ");
    memcpy(p, s, n);
    p += n;
    if (sse) p += sprintf(p, "\n\n");
    *p = 0;
    rd->out_len = (size_t)(p - rd->out);
}

static void out_chunk(struct reader *rd, const char *text, size_t len, enum serve_finish fin) {
    char *chunk = api_chunk(rd->kind, rd->r->id, rd->created, rd->h->m->name, text, len, !rd->role_sent &&
                            rd->kind == API_KIND_CHAT, fin);
    rd->role_sent = true;
    out_add(rd, chunk, true);
    free(chunk);
}

/* Wait for the request to grow or finish, then make the next bytes. false: the client went away
 * or the server is stopping (the response ends with an error: the connection closes). */
static bool reader_produce(struct reader *rd) {
    struct serve_request *r = rd->r;
    if (rd->o.stream && !rd->role_sent && rd->kind == API_KIND_CHAT) { /* the role comes at once */
        out_chunk(rd, "", 0, SERVE_FINISH_NONE);
        return true;
    }
    pthread_mutex_lock(&r->mu);
    /* A stream waits for new text, except that the first token sends a chunk at once even when it
     * has no text yet (part of a UTF-8 character, a possible stop string, no tokenizer): clients
     * time their first token by it. Every 200 ms of waiting, whether tokens came or not (a
     * request without streaming sends nothing until it ends), a look at whether the client left. */
    double next_look = nm_time_s() + 0.2;
    while (r->finish == SERVE_FINISH_NONE &&
           (!rd->o.stream || (rd->text_read == r->text_len && (rd->first_sent || r->n_gen == 0)))) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        const double now = nm_time_s();
        if (now < next_look) continue;
        next_look = now + 0.2;
        if (client_gone(rd->c, r->id)) {
            r->cancelled = true; /* the scheduler frees the slot at its next step */
            pthread_mutex_unlock(&r->mu);
            return false;
        }
    }
    const enum serve_finish fin = r->finish;
    const size_t from = rd->text_read, to = r->text_len;
    char *text = malloc(to - from + 1);
    memcpy(text, r->text ? r->text + from : "", to - from);
    const int64_t n_gen = r->n_gen, n_prompt = r->n_prompt, n_cached = r->n_cached;
    pthread_mutex_unlock(&r->mu);
    rd->text_read = to;
    bool ok = fin != SERVE_FINISH_CANCEL;
    if (!ok) {
    } else if (rd->o.stream) {
        if (to > from || (!rd->first_sent && n_gen > 0 && fin == SERVE_FINISH_NONE))
            out_chunk(rd, text, to - from, SERVE_FINISH_NONE);
        rd->first_sent = rd->first_sent || n_gen > 0;
        if (fin != SERVE_FINISH_NONE) {
            out_chunk(rd, "", 0, fin);
            if (rd->o.include_usage) {
                char *u = api_usage_chunk(rd->kind, r->id, rd->created, rd->h->m->name, n_prompt, n_gen, n_cached);
                out_add(rd, u, true);
                free(u);
            }
            out_add(rd, "[DONE]", true);
            rd->ended = true;
        }
    } else {
        char *body = api_completion(rd->kind, r->id, rd->created, rd->h->m->name, text, to, fin, n_prompt, n_gen,
                                    n_cached);
        out_add(rd, body, false);
        free(body);
        rd->ended = true;
    }
    free(text);
    return ok;
}

static ssize_t reader_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct reader *rd = cls;
    while (rd->out_off == rd->out_len) {
        rd->out_len = rd->out_off = 0;
        if (rd->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!reader_produce(rd)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const size_t n = NM_MIN(max, rd->out_len - rd->out_off);
    memcpy(buf, rd->out + rd->out_off, n);
    rd->out_off += n;
    return (ssize_t)n;
}

static void reader_free(void *cls) {
    struct reader *rd = cls;
    serve_request_cancel(rd->r); /* no effect once it finished; frees the slot if the client left early */
    serve_request_release(rd->r);
    free(rd->out);
    free(rd);
}

static enum MHD_Result completion(struct serve_http *h, struct serve_sched *sc, struct MHD_Connection *c,
                                  enum api_kind kind, const struct upload *up) {
    char err[512];
    struct api_opts o;
    enum api_refusal why;
    struct serve_request *r = api_parse(h->m, kind, up->body ? up->body : "", up->len, &o, &why, err, sizeof err);
    if (!r && why == API_REFUSAL_NO_MODEL) return respond_json(c, MHD_HTTP_NOT_FOUND, api_error_no_model(err));
    if (!r) return respond_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", err);
    switch (serve_sched_submit(sc, r, err, sizeof err)) {
    case SERVE_SUBMIT_OK: break;
    case SERVE_SUBMIT_TOO_LONG:
    case SERVE_SUBMIT_EMPTY:
        serve_request_release(r);
        return respond_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", err);
    case SERVE_SUBMIT_QUEUE_FULL:
    case SERVE_SUBMIT_STOPPING:
        serve_request_release(r);
        return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable_error", err);
    }
    struct reader *rd = calloc(1, sizeof *rd);
    NM_ASSERT(rd);
    *rd = (struct reader){.h = h, .r = r, .c = c, .kind = kind, .o = o, .created = (int64_t)time(NULL)};
    /* --timeout is for connections that send nothing: a completion may wait in the queue or
     * generate for longer than it without a byte to send (reader_cb blocks meanwhile), and a
     * client that leaves is noticed by client_gone. So this connection is not timed out from now
     * on (libmicrohttpd would otherwise close it when reader_cb returns late). */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader_cb, rd, reader_free);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, o.stream ? "text/event-stream" : "application/json");
    if (o.stream) MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    const enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- the other routes -------------------------------------------------------------------- */

static enum MHD_Result metrics(struct serve_sched *sc, struct MHD_Connection *c) {
    struct serve_metrics m;
    serve_sched_metrics(sc, &m);
    enum { CAP = 8192 };
    char *b = malloc(CAP);
    NM_ASSERT(b);
    int n = 0;
#define METRIC(name, type, help, fmt, v)                                                                        \
    do {                                                                                                         \
        if (n < CAP)                                                                                             \
            n += snprintf(b + n, CAP - (size_t)n, "# HELP numallm_" name " " help "\n# TYPE numallm_" name " " type \
                          "\n" "numallm_" name " " fmt "\n", v);                                                 \
    } while (0)
    METRIC("requests_total", "counter", "Requests accepted.", "%llu", (unsigned long long)m.requests_total);
    METRIC("requests_cancelled_total", "counter", "Requests whose client went away.", "%llu",
           (unsigned long long)m.requests_cancelled);
    METRIC("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", "%llu",
           (unsigned long long)m.prompt_tokens_total);
    METRIC("prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's KV cache.", "%llu",
           (unsigned long long)m.prompt_tokens_cached_total);
    METRIC("tokens_predicted_total", "counter", "Generated tokens.", "%llu", (unsigned long long)m.tokens_predicted_total);
    METRIC("prompt_seconds_total", "counter", "Time from a request's slot to its first token.", "%.6f",
           m.prompt_seconds_total);
    METRIC("tokens_predicted_seconds_total", "counter", "Time generating after the first token.", "%.6f",
           m.predicted_seconds_total);
    METRIC("steps_total", "counter", "Forward passes (batches).", "%llu", (unsigned long long)m.steps_total);
    METRIC("batch_rows_total", "counter", "Rows over all batches.", "%llu", (unsigned long long)m.batch_rows_total);
    METRIC("step_forward_seconds_total", "counter", "Time in the steps' forward passes.", "%.6f",
           m.forward_seconds_total);
    METRIC("step_sample_seconds_total", "counter", "Time sampling the steps' rows.", "%.6f", m.sample_seconds_total);
    METRIC("step_deliver_seconds_total", "counter", "Time turning the steps' tokens into their requests' text.",
           "%.6f", m.deliver_seconds_total);
    METRIC("requests_processing", "gauge", "Requests holding a slot.", "%d", m.requests_processing);
    METRIC("requests_deferred", "gauge", "Requests waiting for a slot.", "%d", m.requests_deferred);
    METRIC("slots", "gauge", "Slots (-np).", "%d", m.n_slots);
    METRIC("slot_context", "gauge", "Positions per slot (-c / -np).", "%lld", (long long)m.n_ctx_slot);
#undef METRIC
    NM_ASSERT(n < CAP); /* (the lines fit: a bug otherwise) */
    return respond(c, MHD_HTTP_OK, b, "text/plain; version=0.0.4", false);
}

static bool authorized(const struct serve_http *h, struct MHD_Connection *c) {
    if (!h->api_key) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return a && strncmp(a, "Bearer ", 7) == 0 && strcmp(a + 7, h->api_key) == 0;
}

/* url is path a, or path b (when not NULL). */
static bool path_is(const char *url, const char *a, const char *b) {
    return strcmp(url, a) == 0 || (b && strcmp(url, b) == 0);
}
static bool is_health(const char *url) { return path_is(url, "/health", "/v1/health"); }

/* A known path asked with another method than its own. */
static enum MHD_Result wrong_method(struct MHD_Connection *c, const char *url, const char *own, const char *method) {
    char err[512];
    snprintf(err, sizeof err, "%.300s takes %s, not %.32s", url, own, method);
    return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", err);
}

static enum MHD_Result route(struct serve_http *h, struct MHD_Connection *c, const char *url, const char *method,
                             const struct upload *up) {
    /* HEAD: GET's status and headers (libmicrohttpd leaves the body out) */
    const bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    struct serve_sched *sc = atomic_load(&h->sc);
    if (is_health(url)) {
        if (!sc) return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable_error", "Loading model");
        return respond_json(c, MHD_HTTP_OK, strdup("{\"status\":\"ok\"}"));
    }
    if (up->refused) return respond_error(c, MHD_HTTP_UNAUTHORIZED, "authentication_error", "Invalid API key");
    if (up->too_big) return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", "the body is over 16 MiB");
    if (!sc) return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable_error", "Loading model");
    if (path_is(url, "/v1/models", "/models"))
        return get ? respond_json(c, MHD_HTTP_OK, api_models(h->m->name, h->created, serve_sched_n_ctx_slot(sc)))
                   : wrong_method(c, url, "GET", method);
    if (strncmp(url, "/v1/models/", 11) == 0 || strncmp(url, "/models/", 8) == 0) {
        if (!get) return wrong_method(c, url, "GET", method);
        const char *asked = url + (url[1] == 'v' ? 11 : 8); /* the rest of the path: a name may hold '/' */
        if (strcmp(asked, h->m->name) != 0) return respond_json(c, MHD_HTTP_NOT_FOUND, api_error_no_model(asked));
        return respond_json(c, MHD_HTTP_OK, api_model_object(h->m->name, h->created, serve_sched_n_ctx_slot(sc)));
    }
    if (path_is(url, "/metrics", NULL)) return get ? metrics(sc, c) : wrong_method(c, url, "GET", method);
    if (path_is(url, "/v1/chat/completions", "/chat/completions"))
        return post ? completion(h, sc, c, API_KIND_CHAT, up) : wrong_method(c, url, "POST", method);
    if (path_is(url, "/v1/completions", "/completions"))
        return post ? completion(h, sc, c, API_KIND_COMPLETION, up) : wrong_method(c, url, "POST", method);
    char err[512];
    if (path_is(url, "/tokenize", "/detokenize")) {
        if (!post) return wrong_method(c, url, "POST", method);
        char *body = (path_is(url, "/tokenize", NULL) ? api_tokenize : api_detokenize)(h->m, up->body ? up->body : "",
                                                                                     up->len, err, sizeof err);
        if (!body) return respond_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", err);
        return respond_json(c, MHD_HTTP_OK, body);
    }
    snprintf(err, sizeof err, "no route for %.32s %.300s", method, url);
    return respond_error(c, MHD_HTTP_NOT_FOUND, "not_found_error", err);
}

/* libmicrohttpd calls this first with the headers, then with pieces of the body, then once with
 * none left: only then is the request answered. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)version;
    struct upload *up = *con_cls;
    if (!up) { /* the headers: decide now whether the body is worth keeping */
        *con_cls = up = calloc(1, sizeof *up);
        if (!up) return MHD_NO;
        up->refused = !is_health(url) && !authorized(cls, c); /* route answers 401 */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            const unsigned long long n = strtoull(cl, &end, 10);
            up->too_big = errno == ERANGE || (end != cl && n > BODY_MAX);
        }
        return MHD_YES;
    }
    if (*data_size > 0) {
        if (up->refused || up->too_big) {
            /* dropped: a request without the key, or too large, costs no memory */
        } else if (up->len + *data_size > BODY_MAX) {
            up->too_big = true;
        } else {
            if (up->len + *data_size + 1 > up->cap) {
                up->cap = NM_MAX(2 * up->cap, up->len + *data_size + 1);
                up->body = realloc(up->body, up->cap);
                NM_ASSERT(up->body);
            }
            memcpy(up->body + up->len, data, *data_size);
            up->len += *data_size;
            up->body[up->len] = 0;
        }
        *data_size = 0;
        return MHD_YES;
    }
    return route(cls, c, url, method, up);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    struct upload *up = *con_cls;
    const bool large = up && up->cap > (1u << 20);
    if (up) free(up->body);
    free(up);
    *con_cls = NULL;
    /* a large body came in on this connection's thread, into that thread's malloc arena: give
     * the freed pages back, or every connection thread keeps its largest body's worth */
    if (large) malloc_trim(0);
}

enum nm_status serve_http_start(struct serve_http **out, const struct serve_http_params *p, char *err, size_t errlen) {
    *out = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    const int gai = getaddrinfo(p->host, port, &hints, &ai);
    if (gai != 0)
        return nm_errf(err, errlen, NM_ERR_ARGS, "--host %s: %s (give a numeric address such as 127.0.0.1 or ::1)",
                       p->host, gai_strerror(gai));
    struct serve_http *h = calloc(1, sizeof *h);
    NM_ASSERT(h);
    h->api_key = p->api_key;
    h->created = (int64_t)time(NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_LIMIT, 512u,
                            MHD_OPTION_CONNECTION_TIMEOUT, p->timeout_s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        free(h);
        return nm_errf(err, errlen, NM_ERR_IO, "cannot listen on %s:%d (in use by another process, or not an address "
                       "of this machine): choose another --port or --host", p->host, p->port);
    }
    *out = h;
    return NM_OK;
}

void serve_http_ready(struct serve_http *h, struct serve_sched *sc, const struct api_model *m) {
    h->m = m;
    atomic_store(&h->sc, sc);
}

void serve_http_stop(struct serve_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
