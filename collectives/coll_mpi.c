/* The MPI transport: the fallback across hosts and the baseline of every benchmark. Built from
 * non-blocking point-to-point messages rather than MPI's own collectives, for two reasons:
 * - determinism: MPI_Allreduce may combine partial sums in any order (recursive doubling,
 *   rings, trees), so ranks and transports could disagree in the last bit; here every sum is
 *   folded in rank order by coll_reduce_sum, bit-identical to the shm and single transports;
 * - failure reports: a wait that makes no progress for the timeout knows which peer's message
 *   is missing and names that rank before MPI_Abort.
 * Algorithms (R ranks, N bytes): allreduce up to COLL_MPI_GATHER_MAX gathers every input on
 * every rank and sums locally (one round, latency bound); larger ones reduce-scatter (rank p
 * sums segment p) then allgather the segments (two rounds, 2N(R-1)/R bytes out per rank).
 * Allgather, broadcast and barrier are flat exchanges with every peer (R <= 16 in practice).
 * Also here: the MPI_COMM_WORLD facts and the MPI_Init/MPI_Finalize reference count that coll.c
 * and the shm bootstrap use. This file is only compiled with NM_HAVE_MPI. */
#ifdef NM_HAVE_MPI
#include "coll_impl.h"

#include <limits.h>
#include <mpi.h>
#include <string.h>

/* Allreduce inputs up to this many bytes are gathered whole (see above). */
enum { COLL_MPI_GATHER_MAX = 16 * 1024 };
/* The tag of every collective message; coll_send/coll_recv use their own communicator. */
enum { COLL_MPI_TAG = 7 };

static int g_mpi_refs;    /* live instances that use MPI */
static bool g_mpi_inited; /* coll_mpi_ref called MPI_Init_thread */
static bool g_mpi_finalized;

struct coll_mpi {
    MPI_Comm comm;     /* dup of MPI_COMM_WORLD for collective traffic */
    MPI_Comm p2p;      /* dup for coll_send/coll_recv: user tags never meet collectives */
    MPI_Request *reqs; /* [2 * size] */
    int *req_peer;     /* [2 * size] peer of each request; +size for sends */
    int *idx;          /* [2 * size] MPI_Testsome output */
    int nreq;
    const void **src; /* [size] sources of coll_reduce_sum */
    void *scratch;    /* grows to the largest gather/reduce-scatter seen */
    size_t scratch_bytes;
};

static _Noreturn void coll_mpi_fail(const char *call, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    nm_fatal("collectives: %s failed: %s (an MPI installation or launch problem: check that "
             "mpirun and the library come from the same Open MPI)",
             call, s);
}
#define COLL_MPI_CHECK(call)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) coll_mpi_fail(#call, rc_);                                         \
    } while (0)

void coll_mpi_ref(void) {
    if (g_mpi_refs++) return;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        COLL_MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
        g_mpi_inited = true;
    }
}

void coll_mpi_unref(void) {
    NM_ASSERT(g_mpi_refs > 0);
    if (--g_mpi_refs || !g_mpi_inited) return;
    MPI_Finalize();
    g_mpi_inited = false;
    g_mpi_finalized = true;
}

bool coll_mpi_active(void) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    return inited && !finalized && !g_mpi_finalized;
}

int coll_mpi_world_rank(void) {
    int r;
    COLL_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
    return r;
}

int coll_mpi_world_size(void) {
    int s;
    COLL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s));
    return s;
}

int coll_mpi_local_size(void) {
    MPI_Comm local;
    int n;
    COLL_MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
    COLL_MPI_CHECK(MPI_Comm_size(local, &n));
    MPI_Comm_free(&local);
    return n;
}

MPI_Comm coll_mpi_base(const struct coll *c) { return *(const MPI_Comm *)c->mpi_base; }

void coll_mpi_base_init(struct coll *c, int group) {
    MPI_Comm *base = nm_alloc(sizeof *base, 64, "mpi communicator");
    if (group == 0) COLL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, base));
    else COLL_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, group, coll_mpi_world_rank(), base));
    c->mpi_base = base;
    COLL_MPI_CHECK(MPI_Comm_rank(*base, &c->rank));
    COLL_MPI_CHECK(MPI_Comm_size(*base, &c->size));
}

int coll_mpi_base_local_size(const struct coll *c) {
    MPI_Comm local;
    int n;
    COLL_MPI_CHECK(MPI_Comm_split_type(coll_mpi_base(c), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
    COLL_MPI_CHECK(MPI_Comm_size(local, &n));
    MPI_Comm_free(&local);
    return n;
}

void coll_mpi_base_free(struct coll *c) {
    if (!c->mpi_base) return;
    if (coll_mpi_active()) MPI_Comm_free((MPI_Comm *)c->mpi_base);
    nm_free(c->mpi_base);
    c->mpi_base = NULL;
}

_Noreturn void coll_mpi_abort(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code); /* MPI_Abort does not return; keep the compiler and the contract honest */
}

static void *mpi_scratch(struct coll_mpi *m, size_t bytes) {
    if (bytes > m->scratch_bytes) {
        nm_free(m->scratch);
        m->scratch = nm_alloc(bytes, 64, "mpi transport scratch");
        m->scratch_bytes = bytes;
    }
    return m->scratch;
}

/* MPI counts are int: activations stay far below 2 GiB per message. */
static int mpi_count(size_t bytes) {
    NM_ASSERT(bytes <= INT_MAX);
    return (int)bytes;
}

static void mpi_irecv(struct coll_mpi *m, MPI_Comm comm, void *buf, size_t bytes, int peer,
                      int tag) {
    COLL_MPI_CHECK(MPI_Irecv(buf, mpi_count(bytes), MPI_BYTE, peer, tag, comm, &m->reqs[m->nreq]));
    m->req_peer[m->nreq++] = peer;
}

static void mpi_isend(struct coll *c, struct coll_mpi *m, MPI_Comm comm, const void *buf,
                      size_t bytes, int peer, int tag) {
    COLL_MPI_CHECK(MPI_Isend(buf, mpi_count(bytes), MPI_BYTE, peer, tag, comm, &m->reqs[m->nreq]));
    m->req_peer[m->nreq++] = peer + c->size;
}

/* Completes every posted request. Progress (any request completing) restarts the timeout
 * clock; with none for c->timeout_s the job stops, naming the peers still missing. */
static void mpi_wait(struct coll *c, struct coll_mpi *m, const char *what) {
    int left = m->nreq;
    struct coll_backoff b;
    coll_backoff_init(&b, c);
    while (left > 0) {
        int done = 0;
        COLL_MPI_CHECK(MPI_Testsome(m->nreq, m->reqs, &done, m->idx, MPI_STATUSES_IGNORE));
        if (done == MPI_UNDEFINED) break;
        if (done > 0) {
            left -= done;
            coll_backoff_progress(&b);
            continue;
        }
        if (coll_backoff_check(&b) && coll_backoff_stalled_s(&b) > c->timeout_s) {
            char names[256] = "";
            size_t len = 0;
            int first = -1;
            for (int i = 0; i < m->nreq && len + 40 < sizeof names; i++) {
                if (m->reqs[i] == MPI_REQUEST_NULL) continue;
                int p = m->req_peer[i];
                if (first < 0) first = p % c->size;
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s rank %d",
                                        len ? "," : "", p >= c->size ? " send to" : " recv from",
                                        p % c->size);
            }
            nm_fatal("collectives: rank %d made no progress for %.1f s in %s (mpi; still "
                     "waiting on:%s); stopping the job (NM_COLL_TIMEOUT_S raises the limit)",
                     first, coll_backoff_stalled_s(&b), what, names);
        }
        coll_backoff_pause(&b);
    }
    m->nreq = 0;
}

static void mpi_allreduce_sum(struct coll *c, const void *in, enum coll_dtype dt, void *out,
                              size_t n) {
    struct coll_mpi *m = c->impl;
    int R = c->size, me = c->rank;
    size_t es = coll_dtype_in_bytes(dt), os = coll_dtype_out_bytes(dt);
    const void **src = m->src;
    if (R == 1) {
        src[0] = in;
        if (dt == COLL_DTYPE_BF16 || in != out) coll_reduce_sum(out, src, 1, dt, n);
        return;
    }
    if (n * es <= COLL_MPI_GATHER_MAX) {
        size_t bytes = n * es;
        char *buf = mpi_scratch(m, bytes * (size_t)R);
        for (int p = 0; p < R; p++)
            if (p != me) mpi_irecv(m, m->comm, buf + (size_t)p * bytes, bytes, p, COLL_MPI_TAG);
        for (int p = 0; p < R; p++)
            if (p != me) mpi_isend(c, m, m->comm, in, bytes, p, COLL_MPI_TAG);
        mpi_wait(c, m, "allreduce");
        for (int p = 0; p < R; p++) src[p] = p == me ? in : buf + (size_t)p * bytes;
        coll_reduce_sum(out, src, R, dt, n);
        return;
    }
    /* Reduce-scatter: rank p receives everyone's segment p and sums it. */
    size_t lo, hi, seg_max = coll_segment_max(n, R);
    coll_segment(n, R, me, &lo, &hi);
    char *buf = mpi_scratch(m, seg_max * es * (size_t)R);
    for (int p = 0; p < R; p++)
        if (p != me && hi > lo)
            mpi_irecv(m, m->comm, buf + (size_t)p * seg_max * es, (hi - lo) * es, p, COLL_MPI_TAG);
    for (int p = 0; p < R; p++) {
        size_t plo, phi;
        coll_segment(n, R, p, &plo, &phi);
        if (p != me && phi > plo)
            mpi_isend(c, m, m->comm, (const char *)in + plo * es, (phi - plo) * es, p,
                      COLL_MPI_TAG);
    }
    mpi_wait(c, m, "allreduce (reduce-scatter)");
    for (int p = 0; p < R; p++)
        src[p] = p == me ? (const char *)in + lo * es : buf + (size_t)p * seg_max * es;
    /* out + lo may be in + lo (in place): allowed */
    coll_reduce_sum((char *)out + lo * os, src, R, dt, hi - lo);
    /* Allgather of the summed segments, straight into out. */
    for (int p = 0; p < R; p++) {
        size_t plo, phi;
        coll_segment(n, R, p, &plo, &phi);
        if (p != me && phi > plo)
            mpi_irecv(m, m->comm, (char *)out + plo * os, (phi - plo) * os, p, COLL_MPI_TAG);
    }
    for (int p = 0; p < R; p++)
        if (p != me && hi > lo)
            mpi_isend(c, m, m->comm, (char *)out + lo * os, (hi - lo) * os, p, COLL_MPI_TAG);
    mpi_wait(c, m, "allreduce (allgather)");
}

static void mpi_allgatherv(struct coll *c, const void *in, const size_t *bytes, size_t total,
                           void *out) {
    struct coll_mpi *m = c->impl;
    size_t at = 0, mine_at = 0;
    for (int p = 0; p < c->size; p++) {
        if (p == c->rank)
            mine_at = at;
        else if (bytes[p])
            mpi_irecv(m, m->comm, (char *)out + at, bytes[p], p, COLL_MPI_TAG);
        at += bytes[p];
    }
    size_t mine = bytes[c->rank];
    for (int p = 0; p < c->size && mine; p++)
        if (p != c->rank) mpi_isend(c, m, m->comm, in, mine, p, COLL_MPI_TAG);
    if (in != (char *)out + mine_at) memcpy((char *)out + mine_at, in, mine);
    mpi_wait(c, m, "allgather");
}

static void mpi_bcast(struct coll *c, void *buf, size_t bytes, int root) {
    struct coll_mpi *m = c->impl;
    if (c->rank == root) {
        for (int p = 0; p < c->size; p++)
            if (p != root) mpi_isend(c, m, m->comm, buf, bytes, p, COLL_MPI_TAG);
    } else {
        mpi_irecv(m, m->comm, buf, bytes, root, COLL_MPI_TAG);
    }
    mpi_wait(c, m, "bcast");
}

static void mpi_barrier(struct coll *c) {
    struct coll_mpi *m = c->impl;
    for (int p = 0; p < c->size; p++)
        if (p != c->rank) mpi_irecv(m, m->comm, NULL, 0, p, COLL_MPI_TAG);
    for (int p = 0; p < c->size; p++)
        if (p != c->rank) mpi_isend(c, m, m->comm, NULL, 0, p, COLL_MPI_TAG);
    mpi_wait(c, m, "barrier");
}

static void mpi_send(struct coll *c, const void *buf, size_t bytes, int peer, int tag) {
    struct coll_mpi *m = c->impl;
    NM_ASSERT(tag <= 32767); /* the smallest MPI_TAG_UB the standard allows */
    mpi_isend(c, m, m->p2p, buf, bytes, peer, tag);
    mpi_wait(c, m, "send");
}

static void mpi_recv(struct coll *c, void *buf, size_t bytes, int peer, int tag) {
    struct coll_mpi *m = c->impl;
    NM_ASSERT(tag <= 32767);
    /* Probe first: the size is checked before any byte lands in buf. */
    MPI_Message msg;
    MPI_Status st;
    struct coll_backoff b;
    coll_backoff_init(&b, c);
    for (;;) {
        int found = 0;
        COLL_MPI_CHECK(MPI_Improbe(peer, tag, m->p2p, &found, &msg, &st));
        if (found) break;
        if (coll_backoff_check(&b) && coll_backoff_stalled_s(&b) > c->timeout_s)
            nm_fatal("collectives: rank %d made no progress for %.1f s: no message with tag %d "
                     "arrived from it (mpi recv); stopping the job (NM_COLL_TIMEOUT_S raises the "
                     "limit)",
                     peer, coll_backoff_stalled_s(&b), tag);
        coll_backoff_pause(&b);
    }
    int got = 0;
    COLL_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &got));
    if ((size_t)got != bytes)
        nm_fatal("collectives: rank %d sent %d bytes with tag %d, this rank receives %zu: the "
                 "ranks disagree on the message",
                 peer, got, tag, bytes);
    COLL_MPI_CHECK(MPI_Mrecv(buf, got, MPI_BYTE, &msg, MPI_STATUS_IGNORE));
}

static void mpi_free(struct coll *c) {
    struct coll_mpi *m = c->impl;
    mpi_barrier(c);
    MPI_Comm_free(&m->comm);
    MPI_Comm_free(&m->p2p);
    nm_free(m->reqs);
    nm_free(m->req_peer);
    nm_free(m->idx);
    nm_free(m->src);
    nm_free(m->scratch);
    nm_free(m);
}

static const struct coll_ops coll_mpi_ops = {
    .name = "mpi",
    .allreduce_sum = mpi_allreduce_sum, /* gather + local sum, or reduce-scatter + allgather */
    .allgatherv = mpi_allgatherv,       /* flat exchange */
    .bcast = mpi_bcast,                 /* root sends to every peer */
    .barrier = mpi_barrier,             /* zero-byte exchange with every peer */
    .send = mpi_send,                   /* MPI_Isend on a private communicator */
    .recv = mpi_recv,                   /* MPI_Irecv, exact size checked */
    .abort_notify = NULL,               /* MPI_Abort tells the peers */
    .free = mpi_free,
};

void coll_mpi_init(struct coll *c) {
    struct coll_mpi *m = nm_alloc(sizeof *m, 64, "mpi transport");
    COLL_MPI_CHECK(MPI_Comm_dup(coll_mpi_base(c), &m->comm));
    COLL_MPI_CHECK(MPI_Comm_dup(coll_mpi_base(c), &m->p2p));
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(m->p2p, MPI_ERRORS_RETURN);
    size_t nr = 2 * (size_t)c->size;
    m->reqs = nm_alloc(nr * sizeof *m->reqs, 64, "mpi requests");
    m->req_peer = nm_alloc(nr * sizeof *m->req_peer, 64, "mpi requests");
    m->idx = nm_alloc(nr * sizeof *m->idx, 64, "mpi requests");
    m->src = nm_alloc((size_t)c->size * sizeof *m->src, 64, "mpi requests");
    c->impl = m;
    c->ops = &coll_mpi_ops;
}
#else
typedef int coll_mpi_unused; /* ISO C: a translation unit must not be empty */
#endif
