/* The HTTP side of numallm serve (rank 0), on libmicrohttpd: one thread per connection, the
 * routes of OpenAI's API and llama-server's extras, the API key, streaming (server-sent events)
 * and noticing a client that went away. It starts before the model loads (GET /health answers
 * 503 until serve_http_ready) and hands requests to the scheduler (scheduler.h). */
#ifndef NM_SERVE_HTTP_H
#define NM_SERVE_HTTP_H

#include "api.h"
#include "base.h"
#include "scheduler.h"

struct serve_http_params {
    const char *host;    /* address to bind (numeric IPv4 or IPv6) */
    int port;
    const char *api_key; /* NULL: none; else every route but /health needs "Authorization: Bearer KEY" */
    unsigned timeout_s;  /* a connection idle this long (no request bytes, a response not read) is
                          * closed; 0: never */
};

struct serve_http;

/* Listen on host:port. NM_ERR_IO with a message naming the address when it cannot. */
enum nm_status serve_http_start(struct serve_http **out, const struct serve_http_params *p, char *err, size_t errlen);
/* The model is loaded: requests go to sc, with model facts m (both borrowed until
 * serve_http_stop). */
void serve_http_ready(struct serve_http *h, struct serve_sched *sc, const struct api_model *m);
/* Stop listening, wait for the connection threads (their requests must have finished: stop the
 * scheduler's loop first) and free. */
void serve_http_stop(struct serve_http *h);

#endif
