/* Helpers shared by the numallm subcommands: flag values parsed with messages that name the
 * flag, the value and what is allowed; the CPUs this process may run on; the default model. */
#ifndef NM_CLI_H
#define NM_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"

/* Each returns false after printing "error: ..." to stderr. */
bool cli_int(const char *flag, const char *value, long long min, long long max, long long *out);
bool cli_float(const char *flag, const char *value, double min, double max, double *out);
/* The value after argv[*i] (advancing *i), or NULL after an error naming the flag. */
const char *cli_value(int argc, char **argv, int *i);
/* Parse "1,2,3" into ids (malloc'ed). */
bool cli_int_list(const char *flag, const char *value, int32_t **out, int *n);

/* CPUs in this process's affinity mask (as mpirun or taskset bound it), in order. Returns the
 * count; *cpus is malloc'ed. */
int cli_allowed_cpus(int **cpus);
/* A pool of n threads bound to the first n allowed CPUs (n <= 0: one per allowed CPU). */
struct pool *cli_pool(int n_threads);

/* Path of the default synthetic model in the cache directory ($NUMALLM_CACHE, else
 * $XDG_CACHE_HOME/numallm, else ~/.cache/numallm), created with mkmodel when missing. Returns
 * false after printing an error. */
bool cli_default_model(char *path, size_t len, struct pool *pool);

/* Run argv (stdin and stderr to /dev/null) and keep the first line of its output in out (false
 * when it did not run, failed or printed nothing). */
bool cli_first_line(char *const argv[], char *out, size_t len);
/* The commit (short hash) and commit count of the source tree this binary was built from, which
 * its build directory's CMakeCache.txt names: "unknown" and 0 when that tree is not a git
 * checkout of its own, or the binary has moved. */
void cli_build_info(char *commit, size_t len, int *number);

int cmd_run(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
/* numallm serve (launcher/serve/): an OpenAI-compatible server with continuous batching. */
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
