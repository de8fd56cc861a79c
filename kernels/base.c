/* Logging, fatal errors and allocation shared by every module (see base.h). */
#include "base.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_origin[64] = "r0";
static void (*g_fatal_hook)(int code);
int nm_log_level = 1;

void nm_log_set_origin(const char *origin) { snprintf(g_origin, sizeof g_origin, "%s", origin); }
const char *nm_log_origin(void) { return g_origin; }
void nm_fatal_set_hook(void (*hook)(int code)) { g_fatal_hook = hook; }
const char *nm_strerror_errno(void) { return strerror(errno); }

/* One write per line (stderr is unbuffered, and fprintf may write a line in pieces): under
 * mpirun the ranks' lines then arrive whole, not spliced into each other. */
static void vlog(FILE *f, const char *tag, const char *fmt, va_list ap) {
    char line[4096];
    int n = snprintf(line, sizeof line, "[%s] %s", g_origin, tag);
    if (n < 0 || n >= (int)sizeof line - 1) n = 0;
    const int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m > 0) n += NM_MIN(m, (int)(sizeof line - (size_t)n - 2));
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, f);
    fflush(f);
}

#define NM_DEFINE_LOG(name, level, tag)                                                     \
    void name(const char *fmt, ...) {                                                       \
        if (nm_log_level < (level)) return;                                                 \
        va_list ap;                                                                         \
        va_start(ap, fmt);                                                                  \
        vlog(stderr, tag, fmt, ap);                                                         \
        va_end(ap);                                                                         \
    }
NM_DEFINE_LOG(nm_log_info, 1, "")
NM_DEFINE_LOG(nm_log_debug, 2, "debug: ")
NM_DEFINE_LOG(nm_log_warn, 0, "warning: ")
NM_DEFINE_LOG(nm_log_error, 0, "error: ")

_Noreturn void nm_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "fatal: ", fmt, ap);
    va_end(ap);
    if (g_fatal_hook) g_fatal_hook(1);
    exit(1);
}

_Noreturn void nm_bug(const char *file, int line, const char *expr) {
    fprintf(stderr, "[%s] bug: %s:%d: assertion failed: %s\n", g_origin, file, line, expr);
    fflush(stderr);
    if (g_fatal_hook) g_fatal_hook(134);
    abort();
}

void *nm_alloc(size_t bytes, size_t align, const char *what) {
    if (align < sizeof(void *)) align = sizeof(void *);
    size_t rounded = (bytes + align - 1) / align * align;
    if (rounded == 0) rounded = align;
    void *p = aligned_alloc(align, rounded);
    if (!p) nm_fatal("out of memory allocating %zu bytes for %s", bytes, what);
    memset(p, 0, rounded);
    return p;
}

void nm_free(void *p) { free(p); }

struct tbufs {
    void *p[NM_TBUF_COUNT];
    size_t cap[NM_TBUF_COUNT];
};
static _Thread_local struct tbufs *g_tbufs;
static pthread_key_t g_tbufs_key;
static pthread_once_t g_tbufs_once = PTHREAD_ONCE_INIT;
static void tbufs_free(void *v) {
    struct tbufs *b = v;
    for (int i = 0; i < NM_TBUF_COUNT; i++) free(b->p[i]);
    free(b);
}
static void tbufs_key_init(void) {
    if (pthread_key_create(&g_tbufs_key, tbufs_free) != 0) nm_fatal("pthread_key_create failed for the thread buffers");
}

void *nm_thread_buf(enum nm_tbuf slot, size_t bytes) {
    NM_ASSERT(slot >= 0 && slot < NM_TBUF_COUNT);
    struct tbufs *b = g_tbufs;
    if (!b) {
        pthread_once(&g_tbufs_once, tbufs_key_init);
        b = g_tbufs = calloc(1, sizeof *b);
        if (!b) nm_fatal("out of memory: the thread buffers' table");
        pthread_setspecific(g_tbufs_key, b); /* freed when the thread exits */
    }
    if (bytes > b->cap[slot]) {
        /* at least double, so that a slowly growing caller reallocates a few times only */
        size_t want = bytes > 2 * b->cap[slot] ? bytes : 2 * b->cap[slot];
        want = (want + 4095) / 4096 * 4096;
        free(b->p[slot]);
        b->p[slot] = aligned_alloc(64, want);
        if (!b->p[slot]) nm_fatal("out of memory: %zu bytes of thread buffer %d", want, (int)slot);
        b->cap[slot] = want;
    }
    return b->p[slot];
}

uint64_t nm_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *nm_status_str(enum nm_status s) {
    switch (s) {
    case NM_OK: return "ok";
    case NM_ERR_IO: return "i/o error";
    case NM_ERR_FORMAT: return "malformed file";
    case NM_ERR_UNSUPPORTED: return "unsupported";
    case NM_ERR_NOT_FOUND: return "not found";
    case NM_ERR_MISMATCH: return "mismatch";
    case NM_ERR_ARGS: return "bad arguments";
    case NM_ERR_NOMEM: return "out of memory";
    }
    return "unknown status";
}

enum nm_status nm_errf(char *err, size_t errlen, enum nm_status status, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}
