/* NUMA placement for the shared-memory transport: which node a rank runs on, binding a range
 * of a shared mapping to it, and asking the kernel where the pages really are. Without libnuma
 * (NM_HAVE_NUMA unset) every answer is "unknown" and nothing is bound. */
#define _GNU_SOURCE /* sched_getcpu */
#include "coll_impl.h"

#include <errno.h>

#ifdef NM_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <unistd.h>

int coll_numa_node_self(void) {
    if (numa_available() < 0) return -1;
    int cpu = sched_getcpu();
    return cpu < 0 ? -1 : numa_node_of_cpu(cpu);
}

bool coll_numa_prefer(void *addr, size_t len, int node) {
    if (node < 0 || numa_available() < 0) return true;
    unsigned long mask[16] = {0};
    if (node >= (int)(8 * sizeof mask)) {
        errno = EINVAL;
        return false;
    }
    mask[node / (8 * sizeof mask[0])] |= 1ul << (node % (8 * sizeof mask[0]));
    /* MPOL_PREFERRED, not BIND: a full node spills over instead of failing the job. On a
     * shared (tmpfs) mapping the policy belongs to the object, so it holds for whoever
     * touches or fallocates the pages. */
    return mbind(addr, len, MPOL_PREFERRED, mask, 8 * sizeof mask, 0) == 0;
}

double coll_numa_fraction_on(const void *addr, size_t len, int node) {
    if (node < 0 || numa_available() < 0) return -1;
    enum { SAMPLES = 64 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE), npages = len / page;
    if (!npages) return -1;
    void *pages[SAMPLES];
    int status[SAMPLES];
    unsigned long n = npages < SAMPLES ? npages : SAMPLES;
    for (unsigned long i = 0; i < n; i++) pages[i] = (char *)addr + (i * npages / n) * page;
    if (numa_move_pages(0, n, pages, NULL, status, 0) != 0) return -1;
    unsigned long on = 0;
    for (unsigned long i = 0; i < n; i++) on += status[i] == node;
    return (double)on / (double)n;
}
#else
int coll_numa_node_self(void) { return -1; }
bool coll_numa_prefer(void *addr, size_t len, int node) { return true; }
double coll_numa_fraction_on(const void *addr, size_t len, int node) { return -1; }
#endif
