/* numallm: the command users type. Dispatches to one subcommand per file (cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmd_tokenize.h"
#include "cmd_topo.h"

static void usage(FILE *f) {
    fprintf(f,
            "numallm: GGUF language models on multi-socket CPU servers\n"
            "\n"
            "usage: numallm COMMAND [options]   (numallm COMMAND --help for its options)\n"
            "\n"
            "commands:\n"
            "  run        generate text or tokens from a prompt (the default model needs no download)\n"
            "  perplexity score a text (llama.cpp's method and numbers)\n"
            "  serve      an OpenAI-compatible HTTP server with continuous batching (llama-server's flags)\n"
            "  bench      llama-bench's tests over rank counts, with bandwidth and scaling efficiency\n"
            "  mkmodel    write a synthetic GGUF model with a real model's shapes\n"
            "  tokenize   print the token ids and pieces of a text\n"
            "  topo       print the machine (NUMA nodes, cores, memory, GPUs) and, with -m, the rank plan\n"
            "\n"
            "numallm --version: the commit this binary was built from\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "perplexity") == 0) return cmd_perplexity(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "mkmodel") == 0) return cmd_mkmodel(argc - 1, argv + 1);
    if (strcmp(cmd, "topo") == 0) return cmd_topo(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        char commit[64];
        int number;
        cli_build_info(commit, sizeof commit, &number);
#ifdef __clang__
        const char *cc = "clang " __clang_version__;
#else
        const char *cc = "gcc " __VERSION__;
#endif
        printf("version: %d (%s)\nbuilt with %s\n", number, commit, cc);
        return 0;
    }
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 1;
}
