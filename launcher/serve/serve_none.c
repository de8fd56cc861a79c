/* numallm serve in a build without libmicrohttpd or jansson: says how to get them. */
#include <stdio.h>

#include "cli.h"

int cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "error: this numallm was built without libmicrohttpd and jansson, which serve needs: install "
                    "libmicrohttpd-dev and libjansson-dev (launcher/setup.sh does) and build again\n");
    return 1;
}
