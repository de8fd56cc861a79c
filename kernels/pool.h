/* A fixed pool of worker threads, each bound to one core, that runs one parallel job at a time.
 * The calling thread is worker 0, so a pool of 1 thread runs jobs inline with no locking. */
#ifndef NM_POOL_H
#define NM_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct pool;

/* Job body: called once on every worker with its index ith in [0, nth). */
typedef void (*pool_fn)(void *ctx, int ith, int nth);

/* Start n_threads - 1 workers (the caller is worker 0). cpus, when not NULL, lists n_threads
 * logical CPU ids: worker i is bound to cpus[i] (the caller is bound too). A failed binding is
 * logged once as a warning and the pool runs unbound. */
struct pool *pool_init(int n_threads, const int *cpus);
void pool_free(struct pool *p);
int pool_size(const struct pool *p);
/* The logical CPU worker i is bound to; -1 when the pool runs unbound. */
int pool_cpu(const struct pool *p, int i);

/* Run fn on every worker and return when all have finished. Not reentrant. */
void pool_run(struct pool *p, pool_fn fn, void *ctx);

/* No job is coming for a while (a server turning a step's tokens into text, between forward
 * passes): the workers sleep at once instead of spinning, and leave the cores to other threads;
 * the next pool_run wakes them. */
void pool_rest(struct pool *p);

/* Busy-time accounting, for profiles (NM_PROFILE): once on, every pool_run adds its wall time
 * and each worker's time inside the job body. Off by default (two clock reads per worker per
 * job when on). */
struct pool_stats {
    uint64_t jobs;    /* pool_run calls */
    uint64_t wall_ns; /* their wall time, summed */
    uint64_t busy_ns; /* the workers' time inside the job bodies, summed over workers */
};
void pool_set_profile(struct pool *p, bool on);
void pool_get_stats(const struct pool *p, struct pool_stats *out);

/* Split [0, n) into nth nearly equal ranges, rounded to multiples of `align` (except the end);
 * worker ith gets [*lo, *hi). */
void pool_split(long n, long align, int ith, int nth, long *lo, long *hi);

/* [0, n) claimed by the workers of one job a range at a time, so that they end together: a thread
 * that runs slower (a busy neighbour on a shared host, a core at a lower clock) takes fewer
 * ranges, and no range is large when the others are almost done (guided self-scheduling): full
 * ranges of `batch` while more than one per thread is left, then what is left over the threads,
 * down to `align`. Ranges start on multiples of align. pool_claims_init before the job;
 * pool_claim in each worker until it returns false. */
struct pool_claims {
    atomic_long next; /* the first unclaimed index */
    long n, batch, align;
    int nth;
};
void pool_claims_init(struct pool_claims *c, long n, long batch, long align, int nth);
bool pool_claim(struct pool_claims *c, long *lo, long *hi);

#endif
