/* Worker pool (see pool.h). Workers wait on a generation counter: pool_run stores the job and
 * bumps the counter (release); each worker that sees a new generation (acquire) runs the job
 * and decrements `pending`; the caller runs its own share as worker 0 and then waits until
 * `pending` reaches zero. Waiters spin with a pause for POOL_SPIN_NS, so the back-to-back jobs of
 * a decode step (hundreds per token, tens of microseconds apart) do not pay a futex wake-up
 * each, then yield the CPU (cores may be shared or oversubscribed, as with several ranks per
 * core in tests), and workers finally sleep on the condition variable: an idle pool costs no
 * CPU. pool_rest sends them to sleep at once. */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

#define POOL_SPIN_NS 100000  /* spin this long before yielding */
#define POOL_YIELD_NS 2000000 /* then yield this long before sleeping */

struct worker {
    struct pool *pool;
    int ith;
    int cpu; /* -1: unbound */
};

struct pool {
    int n;
    pthread_t *threads;
    struct worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    atomic_uint generation; /* bumped by pool_run after fn/ctx are stored */
    atomic_int pending;     /* workers (other than the caller) still running the job */
    atomic_bool stop;
    atomic_bool rest; /* pool_rest: sleep without spinning until the next job */
    pool_fn fn;
    void *ctx;
    bool bound; /* every worker, the caller included, is bound to workers[i].cpu */
    bool profile;       /* pool_set_profile */
    atomic_ullong busy_ns; /* pool_stats */
    uint64_t jobs, wall_ns;
};

static bool bind_to_cpu(pthread_t t, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(t, sizeof set, &set) == 0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* One step of a wait that began at t0 (0 on the first call): pause while young, then yield.
 * Returns false once the wait has lasted long enough to sleep instead. */
static bool wait_step(uint64_t *t0, unsigned *iter) {
    if ((++*iter & 63) != 0) {
        cpu_relax();
        return true;
    }
    const uint64_t now = nm_time_ns();
    if (*t0 == 0) *t0 = now;
    if (now - *t0 < POOL_SPIN_NS) return true;
    if (now - *t0 < POOL_SPIN_NS + POOL_YIELD_NS) {
        sched_yield();
        return true;
    }
    return false;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen, iter = 0;
        uint64_t t0 = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
            if (!atomic_load_explicit(&p->rest, memory_order_relaxed) && wait_step(&t0, &iter)) continue;
            pthread_mutex_lock(&p->mu);
            while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
                   !atomic_load_explicit(&p->stop, memory_order_acquire))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
            t0 = 0;
        }
        seen = gen;
        if (p->profile) {
            const uint64_t b0 = nm_time_ns();
            p->fn(p->ctx, w->ith, p->n);
            atomic_fetch_add_explicit(&p->busy_ns, nm_time_ns() - b0, memory_order_relaxed);
        } else {
            p->fn(p->ctx, w->ith, p->n);
        }
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

struct pool *pool_init(int n_threads, const int *cpus) {
    NM_ASSERT(n_threads >= 1);
    struct pool *p = calloc(1, sizeof *p);
    NM_ASSERT(p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    NM_ASSERT(p->threads && p->workers);
    bool bind_failed = false;
    p->workers[0] = (struct worker){.pool = p, .ith = 0, .cpu = cpus ? cpus[0] : -1};
    if (cpus && !bind_to_cpu(pthread_self(), cpus[0])) bind_failed = true;
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (struct worker){.pool = p, .ith = i, .cpu = cpus ? cpus[i] : -1};
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]) != 0)
            nm_fatal("pthread_create failed for worker %d of %d (lower -t)", i, n_threads);
        if (cpus && !bind_to_cpu(p->threads[i], cpus[i])) bind_failed = true;
    }
    if (bind_failed) nm_log_warn("could not bind pool threads to their cores; running unbound");
    p->bound = cpus && !bind_failed;
    return p;
}

void pool_free(struct pool *p) {
    if (!p) return;
    atomic_store_explicit(&p->stop, true, memory_order_release);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    free(p->threads);
    free(p->workers);
    free(p);
}

int pool_size(const struct pool *p) { return p->n; }

void pool_run(struct pool *p, pool_fn fn, void *ctx) {
    const uint64_t t0 = p->profile ? nm_time_ns() : 0;
    if (p->n == 1) {
        fn(ctx, 0, 1);
        if (p->profile) {
            const uint64_t dt = nm_time_ns() - t0;
            p->jobs++, p->wall_ns += dt;
            atomic_fetch_add_explicit(&p->busy_ns, dt, memory_order_relaxed);
        }
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->rest, false, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    /* Publish fn/ctx/pending, then wake sleepers. Taking the mutex orders the bump with a
     * worker that is between its check and pthread_cond_wait. */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    if (p->profile) atomic_fetch_add_explicit(&p->busy_ns, nm_time_ns() - t0, memory_order_relaxed);
    unsigned iter = 0;
    uint64_t w0 = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        if (!wait_step(&w0, &iter)) sched_yield(); /* workers are running their share: keep yielding */
    if (p->profile) p->jobs++, p->wall_ns += nm_time_ns() - t0;
}

void pool_rest(struct pool *p) {
    /* (a worker that reads it late spins until then, at most one wait_step; the generation is
     * checked under mu before it sleeps, so a job published meanwhile is not missed) */
    if (p->n > 1) atomic_store_explicit(&p->rest, true, memory_order_relaxed);
}

void pool_set_profile(struct pool *p, bool on) { p->profile = on; }

void pool_get_stats(const struct pool *p, struct pool_stats *out) {
    out->jobs = p->jobs;
    out->wall_ns = p->wall_ns;
    out->busy_ns = atomic_load_explicit(&p->busy_ns, memory_order_relaxed);
}

int pool_cpu(const struct pool *p, int i) {
    NM_ASSERT(i >= 0 && i < pool_size(p));
    return p->bound ? p->workers[i].cpu : -1;
}

void pool_split(long n, long align, int ith, int nth, long *lo, long *hi) {
    if (align < 1) align = 1;
    long units = (n + align - 1) / align;
    long per = units / nth, rem = units % nth;
    long u0 = ith * per + (ith < rem ? ith : rem);
    long u1 = u0 + per + (ith < rem ? 1 : 0);
    *lo = NM_MIN(u0 * align, n);
    *hi = NM_MIN(u1 * align, n);
}

void pool_claims_init(struct pool_claims *c, long n, long batch, long align, int nth) {
    NM_ASSERT(align >= 1 && nth >= 1);
    atomic_init(&c->next, 0);
    c->n = n;
    c->align = align;
    c->batch = NM_MAX(align, (batch + align - 1) / align * align);
    c->nth = nth;
}

bool pool_claim(struct pool_claims *c, long *lo, long *hi) {
    long at = atomic_load_explicit(&c->next, memory_order_relaxed);
    for (;;) {
        if (at >= c->n) return false;
        const long want = NM_MIN(c->batch, NM_MAX(c->align, (c->n - at) / c->nth));
        const long end = NM_MIN(c->n, at + (want + c->align - 1) / c->align * c->align);
        /* on failure at takes the counter's value: claim again from there */
        if (atomic_compare_exchange_weak_explicit(&c->next, &at, end, memory_order_relaxed, memory_order_relaxed)) {
            *lo = at;
            *hi = end;
            return true;
        }
    }
}
