/* After loading, every page of a rank's shard is on the rank's NUMA node, as the kernel reports
 * it (move_pages), for each rank of a 1-, 2- and 3-way split loaded in this process. The node
 * expected is the one the kernel says this thread's CPU belongs to (getcpu), not assumed. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mkmodel.h"
#include "model.h"

#ifdef NM_HAVE_NUMA
#include <numa.h>
#endif

int main(void) {
#ifndef NM_HAVE_NUMA
    printf("SKIP: built without libnuma: nothing to check\n");
    return 77;
#else
    if (numa_available() < 0) {
        printf("SKIP: the kernel has no NUMA support (numa_available() < 0)\n");
        return 77;
    }
    unsigned cpu, node;
    if (getcpu(&cpu, &node) != 0) {
        printf("SKIP: getcpu failed\n");
        return 77;
    }
    /* Stay on this CPU so "the rank's node" does not change under the test. */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);

    char path[] = "/tmp/nm_locality_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    char err[512];
    struct pool *pool = pool_init(1, NULL);
    struct mkmodel_params mp = {.preset = mkmodel_find_preset("tiny-qwen3"), .type = DTYPE_Q4_K, .output_type = -1,
                                .seed = 1};
    if (mkmodel_write(&mp, path, pool, err, sizeof err) != NM_OK) {
        printf("FAIL: mkmodel: %s\n", err);
        return 1;
    }
    int failures = 0;
    for (int nranks = 1; nranks <= 3; nranks++) {
        for (int r = 0; r < nranks; r++) {
            struct model *m;
            struct model_load_params lp = {.rank = r, .nranks = nranks, .pool = pool};
            if (model_load(path, &lp, &m, err, sizeof err) != NM_OK) {
                printf("FAIL: load %d/%d: %s\n", r, nranks, err);
                failures++;
                continue;
            }
            uint64_t pages;
            const double frac = arena_local_fraction(m->arena, &pages);
            const bool ok = arena_node(m->arena) == (int)node && frac == 1.0 && pages * 4096 >= m->loaded_bytes;
            printf("%s: shard %d/%d: %llu pages, %.1f%% on node %d (this CPU %u is on node %u), %.1f KiB loaded\n",
                   ok ? "ok" : "FAIL", r, nranks, (unsigned long long)pages, 100 * frac, arena_node(m->arena), cpu,
                   node, (double)m->loaded_bytes / 1024);
            failures += !ok;
            model_free(m);
        }
    }
    pool_free(pool);
    unlink(path);
    printf("%s: test_locality (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    if (failures) printf("repro: ctest -R test_locality --output-on-failure\n");
    return failures ? 1 : 0;
#endif
}
