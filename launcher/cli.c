/* Shared command-line helpers (see cli.h). */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base.h"
#include "mkmodel.h"

bool cli_int(const char *flag, const char *value, long long min, long long max, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end || v < min || v > max) {
        fprintf(stderr, "error: invalid value '%s' for %s: expected an integer in %lld..%lld\n", value, flag, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *value, double min, double max, double *out) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "error: invalid value '%s' for %s: expected a number in %g..%g\n", value, flag, min, max);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool cli_int_list(const char *flag, const char *value, int32_t **out, int *n) {
    int cap = 16, cnt = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    NM_ASSERT(v);
    const char *p = value;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "error: invalid value '%s' for %s: expected comma-separated token ids\n", value, flag);
            free(v);
            return false;
        }
        if (cnt == cap) {
            cap *= 2;
            v = realloc(v, (size_t)cap * sizeof *v);
            NM_ASSERT(v);
        }
        v[cnt++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (cnt == 0) {
        fprintf(stderr, "error: %s is empty: expected comma-separated token ids\n", flag);
        free(v);
        return false;
    }
    *out = v;
    *n = cnt;
    return true;
}

int cli_allowed_cpus(int **cpus) {
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        *cpus = malloc((size_t)(nc > 0 ? nc : 1) * sizeof **cpus);
        NM_ASSERT(*cpus);
        for (long i = 0; i < (nc > 0 ? nc : 1); i++) (*cpus)[n++] = (int)i;
        return n;
    }
    *cpus = malloc((size_t)CPU_COUNT(&set) * sizeof **cpus);
    NM_ASSERT(*cpus);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) (*cpus)[n++] = c;
    return n;
}

struct pool *cli_pool(int n_threads) {
    int *cpus;
    int n_cpus = cli_allowed_cpus(&cpus);
    if (n_threads <= 0) n_threads = n_cpus;
    struct pool *p;
    if (n_threads <= n_cpus) {
        p = pool_init(n_threads, cpus);
    } else {
        nm_log_warn("%d threads on %d allowed CPUs: threads are not bound (oversubscribed)", n_threads, n_cpus);
        p = pool_init(n_threads, NULL);
    }
    free(cpus);
    return p;
}

static void cache_dir(char *dir, size_t len) {
    const char *e = getenv("NUMALLM_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (e && *e) snprintf(dir, len, "%s", e);
    else if (xdg && *xdg) snprintf(dir, len, "%s/numallm", xdg);
    else snprintf(dir, len, "%s/.cache/numallm", home && *home ? home : "/tmp");
}

static bool mkdir_p(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return false;
        *p = '/';
    }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

bool cli_default_model(char *path, size_t len, struct pool *pool) {
    char dir[4000];
    cache_dir(dir, sizeof dir);
    snprintf(path, len, "%s/qwen2.5-0.5b-q4_0.gguf", dir);
    struct stat sb;
    if (stat(path, &sb) == 0) return true;
    if (!mkdir_p(dir)) {
        fprintf(stderr, "error: cannot create the cache directory %s: %s (set NUMALLM_CACHE)\n", dir, strerror(errno));
        return false;
    }
    nm_log_info("no -m given: making the default synthetic model %s (qwen2.5-0.5b shapes, Q4_0, random weights; "
                "made once)", path);
    char tmp[4200], err[512] = "cannot rename the finished file into place";
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    struct mkmodel_params mp = {.preset = mkmodel_find_preset("qwen2.5-0.5b"), .type = DTYPE_Q4_0,
                                .output_type = -1, .seed = 1};
    if (mkmodel_write(&mp, tmp, pool, err, sizeof err) != NM_OK || rename(tmp, path) != 0) {
        fprintf(stderr, "error: making the default model failed: %s\n", err);
        unlink(tmp);
        return false;
    }
    return true;
}

bool cli_first_line(char *const argv[], char *out, size_t len) {
    int fd[2];
    if (pipe(fd) != 0) return false;
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return false;
    }
    if (pid == 0) {
        const int dn = open("/dev/null", O_RDWR);
        dup2(fd[1], 1);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 2);
        }
        close(fd[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[512] = "";
    bool got = f && fgets(line, sizeof line, f) != NULL;
    if (f) {
        char sink[512];
        while (fgets(sink, sizeof sink, f)) {}
        fclose(f);
    } else {
        close(fd[0]);
    }
    int status;
    waitpid(pid, &status, 0);
    got = got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    line[strcspn(line, "\r\n")] = 0;
    if (got) snprintf(out, len, "%s", line);
    return got && *line;
}

void cli_build_info(char *commit, size_t len, int *number) {
    snprintf(commit, len, "unknown");
    *number = 0;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    strcpy(slash + 1, "CMakeCache.txt");
    FILE *f = fopen(exe, "r");
    if (!f) return;
    char line[4200], src[sizeof line] = "";
    static const char key[] = "CMAKE_HOME_DIRECTORY:INTERNAL=";
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, sizeof key - 1) == 0) {
            snprintf(src, sizeof src, "%s", line + sizeof key - 1);
            src[strcspn(src, "\r\n")] = 0;
        }
    fclose(f);
    if (!*src) return;
    char *rev[] = {"git", "-C", src, "rev-parse", "--short", "HEAD", NULL};
    char *cnt[] = {"git", "-C", src, "rev-list", "--count", "HEAD", NULL};
    char *top[] = {"git", "-C", src, "rev-parse", "--show-toplevel", NULL};
    char buf[4096];
    /* Only the source tree's own repository counts (a copy without .git inside another
     * repository would report that one's commit). */
    char real[4096];
    if (!realpath(src, real) || !cli_first_line(top, buf, sizeof buf) || strcmp(buf, real) != 0) return;
    if (cli_first_line(rev, buf, sizeof buf)) snprintf(commit, len, "%s", buf);
    if (cli_first_line(cnt, buf, sizeof buf)) *number = atoi(buf);
}
