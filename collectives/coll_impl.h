/* Internal contract between coll.c (public entry points, transport choice, fatal hook) and the
 * transports (coll_single.c, coll_shm.c, coll_mpi.c). Not included by rank code. */
#ifndef NM_COLL_IMPL_H
#define NM_COLL_IMPL_H

#include "coll.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define coll_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define coll_cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define coll_cpu_relax() ((void)0)
#endif

/* What an allreduce sums: the input element type and the type it is summed in (= output). */
enum coll_dtype {
    COLL_DTYPE_F32,  /* f32 in, f32 sums */
    COLL_DTYPE_BF16, /* bf16 in, widened exactly, f32 sums */
    COLL_DTYPE_F64,  /* f64 in, f64 sums */
};
static inline size_t coll_dtype_in_bytes(enum coll_dtype dt) {
    return dt == COLL_DTYPE_F64 ? 8 : dt == COLL_DTYPE_BF16 ? 2 : 4;
}
static inline size_t coll_dtype_out_bytes(enum coll_dtype dt) {
    return dt == COLL_DTYPE_F64 ? 8 : 4;
}

/* A transport: one table per kind, filled with designated initializers. The public functions
 * in coll.c check arguments and handle n == 0, so a slot never sees a zero-length call except
 * barrier and send/recv of 0 bytes. */
struct coll_ops {
    const char *name; /* printed at start-up, returned by coll_transport_name */
    /* out[i] = sum over ranks in rank order of in_r[i], in the element types of dt (bf16 is
     * widened to f32). For f32 and f64, in == out is allowed. */
    void (*allreduce_sum)(struct coll *c, const void *in, enum coll_dtype dt, void *out, size_t n);
    /* bytes[size] per rank, total their sum (> 0); out packed in rank order; in may be this
     * rank's place in out. */
    void (*allgatherv)(struct coll *c, const void *in, const size_t *bytes, size_t total,
                       void *out);
    void (*bcast)(struct coll *c, void *buf, size_t bytes, int root); /* bytes > 0 */
    void (*barrier)(struct coll *c);
    void (*send)(struct coll *c, const void *buf, size_t bytes, int peer, int tag);
    void (*recv)(struct coll *c, void *buf, size_t bytes, int peer, int tag);
    /* optional (NULL: nothing): called from the fatal hook before MPI_Abort, to tell peers that
     * this rank is stopping the job; must neither wait nor allocate */
    void (*abort_notify)(struct coll *c);
    /* collective: release transport state (c->impl); coll.c frees c itself */
    void (*free)(struct coll *c);
};

struct coll {
    const struct coll_ops *ops;
    int rank;            /* 0 .. size-1 */
    int size;            /* ranks in the job */
    int node;            /* NUMA node this rank ran on at init, -1 if unknown */
    double timeout_s;    /* see coll_set_timeout */
    uint32_t spin_iters; /* pause iterations before a wait yields (coll_spin_iters) */
    size_t *counts;      /* [size] scratch: coll_allgather's equal counts */
    void *impl;          /* transport state */
    bool uses_mpi;       /* holds a reference on MPI (see coll_mpi_ref/unref) */
    void *mpi_base;      /* with MPI: the communicator this instance spans (coll_mpi_base_init) */
    char detail[256];    /* transport facts for the start-up line (placement, thresholds) */
};

/* The largest segment coll_segment makes: an equal share of n elements over R ranks, rounded
 * up to 16 elements (whole 64-byte lines of f32, 128-byte line pairs of f64). */
enum { COLL_SEG_ALIGN = 16 };
static inline size_t coll_segment_max(size_t n, int R) {
    size_t per = (n + (size_t)R - 1) / (size_t)R;
    return (per + COLL_SEG_ALIGN - 1) / COLL_SEG_ALIGN * COLL_SEG_ALIGN;
}
/* Segment p's [lo, hi) when n elements are split over R ranks for a reduce-scatter: shares of
 * coll_segment_max, so the last ones may be short or empty. The same on every rank. */
static inline void coll_segment(size_t n, int R, int p, size_t *lo, size_t *hi) {
    size_t per = coll_segment_max(n, R);
    *lo = (size_t)p * per < n ? (size_t)p * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* NUMA placement (coll_numa.c; without libnuma these report "unknown" and do nothing). */
int coll_numa_node_self(void); /* node of the CPU this thread runs on, -1 if unknown */
/* Prefer node for the pages of [addr, addr+len) (page aligned), shared mappings included;
 * returns false (errno set) on failure. */
bool coll_numa_prefer(void *addr, size_t len, int node);
/* Fraction of the resident pages of [addr, addr+len) that are on node (sampled), -1 if
 * unknown. */
double coll_numa_fraction_on(const void *addr, size_t len, int node);

extern const struct coll_ops coll_single_ops;

/* Transport constructors. Each fills c->ops and c->impl. The shm one returns false (having
 * logged why, on every rank, with the same decision on every rank) when the segment cannot be
 * set up, so the caller may fall back to mpi. */
void coll_single_init(struct coll *c);
#ifdef NM_HAVE_MPI
bool coll_shm_init(struct coll *c, size_t slot_bytes, size_t oneshot_bytes, unsigned hints);
void coll_mpi_init(struct coll *c);
/* MPI_COMM_WORLD facts for coll.c, which does not include mpi.h */
void coll_mpi_ref(void);   /* MPI_Init_thread unless initialized; counts instances */
void coll_mpi_unref(void); /* MPI_Finalize with the last instance, if coll_mpi_ref inited it */
int coll_mpi_world_rank(void);
int coll_mpi_world_size(void);
int coll_mpi_local_size(void); /* ranks on this host (MPI_COMM_TYPE_SHARED) */
/* The ranks this instance spans: the whole job (group 0), or those of the job that passed the
 * same group (MPI_Comm_split, ordered by world rank). Sets c->rank and c->size within it. */
void coll_mpi_base_init(struct coll *c, int group);
int coll_mpi_base_local_size(const struct coll *c); /* of those, the ranks on this host */
void coll_mpi_base_free(struct coll *c);
_Noreturn void coll_mpi_abort(int code);
bool coll_mpi_active(void); /* initialized and not finalized */
#endif

/* Sum in rank order: out[i] = ((src[0][i] + src[1][i]) + ...) over nsrc sources of n elements,
 * in the types of dt (bf16 widened exactly to f32). out may be identical to any source (same
 * element index), no other overlap. */
void coll_reduce_sum(void *out, const void *const *src, int nsrc, enum coll_dtype dt, size_t n);
/* The plain-C twin of coll_reduce_sum, one element at a time: the test oracle. */
void coll_reduce_sum_ref(void *out, const void *const *src, int nsrc, enum coll_dtype dt,
                         size_t n);
/* The baseline-ISA build of coll_reduce_sum (tests compare every build with the _ref). */
void coll_reduce_sum_generic(void *out, const void *const *src, int nsrc, enum coll_dtype dt,
                             size_t n);
/* Which build coll_reduce_sum uses: "avx512" or "generic" (NM_ISA=ref forces generic). */
const char *coll_reduce_isa(void);

/* Cache hints of the shm transport: where non-temporal stores replace plain ones. A slot line
 * written with plain stores is read by the peers straight from the writer's cache; with
 * non-temporal stores it goes to memory without a read-for-ownership (no invalidation round
 * trip to the peers that hold it from the last use) and the peers read it from there. Which is
 * faster depends on the size and the rank count: tests/bench/RESULTS.md ("Cache hints")
 * measured it, and the default below follows those measurements. A hint never changes what a
 * reader sees: an sfence orders the non-temporal stores before the publishing release store. */
enum coll_shm_hint {
    COLL_SHM_HINT_NT_OUT = 1 << 0,      /* allreduce with COLL_SHM_NT_OUT_MIN output bytes or
                                           more: the output is written with non-temporal stores
                                           (lines about to be overwritten are not read first) */
    COLL_SHM_HINT_NT_SLOT = 1 << 1,     /* every collective fills its slots with non-temporal
                                           stores (all sizes: for measurements) */
    COLL_SHM_HINT_NT_SLOT_MID = 1 << 2, /* allreduces of COLL_SHM_NT_SLOT_MIN..MAX input bytes
                                           with COLL_SHM_NT_SLOT_RANKS ranks or more fill their
                                           slots with non-temporal stores */
};
enum {
    COLL_SHM_NT_OUT_MIN = 32 << 20,   /* 2-16 MiB: no gain; 32 and 64 MiB: 2-24% faster */
    COLL_SHM_NT_SLOT_MIN = 2 << 10,   /* 1 KiB: -10% to +15%; 2-16 KiB: 3-26% faster */
    COLL_SHM_NT_SLOT_MAX = 32 << 10,  /* 32 KiB: 1-22% faster; 64 KiB: -10% to +8% */
    COLL_SHM_NT_SLOT_RANKS = 4,       /* 2 ranks: slower from 16 KiB on (3: not measured) */
};
/* The hints in force when neither coll_options.shm_hints nor NM_COLL_SHM_HINTS names any:
 * those that measurably helped. */
#define COLL_SHM_HINTS_DEFAULT ((unsigned)(COLL_SHM_HINT_NT_OUT | COLL_SHM_HINT_NT_SLOT_MID))
/* Parses NM_COLL_SHM_HINTS syntax ("none", or names joined by '+' or ','); fatal on an unknown
 * name, naming it and the allowed ones. */
unsigned coll_shm_hints_parse(const char *s);
/* "nt-out+nt-slot-mid" etc. into buf ("none" for 0). */
void coll_shm_hints_str(unsigned hints, char *buf, size_t len);
/* memcpy with non-temporal stores for the whole 64-byte lines of dst (plain stores for a partial
 * first or last line; plain memcpy on architectures without them). The stores are weakly
 * ordered: call coll_cache_stream_fence before anything else may read dst (another thread, or a
 * release store that publishes it). */
void coll_cache_copy_stream(void *dst, const void *src, size_t bytes);
void coll_cache_stream_fence(void);

/* Waiting. A wait spins with a pause first (the peer is usually microseconds away), then
 * yields the CPU, then sleeps with a growing interval (a rank that waits for more than 20 ms is
 * loading or stuck, not racing). How long it spins depends on the job: with a CPU per rank
 * (production), a few milliseconds, so that a short imbalance never hands the core to another
 * process; oversubscribed (tests run 4 ranks on 2 cores), a few microseconds, so that the rank
 * being waited for gets the core. check() returns true every ~2 ms once past the spin phase:
 * time to look at liveness and the timeout. */
struct coll_backoff {
    uint64_t t_start;    /* ns, end of the spin phase */
    uint64_t t_progress; /* ns, last progress (timeouts count from here) */
    uint64_t t_check;    /* ns, next check due */
    uint32_t spins;      /* pause iterations so far */
    uint32_t spin_max;   /* pause iterations before the first yield */
    uint32_t sleep_ns;   /* current sleep, grows to COLL_SLEEP_MAX_NS */
};
enum {
    COLL_SPIN_DEDICATED = 100000,     /* ~5 ms (a pause is ~50 ns): a CPU per rank */
    COLL_SPIN_OVERSUBSCRIBED = 200,   /* ~10 us: more ranks than CPUs */
    COLL_YIELD_NS = 20 * 1000 * 1000, /* yield (not sleep) for the first 20 ms */
    COLL_CHECK_NS = 2 * 1000 * 1000,  /* liveness and timeout checks every 2 ms */
    COLL_SLEEP_MAX_NS = 1000 * 1000,  /* sleeps grow up to 1 ms */
};
/* Spin budget for a job with `local_ranks` ranks on this host. */
uint32_t coll_spin_iters(int local_ranks);
static inline void coll_backoff_init(struct coll_backoff *b, const struct coll *c) {
    b->t_start = 0;
    b->t_progress = 0;
    b->t_check = 0;
    b->spins = 0;
    b->spin_max = c->spin_iters;
    b->sleep_ns = 0;
}
void coll_backoff_slow(struct coll_backoff *b);
/* Starts the clocks on the first slow iteration (the spin phase never reads the time). */
static inline void coll_backoff_clock(struct coll_backoff *b, uint64_t now) {
    if (b->t_start) return;
    b->t_start = now;
    if (!b->t_progress) b->t_progress = now;
    b->t_check = now; /* first check right away */
}
/* One wait iteration. */
static inline void coll_backoff_pause(struct coll_backoff *b) {
    if (b->spins < b->spin_max) {
        b->spins++;
        coll_cpu_relax();
        return;
    }
    coll_backoff_slow(b);
}
/* True when a liveness/timeout check is due (never during the spin phase). */
static inline bool coll_backoff_check(struct coll_backoff *b) {
    if (b->spins < b->spin_max) return false;
    uint64_t now = nm_time_ns();
    coll_backoff_clock(b, now);
    if (now < b->t_check) return false;
    b->t_check = now + COLL_CHECK_NS;
    return true;
}
/* Seconds since the last progress (or the start of the wait). */
static inline double coll_backoff_stalled_s(const struct coll_backoff *b) {
    return (double)(nm_time_ns() - b->t_progress) * 1e-9;
}
/* Something completed: restart the timeout clock (the spin phase is not restarted). */
static inline void coll_backoff_progress(struct coll_backoff *b) { b->t_progress = nm_time_ns(); }

/* Parse a positive number from the environment; returns def when unset, fatal when malformed
 * (naming the variable, the value and what is allowed). */
double coll_env_double(const char *name, double def, double min, double max);

#endif
