/* Deciding how `numallm run` runs: in-process (one CPU rank and no GPU rank, or this process
 * is already a rank that mpirun started), or as an Open MPI job whose command line is built
 * from the rank plan (plan.h), printed with --dry-run and otherwise exec'ed.
 *
 * The job's ranks are the same `numallm run` command with the user's flags, less -t/--threads,
 * --dry-run and --topology*, plus `-m MODEL` when the user named none (the default model the
 * parent resolved) and `-t T` (threads per rank). Each knows it is a rank from OMPI_COMM_WORLD_SIZE
 * and OMPI_COMM_WORLD_RANK in its environment. The Open MPI line, per layout (plan.h):
 *
 *   one rank per node     mpirun -np N --map-by ppr:1:numa --bind-to numa      EXE run ... -t T
 *   K ranks per node      mpirun -np N --map-by ppr:K:numa:pe=C --bind-to core EXE run ... -t T
 *   one rank per package  mpirun -np N --map-by ppr:1:socket --bind-to socket  EXE run ... -t T
 *
 * with --allow-run-as-root first when numallm runs as root (Open MPI refuses root otherwise).
 *
 * The GPU rank. With -ngl N > 0 and a CUDA device, one CPU rank runs in-process and drives the
 * GPU itself (rank/engine/pipeline.h, local); two or more CPU ranks get a GPU rank as a second app
 * context, the last rank of the job:
 *   mpirun ... -np N ... EXE run ... --role cpu : -np 1 EXE run ... --role gpu --gpu-node K -t 1
 * where K is the NUMA node the GPU is attached to (hwloc's PCI locality); the GPU rank binds
 * itself to that node's cores and memory. No CUDA device: -ngl is ignored with a warning (an
 * error with --strict) and the ranks get -ngl 0.
 * Machines with memory-only NUMA nodes (HBM, CXL) use the per-package spelling when each
 * package has one DRAM node: Open MPI would count the memory-only nodes as places for ranks. */
#ifndef NM_LAUNCH_H
#define NM_LAUNCH_H

#include <stdbool.h>
#include <stdio.h>

#include "checks.h"
#include "plan.h"
#include "topo.h"

/* A process's part in a job with -ngl (see the GPU rank below). */
enum rank_role {
    RANK_ROLE_CPU = 0,       /* a CPU rank; with -ngl and no mpirun it drives the GPU itself */
    RANK_ROLE_CPU_OF_PIPELINE, /* a CPU rank of a job whose last world rank is the GPU rank */
    RANK_ROLE_GPU,           /* the GPU rank: serves the last -ngl layers and the head */
};

/* What the user asked for, from the flags launch_parse_flag consumes and the caller's own. */
struct launch_request {
    const char *model;       /* model file (the caller resolves the default model); NULL: bytes per
                                rank are not known and memory is not checked */
    int n_ranks;             /* --ranks N; 0 = auto (one per NUMA node) */
    int n_threads;           /* -t/--threads: threads per rank; 0 = cores of the rank */
    struct topo_source topo; /* --topology FILE.xml / --topology-synthetic DESC; default: this machine */
    bool dry_run;            /* --dry-run: print the plan and the command, run nothing */
    const char *exe;         /* the numallm executable the ranks run; NULL: /proc/self/exe */
    const char *mpirun;      /* NULL: $NUMALLM_MPIRUN, else "mpirun" (found through PATH) */
    int argc;                /* the subcommand's arguments as typed: argv[0] = "run", then flags */
    char **argv;
    long long n_gpu_layers;  /* -ngl/--n-gpu-layers N: the last N layers and the output head on the
                                GPU (N >= n_layer: all of them); 0 = none */
    bool strict;             /* --strict: no GPU for -ngl is an error, not a downgrade */
    enum rank_role role;     /* --role cpu|gpu: set by the launcher on the ranks' command lines */
    int gpu_node;            /* --gpu-node K: the NUMA node the GPU rank binds to (-1: leave it) */
};

/* Defaults: auto ranks, default threads, this machine; argc/argv are the subcommand's (kept,
 * not copied, for the ranks' command line). */
void launch_request_init(struct launch_request *req, int argc, char **argv);

/* Try to consume argv[*i] (and its value, advancing *i) as one of the launcher's flags:
 *   --ranks auto|N   --topology FILE.xml   --topology-synthetic DESC   --dry-run
 *   -t/--threads N   -ngl/--n-gpu-layers N   --role cpu|gpu   --gpu-node K
 * (the caller sets req->strict from its own --strict). Returns 1 when consumed, 0 when argv[*i] is not one of them, -1 after printing an error that
 * names the flag and what it accepts. Call it first in the subcommand's flag loop. */
int launch_parse_flag(int argc, char **argv, int *i, struct launch_request *req);

/* Lines for the subcommand's --help, describing those flags. */
const char *launch_flags_help(void);

enum launch_mode {
    LAUNCH_MODE_IN_PROCESS, /* run the rank here (see struct launch_decision) */
    LAUNCH_MODE_DONE,       /* --dry-run printed the plan and the command: exit 0 */
    LAUNCH_MODE_ERROR,      /* an error was printed (bad flag, does not fit, exec failed): exit 1 */
};

struct launch_decision {
    bool under_mpirun; /* this process is rank `rank` of `nranks` of an Open MPI job */
    int rank, nranks;  /* 0 and 1 when in-process; CPU ranks only (the GPU rank is not counted) */
    enum rank_role role;
    int gpu_rank;      /* world rank of the GPU rank (RANK_ROLE_CPU_OF_PIPELINE, _GPU), else -1 */
    int gpu_node;      /* RANK_ROLE_GPU: the NUMA node to bind to, -1 unknown */
    long long n_gpu_layers; /* -ngl in force: 0 when there is no GPU (said once, by the launcher) */
    int n_threads;     /* threads for this rank: -t, else the cores (not SMT siblings) this
                          process may run on; 0 when hwloc cannot tell (use your default) */
};

/* Decide, and for a multi-rank job print the mpirun line on stderr and execvp it (so on
 * success it does not return). A memory shortfall is refused here, before anything is loaded,
 * with a message naming the node, the bytes needed and available, and what to do. A
 * --topology/--topology-synthetic without --dry-run is refused: it describes another machine. */
enum launch_mode launch_decide(const struct launch_request *req, struct launch_decision *d);

/* ---- Pure parts, tested for exact output -------------------------------------------------- */

struct launch_argv_params {
    const char *mpirun;  /* "mpirun" */
    bool as_root;        /* add --allow-run-as-root */
    const char *exe;     /* numallm executable */
    const char *model;   /* the model the parent resolved (the default one when no -m was given):
                            added as -m MODEL when the arguments name none, so that the ranks do
                            not each look for it; may be NULL */
    int argc;            /* the subcommand's arguments ("run", flags...) */
    char *const *argv;
    bool gpu_rank;       /* add the GPU rank's app context */
    int gpu_node;        /* its NUMA node (-1: unknown) */
};

/* The mpirun argv (NULL-terminated, malloc'ed: launch_argv_free) for a plan of two or more
 * ranks. NM_ERR_ARGS for a one-rank plan (it runs in-process), NM_ERR_UNSUPPORTED for a layout
 * Open MPI's mapping options cannot express (sub-NUMA clusters next to memory-only nodes). */
enum nm_status launch_argv_build(const struct plan *p, const struct topo *t, const struct launch_argv_params *ap,
                                 char ***out, char *err, size_t errlen);
void launch_argv_free(char **argv);

/* execvp the mpirun argv; returns only on failure, after printing what went wrong and a hint. */
void launch_exec(char *const *argv);

/* The argv as one shell-quoted line (malloc'ed), for printing and copying. */
char *launch_argv_format(char *const *argv);

/* ---- Shared with `numallm topo` and the ranks ------------------------------------------- */

/* Load the topology of req->topo, plan req's ranks on it and, with req->model, the bytes per
 * rank. Does not check that they fit (plan_check_memory). */
enum nm_status launch_plan(const struct launch_request *req, struct topo **t, struct plan **p, char *err,
                           size_t errlen);

/* Print how the plan runs: "runs in-process" for one rank, else the mpirun line (with as_root
 * and exe resolved as launch_decide would). */
void launch_print_command(const struct launch_request *req, const struct plan *p, const struct topo *t, FILE *f);

/* On a rank (in-process or under mpirun): the start-up checks' input, from the plan of this
 * rank count on this machine (what the binding should be, which node's memory it uses).
 * weight_bytes: what the rank will load (0: not checked). */
void launch_checks_input(const struct launch_decision *d, uint64_t weight_bytes, bool strict,
                         struct checks_input *in);

#endif
