/* The single transport: one rank. A collective is a copy (or nothing when in place); no MPI
 * call, no shared memory. The job's only rank has no peers, so send/recv cannot be called
 * (coll.c asserts peer != rank). */
#include "coll_impl.h"

#include <string.h>

static void single_allreduce_sum(struct coll *c, const void *in, enum coll_dtype dt, void *out,
                                 size_t n) {
    if (dt == COLL_DTYPE_BF16)
        coll_reduce_sum(out, &in, 1, dt, n); /* widen */
    else if (in != out)
        memcpy(out, in, n * coll_dtype_out_bytes(dt));
}

static void single_allgatherv(struct coll *c, const void *in, const size_t *bytes, size_t total,
                              void *out) {
    if (in != out) memcpy(out, in, total);
}

static void single_bcast(struct coll *c, void *buf, size_t bytes, int root) {}
static void single_barrier(struct coll *c) {}

static void single_p2p(struct coll *c, const void *buf, size_t bytes, int peer, int tag) {
    NM_ASSERT(!"send/recv with one rank"); /* unreachable: coll.c checks peer != rank */
}
static void single_recv(struct coll *c, void *buf, size_t bytes, int peer, int tag) {
    single_p2p(c, buf, bytes, peer, tag);
}
static void single_free(struct coll *c) {}

const struct coll_ops coll_single_ops = {
    .name = "single",
    .allreduce_sum = single_allreduce_sum, /* copy, or nothing in place */
    .allgatherv = single_allgatherv,       /* copy, or nothing in place */
    .bcast = single_bcast,                 /* nothing: the root's buffer is the result */
    .barrier = single_barrier,             /* nothing */
    .send = single_p2p,                    /* unreachable */
    .recv = single_recv,                   /* unreachable */
    .abort_notify = NULL,                  /* no peers to tell */
    .free = single_free,                   /* no state */
};

void coll_single_init(struct coll *c) {
    c->ops = &coll_single_ops;
    c->rank = 0;
    c->size = 1;
}
