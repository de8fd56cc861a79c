/* The ranks of a numallm bench job. `numallm bench` (cmd_bench.c) never loads a model: for each
 * configuration it starts `numallm bench --worker ...`, as a child process for one rank and
 * through mpirun (launch.h) for several. Every rank of the job opens a session (session.h) and
 * runs the same tests in the same order with the same token ids; rank 0 times them between
 * barriers and reports on its stdout, one line per event, tab-separated:
 *
 *   #nmb info      MODEL_TYPE  MODEL_SIZE  N_PARAMS  TOKEN_BYTES  NUMA_NODES  N_RANKS  ISA
 *   #nmb progress  TEST  REP [DONE TOTAL] (REP -1: filling the KV cache to the test's depth,
 *                                          0: the warm-up, then 1..r; with DONE/TOTAL tokens of
 *                                          it, at most once a second during long ones)
 *   #nmb result    TEST  NS,NS,...        (one figure per repetition)
 *
 * TOKEN_BYTES is the sum over ranks of the weight bytes one forward pass reads (model.token_bytes:
 * all a rank holds, but only the chosen experts of a MoE model); NUMA_NODES the nodes holding them ("0,1"). TEST indexes the
 * --test flags in the order given. A failure is printed on stderr and the job exits with 1.
 *
 * Worker flags (all given by the orchestrator; -t comes last, from the launcher):
 *   -m FILE  -r REPS  -b N_BATCH  -ub N_UBATCH  -ctk f16|f32  [--no-warmup]  [-v]
 *   --test N_PROMPT,N_GEN,N_DEPTH  (repeated)   -t THREADS
 *
 * Each repetition, as llama-bench: forget everything after the depth prefix (the depth's
 * tokens are evaluated once per test, untimed), then a barrier and the clock; N_PROMPT tokens
 * in chunks of N_BATCH (the engine runs them in matrices of min(N_BATCH, N_UBATCH) rows), then
 * N_GEN single-token steps; a barrier and the clock. Token ids are fixed pseudo-random numbers,
 * the same on every rank; nothing is tokenized or sampled. The warm-up runs the prompt once and
 * one generation step. */
#ifndef NM_BENCH_WORKER_H
#define NM_BENCH_WORKER_H

#define BENCH_WORKER_TAG "#nmb"
/* Most tests one job runs (its -p, -n and -pg values, times its -d values). */
#define BENCH_WORKER_MAX_TESTS 256

/* `numallm bench --worker ...`: argv[0] is "bench". Returns the exit status. */
int bench_worker_main(int argc, char **argv);

/* `numallm bench --coll-worker [--op OP] [--max-size BYTES] [--iter-scale X] [--transports LIST]`
 * under mpirun: the collectives benchmark of tests/bench/bench_coll.c on this rank. */
int bench_coll_worker_main(int argc, char **argv);

#endif
