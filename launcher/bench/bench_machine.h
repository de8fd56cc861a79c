/* The machine facts numallm bench prints before its results: CPU, the kernel path chosen, NUMA
 * nodes with their read bandwidth as measured here (STREAM-like: every core of the node sums a
 * large array in the node's own memory), GPUs, the MPI library and the build. */
#ifndef NM_BENCH_MACHINE_H
#define NM_BENCH_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base.h"

struct bench_node {
    int os_index;     /* numactl's node number */
    int n_cores, n_pus;
    uint64_t memory;  /* bytes */
    char cpus[256];   /* "0-13,112-125" */
    double bw_gbs;    /* median read bandwidth, 1e9 bytes/s; 0 when not measured */
    double bw_min, bw_max;
    int bw_threads;   /* threads that measured it (one per core) */
};

struct bench_machine {
    char cpu[128];       /* CPU model */
    const char *isa;     /* kern_isa_get()->name */
    int n_packages, n_cores, n_pus;
    int n_nodes;         /* nodes with cores */
    struct bench_node nodes[64];
    int n_gpus;
    char gpus[8][256];   /* "NVIDIA H100 80GB HBM3 (10de:2330) at 0000:17:00.0, node 0" */
    char gpu_names[512]; /* llama-bench's gpu_info: names joined with ", " ("" without GPUs) */
    char mpi[128];       /* first line of `mpirun --version`, "" when there is none */
    size_t bw_bytes;     /* array size of the bandwidth measurement */
    char build_commit[48];
    int build_number;
};

/* Read the machine (hwloc), and measure each node's read bandwidth with an array of bw_bytes
 * (0: do not measure), printing a line per node on stderr while it runs. mpirun: the program
 * whose version is asked (NULL: do not ask). */
enum nm_status bench_machine_read(struct bench_machine *m, size_t bw_bytes, const char *mpirun, char *err,
                                  size_t errlen);

/* The facts, as a markdown list (markdown) or as plain "# " comment lines. */
void bench_machine_print(const struct bench_machine *m, FILE *f, bool markdown);

/* Sum of the measured bandwidths of the nodes in `nodes` ("0", "0,1"); 0 when one of them was
 * not measured. */
double bench_machine_bw(const struct bench_machine *m, const char *nodes);

#endif
