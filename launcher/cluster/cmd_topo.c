/* numallm topo: print the machine, the rank plan and the command line (see cmd_topo.h). */
#include "cmd_topo.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "launch.h"

static void topo_usage(FILE *f) {
    fprintf(f,
            "usage: numallm topo [-m MODEL.gguf] [--ranks auto|N] [-t THREADS]\n"
            "                    [--topology FILE.xml | --topology-synthetic DESC]\n"
            "\n"
            "Prints the machine as hwloc sees it (packages, NUMA nodes, cores, memory per node, GPUs and\n"
            "their nodes), the rank plan (CPUs and threads per rank; with -m the bytes of weights per rank\n"
            "and whether they fit in its node's memory) and the mpirun line `numallm run` would use.\n"
            "\n"
            "  -m, --model FILE   plan the weights of this model (only its header is read)\n"
            "%s",
            launch_flags_help());
}

int cmd_topo(int argc, char **argv) {
    struct launch_request req;
    launch_request_init(&req, 0, NULL); /* the ranks' command is synthesized: run -m MODEL */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            topo_usage(stdout);
            return 0;
        }
        const int r = launch_parse_flag(argc, argv, &i, &req);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (!(req.model = cli_value(argc, argv, &i))) return 1;
            continue;
        }
        fprintf(stderr, "error: unknown option '%s' for topo (numallm topo --help lists them)\n", a);
        return 1;
    }
    struct topo *t;
    struct plan *p;
    char err[1024];
    if (launch_plan(&req, &t, &p, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    topo_print(t, stdout);
    plan_print(p, t, stdout);
    const int rc = plan_check_memory(p, t, err, sizeof err) ? 1 : 0;
    if (rc == 0) launch_print_command(&req, p, t, stdout);
    fflush(stdout);
    if (rc) fprintf(stderr, "error: %s\n", err);
    plan_free(p);
    topo_free(t);
    return rc;
}
