/* One rank's running state for the commands that evaluate a model (run, chat, perplexity): the
 * collectives (single rank without mpirun, or this process's place in an mpirun job), the
 * thread pool, this rank's shard of the model, the tokenizer, the engine. Every rank of a job
 * opens the same session with the same options. */
#ifndef NM_SESSION_H
#define NM_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "forward.h"
#include "launch.h"
#include "model.h"
#include "tokenizer.h"

struct session_opts {
    const char *model;   /* resolved by session_launch (the default model when -m is absent) */
    long long n_threads; /* 0: every allowed CPU */
    int n_batch;
    int n_seq;           /* sequences the engine holds (serve's -np); 0: one */
    enum dtype kv_type;
    bool strict;         /* --strict: a failed start-up check or a downgrade is an error */
    /* Optional: called by session_open with this process's rank once the collectives are up,
     * before the model loads (serve starts its HTTP listener there, to answer while loading). */
    void (*on_rank)(void *ctx, int rank);
    void *on_rank_ctx;
    struct launch_decision launch; /* filled by session_launch */
};

struct session {
    struct coll *world;    /* with a GPU rank: the whole job (the pipeline's send/recv); else NULL */
    struct coll *coll;     /* the CPU ranks */
    int rank, nranks;
    struct pool *pool;
    struct model *m;
    struct tokenizer *tok; /* NULL when the file carries no vocabulary */
    struct engine *e;      /* after session_engine */
    double t_load;
};

/* The launcher side of a command that runs ranks (run, perplexity, bench workers): resolve the
 * default model when req->model is NULL, then decide how to run (launch.h): returns -1 when this
 * process goes on as a CPU rank (so->launch filled, so->model and so->n_threads set), else the
 * exit status (0 after --dry-run, 1 after an error, the GPU rank's when this process was the GPU
 * rank of the job and has served it). When the job needs mpirun this does not return. */
int session_launch(struct launch_request *req, struct session_opts *so);

/* Start collectives and threads, load this rank's shard and the tokenizer (a file without a
 * usable vocabulary only warns: token ids still work). Prints the model and the shard. */
enum nm_status session_open(struct session *s, const struct session_opts *o, char *err, size_t errlen);
/* Create the engine with a KV cache of n_ctx tokens (divided among o->n_seq sequences). With -ngl, rank 0 opens the GPU stage for
 * the layers after the CPU ranks' (in this process, or on the GPU rank). */
enum nm_status session_engine(struct session *s, const struct session_opts *o, int64_t n_ctx, char *err,
                              size_t errlen);
void session_close(struct session *s);

/* The GPU rank of a job (launch role RANK_ROLE_GPU): bind to the GPU's NUMA node, then serve
 * CPU rank 0's pipeline requests until the job ends. Returns the exit status. */
int session_serve_gpu(const struct session_opts *o);

/* Text to ids with the model's tokenizer (add_special: BOS/EOS as the model says; special
 * markers in the text are parsed). NM_ERR_UNSUPPORTED when the file has no tokenizer. */
enum nm_status session_tokenize(const struct session *s, const char *text, size_t len, bool add_special,
                                int32_t **ids, size_t *n, char *err, size_t errlen);

/* Collective: rank 0's bytes (*buf, *len, malloc'ed) replace every other rank's. */
void session_bcast_text(struct session *s, char **buf, size_t *len);

/* Read a whole file (malloc'ed, NUL-terminated); NULL on error with errno set. */
char *session_read_file(const char *path, size_t *len);

#endif
