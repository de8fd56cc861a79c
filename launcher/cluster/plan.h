/* The rank plan: how many CPU ranks, which NUMA node(s) and CPUs each one gets, its thread
 * count, the bytes of weights it will hold and whether they fit in its node's memory. A pure
 * function of a topology (topo.h) and the user's request, so every machine layout can be
 * tested on a small one; the Open MPI command line (launch.h) is derived from it.
 *
 * Layouts, in the order `--ranks` chooses them:
 *   auto or N = NUMA nodes      one rank per NUMA node (sub-NUMA clusters count as nodes);
 *                               nodes that hold memory only (HBM, CXL) get no rank
 *   N = k * nodes               k ranks per node, each on its own share of the node's cores
 *   N = packages (< nodes)      one rank per package, spanning the package's nodes
 *   N = 1                       one rank on the whole machine, in-process, without MPI
 * Any other N is refused with the list of counts that work. */
#ifndef NM_PLAN_H
#define NM_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base.h"
#include "topo.h"

enum plan_layout {
    PLAN_LAYOUT_MACHINE,    /* one rank, in-process, all cores of the machine */
    PLAN_LAYOUT_NODE,       /* one rank per NUMA node */
    PLAN_LAYOUT_NODE_SPLIT, /* ranks_per_node ranks per NUMA node, cores_per_rank cores each */
    PLAN_LAYOUT_PACKAGE,    /* one rank per package, nodes_per_rank nodes each */
};
const char *plan_layout_name(enum plan_layout l);

struct plan_request {
    int n_ranks;   /* --ranks: 0 = auto (one per NUMA node with cores) */
    int n_threads; /* -t: threads per rank; 0 = the cores of the rank */
};

struct plan_rank {
    int rank;
    int node;           /* OS index of its NUMA node (the first when it spans several); -1 for
                           the whole machine */
    int package;        /* logical package index; -1 for the whole machine */
    char nodes[64];     /* OS indexes of all its nodes: "3", "0-3" */
    char *cpus;         /* the CPUs it is bound to, "0-13,112-125" (owned) */
    int n_cores, n_pus;
    int n_threads;      /* = plan->n_threads */
    uint64_t mem_bytes; /* memory of its nodes it may use: their sum divided by the ranks
                           sharing them */
    uint64_t weight_bytes; /* 0 until plan_set_weight_bytes / plan_add_model */
    bool fits;          /* weight_bytes <= mem_bytes */
};

/* Where the GPU rank goes (launch.h, -ngl): on cores of the GPU's
 * node, next to the CPU rank that owns that node. */
struct plan_gpu {
    int gpu;       /* index in topo->gpus */
    int node;      /* OS index of its node, -1 unknown */
    int near_rank; /* CPU rank on that node, -1 none */
};

struct plan {
    enum plan_layout layout;
    int n_ranks;
    int ranks_per_node; /* > 1 only for NODE_SPLIT */
    int nodes_per_rank; /* > 1 only for PACKAGE (and MACHINE) */
    int cores_per_rank; /* fewest cores of any rank (the pe= of NODE_SPLIT) */
    int n_threads;      /* -t given to every rank: the request, else the fewest cores of any rank */
    bool threads_from_user;
    bool memory_only_nodes; /* the machine has NUMA nodes without cores */
    struct plan_rank *ranks;
    int n_gpus;
    struct plan_gpu *gpus;
    bool has_weights;   /* weight_bytes are known */
    char model[256];    /* what the weights are of, for printing ("" when none) */
    char note[512];     /* remarks for the user (uneven nodes, threads above cores), "" if none */
};

/* Plan the ranks of `req` on `t`. A rank count that does not fit the machine returns
 * NM_ERR_ARGS with a message that lists the counts that do. *out is owned by the caller. */
enum nm_status plan_make(const struct topo *t, const struct plan_request *req, struct plan **out, char *err,
                         size_t errlen);
void plan_free(struct plan *p);

/* Set the bytes of weights of one rank and recompute whether it fits. */
void plan_set_weight_bytes(struct plan *p, int rank, uint64_t bytes);

/* Weights per rank from a model file's tensors (shard_weight_bytes for every rank). Fails with
 * shard_plan's message when the model cannot be split into p->n_ranks parts. */
struct gguf_file;
struct model_config;
enum nm_status plan_add_model(struct plan *p, const char *name, const struct gguf_file *f,
                              const struct model_config *c, char *err, size_t errlen);

/* NM_ERR_NOMEM when a rank's weights do not fit in its memory, with a message naming the rank,
 * its node, the bytes needed and available, and what to do. NM_OK otherwise (and when no
 * weights are known). Checked before anything is loaded. */
enum nm_status plan_check_memory(const struct plan *p, const struct topo *t, char *err, size_t errlen);

/* Print the plan: a line of summary, one row per rank, the GPUs' placement and the notes. */
void plan_print(const struct plan *p, const struct topo *t, FILE *f);

#endif
