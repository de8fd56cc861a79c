/* numallm topo: the machine as hwloc sees it (packages, NUMA nodes, cores, memory, GPUs and
 * their nodes), the rank plan, and the command `numallm run` would use. */
#ifndef NM_CMD_TOPO_H
#define NM_CMD_TOPO_H

/* argv[0] = "topo". Returns the process exit status: 0, or 1 after an error message (bad flag,
 * unreadable topology, a plan that does not fit). */
int cmd_topo(int argc, char **argv);

#endif
