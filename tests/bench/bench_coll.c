/* Collectives benchmark in the style of the OSU micro-benchmarks (osu_allreduce,
 * osu_allgather): latency per message size, 4 B to 64 MiB, for each numallm transport side by
 * side with Open MPI's own MPI_Allreduce / MPI_Allgather in the same run. For each size:
 * warm-up iterations per column (not timed), then 5 timed blocks of back-to-back operations
 * per column, the columns taking turns; a rank's figure is its median block (robust to the
 * preemptions of a shared machine), reported as average, minimum and maximum over ranks.
 * Next to it: the speedup of each transport over MPI, its bandwidth (bytes / time) and memcpy's
 * bandwidth for the same size with every rank copying at once (the ceiling for large sizes).
 *
 * Usage: mpirun -np N [--bind-to core] bench_coll [-o OPS] [-b MIN_BYTES] [-m MAX_BYTES]
 *        [-i ITER_SCALE] [-t shm,mpi]
 * -o is a comma list of allreduce (f32), allreduce_f64, allgather, or all (the default: all
 * three). Sizes are powers of two from MIN_BYTES (default 4) to MAX_BYTES (default 64 MiB).
 * -t lists the numallm transports to time (each becomes a column); shm:ONESHOT_KB[:SLOT_KB]
 * is the shm transport with other thresholds (shm:0 never uses the one-shot allreduce), and a
 * suffix /HINTS sets its cache hints (NM_COLL_SHM_HINTS syntax with '+': shm/none,
 * shm:0/nt-slot).
 * Allgather sizes are bytes per rank (as OSU's), up to MAX_BYTES / N so that the gathered
 * buffer stays within MAX_BYTES. Not a test: timings are printed, never asserted. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "coll.h"

#ifndef NM_HAVE_MPI
int main(void) {
    fprintf(stderr, "bench_coll: numallm was built without MPI; nothing to compare\n");
    return 77;
}
#else
#include <mpi.h>

enum col_kind { COL_TRANSPORT, COL_MPI, COL_MEMCPY };
struct column {
    enum col_kind kind;
    struct coll *c; /* COL_TRANSPORT */
    const char *name;
};

static int g_rank, g_size;
enum { BLOCKS = 5, MAX_COLS = 16 }; /* timed blocks per size and column; columns */

static void machine_facts(struct column *cols, int ncols) {
    char cpu[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    int nodes = 0;
    DIR *d = opendir("/sys/devices/system/node");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (!strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9')
                nodes++;
        closedir(d);
    }
    cpu_set_t set;
    int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1, most = 0,
        least = 0;
    MPI_Reduce(&mine, &most, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&mine, &least, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    if (g_rank) return;
    printf("# numallm bench_coll (OSU style: warm-up excluded; a rank's latency = the median of "
           "%d timed blocks, each the mean of its back-to-back operations, columns taking turns; "
           "avg/min/max over ranks)\n",
           BLOCKS);
    printf("# host %s, CPU %s, %ld CPUs online, %d NUMA node(s)\n", host, cpu,
           sysconf(_SC_NPROCESSORS_ONLN), nodes);
    printf("# %d ranks, CPUs each rank may run on: %d..%d; %s\n", g_size, least, most, lib);
    printf("# columns:");
    for (int i = 0; i < ncols; i++) printf(" %s", cols[i].name);
    printf("\n");
}

static int iters_for(size_t bytes, double scale) {
    double it = (double)(256u << 20) / (double)(bytes ? bytes : 1);
    it = it > 1000 ? 1000 : it < 10 ? 10 : it;
    it *= scale;
    return it < 2 ? 2 : (int)it;
}

enum op { OP_ALLREDUCE, OP_ALLREDUCE_F64, OP_ALLGATHER };

/* One operation of size bytes (allreduce: the vector; allgather: per rank) on a column. */
static void run_once(const struct column *col, enum op op, size_t bytes, void *in, void *out) {
    switch (col->kind) {
    case COL_TRANSPORT:
        if (op == OP_ALLREDUCE)
            coll_allreduce_sum_f32(col->c, in, out, bytes / sizeof(float));
        else if (op == OP_ALLREDUCE_F64)
            coll_allreduce_sum_f64(col->c, in, out, bytes / sizeof(double));
        else
            coll_allgather(col->c, in, bytes, out);
        break;
    case COL_MPI:
        if (op == OP_ALLREDUCE)
            MPI_Allreduce(in, out, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
        else if (op == OP_ALLREDUCE_F64)
            MPI_Allreduce(in, out, (int)(bytes / sizeof(double)), MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD);
        else
            MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case COL_MEMCPY:
        memcpy(out, in, bytes);
        break;
    }
}

/* Seconds per operation on this rank, for every column: warm-up, then BLOCKS timed blocks of
 * iters / BLOCKS operations, the columns taking turns block by block (so a disturbance on a
 * shared machine hits them all alike); the median block is the rank's figure. */
static void time_columns(const struct column *cols, int ncols, enum op op, size_t bytes, void *in,
                         void *out, int iters, double *t) {
    int per = iters / BLOCKS < 1 ? 1 : iters / BLOCKS, warmup = iters / 10 + 2;
    double blk[MAX_COLS][BLOCKS];
    for (int i = 0; i < ncols; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (int w = 0; w < warmup; w++) run_once(&cols[i], op, bytes, in, out);
    }
    for (int b = 0; b < BLOCKS; b++)
        for (int i = 0; i < ncols; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int k = 0; k < per; k++) run_once(&cols[i], op, bytes, in, out);
            blk[i][b] = (MPI_Wtime() - t0) / per;
        }
    for (int i = 0; i < ncols; i++) { /* median of BLOCKS (insertion sort) */
        for (int a = 1; a < BLOCKS; a++)
            for (int j = a; j > 0 && blk[i][j - 1] > blk[i][j]; j--) {
                double x = blk[i][j];
                blk[i][j] = blk[i][j - 1];
                blk[i][j - 1] = x;
            }
        t[i] = blk[i][BLOCKS / 2];
    }
}

static void bench_op(enum op op, struct column *cols, int ncols, size_t min_bytes,
                     size_t max_bytes, double scale) {
    size_t top = op == OP_ALLGATHER ? max_bytes / (size_t)g_size : max_bytes;
    size_t out_bytes = op == OP_ALLGATHER ? top * (size_t)g_size : top;
    float *in = nm_alloc(top, 64, "bench input"), *out = nm_alloc(out_bytes, 64, "bench output");
    if (op == OP_ALLREDUCE_F64)
        for (size_t i = 0; i < top / sizeof(double); i++) ((double *)in)[i] = 1.0;
    else
        for (size_t i = 0; i < top / sizeof(float); i++) in[i] = 1.0f;
    memset(out, 1, out_bytes); /* fault every page in before timing */
    int mpi_col = -1;
    for (int i = 0; i < ncols; i++)
        if (cols[i].kind == COL_MPI) mpi_col = i;
    if (!g_rank) {
        printf("\n# %s, %d ranks: latency in us (avg min max over ranks); speedup = MPI avg / "
               "transport avg; GB/s = size / avg time%s\n",
               op == OP_ALLREDUCE       ? "allreduce sum f32"
               : op == OP_ALLREDUCE_F64 ? "allreduce sum f64"
                                        : "allgather (size = bytes per rank)",
               g_size, op == OP_ALLGATHER ? " (per-rank bytes)" : "");
        printf("%10s", "size(B)");
        for (int i = 0; i < ncols; i++)
            if (cols[i].kind != COL_MEMCPY) printf(" | %-13s %8s %8s", cols[i].name, "min", "max");
        for (int i = 0; i < ncols; i++)
            if (cols[i].kind == COL_TRANSPORT) printf(" | %4s x   GB/s", cols[i].name);
        printf(" | memcpy GB/s\n");
    }
    size_t first = op == OP_ALLREDUCE_F64 ? 8 : 4;
    while (first < min_bytes) first *= 2;
    for (size_t bytes = first; bytes <= top; bytes *= 2) {
        int iters = iters_for(bytes, scale);
        double t[MAX_COLS], avg[MAX_COLS] = {0}, mn[MAX_COLS] = {0}, mx[MAX_COLS] = {0};
        time_columns(cols, ncols, op, bytes, in, out, iters, t);
        for (int i = 0; i < ncols; i++) {
            double sum = 0;
            MPI_Reduce(&t[i], &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            MPI_Reduce(&t[i], &mn[i], 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
            MPI_Reduce(&t[i], &mx[i], 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            avg[i] = sum / g_size;
        }
        if (g_rank) continue;
        printf("%10zu", bytes);
        for (int i = 0; i < ncols; i++)
            if (cols[i].kind != COL_MEMCPY)
                printf(" | %13.2f %8.2f %8.2f", avg[i] * 1e6, mn[i] * 1e6, mx[i] * 1e6);
        for (int i = 0; i < ncols; i++)
            if (cols[i].kind == COL_TRANSPORT)
                printf(" | %6.2f %6.2f", mpi_col >= 0 ? avg[mpi_col] / avg[i] : 0.0,
                       (double)bytes / avg[i] * 1e-9);
        for (int i = 0; i < ncols; i++)
            if (cols[i].kind == COL_MEMCPY) printf(" | %8.2f", (double)bytes / avg[i] * 1e-9);
        printf("\n");
        fflush(stdout);
    }
    nm_free(in);
    nm_free(out);
}

int main(int argc, char **argv) {
    const char *ops = "all", *transports = "shm,mpi";
    size_t max_bytes = 64u << 20, min_bytes = 4;
    double scale = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            ops = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            max_bytes = (size_t)strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            min_bytes = (size_t)strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            scale = atof(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            transports = argv[++i];
        else
            nm_fatal("usage: %s [-o allreduce,allreduce_f64,allgather|all] [-b MIN_BYTES] "
                     "[-m MAX_BYTES] [-i ITER_SCALE] [-t shm[:ONESHOT_KB[:SLOT_KB]][/HINTS],mpi]",
                     argv[0]);
    }
    int inited = 0; /* launcher/bench/bench_coll_main.c may call this with MPI already up */
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (getenv("NM_COLL")) {
        if (!g_rank) nm_log_warn("bench_coll: ignoring NM_COLL; -t chooses the transports");
        unsetenv("NM_COLL");
    }
    if (getenv("NM_COLL_SHM_HINTS")) {
        if (!g_rank) nm_log_warn("bench_coll: ignoring NM_COLL_SHM_HINTS; -t shm/HINTS sets them");
        unsetenv("NM_COLL_SHM_HINTS");
    }
    bool op_on[3] = {false, false, false};
    {
        static const char *const names[] = {"allreduce", "allreduce_f64", "allgather"};
        char olist[128];
        snprintf(olist, sizeof olist, "%s", ops);
        for (char *save, *o = strtok_r(olist, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
            size_t k = 0;
            for (; k < 3 && strcmp(o, names[k]); k++) {}
            if (!strcmp(o, "all"))
                op_on[0] = op_on[1] = op_on[2] = true;
            else if (k < 3)
                op_on[k] = true;
            else
                nm_fatal("bench_coll: -o %s: \"%s\" is not allreduce, allreduce_f64, allgather "
                         "or all",
                         ops, o);
        }
    }
    struct column cols[MAX_COLS];
    int ncols = 0;
    char list[512];
    snprintf(list, sizeof list, "%s", transports);
    for (char *save, *t = strtok_r(list, ",", &save); t && ncols < MAX_COLS - 2;
         t = strtok_r(NULL, ",", &save)) {
        /* "shm:ONESHOT_KB[:SLOT_KB][/HINTS]" is the shm transport with other thresholds or
         * cache hints */
        struct coll_options o = {.quiet = g_rank != 0};
        char *slash = strchr(t, '/');
        if (slash) o.shm_hints = slash + 1;
        unsigned oneshot_kb = 0, slot_kb = 0;
        if (!strncmp(t, "shm", 3) && sscanf(t, "shm:%u:%u", &oneshot_kb, &slot_kb) >= 1) {
            o.shm_oneshot_bytes = oneshot_kb ? (size_t)oneshot_kb << 10 : 1; /* 0: never */
            o.shm_slot_bytes = (size_t)slot_kb << 10;
        }
        o.transport = !strncmp(t, "shm", 3)  ? COLL_TRANSPORT_SHM
                      : !strcmp(t, "mpi")    ? COLL_TRANSPORT_MPI
                      : !strcmp(t, "single") ? COLL_TRANSPORT_SINGLE
                                             : COLL_TRANSPORT_AUTO;
        cols[ncols++] = (struct column){COL_TRANSPORT, coll_init(&o), t};
    }
    cols[ncols++] = (struct column){COL_MPI, NULL, "MPI"};
    cols[ncols++] = (struct column){COL_MEMCPY, NULL, "memcpy"};
    machine_facts(cols, ncols);
    for (int k = 0; k < 3; k++)
        if (op_on[k]) bench_op((enum op)k, cols, ncols, min_bytes, max_bytes, scale);
    for (int i = 0; i < ncols; i++)
        if (cols[i].kind == COL_TRANSPORT) coll_free(cols[i].c);
    if (!inited) MPI_Finalize();
    return 0;
}
#endif
