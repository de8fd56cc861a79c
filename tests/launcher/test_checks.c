/* Start-up checks (rank/model/checks.c): each check's pass/warn/fail decision on given inputs
 * (binding lists, memory figures, sysctl and sysfs values), the whole table on this machine
 * (AMX must be "warn: CPU has no AMX" where CPUID says there is none), and --strict, which must
 * end the process when a check fails. Usage: test_checks */
#define _GNU_SOURCE
#include <cpuid.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base.h"
#include "checks.h"

static int g_fail;

#define CHECK(cond, ...)                                                                            \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                           \
            fprintf(stderr, "  (rerun: test_checks)\n");                                            \
            g_fail++;                                                                               \
        }                                                                                           \
    } while (0)

static struct checks_input input(int rank, int nranks, const char *expected) {
    struct checks_input in;
    memset(&in, 0, sizeof in);
    in.rank = rank;
    in.nranks = nranks;
    in.node = 0;
    snprintf(in.expected_cpus, sizeof in.expected_cpus, "%s", expected);
    return in;
}

static void expect(const struct checks_line *l, enum checks_result r, const char *needle) {
    CHECK(l->result == r, "%s: got %s (%s), expected %s\n", l->name, checks_result_str(l->result), l->detail,
          checks_result_str(r));
    CHECK(strstr(l->detail, needle) || strstr(l->hint, needle), "%s: '%s' / '%s' lacks '%s'\n", l->name, l->detail,
          l->hint, needle);
    if (r != CHECKS_RESULT_PASS) CHECK(l->hint[0] || r == CHECKS_RESULT_WARN, "%s: a fail has a hint\n", l->name);
}

static void test_binding(void) {
    struct checks_line l;
    struct checks_input in = input(1, 8, "14-27,126-139");
    checks_binding(&in, "14-27,126-139", &l);
    expect(&l, CHECKS_RESULT_PASS, "as planned");
    checks_binding(&in, "0-223", &l); /* not bound: a hand-written mpirun without --bind-to */
    expect(&l, CHECKS_RESULT_FAIL, "more than the plan's 14-27,126-139 for rank 1 of 8");
    expect(&l, CHECKS_RESULT_FAIL, "--bind-to numa");
    checks_binding(&in, "14-20", &l); /* bound to cores: part of the node */
    expect(&l, CHECKS_RESULT_FAIL, "part of");
    checks_binding(&in, "0-13,112-125", &l); /* the node of rank 0 */
    expect(&l, CHECKS_RESULT_FAIL, "none of");
    in = input(0, 1, "");
    checks_binding(&in, "0-63", &l);
    expect(&l, CHECKS_RESULT_PASS, "in-process");
    in = input(2, 4, "");
    snprintf(in.plan_note, sizeof in.plan_note, "no rank plan for 4 ranks on this machine");
    checks_binding(&in, "0-1", &l);
    expect(&l, CHECKS_RESULT_WARN, "no rank plan for 4 ranks");
}

static void test_memory(void) {
    struct checks_line l;
    struct checks_input in = input(0, 2, "0-3");
    in.node = 1;
    in.weight_bytes = 40ull << 30;
    checks_memory(&in, 50ll << 30, 64ll << 30, &l);
    expect(&l, CHECKS_RESULT_PASS, "node 1: 50.0 GiB free of 64.0 GiB; the weights need 40.0 GiB");
    checks_memory(&in, 30ll << 30, 64ll << 30, &l);
    expect(&l, CHECKS_RESULT_WARN, "30.0 GiB free of 64.0 GiB");
    expect(&l, CHECKS_RESULT_WARN, "drop_caches");
    checks_memory(&in, 30ll << 30, 32ll << 30, &l);
    expect(&l, CHECKS_RESULT_FAIL, "node 1 has 32.0 GiB in all; the weights of this rank need 40.0 GiB");
    in.node = -1;
    in.weight_bytes = 0;
    checks_memory(&in, 1ll << 30, 2ll << 30, &l);
    expect(&l, CHECKS_RESULT_PASS, "the machine: 1.0 GiB free of 2.0 GiB");
    checks_memory(&in, -1, -1, &l);
    expect(&l, CHECKS_RESULT_WARN, "cannot read");
}

static void test_kernel_settings(void) {
    struct checks_line l;
    checks_numa_balancing("0", 8, &l);
    expect(&l, CHECKS_RESULT_PASS, "off");
    checks_numa_balancing("1", 8, &l);
    expect(&l, CHECKS_RESULT_WARN, "sysctl -w kernel.numa_balancing=0");
    checks_numa_balancing("1", 1, &l);
    expect(&l, CHECKS_RESULT_PASS, "harmless with one rank");
    checks_numa_balancing(NULL, 8, &l);
    expect(&l, CHECKS_RESULT_PASS, "not in this kernel");
    checks_thp("[always] madvise never", &l);
    expect(&l, CHECKS_RESULT_PASS, "always");
    checks_thp("always [madvise] never", &l);
    expect(&l, CHECKS_RESULT_WARN, "madvise");
    checks_thp("always madvise [never]", &l);
    expect(&l, CHECKS_RESULT_WARN, "never");
    expect(&l, CHECKS_RESULT_WARN, "echo always > /sys/kernel/mm/transparent_hugepage/enabled");
}

static bool cpu_has_amx(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return (d >> 24) & 1;
}

/* The table on this machine, as the process is bound now. */
static void test_here(void) {
    cpu_set_t set;
    NM_ASSERT(sched_getaffinity(0, sizeof set, &set) == 0);
    char cpus[4096] = "";
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            snprintf(cpus + strlen(cpus), sizeof cpus - strlen(cpus), "%s%d", cpus[0] ? "," : "", c);
    struct checks_input in = input(0, 2, cpus);
    struct checks_line lines[CHECKS_MAX];
    const int n = checks_run(&in, lines);
    CHECK(n == 5, "5 checks, got %d\n", n);
    for (int i = 0; i < n; i++) {
        printf("  %s  %-14s  %s\n", checks_result_str(lines[i].result), lines[i].name, lines[i].detail);
        if (strcmp(lines[i].name, "amx") == 0) {
            if (!cpu_has_amx()) expect(&lines[i], CHECKS_RESULT_WARN, "CPU has no AMX");
            else CHECK(lines[i].result != CHECKS_RESULT_WARN, "AMX CPU: %s\n", lines[i].detail);
        }
        if (strcmp(lines[i].name, "binding") == 0) expect(&lines[i], CHECKS_RESULT_PASS, "as planned");
    }
    CHECK(checks_run_and_print(&in) == 0 || !cpu_has_amx(), "no fail expected here\n");
}

/* --strict: a failed check ends the process with status 1 after the table. */
static void test_strict(void) {
    for (int strict = 0; strict <= 1; strict++) {
        fflush(stdout);
        pid_t pid = fork();
        NM_ASSERT(pid >= 0);
        if (pid == 0) {
            struct checks_input in = input(3, 4, "1000"); /* a CPU no machine binds it to */
            in.strict = strict;
            nm_log_set_origin("r3/strict-test");
            const int fails = checks_run_and_print(&in);
            _exit(fails >= 1 ? 42 : 0);
        }
        int status;
        NM_ASSERT(waitpid(pid, &status, 0) == pid);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        CHECK(code == (strict ? 1 : 42), "strict=%d: exit %d, expected %d\n", strict, code, strict ? 1 : 42);
    }
}

int main(void) {
    test_binding();
    test_memory();
    test_kernel_settings();
    test_here();
    test_strict();
    if (g_fail) {
        fprintf(stderr, "test_checks: %d checks failed\n", g_fail);
        return 1;
    }
    printf("test_checks: passed\n");
    return 0;
}
