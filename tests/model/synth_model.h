/* A synthetic model of one of mkmodel's presets, for the programs that drive the engine directly
 * (test_batch, bench_batch, test_gpu_stage): rank 0 writes DIR/PRESET_TYPE.gguf (or reuses it),
 * then every rank of coll loads its shard. */
#ifndef NM_TESTS_SYNTH_MODEL_H
#define NM_TESTS_SYNTH_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "coll.h"
#include "model.h"
#include "pool.h"
#include "types.h"

struct synth_model {
    struct model *m;
    enum dtype type;
    char path[1024];
};

/* Parse PRESET and TYPE, make the file (seed; reuse: keep a file that is already there) and load
 * it with pool on this rank of coll. 0 on success; otherwise it has said what failed on stderr
 * and returns the exit code to use: 2 for an unknown preset or type, 1 for anything else. */
int synth_model_open(const char *preset, const char *type, const char *dir, uint64_t seed, bool reuse,
                     struct pool *pool, struct coll *coll, struct synth_model *out);

#endif
