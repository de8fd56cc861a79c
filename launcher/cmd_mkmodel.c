/* numallm mkmodel: write a synthetic GGUF model (see rank/model/mkmodel.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mkmodel.h"
#include "types.h"

static void mkmodel_usage(FILE *f) {
    fprintf(f,
            "usage: numallm mkmodel --preset NAME --type TYPE -o FILE [--seed S] [--output-type TYPE]\n"
            "                       [--vocab-from FILE.gguf] [-t THREADS]\n"
            "\n"
            "  --type         matmul weights and token_embd, one of: %s\n"
            "                 Quantized types use numallm's own plain quantizers (nearest values, valid\n"
            "                 blocks, not llama-quantize's quality: for benchmarks and tests, not for use).\n"
            "                 Types of 256-value blocks fall back, as llama-quantize does, for rows that are\n"
            "                 not a multiple of 256: q2_k/q3_k -> q4_0, q4_k -> q5_0, q5_k -> q5_1,\n"
            "                 q6_k -> q8_0, the iq types -> iq4_nl\n"
            "  --output-type  type of output.weight (default: --type)\n"
            "  --vocab-from   copy the tokenizer.* keys (vocabulary) of another GGUF file\n"
            "\npresets:\n",
            dtype_supported_list());
    for (const struct mkmodel_preset *p = mkmodel_presets(); p->name; p++)
        fprintf(f, "  %-14s %-6s %s\n", p->name, p->arch, p->about);
}

static bool parse_type(const char *flag, const char *v, int *out) {
    int t = dtype_from_name(v);
    if (t < 0) {
        fprintf(stderr, "error: invalid value '%s' for %s: expected one of %s\n", v, flag, dtype_supported_list());
        return false;
    }
    *out = t;
    return true;
}

int cmd_mkmodel(int argc, char **argv) {
    const char *preset = NULL, *out = NULL, *vocab = NULL, *v;
    int type = -1, output_type = -1;
    long long seed = 1, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mkmodel_usage(stdout);
            return 0;
        }
        if (!(v = cli_value(argc, argv, &i))) return 1;
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--type")) { if (!parse_type(a, v, &type)) return 1; }
        else if (!strcmp(a, "--output-type")) { if (!parse_type(a, v, &output_type)) return 1; }
        else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) { if (!cli_int(a, v, 0, INT64_MAX, &seed)) return 1; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!cli_int(a, v, 1, 4096, &threads)) return 1; }
        else if (!strcmp(a, "--vocab-from")) vocab = v;
        else {
            fprintf(stderr, "error: unknown option '%s' for mkmodel\n", a);
            return 1;
        }
    }
    if (!preset || !out || type < 0) {
        fprintf(stderr, "error: mkmodel needs --preset, --type and -o\n\n");
        mkmodel_usage(stderr);
        return 1;
    }
    const struct mkmodel_preset *p = mkmodel_find_preset(preset);
    if (!p) {
        fprintf(stderr, "error: unknown preset '%s'\n\n", preset);
        mkmodel_usage(stderr);
        return 1;
    }
    struct pool *pool = cli_pool((int)threads);
    struct mkmodel_params mp = {.preset = p, .type = (enum dtype)type, .output_type = output_type,
                                .seed = (uint64_t)seed, .vocab_from = vocab};
    char err[1024];
    enum nm_status st = mkmodel_write(&mp, out, pool, err, sizeof err);
    pool_free(pool);
    if (st) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    return 0;
}
