/* Start-up checks of a rank (see checks.h). */
#define _GNU_SOURCE
#include "checks.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#endif
#ifdef NM_HAVE_NUMA
#include <numa.h>
#endif

#include "base.h"

const char *checks_result_str(enum checks_result r) {
    switch (r) {
    case CHECKS_RESULT_PASS: return "pass";
    case CHECKS_RESULT_WARN: return "warn";
    case CHECKS_RESULT_FAIL: return "fail";
    }
    return "?";
}

static void line_set(struct checks_line *l, const char *name, enum checks_result r, const char *hint,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void line_set(struct checks_line *l, const char *name, enum checks_result r, const char *hint,
                     const char *fmt, ...) {
    l->name = name;
    l->result = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->detail, sizeof l->detail, fmt, ap);
    va_end(ap);
    snprintf(l->hint, sizeof l->hint, "%s", hint ? hint : "");
}

static const char *gib(uint64_t b, char *buf, size_t len) {
    snprintf(buf, len, "%.1f GiB", (double)b / (1ull << 30));
    return buf;
}

/* ---- AMX ------------------------------------------------------------------------------- */

#define CHECKS_ARCH_GET_XCOMP_PERM 0x1022
#define CHECKS_ARCH_REQ_XCOMP_PERM 0x1023
#define CHECKS_XFEATURE_XTILEDATA 18

static void check_amx(struct checks_line *l) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    bool tile = false, int8 = false, bf16 = false;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        bf16 = (d >> 22) & 1;
        tile = (d >> 24) & 1;
        int8 = (d >> 25) & 1;
    }
    (void)a, (void)b, (void)c;
    if (!tile) {
        line_set(l, "amx", CHECKS_RESULT_WARN,
                 "prefill runs on the AVX-512/AVX2 kernels; AMX needs a 4th-generation Xeon (Sapphire Rapids) or later",
                 "CPU has no AMX");
        return;
    }
    char what[48];
    snprintf(what, sizeof what, "AMX-TILE%s%s", int8 ? ", AMX-INT8" : "", bf16 ? ", AMX-BF16" : "");
    uint64_t perm = 0;
    if (syscall(SYS_arch_prctl, CHECKS_ARCH_GET_XCOMP_PERM, &perm) == 0 && (perm >> CHECKS_XFEATURE_XTILEDATA & 1)) {
        line_set(l, "amx", CHECKS_RESULT_PASS, NULL, "%s; tile data already permitted", what);
        return;
    }
    if (syscall(SYS_arch_prctl, CHECKS_ARCH_REQ_XCOMP_PERM, CHECKS_XFEATURE_XTILEDATA) == 0) {
        line_set(l, "amx", CHECKS_RESULT_PASS, NULL, "%s; tile data permitted (arch_prctl)", what);
        return;
    }
    const int e = errno;
    line_set(l, "amx", CHECKS_RESULT_FAIL,
             e == EINVAL ? "the kernel does not manage AMX state: Linux 5.16 or later is needed for AMX"
                         : "a seccomp filter or the kernel refuses AMX to this process; prefill falls back to AVX-512",
             "%s on the CPU, but arch_prctl(ARCH_REQ_XCOMP_PERM) failed: %s", what, strerror(e));
#else
    line_set(l, "amx", CHECKS_RESULT_WARN, "AMX exists on x86-64 Xeons only", "not an x86-64 CPU: no AMX");
#endif
}

/* ---- binding --------------------------------------------------------------------------- */

static bool cpulist_to_set(const char *list, cpu_set_t *set) {
    CPU_ZERO(set);
    const char *p = list;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a >= CPU_SETSIZE) return false;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a || b >= CPU_SETSIZE) return false;
        }
        for (long x = a; x <= b; x++) CPU_SET((int)x, set);
        if (*end == ',') end++;
        else if (*end) return false;
        p = end;
    }
    return true;
}

static void set_to_cpulist(const cpu_set_t *set, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set)) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
        int k = e == c ? snprintf(buf + used, len - used, "%s%d", used ? "," : "", c)
                       : snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, e);
        if (k < 0 || used + (size_t)k >= len) break;
        used += (size_t)k;
        c = e;
    }
}

void checks_binding(const struct checks_input *in, const char *actual_cpus, struct checks_line *l) {
    cpu_set_t actual, expected;
    if (!cpulist_to_set(actual_cpus, &actual)) {
        line_set(l, "binding", CHECKS_RESULT_WARN, NULL, "cannot read this process's CPUs (\"%s\")", actual_cpus);
        return;
    }
    if (!in->expected_cpus[0]) {
        if (in->nranks <= 1)
            line_set(l, "binding", CHECKS_RESULT_PASS, NULL, "one rank, in-process: not bound, %d CPUs allowed (%s)",
                     CPU_COUNT(&actual), actual_cpus);
        else
            line_set(l, "binding", CHECKS_RESULT_WARN,
                     "`numallm topo --ranks N` shows which rank counts this machine can plan",
                     "bound to %s; not checked: %s", actual_cpus,
                     in->plan_note[0] ? in->plan_note : "no rank plan for this job");
        return;
    }
    if (!cpulist_to_set(in->expected_cpus, &expected)) {
        line_set(l, "binding", CHECKS_RESULT_WARN, NULL, "the plan's CPU list \"%s\" is malformed", in->expected_cpus);
        return;
    }
    if (CPU_EQUAL(&actual, &expected)) {
        line_set(l, "binding", CHECKS_RESULT_PASS, NULL, "bound to CPUs %s, as planned", actual_cpus);
        return;
    }
    cpu_set_t both;
    CPU_AND(&both, &actual, &expected);
    const char *how = CPU_EQUAL(&both, &expected)  ? "more than"
                      : CPU_EQUAL(&both, &actual) ? "part of"
                      : CPU_COUNT(&both) == 0    ? "none of"
                                                 : "other than";
    line_set(l, "binding", CHECKS_RESULT_FAIL,
             "bind one rank per NUMA node: mpirun --map-by ppr:1:numa --bind-to numa (`numallm run --dry-run` prints "
             "the whole line)",
             "may run on CPUs %s, %s the plan's %s for rank %d of %d", actual_cpus, how, in->expected_cpus, in->rank,
             in->nranks);
}

/* ---- kernel settings ------------------------------------------------------------------- */

static bool read_first_line(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (ok) buf[strcspn(buf, "\n")] = 0;
    return ok;
}

void checks_numa_balancing(const char *value, int nranks, struct checks_line *l) {
    if (!value) {
        line_set(l, "numa_balancing", CHECKS_RESULT_PASS, NULL, "not in this kernel: pages stay where they are put");
        return;
    }
    if (strcmp(value, "0") == 0) {
        line_set(l, "numa_balancing", CHECKS_RESULT_PASS, NULL, "off");
        return;
    }
    if (nranks <= 1) {
        line_set(l, "numa_balancing", CHECKS_RESULT_PASS, NULL, "on (%s); harmless with one rank", value);
        return;
    }
    line_set(l, "numa_balancing", CHECKS_RESULT_WARN, "as root: sysctl -w kernel.numa_balancing=0",
             "on (%s): the kernel may migrate a rank's weights to other nodes and unmaps pages to sample them", value);
}

void checks_thp(const char *value, struct checks_line *l) {
    if (!value) {
        line_set(l, "huge pages", CHECKS_RESULT_WARN, NULL, "transparent huge pages are not available in this kernel");
        return;
    }
    const char *open = strchr(value, '['), *close = open ? strchr(open, ']') : NULL;
    char mode[32] = "";
    if (open && close && close - open - 1 < (long)sizeof mode)
        snprintf(mode, sizeof mode, "%.*s", (int)(close - open - 1), open + 1);
    if (strcmp(mode, "always") == 0)
        line_set(l, "huge pages", CHECKS_RESULT_PASS, NULL, "transparent huge pages: always");
    else if (strcmp(mode, "madvise") == 0)
        line_set(l, "huge pages", CHECKS_RESULT_WARN,
                 "as root: echo always > /sys/kernel/mm/transparent_hugepage/enabled",
                 "transparent huge pages: madvise: only memory that asks for them gets 2 MiB pages");
    else
        line_set(l, "huge pages", CHECKS_RESULT_WARN,
                 "as root: echo always > /sys/kernel/mm/transparent_hugepage/enabled",
                 "transparent huge pages: %s: weights sit in 4 KiB pages (more TLB misses)", mode[0] ? mode : value);
}

/* ---- memory ---------------------------------------------------------------------------- */

void checks_memory(const struct checks_input *in, int64_t free_bytes, int64_t total_bytes, struct checks_line *l) {
    char where[48], b1[32], b2[32], b3[32];
    if (in->node >= 0) snprintf(where, sizeof where, "node %d", in->node);
    else snprintf(where, sizeof where, "the machine");
    if (free_bytes < 0 || total_bytes <= 0) {
        line_set(l, "memory", CHECKS_RESULT_WARN, NULL, "cannot read the memory of %s", where);
        return;
    }
    gib((uint64_t)free_bytes, b1, sizeof b1);
    gib((uint64_t)total_bytes, b2, sizeof b2);
    gib(in->weight_bytes, b3, sizeof b3);
    if (in->weight_bytes == 0)
        line_set(l, "memory", CHECKS_RESULT_PASS, NULL, "%s: %s free of %s", where, b1, b2);
    else if ((uint64_t)total_bytes < in->weight_bytes)
        line_set(l, "memory", CHECKS_RESULT_FAIL,
                 "use a smaller quantization or more NUMA nodes (`numallm topo -m MODEL` shows the plan)",
                 "%s has %s in all; the weights of this rank need %s", where, b2, b3);
    else if ((uint64_t)free_bytes < in->weight_bytes)
        line_set(l, "memory", CHECKS_RESULT_WARN,
                 "free memory on that node (other jobs, or the page cache: sync; echo 1 > /proc/sys/vm/drop_caches), "
                 "or the kernel puts the rest on other nodes",
                 "%s: %s free of %s; the weights of this rank need %s", where, b1, b2, b3);
    else
        line_set(l, "memory", CHECKS_RESULT_PASS, NULL, "%s: %s free of %s; the weights need %s", where, b1, b2, b3);
}

static void node_memory(int node, int64_t *free_bytes, int64_t *total_bytes) {
    *free_bytes = -1;
    *total_bytes = -1;
#ifdef NM_HAVE_NUMA
    if (numa_available() < 0) return;
    int64_t fr_sum = 0, tot_sum = 0;
    for (int n = node < 0 ? 0 : node; n <= (node < 0 ? numa_max_node() : node); n++) {
        long long fr = 0;
        long long tot = numa_node_size64(n, &fr);
        if (tot < 0) {
            if (node >= 0) return;
            continue;
        }
        fr_sum += fr;
        tot_sum += tot;
    }
    *free_bytes = fr_sum;
    *total_bytes = tot_sum;
#else
    (void)node;
#endif
}

/* ---- all together ---------------------------------------------------------------------- */

int checks_run(const struct checks_input *in, struct checks_line *lines) {
    int n = 0;
    check_amx(&lines[n++]);

    cpu_set_t set;
    char actual[4096] = "";
    if (sched_getaffinity(0, sizeof set, &set) == 0) set_to_cpulist(&set, actual, sizeof actual);
    checks_binding(in, actual, &lines[n++]);

    char v[256];
    checks_numa_balancing(read_first_line("/proc/sys/kernel/numa_balancing", v, sizeof v) ? v : NULL, in->nranks,
                          &lines[n++]);
    checks_thp(read_first_line("/sys/kernel/mm/transparent_hugepage/enabled", v, sizeof v) ? v : NULL, &lines[n++]);

    int64_t fr, tot;
    node_memory(in->node, &fr, &tot);
    checks_memory(in, fr, tot, &lines[n]);
#ifndef NM_HAVE_NUMA
    line_set(&lines[n], "memory", CHECKS_RESULT_WARN, "install libnuma-dev and rebuild",
             "built without libnuma: memory per node not checked");
#endif
    n++;
    NM_ASSERT(n <= CHECKS_MAX);
    return n;
}

int checks_run_and_print(const struct checks_input *in) {
    struct checks_line lines[CHECKS_MAX];
    const int n = checks_run(in, lines);
    int fails = 0, warns = 0;
    for (int i = 0; i < n; i++) {
        fails += lines[i].result == CHECKS_RESULT_FAIL;
        warns += lines[i].result == CHECKS_RESULT_WARN;
    }
    /* Warnings and failures are printed even at the quietest log level; passes only at info. */
    const bool show_all = nm_log_level >= 1;
    if (show_all || fails || warns)
        fprintf(stderr, "[%s] start-up checks: %d pass, %d warn, %d fail%s\n", nm_log_origin(), n - fails - warns,
                warns, fails, fails && !in->strict ? " (--strict makes a fail an error)" : "");
    for (int i = 0; i < n; i++) {
        const struct checks_line *l = &lines[i];
        if (l->result == CHECKS_RESULT_PASS && !show_all) continue;
        fprintf(stderr, "[%s]   %s  %-14s  %s\n", nm_log_origin(), checks_result_str(l->result), l->name, l->detail);
        if (l->hint[0] && l->result != CHECKS_RESULT_PASS)
            fprintf(stderr, "[%s]   %4s  %-14s  hint: %s\n", nm_log_origin(), "", "", l->hint);
    }
    fflush(stderr);
    if (fails && in->strict)
        nm_fatal("%d start-up check%s failed and --strict is set (the table above says what to do)", fails,
                 fails == 1 ? "" : "s");
    return fails;
}
