/* Collectives: the only way rank code moves data between ranks (activations, logits, token
 * ids, the hidden state handed to the GPU rank). One interface over three transports, chosen
 * once by coll_init and printed:
 *   single  one rank: a copy, or nothing when in place; never touches MPI;
 *   shm     ranks on one host: a POSIX shared-memory segment, each rank's slots on its own
 *           NUMA node (collectives/coll_shm.c describes the protocol);
 *   mpi     Open MPI point-to-point messages: the fallback across hosts and the baseline.
 *
 * Rules shared by every function below:
 * - Collective calls (everything except coll_send/coll_recv) must be made by every rank, in
 *   the same order, with the same sizes (and the same root); the shm transport checks the
 *   operation and size of every step it reads and stops the job naming both when they differ.
 * - Results are deterministic: a sum is folded in rank order, ((x0 + x1) + x2) + ..., in f32
 *   (f64 for coll_allreduce_sum_f64), so every rank ends with the same bits, on every run and
 *   with every transport.
 * - Failures do not return: a peer that died, or made no progress for the timeout
 *   (coll_options.timeout_s), or a failing MPI call ends the whole job through nm_fatal with a
 *   message naming the rank, and MPI_Abort when MPI is in use. A rank never exits alone.
 * - Call from one thread (the one that called coll_init); buffers are plain host memory.
 * - Sizes are in elements for allreduce and in bytes elsewhere; 0 is allowed and moves nothing.
 */
#ifndef NM_COLL_H
#define NM_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum coll_transport {
    COLL_TRANSPORT_AUTO = 0, /* single for one rank, shm when all ranks share a host, else mpi */
    COLL_TRANSPORT_SINGLE,
    COLL_TRANSPORT_SHM,
    COLL_TRANSPORT_MPI,
};

/* Zero-initialize and set what you need; every zero field means "environment, else default".
 * Environment variables override the fields (so a user can force a transport without a flag). */
struct coll_options {
    enum coll_transport transport; /* env NM_COLL=auto|single|shm|mpi */
    double timeout_s;              /* env NM_COLL_TIMEOUT_S; default 5: a wait without progress
                                      longer than this stops the job */
    size_t shm_slot_bytes;         /* env NM_COLL_SHM_SLOT_KB; default 1 MiB: bytes per rank
                                      and shm step (large messages go in pieces of this size) */
    size_t shm_oneshot_bytes;      /* env NM_COLL_SHM_ONESHOT_KB; an allreduce up to this size is
                                      one-shot, larger is reduce-scatter + allgather; default by
                                      rank count: 64 KiB for 2, 4 KiB for 3, 2 KiB for 4, 512 B
                                      for 8 (coll.c explains) */
    const char *shm_hints;         /* env NM_COLL_SHM_HINTS: where the shm transport uses
                                      non-temporal stores; "none" or names joined by '+' or
                                      ',': nt-out (the output of allreduces of 32 MiB or more),
                                      nt-slot-mid (the slots of allreduces of 2-32 KiB with 4 or
                                      more ranks), nt-slot (every slot, for measurements);
                                      NULL: nt-out+nt-slot-mid, which tests/bench/RESULTS.md
                                      measured to help */
    bool strict;                   /* a downgrade (shm requested or possible but not set up,
                                      fell back to mpi) is fatal instead of a warning */
    bool quiet;                    /* no start-up line (benchmarks that open several) */
    int group;                     /* 0: every rank of the job; g > 0: only the ranks that pass the
                                      same g (the CPU ranks apart from the GPU rank), numbered
                                      in job order. Every rank of the job calls coll_init. */
};

struct coll;

/* Sets up the transport for this process and prints the choice (one line per rank, reason
 * included). opt may be NULL (all defaults). How the rank count is known before MPI_Init:
 * Open MPI's OMPI_COMM_WORLD_SIZE or MPICH's PMI_SIZE; with neither (no mpirun) or a size of 1
 * the auto and single transports never call MPI. Otherwise MPI is initialized here
 * (MPI_THREAD_FUNNELED) unless the caller already did, and a fatal hook is installed so that
 * nm_fatal/NM_ASSERT on this rank end the whole job with MPI_Abort. Sets the log origin to
 * "r<rank>/node<node>" unless the caller set one already. Several instances may coexist (the
 * benchmark opens shm and mpi side by side); each is collective over all ranks.
 * Fails (nm_fatal) when the forced transport cannot work: single with several ranks, shm across
 * hosts or without shared memory, any multi-rank transport in a build without MPI. */
struct coll *coll_init(const struct coll_options *opt);

/* Collective: waits for all ranks, releases the transport and, with the last instance, calls
 * MPI_Finalize if coll_init called MPI_Init. c may be NULL. */
void coll_free(struct coll *c);

int coll_rank(const struct coll *c);
int coll_size(const struct coll *c);
/* "single", "shm" or "mpi". */
const char *coll_transport_name(const struct coll *c);
/* Waits longer than this many seconds without progress stop the job; raise it around phases
 * where ranks are legitimately unbalanced (loading weights). Local: call on every rank. */
void coll_set_timeout(struct coll *c, double seconds);
/* The timeout now in force (to restore it after a phase that raised it). */
double coll_timeout(const struct coll *c);

/* out[i] = in_0[i] + in_1[i] + ... + in_{size-1}[i], folded in rank order in f32. n elements
 * on every rank. in == out (in place) is allowed; other overlaps are not. */
void coll_allreduce_sum_f32(struct coll *c, const float *in, float *out, size_t n);

/* As coll_allreduce_sum_f32 in f64: out[i] = ((in_0[i] + in_1[i]) + ...) folded in rank order
 * in double, the same bits on every rank and transport. n elements on every rank; in == out is
 * allowed, other overlaps are not. The one-shot / reduce-scatter choice goes by bytes, so an
 * f64 vector switches at half the element count of an f32 one. */
void coll_allreduce_sum_f64(struct coll *c, const double *in, double *out, size_t n);

/* As coll_allreduce_sum_f32, with bf16 inputs widened exactly to f32 and summed in f32: the
 * result is bit-identical to the f32 allreduce of the widened inputs. Half the bytes cross
 * between ranks. in and out must not overlap. */
void coll_allreduce_sum_bf16_to_f32(struct coll *c, const uint16_t *in, float *out, size_t n);

/* out (size * bytes) receives every rank's in (bytes), in rank order. In place: in may be
 * out + rank * bytes. */
void coll_allgather(struct coll *c, const void *in, size_t bytes, void *out);

/* Variable counts: rank r contributes bytes[r] (the same array on every rank), out receives the
 * contributions packed in rank order (rank r's at sum of bytes[0..r-1]). In place: in may be
 * that position in out. */
void coll_allgatherv(struct coll *c, const void *in, const size_t *bytes, void *out);

/* Every rank's buf (bytes) receives root's buf. */
void coll_bcast(struct coll *c, void *buf, size_t bytes, int root);

/* Returns when every rank has entered it. */
void coll_barrier(struct coll *c);

/* Point-to-point, for the pipeline stage between CPU ranks and the GPU rank. Messages between
 * one pair arrive in the order sent; recv must name the tag (>= 0) and the exact byte count of
 * the message that is next from that peer, and a mismatch stops the job naming both. send may
 * return before the message is received (small messages) or block until the receiver takes
 * it, so two ranks must not both send large messages to each other before receiving. peer must
 * not be the calling rank. */
void coll_send(struct coll *c, const void *buf, size_t bytes, int peer, int tag);
void coll_recv(struct coll *c, void *buf, size_t bytes, int peer, int tag);

#endif
