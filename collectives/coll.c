/* Public entry points of collectives/coll.h: option and environment parsing, the choice of
 * transport, argument checks common to every transport, the fatal hook that ends the whole job,
 * and the waiting policy (backoff) shared by the transports. */
#include "coll_impl.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum { COLL_MAX_LIVE = 16 }; /* the benchmark opens one per column */
/* Instances alive in this process, so the fatal hook can tell their peers (abort_notify). */
static struct coll *g_live[COLL_MAX_LIVE];

static const char *const coll_transport_names[] = {
    [COLL_TRANSPORT_AUTO] = "auto",
    [COLL_TRANSPORT_SINGLE] = "single",
    [COLL_TRANSPORT_SHM] = "shm",
    [COLL_TRANSPORT_MPI] = "mpi",
};

double coll_env_double(const char *name, double def, double min, double max) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= min && v <= max))
        nm_fatal("collectives: %s=%s is not a number in [%g, %g]", name, s, min, max);
    return v;
}

static enum coll_transport coll_env_transport(enum coll_transport def) {
    const char *s = getenv("NM_COLL");
    if (!s || !*s) return def;
    for (size_t i = 0; i < NM_ARRAY_LEN(coll_transport_names); i++)
        if (!strcasecmp(s, coll_transport_names[i])) return (enum coll_transport)i;
    nm_fatal("collectives: NM_COLL=%s is not a transport; allowed: auto, single, shm, mpi", s);
}

/* Ranks in the job as the launcher announces it, before any MPI call; 1 without a launcher. */
static int coll_env_world_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < NM_ARRAY_LEN(vars); i++) {
        const char *s = getenv(vars[i]);
        if (s && *s) {
            char *end;
            long v = strtol(s, &end, 10);
            if (*end || v < 1 || v > 1 << 20)
                nm_fatal("collectives: %s=%s is not a rank count", vars[i], s);
            return (int)v;
        }
    }
    return 1;
}

static void coll_fatal_hook(int code) {
    static volatile int entered;
    if (entered++) return; /* a fatal error inside the hook: let nm_fatal exit */
    for (int i = 0; i < COLL_MAX_LIVE; i++)
        if (g_live[i] && g_live[i]->ops->abort_notify) g_live[i]->ops->abort_notify(g_live[i]);
#ifdef NM_HAVE_MPI
    if (coll_mpi_active()) coll_mpi_abort(code);
#endif
}

uint32_t coll_spin_iters(int local_ranks) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 && local_ranks > cpus ? COLL_SPIN_OVERSUBSCRIBED : COLL_SPIN_DEDICATED;
}

void coll_backoff_slow(struct coll_backoff *b) {
    uint64_t now = nm_time_ns();
    coll_backoff_clock(b, now);
    if (now - b->t_start < COLL_YIELD_NS) {
        sched_yield();
        return;
    }
    b->sleep_ns = b->sleep_ns ? NM_MIN(2 * b->sleep_ns, (uint32_t)COLL_SLEEP_MAX_NS) : 20000;
    struct timespec ts = {0, (long)b->sleep_ns};
    nanosleep(&ts, NULL);
}

/* Largest allreduce that goes one-shot by default. One-shot costs one synchronization and reads
 * (R-1)N bytes from the peers; reduce-scatter + allgather costs two and reads 2N(R-1)/R. They
 * break even at N = K * R / ((R-1)(R-2)), K = synchronization time x cache-to-cache bandwidth:
 * never for 2 ranks (one-shot up to 64 KiB, every decode size). K = 3 KB fits the crossovers
 * measured on the 16-core Xeon of tests/bench/RESULTS.md (about 2 KiB with 4 ranks, between
 * 512 B and 1 KiB with 8); 3 and 5-7 ranks are the model's interpolation. Rounded to the
 * nearest power of two; NM_COLL_SHM_ONESHOT_KB overrides it. */
static size_t coll_oneshot_default(int R) {
    size_t cap = 64 * 1024, p = 256;
    if (R <= 2) return cap;
    double even = 3072.0 * R / ((double)(R - 1) * (R - 2));
    while (p < cap && (double)p * 1.5 < even) p *= 2;
    return p;
}

struct coll *coll_init(const struct coll_options *opt) {
    static const struct coll_options defaults;
    if (!opt) opt = &defaults;
    enum coll_transport want = coll_env_transport(opt->transport);
    int env_size = coll_env_world_size();

    struct coll *c = nm_alloc(sizeof *c, 64, "collectives instance");
    c->node = -1;
    c->spin_iters = COLL_SPIN_DEDICATED;
    c->timeout_s =
        coll_env_double("NM_COLL_TIMEOUT_S", opt->timeout_s > 0 ? opt->timeout_s : 5.0, 0.001, 1e6);
    const char *why = NULL;

    if (want == COLL_TRANSPORT_SINGLE || (want == COLL_TRANSPORT_AUTO && env_size == 1)) {
        if (env_size > 1)
            nm_fatal("collectives: transport single was requested but the launcher started %d "
                     "ranks (unset NM_COLL or run without mpirun)",
                     env_size);
        coll_single_init(c);
        why = want == COLL_TRANSPORT_SINGLE ? "requested" : "one rank, no MPI";
    } else {
#ifdef NM_HAVE_MPI
        coll_mpi_ref();
        c->uses_mpi = true;
        coll_mpi_base_init(c, opt->group);
        int local = coll_mpi_base_local_size(c);
        c->spin_iters = coll_spin_iters(local);
        if (want == COLL_TRANSPORT_AUTO && c->size == 1) {
            coll_single_init(c);
            why = "one rank";
        } else if (want == COLL_TRANSPORT_MPI) {
            coll_mpi_init(c);
            why = "requested";
        } else if (local != c->size) {
            if (want == COLL_TRANSPORT_SHM)
                nm_fatal("collectives: transport shm was requested but the %d ranks span more "
                         "than one host (use NM_COLL=mpi or auto)",
                         c->size);
            coll_mpi_init(c);
            why = "ranks span several hosts";
        } else {
            double slot_kb = opt->shm_slot_bytes ? (double)opt->shm_slot_bytes / 1024 : 1024;
            double oneshot_kb = opt->shm_oneshot_bytes
                                    ? (double)opt->shm_oneshot_bytes / 1024
                                    : (double)coll_oneshot_default(c->size) / 1024;
            size_t slot =
                (size_t)(coll_env_double("NM_COLL_SHM_SLOT_KB", slot_kb, 4, 1 << 20) * 1024);
            size_t oneshot =
                (size_t)(coll_env_double("NM_COLL_SHM_ONESHOT_KB", oneshot_kb, 0, 1 << 20) * 1024);
            const char *hints_env = getenv("NM_COLL_SHM_HINTS");
            const char *hints_str = hints_env && *hints_env ? hints_env : opt->shm_hints;
            unsigned hints = hints_str ? coll_shm_hints_parse(hints_str) : COLL_SHM_HINTS_DEFAULT;
            if (coll_shm_init(c, slot, oneshot, hints)) {
                why = want == COLL_TRANSPORT_SHM ? "requested" : "all ranks on one host";
            } else if (want == COLL_TRANSPORT_SHM || opt->strict) {
                nm_fatal("collectives: the shared-memory transport could not be set up (see "
                         "above); NM_COLL=mpi uses MPI instead");
            } else {
                nm_log_warn("collectives: falling back to mpi: shared memory could not be set up "
                            "(see above)");
                coll_mpi_init(c);
                why = "fallback: shared memory failed";
            }
        }
        nm_fatal_set_hook(coll_fatal_hook);
#else
        nm_fatal("collectives: %d ranks (or NM_COLL=%s) need MPI, but numallm was built without "
                 "it (install libopenmpi-dev and reconfigure)",
                 env_size, coll_transport_names[want]);
#endif
    }
    c->counts = nm_alloc(sizeof(size_t) * (size_t)c->size, 64, "collectives counts");

    if (!strcmp(nm_log_origin(), "r0") && (c->rank != 0 || c->node >= 0)) {
        char origin[32];
        if (c->node >= 0)
            snprintf(origin, sizeof origin, "r%d/node%d", c->rank, c->node);
        else
            snprintf(origin, sizeof origin, "r%d", c->rank);
        nm_log_set_origin(origin);
    }
    int slot = -1;
    for (int i = 0; i < COLL_MAX_LIVE && slot < 0; i++)
        if (!g_live[i]) slot = i;
    NM_ASSERT(slot >= 0); /* more than COLL_MAX_LIVE instances: a leak */
    g_live[slot] = c;
    if (!opt->quiet)
        nm_log_info("collectives: transport %s (%s%s%s), rank %d of %d, %s sums, timeout %g s%s",
                    c->ops->name, why, c->detail[0] ? "; " : "", c->detail, c->rank, c->size,
                    coll_reduce_isa(), c->timeout_s,
                    c->spin_iters == COLL_SPIN_OVERSUBSCRIBED
                        ? ", oversubscribed (more ranks than CPUs): waits yield early"
                        : "");
    return c;
}

void coll_free(struct coll *c) {
    if (!c) return;
    c->ops->free(c);
    for (int i = 0; i < COLL_MAX_LIVE; i++)
        if (g_live[i] == c) g_live[i] = NULL;
#ifdef NM_HAVE_MPI
    coll_mpi_base_free(c);
    if (c->uses_mpi) coll_mpi_unref();
#endif
    nm_free(c->counts);
    nm_free(c);
}

int coll_rank(const struct coll *c) { return c->rank; }
int coll_size(const struct coll *c) { return c->size; }
const char *coll_transport_name(const struct coll *c) { return c->ops->name; }

void coll_set_timeout(struct coll *c, double seconds) {
    NM_ASSERT(seconds > 0);
    c->timeout_s = seconds;
}

double coll_timeout(const struct coll *c) { return c->timeout_s; }

/* Overlap of [a, a+an) and [b, b+bn). */
static bool coll_overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

void coll_allreduce_sum_f32(struct coll *c, const float *in, float *out, size_t n) {
    if (!n) return;
    NM_ASSERT(in && out && n <= SIZE_MAX / sizeof(float));
    NM_ASSERT(in == out || !coll_overlap(in, n * sizeof(float), out, n * sizeof(float)));
    c->ops->allreduce_sum(c, in, COLL_DTYPE_F32, out, n);
}

void coll_allreduce_sum_f64(struct coll *c, const double *in, double *out, size_t n) {
    if (!n) return;
    NM_ASSERT(in && out && n <= SIZE_MAX / sizeof(double));
    NM_ASSERT(in == out || !coll_overlap(in, n * sizeof(double), out, n * sizeof(double)));
    c->ops->allreduce_sum(c, in, COLL_DTYPE_F64, out, n);
}

void coll_allreduce_sum_bf16_to_f32(struct coll *c, const uint16_t *in, float *out, size_t n) {
    if (!n) return;
    NM_ASSERT(in && out && n <= SIZE_MAX / sizeof(float));
    NM_ASSERT(!coll_overlap(in, n * sizeof(uint16_t), out, n * sizeof(float)));
    c->ops->allreduce_sum(c, in, COLL_DTYPE_BF16, out, n);
}

void coll_allgatherv(struct coll *c, const void *in, const size_t *bytes, void *out) {
    NM_ASSERT(bytes);
    size_t total = 0, before = 0;
    for (int r = 0; r < c->size; r++) {
        NM_ASSERT(bytes[r] <= SIZE_MAX - total);
        if (r == c->rank) before = total;
        total += bytes[r];
    }
    if (!total) return;
    size_t mine = bytes[c->rank];
    NM_ASSERT(out && (in || !mine));
    NM_ASSERT(in == (const char *)out + before || !coll_overlap(in, mine, out, total));
    c->ops->allgatherv(c, in, bytes, total, out);
}

void coll_allgather(struct coll *c, const void *in, size_t bytes, void *out) {
    if (!bytes) return;
    NM_ASSERT(bytes <= SIZE_MAX / (size_t)c->size);
    for (int r = 0; r < c->size; r++) c->counts[r] = bytes;
    coll_allgatherv(c, in, c->counts, out);
}

void coll_bcast(struct coll *c, void *buf, size_t bytes, int root) {
    NM_ASSERT(root >= 0 && root < c->size);
    if (!bytes) return;
    NM_ASSERT(buf);
    c->ops->bcast(c, buf, bytes, root);
}

void coll_barrier(struct coll *c) { c->ops->barrier(c); }

void coll_send(struct coll *c, const void *buf, size_t bytes, int peer, int tag) {
    NM_ASSERT(peer >= 0 && peer < c->size && peer != c->rank && tag >= 0);
    NM_ASSERT(buf || !bytes);
    c->ops->send(c, buf, bytes, peer, tag);
}

void coll_recv(struct coll *c, void *buf, size_t bytes, int peer, int tag) {
    NM_ASSERT(peer >= 0 && peer < c->size && peer != c->rank && tag >= 0);
    NM_ASSERT(buf || !bytes);
    c->ops->recv(c, buf, bytes, peer, tag);
}
