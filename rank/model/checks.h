/* Start-up checks every rank runs before loading weights, printed as one table of pass / warn /
 * fail lines, each with a hint that says what to do (in the manner of Redis's syscheck):
 *   amx            the CPU has AMX and the kernel grants this process the tile state
 *                  (arch_prctl ARCH_REQ_XCOMP_PERM); "warn: CPU has no AMX" elsewhere
 *   binding        the CPUs this process may run on (sched_getaffinity) are the ones the rank
 *                  plan gives it: catches hand-written mpirun lines that bind differently
 *   numa_balancing kernel.numa_balancing is off (it migrates pages away from their rank)
 *   huge pages     /sys/kernel/mm/transparent_hugepage/enabled
 *   memory         free memory on the rank's node covers the weights it will load
 * The checks only read the system; the AMX one also requests the permission it tests, which is
 * what the AMX kernels need anyway. */
#ifndef NM_CHECKS_H
#define NM_CHECKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum checks_result {
    CHECKS_RESULT_PASS,
    CHECKS_RESULT_WARN,
    CHECKS_RESULT_FAIL,
};
const char *checks_result_str(enum checks_result r); /* "pass", "warn", "fail" */

struct checks_input {
    int rank, nranks;
    int node;                  /* OS index of the NUMA node whose memory the rank uses; -1: the
                                  whole machine (one rank, in-process) */
    char expected_cpus[4096];  /* CPUs the rank plan binds it to ("0-13,112-125"); "" when
                                  nothing binds it (in-process) */
    char plan_note[256];       /* why expected_cpus is empty under mpirun (no plan for this rank
                                  count on this machine); "" otherwise */
    uint64_t weight_bytes;     /* bytes of weights it will load on that node; 0: not checked */
    bool strict;               /* --strict: any fail ends the job (nm_fatal) after the table */
};

/* One line of the table. */
struct checks_line {
    const char *name;
    enum checks_result result;
    char detail[256];
    char hint[256]; /* "" when there is nothing to do */
};

/* Run every check into lines[] (at least CHECKS_MAX entries); returns the count. For tests. */
#define CHECKS_MAX 8
int checks_run(const struct checks_input *in, struct checks_line *lines);

/* The individual checks, for tests: the binding check compares an explicit affinity list. */
void checks_binding(const struct checks_input *in, const char *actual_cpus, struct checks_line *out);
void checks_memory(const struct checks_input *in, int64_t free_bytes, int64_t total_bytes, struct checks_line *out);
void checks_numa_balancing(const char *value, int nranks, struct checks_line *out);
void checks_thp(const char *value, struct checks_line *out);

/* Run the checks and print the table through the log (every line carries the rank's origin).
 * Returns the number of failed checks; with in->strict, a failed check ends the process through
 * nm_fatal (which aborts the whole MPI job when the rank installed its hook). */
int checks_run_and_print(const struct checks_input *in);

#endif
