/* The machine as the planner needs it: packages, NUMA nodes with their cores and memory, and
 * GPUs with the node each is attached to. Read once from hwloc (this machine, a recorded XML
 * file or a synthetic description, so that machines you do not have can be planned), then
 * copied into plain arrays: the planner and its tests never touch hwloc.
 *
 * Conventions: NUMA nodes and GPUs are listed in hwloc's logical order, which is the order in
 * which Open MPI's `--map-by ppr:N:numa` places ranks. CPUs are named by their OS index (what
 * `taskset`, `numactl` and sched_getaffinity use); cores keep hwloc's logical order, which is
 * the order in which `--map-by ...:pe=C --bind-to core` hands them out. */
#ifndef NM_TOPO_H
#define NM_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base.h"

enum topo_source_kind {
    TOPO_SOURCE_MACHINE,   /* the machine this process runs on */
    TOPO_SOURCE_XML,       /* an hwloc XML file (lstopo FILE.xml on the machine to plan for) */
    TOPO_SOURCE_SYNTHETIC, /* an hwloc synthetic description: "pack:2 numa:4 core:8 pu:2" */
};

struct topo_source {
    enum topo_source_kind kind;
    const char *arg; /* file or description; NULL for the machine */
};

struct topo_core {
    int pu_begin, n_pus; /* its PUs: topo->pus[pu_begin .. pu_begin + n_pus) */
};

struct topo_node {
    int os_index;       /* the number numactl and libnuma use */
    int package;        /* logical index of its package; -1 when it spans packages */
    uint64_t memory;    /* bytes of local memory */
    const char *subtype; /* NULL for ordinary DRAM; "HBM", "NVM", "CXL-DRAM", ... from hwloc */
    int core_begin, n_cores; /* its cores: topo->cores[core_begin .. core_begin + n_cores);
                              * 0 for a node with memory only (HBM or CXL next to a DRAM node) */
    int n_pus;
};

struct topo_gpu {
    char name[32];      /* OS device name (cuda0, nvml0, rsmi0, card1); "" when none */
    char pci[16];       /* "0000:17:00.0" */
    unsigned vendor_id, device_id;
    bool cuda;          /* an NVIDIA device (the GPU rank uses CUDA) */
    int node;           /* logical index of the nearest NUMA node in topo->nodes; -1 unknown */
    int n_local_nodes;  /* NUMA nodes local to it (>1 when it hangs off a package with SNC) */
};

struct topo {
    char source[512];   /* for messages: "this machine", "XML file configs/x.xml", ... */
    char cpu_model[128]; /* first package's CPUModel, "" when unknown (synthetic) */
    int n_packages;
    int n_nodes;
    struct topo_node *nodes;
    int n_cores;
    struct topo_core *cores; /* grouped by node, in node order */
    int n_pus;
    int *pus;                /* OS indexes, grouped by core */
    int n_gpus;
    struct topo_gpu *gpus;
    uint64_t memory;         /* total bytes over all nodes */
};

/* Load a topology. I/O devices are kept (for the GPUs). A description hwloc rejects, or a file
 * it cannot read, returns NM_ERR_ARGS with a message naming it; a machine hwloc cannot read
 * returns NM_ERR_IO. On success *out is owned by the caller (topo_free). */
enum nm_status topo_load(const struct topo_source *src, struct topo **out, char *err, size_t errlen);
void topo_free(struct topo *t);

/* Nodes with at least one core: the ones that get a rank. */
int topo_cpu_nodes(const struct topo *t);
/* The NUMA node (OS index, as libnuma counts) of the first CUDA GPU hwloc places; -1 when
 * there is none or its node is unknown. Where the GPU rank runs (launch.h). */
int topo_cuda_gpu_node(const struct topo *t);
/* Nodes with cores in package `pkg`. */
int topo_cpu_nodes_in_package(const struct topo *t, int pkg);

/* Print the machine: packages, nodes (cores, PUs, memory, CPUs), GPUs and their nodes. */
void topo_print(const struct topo *t, FILE *f);

/* Format ascending CPU ids as a list like "0-13,112-125" (the format of taskset -c, numactl
 * and /sys/devices/system/node/node0/cpulist). ids need not be sorted; duplicates are merged.
 * Returns the length it needed (as snprintf). */
size_t topo_cpulist_format(const int *ids, int n, char *buf, size_t len);
/* Parse such a list into a malloc'ed array of ids (ascending, no duplicates). Returns the
 * count, or -1 for a malformed list. */
int topo_cpulist_parse(const char *list, int **ids);

/* Cores of this machine that have at least one CPU in this process's affinity mask (what
 * taskset or mpirun's binding left it). Loads the machine's topology; 0 when it cannot. */
int topo_cores_in_affinity(void);

/* Human-readable bytes, "64.0 GiB", into buf (returned). */
const char *topo_bytes_str(uint64_t bytes, char *buf, size_t len);

#endif
