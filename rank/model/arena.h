/* Rank-owned memory for weights, bound to the rank's NUMA node (libnuma). Weights are copied
 * (sliced, later repacked) from the mapped file into it at load and never move afterwards
 * (DESIGN lesson 1). After loading, the kernel is asked where the pages really are. */
#ifndef NM_ARENA_H
#define NM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct arena;

/* node < 0: the node of the CPU this thread runs on. Without libnuma or on a machine without
 * NUMA support the memory is ordinary (said once). */
struct arena *arena_init(int node);
void arena_free(struct arena *a);
/* Zero-filled, 64-byte aligned; fatal on failure, naming `what` and the node. */
void *arena_alloc(struct arena *a, size_t bytes, const char *what);
int arena_node(const struct arena *a);

/* Run this process on the CPUs of NUMA node `node` and prefer its memory (the GPU rank, on the
 * node its GPU is attached to). False when libnuma is missing or refuses. */
bool arena_bind_process_to_node(int node);
uint64_t arena_bytes(const struct arena *a);

/* Ask the kernel (move_pages) where every page of every allocation is: returns the fraction on
 * the arena's node, and the pages counted; -1 if the kernel cannot tell. */
double arena_local_fraction(const struct arena *a, uint64_t *pages);

#endif
