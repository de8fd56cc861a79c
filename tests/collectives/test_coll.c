/* Every collective operation of collectives/coll.h, every dtype (f32, bf16->f32, f64), sizes
 * from one element to --max-mib (default 64 MiB) with odd sizes around every threshold of every
 * transport, in place and out of place, checked bit-exactly against values each rank computes
 * on its own:
 *   - an input element is a hash of (operation, rank, index), so any rank knows any input;
 *   - an allreduce result must equal the rank-order fold ((x0 + x1) + x2) ... computed here one
 *     element at a time, bit for bit (so all ranks hold the same bits, on every run);
 *   - outputs have guard bytes on both sides that must survive.
 * Run it plainly or under mpirun with NM_COLL=shm|mpi|auto (and NM_COLL_SHM_HINTS); whenever
 * the transport is single, MPI must not have been initialized at the end. Also: many small
 * collectives of every kind back to back (slot reuse). Usage: test_coll [--max-mib N]
 * [--min-mib N] [--expect T]; --min-mib N runs only the sizes of at least N MiB (the big-size
 * ctest entries). */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "coll.h"
#ifdef NM_HAVE_MPI
#include <mpi.h>
#endif

enum { GUARD = 64 };
static const unsigned char GUARD_BYTE = 0xa5;

static struct coll *g_c;
static int g_rank, g_size;
static size_t g_checks;
static char g_repro[512];

/* ---- inputs ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t gen_bits(uint32_t op, int rank, size_t i) {
    return mix64((uint64_t)op << 48 ^ (uint64_t)rank << 40 ^ (uint64_t)i);
}

/* Floats with exponents over a wide range (sums then round in interesting ways), with the odd
 * zero of either sign, denormal and infinity. Never NaN inputs: a sum of NaNs with different
 * payloads may legitimately depend on the operand order the compiler picks. */
static float gen_f32(uint32_t op, int rank, size_t i) {
    uint64_t h = gen_bits(op, rank, i);
    uint32_t kind = h & 63, sign = (uint32_t)(h >> 6 & 1) << 31,
             mant = (uint32_t)(h >> 7) & 0x7fffff;
    uint32_t u;
    if (kind == 0)
        u = sign; /* +-0 */
    else if (kind == 1)
        u = sign | mant; /* denormal */
    else if (kind == 2 && (h >> 40 & 15) == 0)
        u = sign | 0x7f800000u; /* +-inf, rarely */
    else
        u = sign | (uint32_t)(127 - 12 + (int)(h >> 32 & 31)) << 23 | mant; /* 2^-12 .. 2^19 */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The same mix for doubles: exponents 2^-30 .. 2^33, zeros, denormals, rare infinities. */
static double gen_f64(uint32_t op, int rank, size_t i) {
    uint64_t h = gen_bits(op, rank, i), m = mix64(h) & 0xfffffffffffffull;
    uint64_t kind = h & 63, sign = (h >> 6 & 1) << 63, u;
    if (kind == 0)
        u = sign; /* +-0 */
    else if (kind == 1)
        u = sign | m; /* denormal */
    else if (kind == 2 && (h >> 40 & 15) == 0)
        u = sign | 0x7ff0000000000000ull; /* +-inf, rarely */
    else
        u = sign | (uint64_t)(1023 - 30 + (int)(h >> 32 & 63)) << 52 | m;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint16_t gen_bf16(uint32_t op, int rank, size_t i) {
    uint32_t u;
    float f = gen_f32(op, rank, i);
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static float widen_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Bytes come eight to a hash: byte i of (op, rank) is byte i % 8 of hash i / 8. */
static void gen_bytes(unsigned char *dst, size_t n, uint32_t op, int rank) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t h = gen_bits(op, rank, i / 8);
        memcpy(dst + i, &h, 8);
    }
    if (i < n) {
        uint64_t h = gen_bits(op, rank, i / 8);
        memcpy(dst + i, &h, n - i);
    }
}

/* The expected allreduce element: the rank-order fold, one element at a time. */
static float want_sum(uint32_t op, bool bf16, size_t i) {
    float s = 0;
    for (int r = 0; r < g_size; r++) {
        float x = bf16 ? widen_bf16(gen_bf16(op, r, i)) : gen_f32(op, r, i);
        s = r ? s + x : x;
    }
    return s;
}

static double want_sum_f64(uint32_t op, size_t i) {
    double s = 0;
    for (int r = 0; r < g_size; r++) {
        double x = gen_f64(op, r, i);
        s = r ? s + x : x;
    }
    return s;
}

/* ---- buffers with guards and the checker ------------------------------------------------ */

static void *guarded_alloc(size_t bytes) {
    unsigned char *p = nm_alloc(bytes + 2 * GUARD, 64, "test buffer");
    memset(p, GUARD_BYTE, GUARD);
    memset(p + GUARD + bytes, GUARD_BYTE, GUARD);
    return p + GUARD;
}

static void guarded_free(void *p) {
    if (p) nm_free((unsigned char *)p - GUARD);
}

/* Returns NULL when the guards of a buffer of `bytes` are intact, else which one is not. */
static const char *guards_broken(const void *p, size_t bytes) {
    const unsigned char *b = p;
    for (size_t i = 0; i < GUARD; i++) {
        if (b[-(ptrdiff_t)GUARD + (ptrdiff_t)i] != GUARD_BYTE) return "guard before the output";
        if (b[bytes + i] != GUARD_BYTE) return "guard after the output";
    }
    return NULL;
}

/* Index of the first of n elements of elem bytes where got differs from want, or -1. */
static ptrdiff_t first_difference(const void *got, const void *want, size_t n, size_t elem) {
    if (!memcmp(got, want, n * elem)) return -1;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * elem, (const char *)want + i * elem, elem))
            return (ptrdiff_t)i;
    return -1;
}

/* Checks got == want (bit for bit) and the guards of got; on failure the whole job stops. */
static void check(const char *what, size_t size, const void *got, const void *want, size_t n,
                  size_t elem) {
    g_checks++;
    ptrdiff_t bad = first_difference(got, want, n, elem);
    const char *g = guards_broken(got, n * elem);
    if (bad < 0 && !g) return;
    if (bad >= 0) {
        uint64_t gv = 0, wv = 0;
        memcpy(&gv, (const char *)got + (size_t)bad * elem, NM_MIN(elem, sizeof gv));
        memcpy(&wv, (const char *)want + (size_t)bad * elem, NM_MIN(elem, sizeof wv));
        nm_log_error("FAIL %s, size %zu (%s): element %td of %zu is 0x%llx, want 0x%llx", what,
                     size, coll_transport_name(g_c), bad, n, (unsigned long long)gv,
                     (unsigned long long)wv);
    } else {
        nm_log_error("FAIL %s, size %zu (%s): %s overwritten", what, size, coll_transport_name(g_c),
                     g);
    }
    nm_fatal("reproduce: %s", g_repro);
}

/* The checker's own test: it must see a flipped bit and a trampled guard. */
static void check_self_test(void) {
    enum { N = 37 };
    float *a = guarded_alloc(N * sizeof(float)), b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = gen_f32(1, 0, (size_t)i);
    NM_ASSERT(first_difference(a, b, N, sizeof(float)) < 0 && !guards_broken(a, sizeof b));
    ((unsigned char *)a)[4 * 29 + 2] ^= 0x10;
    NM_ASSERT(first_difference(a, b, N, sizeof(float)) == 29);
    ((unsigned char *)a)[4 * 29 + 2] ^= 0x10;
    ((unsigned char *)a)[N * sizeof(float)] = 0;
    NM_ASSERT(guards_broken(a, sizeof b) != NULL);
    ((unsigned char *)a)[N * sizeof(float)] = GUARD_BYTE;
    ((unsigned char *)a)[-1] = 0;
    NM_ASSERT(guards_broken(a, sizeof b) != NULL);
    ((unsigned char *)a)[-1] = GUARD_BYTE;
    /* -0.0 and +0.0 are equal as floats but not as bits: the checker compares bits */
    float z[2] = {0.0f, -0.0f};
    NM_ASSERT(first_difference(&z[0], &z[1], 1, sizeof(float)) == 0);
    guarded_free(a);
}

/* ---- one size of every operation -------------------------------------------------------- */

static void test_allreduce(size_t n, uint32_t op) {
    size_t bytes = n * sizeof(float);
    float *in = guarded_alloc(bytes), *out = guarded_alloc(bytes),
          *want = nm_alloc(bytes, 64, "want");
    uint16_t *in16 = guarded_alloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        in[i] = gen_f32(op, g_rank, i);
        in16[i] = gen_bf16(op + 1, g_rank, i);
        want[i] = want_sum(op, false, i);
    }
    coll_allreduce_sum_f32(g_c, in, out, n);
    check("allreduce f32", n, out, want, n, sizeof(float));
    coll_allreduce_sum_f32(g_c, in, in, n); /* in place */
    check("allreduce f32 in place", n, in, want, n, sizeof(float));
    for (size_t i = 0; i < n; i++) want[i] = want_sum(op + 1, true, i);
    coll_allreduce_sum_bf16_to_f32(g_c, in16, out, n);
    check("allreduce bf16->f32", n, out, want, n, sizeof(float));
    guarded_free(in);
    guarded_free(out);
    guarded_free(in16);
    nm_free(want);
}

static void test_allreduce_f64(size_t n, uint32_t op) {
    size_t bytes = n * sizeof(double);
    double *in = guarded_alloc(bytes), *out = guarded_alloc(bytes),
           *want = nm_alloc(bytes, 64, "want");
    for (size_t i = 0; i < n; i++) {
        in[i] = gen_f64(op, g_rank, i);
        want[i] = want_sum_f64(op, i);
    }
    coll_allreduce_sum_f64(g_c, in, out, n);
    check("allreduce f64", n, out, want, n, sizeof(double));
    coll_allreduce_sum_f64(g_c, in, in, n); /* in place */
    check("allreduce f64 in place", n, in, want, n, sizeof(double));
    guarded_free(in);
    guarded_free(out);
    nm_free(want);
}

/* Allgather with `bytes` per rank (equal), out of place and in place, then variable counts. */
static void test_allgather(size_t bytes, uint32_t op) {
    size_t total = bytes * (size_t)g_size;
    unsigned char *in = guarded_alloc(bytes), *out = guarded_alloc(total),
                  *want = nm_alloc(total, 64, "want");
    gen_bytes(in, bytes, op, g_rank);
    for (int r = 0; r < g_size; r++) gen_bytes(want + (size_t)r * bytes, bytes, op, r);
    coll_allgather(g_c, in, bytes, out);
    check("allgather", bytes, out, want, total, 1);
    memset(out, 0, total);
    memcpy(out + (size_t)g_rank * bytes, in, bytes);
    coll_allgather(g_c, out + (size_t)g_rank * bytes, bytes, out); /* in place */
    check("allgather in place", bytes, out, want, total, 1);
    guarded_free(out);
    nm_free(want);

    /* Variable counts: rank r contributes about bytes * (r + 1) / size, rank 1 nothing. */
    size_t counts[64], vtotal = 0, at = 0;
    NM_ASSERT(g_size <= 64);
    for (int r = 0; r < g_size; r++) {
        counts[r] = r == 1 ? 0 : bytes * (size_t)(r + 1) / (size_t)g_size + (size_t)r;
        vtotal += counts[r];
    }
    out = guarded_alloc(vtotal);
    want = nm_alloc(vtotal + 1, 64, "want");
    unsigned char *vin = guarded_alloc(counts[g_rank]);
    gen_bytes(vin, counts[g_rank], op + 1, g_rank);
    for (int r = 0; r < g_size; at += counts[r], r++) gen_bytes(want + at, counts[r], op + 1, r);
    coll_allgatherv(g_c, vin, counts, out);
    check("allgatherv", bytes, out, want, vtotal, 1);
    guarded_free(vin);
    guarded_free(in);
    guarded_free(out);
    nm_free(want);
}

static void test_bcast(size_t bytes, uint32_t op, int root) {
    unsigned char *buf = guarded_alloc(bytes), *want = nm_alloc(bytes, 64, "want");
    gen_bytes(want, bytes, op, root);
    for (size_t i = 0; i < bytes; i++) buf[i] = g_rank == root ? want[i] : (unsigned char)~want[i];
    coll_bcast(g_c, buf, bytes, root);
    check("bcast", bytes, buf, want, bytes, 1);
    guarded_free(buf);
    nm_free(want);
}

/* Ring: rank r sends to r+1 and receives from r-1; even ranks send first, odd ranks receive
 * first, so no two ranks wait on each other's send. */
static void test_sendrecv(size_t bytes, uint32_t op, int tag) {
    if (g_size < 2) return;
    int to = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
    unsigned char *out = guarded_alloc(bytes), *in = guarded_alloc(bytes),
                  *want = nm_alloc(bytes, 64, "want");
    gen_bytes(out, bytes, op, g_rank);
    gen_bytes(want, bytes, op, from);
    for (int pass = 0; pass < 2; pass++) {
        if ((pass == 0) == (g_rank % 2 == 0))
            coll_send(g_c, out, bytes, to, tag);
        else
            coll_recv(g_c, in, bytes, from, tag);
    }
    check("send/recv", bytes, in, want, bytes, 1);
    guarded_free(out);
    guarded_free(in);
    nm_free(want);
}

int main(int argc, char **argv) {
    double max_mib = 64, min_mib = 0;
    const char *expect = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-mib") && i + 1 < argc)
            max_mib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--min-mib") && i + 1 < argc)
            min_mib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--expect") && i + 1 < argc)
            expect = argv[++i];
        else
            nm_fatal("usage: %s [--max-mib N] [--min-mib N] [--expect single|shm|mpi]", argv[0]);
    }
    check_self_test();
    double t0 = nm_time_s();
    g_c = coll_init(NULL);
    g_rank = coll_rank(g_c);
    g_size = coll_size(g_c);
    const char *env = getenv("NM_COLL");
    size_t len =
        (size_t)snprintf(g_repro, sizeof g_repro, "NM_COLL=%s mpirun --oversubscribe -np %d",
                         env ? env : "auto", g_size);
    for (int i = 0; i < argc && len < sizeof g_repro; i++)
        len += (size_t)snprintf(g_repro + len, sizeof g_repro - len, " %s", argv[i]);
    if (expect && strcmp(expect, coll_transport_name(g_c)))
        nm_fatal("transport is %s, expected %s; reproduce: %s", coll_transport_name(g_c), expect,
                 g_repro);

    /* Element counts: small odd sizes, the one-shot thresholds (64 KiB = 16384 f32, 32768
     * bf16 or 8192 f64 for 2 ranks; 4 KiB, 2 KiB, 512 B for 3, 4, 8), the 1 MiB slot (262144
     * f32, 524288 bf16, 131072 f64), several chunks with a tail, and odd sizes just under 64 MiB
     * (16777216 - 3 f32, 8388608 - 3 f64). f32 and bf16 run the counts whose f32 bytes are in
     * [--min-mib, --max-mib], f64 those whose f64 bytes are. */
    static const size_t counts[] = {
        1,      2,      3,      5,      7,      15,     16,      17,      33,     64,
        65,     100,    127,    128,    129,    255,    256,     257,     511,    512,
        513,    1000,   1023,   1025,   4095,   4096,   4097,    8191,    8192,   8193,
        16383,  16384,  16385,  32767,  32768,  32769,  65537,   131071,  131072, 131073,
        262143, 262144, 262145, 524287, 524289, 786439, 8388605, 16777213,
    };
    uint32_t op = 100;
    for (size_t k = 0; k < NM_ARRAY_LEN(counts); k++, op += 16) {
        size_t n = counts[k];
        double mib = (double)n * sizeof(float) / (1 << 20), mib64 = 2 * mib;
        if (mib64 <= max_mib && !(min_mib > 0 && mib64 < min_mib)) test_allreduce_f64(n, op + 9);
        if (mib > max_mib || (min_mib > 0 && mib < min_mib)) continue;
        test_allreduce(n, op);
        /* Byte operations: the same sizes in bytes, and the f32 byte count (bigger ones). */
        for (int b = 0; b < 2; b++) {
            size_t bytes = b ? n * sizeof(float) : n;
            if (b && (n * sizeof(float) > (size_t)(max_mib * (1 << 20)))) continue;
            test_allgather(NM_MAX((size_t)1, bytes / (size_t)g_size), op + 2 + (uint32_t)b * 4);
            test_bcast(bytes, op + 3 + (uint32_t)b * 4, (int)(k + (size_t)b) % g_size);
            test_sendrecv(bytes, op + 4 + (uint32_t)b * 4, (int)k);
        }
        coll_barrier(g_c);
    }
    /* Many small collectives back to back: slot reuse across operations of every kind. */
    for (int it = 0; it < 200 && min_mib <= 0; it++, op++) {
        test_allreduce(1 + (size_t)it % 7, op);
        test_allreduce_f64(1 + (size_t)it % 5, op + 1000);
        test_bcast(3, op, it % g_size);
        if (it % 3 == 0) coll_barrier(g_c);
    }
    double dt = nm_time_s() - t0;
    const char *transport = coll_transport_name(g_c);
    int nranks = g_size;
    coll_free(g_c);
#ifdef NM_HAVE_MPI
    /* The single transport (one rank, with or without mpirun) must not have touched MPI. */
    int mpi_inited = 0;
    MPI_Initialized(&mpi_inited);
    if (!strcmp(transport, "single") && mpi_inited)
        nm_fatal("the single transport initialized MPI");
#endif
    if (g_rank == 0)
        nm_log_info("test_coll: %zu checks passed, transport %s, %d ranks, %.2f s", g_checks,
                    transport, nranks, dt);
    return 0;
}
