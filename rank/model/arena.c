/* Node-bound weight memory (see arena.h). Each allocation is its own mapping from
 * numa_alloc_onnode, so its pages are placed on the node whoever touches them first. */
#define _GNU_SOURCE
#include "arena.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"

#ifdef NM_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

struct block {
    void *p;
    size_t bytes;
    bool numa;
};

struct arena {
    int node;
    bool use_numa;
    struct block *blocks;
    int n, cap;
    uint64_t bytes;
};

struct arena *arena_init(int node) {
    struct arena *a = calloc(1, sizeof *a);
    NM_ASSERT(a);
#ifdef NM_HAVE_NUMA
    if (numa_available() >= 0) {
        a->use_numa = true;
        if (node < 0) {
            int cpu = sched_getcpu();
            node = cpu >= 0 ? numa_node_of_cpu(cpu) : 0;
        }
    }
#endif
    if (!a->use_numa) {
        nm_log_warn("no NUMA support (libnuma unavailable or the kernel has none): weights are in ordinary memory");
        node = 0;
    }
    a->node = node < 0 ? 0 : node;
    return a;
}

void *arena_alloc(struct arena *a, size_t bytes, const char *what) {
    if (bytes == 0) bytes = 64;
    void *p = NULL;
#ifdef NM_HAVE_NUMA
    if (a->use_numa) {
        p = numa_alloc_onnode(bytes, a->node); /* page aligned, zero-filled on first touch */
        if (!p) nm_fatal("cannot allocate %zu bytes on NUMA node %d for %s (node too small for its shard?)", bytes,
                         a->node, what);
    }
#endif
    if (!p) p = nm_alloc(bytes, 64, what);
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->blocks = realloc(a->blocks, (size_t)a->cap * sizeof *a->blocks);
        NM_ASSERT(a->blocks);
    }
    a->blocks[a->n++] = (struct block){p, bytes, a->use_numa};
    a->bytes += bytes;
    return p;
}

void arena_free(struct arena *a) {
    if (!a) return;
    for (int i = 0; i < a->n; i++) {
#ifdef NM_HAVE_NUMA
        if (a->blocks[i].numa) {
            numa_free(a->blocks[i].p, a->blocks[i].bytes);
            continue;
        }
#endif
        nm_free(a->blocks[i].p);
    }
    free(a->blocks);
    free(a);
}

int arena_node(const struct arena *a) { return a->node; }
uint64_t arena_bytes(const struct arena *a) { return a->bytes; }

double arena_local_fraction(const struct arena *a, uint64_t *pages) {
    *pages = 0;
#ifdef NM_HAVE_NUMA
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    enum { CHUNK = 4096 };
    void *addr[CHUNK];
    int status[CHUNK];
    uint64_t local = 0, total = 0;
    for (int i = 0; i < a->n; i++) {
        const uintptr_t start = (uintptr_t)a->blocks[i].p / page * page;
        const uintptr_t end = (uintptr_t)a->blocks[i].p + a->blocks[i].bytes;
        for (uintptr_t p = start; p < end;) {
            int n = 0;
            for (; n < CHUNK && p < end; n++, p += page) addr[n] = (void *)p;
            if (move_pages(0, (unsigned long)n, addr, NULL, status, 0) != 0) return -1;
            for (int j = 0; j < n; j++) {
                if (status[j] < 0) continue; /* not present (never touched) */
                total++;
                local += status[j] == a->node;
            }
        }
    }
    *pages = total;
    return total ? (double)local / (double)total : -1;
#else
    (void)a;
    return -1;
#endif
}

bool arena_bind_process_to_node(int node) {
#ifdef NM_HAVE_NUMA
    if (numa_available() < 0 || node > numa_max_node()) return false;
    if (numa_run_on_node(node) != 0) return false;
    numa_set_preferred(node);
    return true;
#else
    (void)node;
    return false;
#endif
}
