/* A stand-in for the numallm command while main.c and cmd_run.c are not wired to the launcher:
 *   launch_cmd topo ARGS...   runs cmd_topo as `numallm topo ARGS...` would
 *   launch_cmd run ARGS...    parses the launcher's flags (and -m) as cmd_run will, calls
 *                             launch_decide and, when it is in-process, prints the decision and
 *                             runs the start-up checks as a rank will (--strict makes a fail fatal)
 *   launch_cmd mkmodel ARGS   numallm mkmodel, for test models
 * Used by the golden tests of configs/ and the launch tests. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmd_topo.h"
#include "launch.h"

static int run(int argc, char **argv) {
    struct launch_request req;
    bool strict = false;
    launch_request_init(&req, argc, argv);
    for (int i = 1; i < argc; i++) {
        const int r = launch_parse_flag(argc, argv, &i, &req);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (strcmp(argv[i], "-m") == 0) {
            if (!(req.model = cli_value(argc, argv, &i))) return 1;
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = true;
        } else if (strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--tokens") == 0) {
            if (!cli_value(argc, argv, &i)) return 1;
        } else {
            fprintf(stderr, "error: unknown option '%s'\n", argv[i]);
            return 1;
        }
    }
    struct launch_decision d;
    switch (launch_decide(&req, &d)) {
    case LAUNCH_MODE_IN_PROCESS: {
        char origin[32];
        snprintf(origin, sizeof origin, "r%d", d.rank);
        nm_log_set_origin(origin);
        printf("in-process: rank %d of %d%s, %d threads\n", d.rank, d.nranks, d.under_mpirun ? " (under mpirun)" : "",
               d.n_threads);
        fflush(stdout);
        struct checks_input in;
        launch_checks_input(&d, 0, strict, &in);
        checks_run_and_print(&in);
        return 0;
    }
    case LAUNCH_MODE_DONE: return 0;
    case LAUNCH_MODE_ERROR: return 1;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "topo") == 0) return cmd_topo(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "run") == 0) return run(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "mkmodel") == 0) return cmd_mkmodel(argc - 1, argv + 1);
    fprintf(stderr, "usage: launch_cmd topo|run|mkmodel ARGS...\n");
    return 2;
}
