/* See synth_model.h. */
#include "synth_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "mkmodel.h"

int synth_model_open(const char *preset, const char *type, const char *dir, uint64_t seed, bool reuse,
                     struct pool *pool, struct coll *coll, struct synth_model *out) {
    const struct mkmodel_preset *p = mkmodel_find_preset(preset);
    const int ti = dtype_from_name(type);
    if (!p || ti < 0) {
        fprintf(stderr, "unknown %s %s\n", p ? "type" : "preset", p ? type : preset);
        return 2;
    }
    out->type = (enum dtype)ti;
    snprintf(out->path, sizeof out->path, "%s/%s_%s.gguf", dir, preset, type);
    const int rank = coll ? coll_rank(coll) : 0, nranks = coll ? coll_size(coll) : 1;
    const double timeout = coll ? coll_timeout(coll) : 0;
    if (coll) coll_set_timeout(coll, 600); /* the others wait while rank 0 writes (K-quants: seconds) */
    char err[512];
    struct stat st;
    if (rank == 0 && !(reuse && stat(out->path, &st) == 0)) {
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        struct mkmodel_params mp = {.preset = p, .type = out->type, .output_type = -1, .seed = seed};
        if (system(cmd) != 0) {
            fprintf(stderr, "cannot make the directory %s\n", dir);
            return 1;
        }
        if (mkmodel_write(&mp, out->path, pool, err, sizeof err)) {
            fprintf(stderr, "mkmodel: %s\n", err);
            return 1;
        }
    }
    if (coll) coll_barrier(coll);
    struct model_load_params lp = {.rank = rank, .nranks = nranks, .pool = pool, .coll = nranks > 1 ? coll : NULL};
    if (model_load(out->path, &lp, &out->m, err, sizeof err)) {
        fprintf(stderr, "model_load: %s\n", err);
        return 1;
    }
    if (coll) {
        coll_barrier(coll);
        coll_set_timeout(coll, timeout);
    }
    return 0;
}
