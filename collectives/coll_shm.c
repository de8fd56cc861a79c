/* The shared-memory transport: ranks on one host exchange activations through one POSIX
 * shared-memory segment, with no system call on the fast path.
 *
 * Bootstrap (coll_shm_init, collective, uses MPI): rank 0 creates the segment under a name made
 * of its host-unique pid and a clock nonce and broadcasts the name; every rank maps it, binds
 * its own region to the NUMA node it runs on (MPOL_PREFERRED), allocates that region's pages
 * (fallocate, so a full /dev/shm is an error now rather than a SIGBUS later) and touches them;
 * after a barrier rank 0 unlinks the name, so nothing is left behind even if the job dies.
 *
 * Segment layout: a header page (sizes, the abort word, every rank's pid), then one region per
 * rank, page aligned. Rank r writes only its own region (the abort word aside):
 *     ctrl.step          last collective step whose data rank r has published
 *     p2p_sent[q]        messages (chunks) rank r has put into its channel to q
 *     p2p_taken[q]       chunks rank r has taken from q's channel to r
 *     slot[2]            { header {step, desc}, data[slot_bytes] }: collective data
 *     p2p[q][2]          { header {tag, bytes, chunk}, data[p2p_bytes] }: channel r -> q
 * Counters sit alone in 128-byte lines (adjacent-line prefetchers pair 64-byte lines).
 *
 * Collective protocol. Every collective is a sequence of steps, numbered 1, 2, ... identically
 * on every rank (c->impl->step counts them). In step k a rank may write its slot[k % 2], then
 * publishes ctrl.step = k with a release store, then reads the slots it needs from the peers
 * whose ctrl.step it has seen >= k with an acquire load. Two rules make this safe:
 *  (R1) a reader finishes reading step k's slots before it publishes step k + 1 (program
 *       order before its release store);
 *  (R2) before writing slot[k % 2] in step k, a rank waits until every peer's ctrl.step >= k - 1,
 *       so by R1 every peer has finished reading step k - 2, the last use of that slot.
 * A rank that read every peer in step k - 1 (the common case) finds R2 already true, so a
 * one-shot allreduce costs one publication and one wait per peer. A slot's header repeats the
 * step and names the operation and size; a reader checks both, so ranks that disagree on the
 * sequence of collectives stop with a message instead of reading garbage.
 *
 * Point-to-point protocol (channel r -> q, two data slots): the sender's i-th chunk goes to
 * slot i % 2 once p2p_taken[r] in q's region is >= i - 1 (acquire), then p2p_sent[q] = i + 1
 * (release); the receiver waits p2p_sent[q] >= i + 1 (acquire), checks the chunk's tag, size
 * and index, copies it out and publishes p2p_taken[r] = i + 1 (release).
 *
 * Waits (shm_wait) spin, yield, then sleep (coll_backoff). Every ~2 ms past the spin phase they
 * check the abort word (another rank is stopping the job), whether the awaited peer's process
 * still exists (kill(pid, 0) and its /proc state, so a killed rank is seen in milliseconds), and
 * the timeout; any of these ends the job through nm_fatal, naming the rank.
 *
 * Algorithms (R ranks, N input bytes, S = slot bytes): allreduce (f32, bf16 widened to f32, or
 * f64; the choice goes by input bytes) up to the one-shot size (coll.c picks it per rank
 * count): one step, every rank copies its input into its slot and sums its own input and the
 * peers' slots in rank order, reading (R-1)N from the peers. Larger: per chunk of S bytes, a
 * reduce-scatter step (every rank copies the chunk, less its own segment, into its slot; rank p
 * sums segment p of every rank into its other slot) and an allgather step (every rank copies
 * every summed segment out): two steps per chunk, 2N(R-1)/R read from the peers. Allgather and
 * broadcast move up to S bytes per rank per step.
 *
 * Cache hints (coll_impl.h, enum coll_shm_hint; NM_COLL_SHM_HINTS). What bounds every size
 * from a few KiB on is the rate at which lines written by one core reach another (about 6 GB/s
 * per core on the 16-core Xeon of tests/bench/RESULTS.md, where memcpy within a core's caches
 * runs at over 100 GB/s). By default, allreduces of 2-32 KiB with 4 or more ranks fill their
 * slots with non-temporal stores (nt-slot-mid): the writer then skips the read-for-ownership
 * of lines its peers still hold, and the peers read the lines from memory; measured up to 26%
 * faster there, and slower for 2 ranks, for larger sizes and below 1 KiB. Allreduces of 32 MiB
 * or more write their output with non-temporal stores (nt-out). An sfence precedes the release
 * store that publishes non-temporal slot data (shm_publish), and ends an allreduce that wrote
 * its output so. Tried and dropped, as measured there: CLDEMOTE of the slot lines after
 * writing them (readers then fetch them from L3: 20-50% slower from 8 KiB on with 2 ranks),
 * also of the lines a reader has read (slower still), or of the step counter alone (no gain),
 * and software prefetch of a peer's slot (no gain). */
#ifdef NM_HAVE_MPI
#include "coll_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    SHM_LINE = 128,            /* one counter per line pair */
    SHM_SLOT_HDR = 64,         /* header in front of every data slot */
    SHM_P2P_BYTES = 64 * 1024, /* data bytes per point-to-point slot */
    SHM_MAX_RANKS = 255,       /* the op descriptor has 8 bits for a root */
    SHM_NAME_MAX = 64,
};
#define SHM_MAGIC 0x6e6d636f6c6c3031ull /* "nmcoll01" */
/* Counters are shared between processes: only lock-free atomics are address-free. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shm transport needs lock-free 64-bit and 32-bit atomics");

/* Operation codes in a slot's descriptor. */
enum shm_op {
    SHM_OP_ALLREDUCE_F32 = 1,
    SHM_OP_ALLREDUCE_BF16,
    SHM_OP_ALLGATHERV,
    SHM_OP_BCAST,
    SHM_OP_ALLREDUCE_F64,
};
static const char *const shm_op_names[] = {
    [SHM_OP_ALLREDUCE_F32] = "allreduce f32",
    [SHM_OP_ALLREDUCE_BF16] = "allreduce bf16",
    [SHM_OP_ALLGATHERV] = "allgather",
    [SHM_OP_BCAST] = "bcast",
    [SHM_OP_ALLREDUCE_F64] = "allreduce f64",
};

struct shm_counter {
    _Atomic uint64_t v;
    char pad[SHM_LINE - sizeof(uint64_t)];
};

struct shm_header {
    uint64_t magic;
    uint64_t nranks;
    uint64_t region_bytes;
    uint64_t slot_bytes;
    char pad0[SHM_LINE - 4 * sizeof(uint64_t)];
    _Atomic int32_t abort_rank; /* 0: running; r + 1: rank r is stopping the job */
    char pad1[SHM_LINE - sizeof(int32_t)];
    int32_t pid[]; /* [nranks], each written once by its rank at init */
};

/* In front of every collective data slot; written by the owner before it publishes. */
struct shm_slot_hdr {
    uint64_t step; /* the step whose data this is */
    uint64_t desc; /* shm_desc(): operation, root, total bytes */
};

/* In front of every point-to-point data slot. */
struct shm_p2p_hdr {
    int64_t tag;
    uint64_t bytes; /* the whole message */
    uint64_t chunk; /* index of this chunk within the message */
};

/* Pointers into one rank's region. */
struct shm_region {
    struct shm_counter *step;      /* ctrl.step */
    struct shm_counter *p2p_sent;  /* [R] */
    struct shm_counter *p2p_taken; /* [R] */
    char *slot[2];                 /* header + slot_bytes each */
    char *p2p;                     /* [R][2] header + SHM_P2P_BYTES each */
};

struct coll_shm {
    struct shm_header *hdr;
    size_t seg_bytes;
    size_t slot_bytes;      /* data bytes per collective slot (multiple of 128) */
    size_t oneshot_bytes;   /* allreduce up to this size is one-shot */
    struct shm_region *reg; /* [R] */
    uint64_t step;          /* last step this rank started */
    uint64_t *p2p_nsent;    /* [R] chunks sent to each peer */
    uint64_t *p2p_ntaken;   /* [R] chunks taken from each peer */
    const void **src;       /* [R] sources of coll_reduce_sum */
    bool check_pids;        /* peers' pids are visible (same pid namespace) */
    unsigned hints;         /* enum coll_shm_hint in force */
    bool nt_pending;        /* non-temporal stores since the last publication */
};

static size_t shm_round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static uint64_t shm_desc(enum shm_op op, int root, size_t bytes) {
    NM_ASSERT(bytes < (1ull << 48));
    return (uint64_t)op << 56 | (uint64_t)root << 48 | bytes;
}

static size_t shm_region_bytes(int R, size_t slot_bytes) {
    size_t b = SHM_LINE * (1 + 2 * (size_t)R);           /* step, p2p_sent, p2p_taken */
    b += 2 * (SHM_SLOT_HDR + slot_bytes);                /* slot[2] */
    b += (size_t)R * 2 * (SHM_SLOT_HDR + SHM_P2P_BYTES); /* p2p[R][2] */
    return shm_round_up(b, (size_t)sysconf(_SC_PAGESIZE));
}

static void shm_region_map(struct shm_region *g, char *base, int R, size_t slot_bytes) {
    g->step = (struct shm_counter *)base;
    g->p2p_sent = g->step + 1;
    g->p2p_taken = g->p2p_sent + R;
    char *p = (char *)(g->p2p_taken + R);
    for (int i = 0; i < 2; i++, p += SHM_SLOT_HDR + slot_bytes) g->slot[i] = p;
    g->p2p = p;
}

static char *shm_p2p_slot(const struct shm_region *g, int to, uint64_t i) {
    return g->p2p + ((size_t)to * 2 + (size_t)(i % 2)) * (SHM_SLOT_HDR + SHM_P2P_BYTES);
}

/* ---- waiting ---------------------------------------------------------------------------- */

/* 'R' running, 'S' sleeping, 'T' stopped, 'Z' zombie ...; 0 if gone, '?' if unknown. */
static char shm_pid_state(pid_t pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno == ENOENT ? 0 : '?';
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return '?';
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* the command name may contain spaces and ')' */
    return rp && rp[1] == ' ' && rp[2] ? rp[2] : '?';
}

/* Called every ~2 ms while waiting for peer: the abort word, the peer's process, the timeout. */
static void shm_wait_check(struct coll *c, struct coll_backoff *b, int peer, const char *what,
                           uint64_t want, uint64_t have) {
    struct coll_shm *s = c->impl;
    int ab = atomic_load_explicit(&s->hdr->abort_rank, memory_order_acquire);
    if (ab && ab != c->rank + 1)
        nm_fatal("collectives: rank %d is stopping the job (its message says why); this rank "
                 "was waiting for rank %d in %s",
                 ab - 1, peer, what);
    pid_t pid = s->hdr->pid[peer];
    char st = s->check_pids ? shm_pid_state(pid) : '?';
    if (st == 0 || st == 'Z' || st == 'X')
        nm_fatal("collectives: rank %d (pid %d) is gone: it died or was killed while this rank "
                 "waited for it in %s (step %llu); stopping the job",
                 peer, (int)pid, what, (unsigned long long)want);
    double stalled = coll_backoff_stalled_s(b);
    if (stalled > c->timeout_s)
        nm_fatal("collectives: rank %d (pid %d, state %c) made no progress for %.1f s: this rank "
                 "waits for it in %s (needs %llu, it is at %llu); stopping the job "
                 "(NM_COLL_TIMEOUT_S=%g; raise it if a rank is legitimately this slow)",
                 peer, (int)pid, st, stalled, what, (unsigned long long)want,
                 (unsigned long long)have, c->timeout_s);
}

/* Returns once *ctr >= want (acquire), or ends the job. */
static void shm_wait(struct coll *c, struct shm_counter *ctr, uint64_t want, int peer,
                     const char *what) {
    uint64_t have = atomic_load_explicit(&ctr->v, memory_order_acquire);
    if (have >= want) return;
    struct coll_backoff b;
    coll_backoff_init(&b, c);
    for (;;) {
        coll_backoff_pause(&b);
        have = atomic_load_explicit(&ctr->v, memory_order_acquire);
        if (have >= want) return;
        if (coll_backoff_check(&b)) shm_wait_check(c, &b, peer, what, want, have);
    }
}

/* ---- collective steps ------------------------------------------------------------------- */

/* Starts the next step; returns its number. */
static uint64_t shm_step_next(struct coll_shm *s) { return ++s->step; }

/* R2: returns this rank's slot for step k, once no peer can still read its previous use, with
 * the header filled in. */
static char *shm_slot_acquire(struct coll *c, uint64_t k, uint64_t desc, const char *what) {
    struct coll_shm *s = c->impl;
    for (int p = 0; p < c->size; p++)
        if (p != c->rank) shm_wait(c, s->reg[p].step, k - 1, p, what);
    char *slot = s->reg[c->rank].slot[k % 2];
    struct shm_slot_hdr *h = (struct shm_slot_hdr *)slot;
    h->step = k;
    h->desc = desc;
    return slot + SHM_SLOT_HDR;
}

/* Fills [dst, dst+bytes) of this rank's slot from src: memcpy, or with nt (an nt-slot hint)
 * non-temporal stores, which the next shm_publish fences. */
static void shm_slot_fill(struct coll_shm *s, char *dst, const void *src, size_t bytes, bool nt) {
    if (nt) {
        coll_cache_copy_stream(dst, src, bytes);
        s->nt_pending = true;
    } else {
        memcpy(dst, src, bytes);
    }
}

/* Publishes step k: everything this rank wrote before is visible to a peer that sees it.
 * Non-temporal stores are not ordered by a release store: they need the sfence first. */
static void shm_publish(struct coll *c, uint64_t k) {
    struct coll_shm *s = c->impl;
    if (s->nt_pending) {
        coll_cache_stream_fence();
        s->nt_pending = false;
    }
    atomic_store_explicit(&s->reg[c->rank].step->v, k, memory_order_release);
}

static void shm_desc_str(uint64_t desc, char *buf, size_t len) {
    unsigned op = (unsigned)(desc >> 56);
    const char *name =
        op < NM_ARRAY_LEN(shm_op_names) && shm_op_names[op] ? shm_op_names[op] : "(corrupt)";
    snprintf(buf, len, "%s of %llu bytes (root %u)", name,
             (unsigned long long)(desc & ((1ull << 48) - 1)), (unsigned)(desc >> 48 & 0xff));
}

/* Waits for peer p to publish step k and returns its slot's data, after checking that the slot
 * holds step k of the same operation. */
static const char *shm_slot_read(struct coll *c, int p, uint64_t k, uint64_t desc,
                                 const char *what) {
    struct coll_shm *s = c->impl;
    shm_wait(c, s->reg[p].step, k, p, what);
    const char *slot = s->reg[p].slot[k % 2];
    const struct shm_slot_hdr *h = (const struct shm_slot_hdr *)slot;
    if (h->step != k || h->desc != desc) {
        char theirs[96], mine[96];
        shm_desc_str(h->desc, theirs, sizeof theirs);
        shm_desc_str(desc, mine, sizeof mine);
        nm_fatal("collectives: rank %d and this rank disagree: step %llu of rank %d holds %s "
                 "(its step %llu), this rank is in %s; every rank must call the same "
                 "collectives in the same order with the same sizes",
                 p, (unsigned long long)k, p, theirs, (unsigned long long)h->step, mine);
    }
    return slot + SHM_SLOT_HDR;
}

/* ---- operations ------------------------------------------------------------------------- */

static void shm_allreduce_oneshot(struct coll *c, const void *in, enum coll_dtype dt, void *out,
                                  size_t n, uint64_t desc, bool nt_slot) {
    struct coll_shm *s = c->impl;
    size_t bytes = n * coll_dtype_in_bytes(dt);
    uint64_t k = shm_step_next(s);
    shm_slot_fill(s, shm_slot_acquire(c, k, desc, "allreduce"), in, bytes, nt_slot);
    shm_publish(c, k);
    for (int p = 0; p < c->size; p++)
        s->src[p] = p == c->rank ? in : shm_slot_read(c, p, k, desc, "allreduce");
    coll_reduce_sum(out, s->src, c->size, dt, n);
}

/* Reduce-scatter + allgather, one chunk of at most slot_bytes input per pair of steps. */
static void shm_allreduce_chunked(struct coll *c, const void *in, enum coll_dtype dt, void *out,
                                  size_t n, uint64_t desc, bool nt_slot) {
    struct coll_shm *s = c->impl;
    int R = c->size, me = c->rank;
    size_t es = coll_dtype_in_bytes(dt), os = coll_dtype_out_bytes(dt);
    /* Input elements per chunk: one slot of input, and each summed segment must fit a slot
     * too (only binds for bf16 input on one rank). */
    size_t chunk = NM_MIN(s->slot_bytes / es, s->slot_bytes / os * (size_t)R);
    NM_ASSERT(coll_segment_max(chunk, R) * os <= s->slot_bytes);
    /* An output far larger than the caches: non-temporal stores skip reading it in first. */
    bool nt_out = s->hints & COLL_SHM_HINT_NT_OUT && n * os >= COLL_SHM_NT_OUT_MIN;
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = NM_MIN(chunk, n - off), lo, hi;
        const char *src = (const char *)in + off * es;
        coll_segment(m, R, me, &lo, &hi);
        /* Step 1: publish this chunk of the input, except segment `me`, which only this rank
         * reads (from in); sum segment `me` of every rank's chunk. */
        uint64_t k = shm_step_next(s);
        char *mine = shm_slot_acquire(c, k, desc, "allreduce (reduce-scatter)");
        shm_slot_fill(s, mine, src, lo * es, nt_slot);
        shm_slot_fill(s, mine + hi * es, src + hi * es, (m - hi) * es, nt_slot);
        shm_publish(c, k);
        for (int p = 0; p < R; p++)
            s->src[p] =
                (p == me ? src : shm_slot_read(c, p, k, desc, "allreduce (reduce-scatter)")) +
                lo * es;
        /* Step 2: publish the summed segment (R2 holds: every peer reached step k above);
         * copy every rank's segment out. With nt-slot the sum goes to out first (out + lo may
         * be in + lo: allowed) and from there into the slot, without reading the slot. */
        uint64_t k2 = shm_step_next(s);
        char *red = shm_slot_acquire(c, k2, desc, "allreduce (allgather)");
        char *out_mine = (char *)out + (off + lo) * os;
        if (nt_slot) {
            coll_reduce_sum(out_mine, s->src, R, dt, hi - lo);
            shm_slot_fill(s, red, out_mine, (hi - lo) * os, true);
        } else {
            coll_reduce_sum(red, s->src, R, dt, hi - lo);
        }
        shm_publish(c, k2);
        for (int i = 0; i < R; i++) {
            int p = (me + i) % R; /* own segment first: it is ready */
            if (p == me && nt_slot) continue; /* already in out */
            size_t plo, phi;
            coll_segment(m, R, p, &plo, &phi);
            const char *seg = p == me ? red
                                      : shm_slot_read(c, p, k2, desc, "allreduce (allgather)");
            char *dst = (char *)out + (off + plo) * os;
            if (nt_out)
                coll_cache_copy_stream(dst, seg, (phi - plo) * os);
            else
                memcpy(dst, seg, (phi - plo) * os);
        }
    }
    if (nt_out) coll_cache_stream_fence(); /* out is complete before the caller sees it */
}

static void shm_allreduce_sum(struct coll *c, const void *in, enum coll_dtype dt, void *out,
                              size_t n) {
    static const enum shm_op op[] = {
        [COLL_DTYPE_F32] = SHM_OP_ALLREDUCE_F32,
        [COLL_DTYPE_BF16] = SHM_OP_ALLREDUCE_BF16,
        [COLL_DTYPE_F64] = SHM_OP_ALLREDUCE_F64,
    };
    struct coll_shm *s = c->impl;
    size_t bytes = n * coll_dtype_in_bytes(dt);
    uint64_t desc = shm_desc(op[dt], 0, bytes);
    bool nt_slot = s->hints & COLL_SHM_HINT_NT_SLOT ||
                   (s->hints & COLL_SHM_HINT_NT_SLOT_MID && c->size >= COLL_SHM_NT_SLOT_RANKS &&
                    bytes >= COLL_SHM_NT_SLOT_MIN && bytes <= COLL_SHM_NT_SLOT_MAX);
    if (bytes <= s->oneshot_bytes && bytes <= s->slot_bytes)
        shm_allreduce_oneshot(c, in, dt, out, n, desc, nt_slot);
    else
        shm_allreduce_chunked(c, in, dt, out, n, desc, nt_slot);
}

static void shm_allgatherv(struct coll *c, const void *in, const size_t *bytes, size_t total,
                           void *out) {
    struct coll_shm *s = c->impl;
    int R = c->size, me = c->rank;
    uint64_t desc = shm_desc(SHM_OP_ALLGATHERV, 0, total);
    size_t most = 0, mine_at = 0, S = s->slot_bytes;
    for (int p = 0; p < R; p++) {
        most = NM_MAX(most, bytes[p]);
        if (p < me) mine_at += bytes[p];
    }
    char *dst_mine = (char *)out + mine_at;
    if (in != dst_mine) memcpy(dst_mine, in, bytes[me]);
    for (size_t off = 0; off < most; off += S) {
        uint64_t k = shm_step_next(s);
        if (bytes[me] > off)
            shm_slot_fill(s, shm_slot_acquire(c, k, desc, "allgather"), (const char *)in + off,
                          NM_MIN(S, bytes[me] - off), s->hints & COLL_SHM_HINT_NT_SLOT);
        shm_publish(c, k);
        size_t at = 0;
        for (int p = 0; p < R; at += bytes[p], p++) {
            if (p == me || bytes[p] <= off) continue;
            memcpy((char *)out + at + off, shm_slot_read(c, p, k, desc, "allgather"),
                   NM_MIN(S, bytes[p] - off));
        }
    }
}

static void shm_bcast(struct coll *c, void *buf, size_t bytes, int root) {
    struct coll_shm *s = c->impl;
    uint64_t desc = shm_desc(SHM_OP_BCAST, root, bytes);
    for (size_t off = 0; off < bytes; off += s->slot_bytes) {
        size_t m = NM_MIN(s->slot_bytes, bytes - off);
        uint64_t k = shm_step_next(s);
        if (c->rank == root) {
            shm_slot_fill(s, shm_slot_acquire(c, k, desc, "bcast"), (char *)buf + off, m,
                          s->hints & COLL_SHM_HINT_NT_SLOT);
            shm_publish(c, k);
        } else {
            shm_publish(c, k); /* writes nothing, but lets the root reuse its slot (R2) */
            memcpy((char *)buf + off, shm_slot_read(c, root, k, desc, "bcast"), m);
        }
    }
}

static void shm_barrier(struct coll *c) {
    struct coll_shm *s = c->impl;
    uint64_t k = shm_step_next(s);
    shm_publish(c, k);
    for (int p = 0; p < c->size; p++)
        if (p != c->rank) shm_wait(c, s->reg[p].step, k, p, "barrier");
}

static void shm_send(struct coll *c, const void *buf, size_t bytes, int peer, int tag) {
    struct coll_shm *s = c->impl;
    const struct shm_region *me = &s->reg[c->rank];
    size_t nchunks = bytes ? (bytes + SHM_P2P_BYTES - 1) / SHM_P2P_BYTES : 1;
    for (size_t j = 0; j < nchunks; j++) {
        uint64_t i = s->p2p_nsent[peer];
        if (i >= 2) shm_wait(c, &s->reg[peer].p2p_taken[c->rank], i - 1, peer, "send");
        char *slot = shm_p2p_slot(me, peer, i);
        struct shm_p2p_hdr *h = (struct shm_p2p_hdr *)slot;
        h->tag = tag;
        h->bytes = bytes;
        h->chunk = j;
        size_t off = j * SHM_P2P_BYTES;
        memcpy(slot + SHM_SLOT_HDR, (const char *)buf + off,
               NM_MIN(bytes - off, (size_t)SHM_P2P_BYTES));
        atomic_store_explicit(&me->p2p_sent[peer].v, i + 1, memory_order_release);
        s->p2p_nsent[peer] = i + 1;
    }
}

static void shm_recv(struct coll *c, void *buf, size_t bytes, int peer, int tag) {
    struct coll_shm *s = c->impl;
    const struct shm_region *from = &s->reg[peer];
    size_t nchunks = bytes ? (bytes + SHM_P2P_BYTES - 1) / SHM_P2P_BYTES : 1;
    for (size_t j = 0; j < nchunks; j++) {
        uint64_t i = s->p2p_ntaken[peer];
        shm_wait(c, &from->p2p_sent[c->rank], i + 1, peer, "recv");
        const char *slot = shm_p2p_slot(from, c->rank, i);
        const struct shm_p2p_hdr *h = (const struct shm_p2p_hdr *)slot;
        if (h->tag != tag || h->bytes != bytes || h->chunk != j)
            nm_fatal("collectives: rank %d sent a message with tag %lld of %llu bytes (chunk "
                     "%llu), this rank receives tag %d of %zu bytes (chunk %zu): messages between "
                     "two ranks are received in the order they are sent",
                     peer, (long long)h->tag, (unsigned long long)h->bytes,
                     (unsigned long long)h->chunk, tag, bytes, j);
        size_t off = j * SHM_P2P_BYTES;
        memcpy((char *)buf + off, slot + SHM_SLOT_HDR, NM_MIN(bytes - off, (size_t)SHM_P2P_BYTES));
        atomic_store_explicit(&s->reg[c->rank].p2p_taken[peer].v, i + 1, memory_order_release);
        s->p2p_ntaken[peer] = i + 1;
    }
}

static void shm_abort_notify(struct coll *c) {
    struct coll_shm *s = c->impl;
    int32_t zero = 0;
    atomic_compare_exchange_strong(&s->hdr->abort_rank, &zero, c->rank + 1);
}

static void shm_release(struct coll_shm *s) {
    if (s->hdr) munmap(s->hdr, s->seg_bytes);
    nm_free(s->reg);
    nm_free(s->p2p_nsent);
    nm_free(s->p2p_ntaken);
    nm_free(s->src);
    nm_free(s);
}

static void shm_free(struct coll *c) {
    shm_barrier(c); /* nobody reads a peer's region after this */
    shm_release(c->impl);
    c->impl = NULL;
}

static const struct coll_ops coll_shm_ops = {
    .name = "shm",
    .allreduce_sum = shm_allreduce_sum, /* one-shot, or reduce-scatter + allgather per chunk */
    .allgatherv = shm_allgatherv,       /* slot_bytes per rank per step */
    .bcast = shm_bcast,                 /* root's slot, slot_bytes per step */
    .barrier = shm_barrier,             /* a step with no data */
    .send = shm_send,                   /* per-pair channel, two slots */
    .recv = shm_recv,                   /* checks tag, size and order */
    .abort_notify = shm_abort_notify,   /* sets the abort word: waiting peers stop at once */
    .free = shm_free,
};

/* ---- bootstrap -------------------------------------------------------------------------- */

/* Every rank learns whether any rank failed; the first failing rank's reason is logged there. */
MPI_Comm coll_mpi_base(const struct coll *c); /* coll_mpi.c */

static bool shm_all_ok(const struct coll *c, bool ok) {
    int bad = !ok, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, coll_mpi_base(c));
    return !any;
}

bool coll_shm_init(struct coll *c, size_t slot_bytes, size_t oneshot_bytes, unsigned hints) {
    const int R = c->size, me = c->rank; /* within the instance's communicator */
    c->node = coll_numa_node_self();
    if (R > SHM_MAX_RANKS) {
        if (!me) nm_log_warn("collectives: shm supports up to %d ranks, not %d", SHM_MAX_RANKS, R);
        return false;
    }
    slot_bytes = shm_round_up(slot_bytes, 128); /* whole 16-element segments of f64 */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t hdr_bytes = shm_round_up(sizeof(struct shm_header) + sizeof(int32_t) * (size_t)R, page);
    size_t region_bytes = shm_region_bytes(R, slot_bytes);
    size_t seg_bytes = hdr_bytes + region_bytes * (size_t)R;

    /* Rank 0 creates the segment and broadcasts its name (empty: creation failed). */
    char name[SHM_NAME_MAX] = "";
    int fd = -1;
    bool ok = true;
    if (!me) {
        snprintf(name, sizeof name, "/numallm-coll-%d-%llx", (int)getpid(),
                 (unsigned long long)nm_time_ns());
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)seg_bytes) != 0) {
            nm_log_warn("collectives: creating shared memory %s (%zu bytes) failed: %s (is "
                        "/dev/shm mounted and writable?)",
                        name, seg_bytes, nm_strerror_errno());
            if (fd >= 0) {
                close(fd);
                shm_unlink(name);
            }
            name[0] = 0;
        }
    }
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, coll_mpi_base(c));
    if (!name[0]) return false;

    struct coll_shm *s = nm_alloc(sizeof *s, 64, "shm transport");
    if (me) fd = shm_open(name, O_RDWR, 0600);
    void *base =
        fd < 0 ? MAP_FAILED : mmap(NULL, seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        nm_log_warn("collectives: mapping shared memory %s (%zu bytes) failed: %s", name, seg_bytes,
                    nm_strerror_errno());
        ok = false;
    } else {
        s->hdr = base;
        s->seg_bytes = seg_bytes;
        /* This rank's region: on its node, allocated now (ENOSPC here, not SIGBUS later). */
        size_t at = hdr_bytes + (size_t)me * region_bytes;
        if (!coll_numa_prefer((char *)base + at, region_bytes, c->node))
            nm_log_warn("collectives: binding the shm slots to node %d failed: %s; they stay "
                        "where the kernel puts them",
                        c->node, nm_strerror_errno());
        int err = posix_fallocate(fd, (off_t)at, (off_t)region_bytes);
        if (!me && !err) err = posix_fallocate(fd, 0, (off_t)hdr_bytes);
        if (err) {
            errno = err;
            nm_log_warn("collectives: allocating %zu bytes of shared memory failed: %s (/dev/shm "
                        "too small? in a container, raise --shm-size)",
                        region_bytes, nm_strerror_errno());
            ok = false;
        } else {
            memset((char *)base + at, 0, region_bytes);
        }
    }
    if (fd >= 0) close(fd);
    if (!shm_all_ok(c, ok)) {
        if (!me) shm_unlink(name);
        shm_release(s);
        return false;
    }
    struct shm_header *h = s->hdr;
    if (!me) {
        h->magic = SHM_MAGIC;
        h->nranks = (uint64_t)R;
        h->region_bytes = region_bytes;
        h->slot_bytes = slot_bytes;
        atomic_init(&h->abort_rank, 0);
    }
    h->pid[me] = (int32_t)getpid();
    MPI_Barrier(coll_mpi_base(c)); /* header and pids written, every rank mapped */
    if (!me) shm_unlink(name);
    NM_ASSERT(h->magic == SHM_MAGIC && h->nranks == (uint64_t)R && h->region_bytes == region_bytes);

    s->slot_bytes = slot_bytes;
    s->oneshot_bytes = oneshot_bytes;
    s->hints = hints;
    char hint_names[96];
    coll_shm_hints_str(hints, hint_names, sizeof hint_names);
    if (hints & COLL_SHM_HINT_NT_SLOT_MID && R < COLL_SHM_NT_SLOT_RANKS)
        snprintf(hint_names + strlen(hint_names), sizeof hint_names - strlen(hint_names),
                 " (nt-slot-mid idle below %d ranks)", COLL_SHM_NT_SLOT_RANKS);
    s->reg = nm_alloc(sizeof *s->reg * (size_t)R, 64, "shm transport");
    s->p2p_nsent = nm_alloc(sizeof(uint64_t) * (size_t)R, 64, "shm transport");
    s->p2p_ntaken = nm_alloc(sizeof(uint64_t) * (size_t)R, 64, "shm transport");
    s->src = nm_alloc(sizeof(void *) * (size_t)R, 64, "shm transport");
    s->check_pids = true;
    volatile char sink = 0;
    for (int p = 0; p < R; p++) {
        char *rb = (char *)base + hdr_bytes + (size_t)p * region_bytes;
        shm_region_map(&s->reg[p], rb, R, slot_bytes);
        for (size_t o = 0; o < region_bytes; o += page) sink += rb[o]; /* map peers' pages now */
        if (p != me && kill(h->pid[p], 0) != 0 && errno == ESRCH) s->check_pids = false;
    }
    (void)sink;
    if (!s->check_pids)
        nm_log_warn("collectives: peer pids are not visible (another pid namespace?): a dead "
                    "rank is found by the timeout only");
    double local = coll_numa_fraction_on((char *)base + hdr_bytes + (size_t)me * region_bytes,
                                         region_bytes, c->node);
    char where[64] = "node unknown";
    if (c->node >= 0 && local >= 0)
        snprintf(where, sizeof where, "node %d, %.0f%% of pages there", c->node, 100 * local);
    else if (c->node >= 0)
        snprintf(where, sizeof where, "node %d", c->node);
    snprintf(c->detail, sizeof c->detail,
             "segment %.1f MiB, 2 x %zu KiB slots on %s, one-shot allreduce up to %zu B, cache "
             "hints %s",
             (double)seg_bytes / (1 << 20), slot_bytes / 1024, where, oneshot_bytes, hint_names);
    c->impl = s;
    c->ops = &coll_shm_ops;
    MPI_Barrier(coll_mpi_base(c));
    return true;
}
#else
typedef int coll_shm_unused; /* ISO C: a translation unit must not be empty */
#endif
