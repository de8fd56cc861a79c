/* Shared plumbing for every numallm module: the three error tiers of STYLE.md (bug asserts,
 * environment-failure checks, expected-failure status codes), log lines that carry their
 * origin ("[r1/node1] ..."), and aligned allocation. The lowest layer: depends on libc only. */
#ifndef NM_BASE_H
#define NM_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Origin prefix printed in front of every log line, e.g. "r0/node0". Set once by the rank at
 * start-up (nm_log_set_origin); defaults to "r0". */
void nm_log_set_origin(const char *origin);
const char *nm_log_origin(void);

/* Verbosity: 0 = errors and warnings, 1 = info (default), 2 = debug. */
extern int nm_log_level;

void nm_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nm_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nm_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nm_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fatal error (environment failure that cannot be handled): prints the message with the
 * origin and ends the job with exit status 1. A rank installs a hook (MPI_Abort) so that one
 * rank never exit()s alone while the others wait in a collective. */
_Noreturn void nm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nm_fatal_set_hook(void (*hook)(int code));

/* Tier 1, bugs: always on, also in release builds. Prints file, line, origin and expression,
 * runs the hook, then abort()s so a core dump or sanitizer trace shows where. */
_Noreturn void nm_bug(const char *file, int line, const char *expr);
#define NM_ASSERT(cond)                                                                     \
    do {                                                                                    \
        if (!(cond)) nm_bug(__FILE__, __LINE__, #cond);                                     \
    } while (0)

/* Tier 2, environment failures: the call, errno's text and a hint for the user. */
#define NM_CHECK_ERRNO(expr, hint)                                                          \
    do {                                                                                    \
        if ((expr) < 0) nm_fatal("%s failed: %s (%s)", #expr, nm_strerror_errno(), hint);   \
    } while (0)
const char *nm_strerror_errno(void);

/* Aligned allocation that never returns NULL (fatal on failure, naming the size). The memory
 * is zero-filled. Free with nm_free. */
void *nm_alloc(size_t bytes, size_t align, const char *what);
void nm_free(void *p);

/* Buffers of the calling thread that live from call to call: 64-byte aligned, at least `bytes`,
 * grown (never shrunk, never cleared: callers write every byte they read), freed when the thread
 * exits. A prompt's activation copies are megabytes; a fresh zeroed allocation per call was a
 * serial memset. One buffer per slot, so that a matmul driver and the kernel it runs (the calling
 * thread is also the pool's worker 0) never write into each other's. */
enum nm_tbuf {
    NM_TBUF_KERNEL,    /* a kernel's own scratch (packed activations, AMX panels) */
    NM_TBUF_ACT_TILES, /* the matmul driver: activations in tile order */
    NM_TBUF_ACT_ROWS,  /* the matmul driver: activation rows as f32/bf16 */
    NM_TBUF_COUNT
};
void *nm_thread_buf(enum nm_tbuf slot, size_t bytes);

/* Tier 3, expected failures (bad model file, bad flag, not enough memory): functions return
 * one of these and write a message naming the field, the value and what was allowed into a
 * caller-provided buffer. */
enum nm_status {
    NM_OK = 0,
    NM_ERR_IO,          /* open/read/mmap failed */
    NM_ERR_FORMAT,      /* the file is malformed */
    NM_ERR_UNSUPPORTED, /* well-formed, but numallm does not support it */
    NM_ERR_NOT_FOUND,   /* a required key or tensor is missing */
    NM_ERR_MISMATCH,    /* shapes or types disagree with the configuration */
    NM_ERR_ARGS,        /* bad command-line flag or value */
    NM_ERR_NOMEM,       /* an allocation or a node is too small */
};
const char *nm_status_str(enum nm_status s);

/* printf into an error buffer (NULL-safe); returns `status` so callers can write
 * `return nm_errf(err, errlen, NM_ERR_FORMAT, "...", ...)`. */
enum nm_status nm_errf(char *err, size_t errlen, enum nm_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
static inline int nm_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int nm_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* Monotonic time in nanoseconds and seconds. */
uint64_t nm_time_ns(void);
static inline double nm_time_s(void) { return (double)nm_time_ns() * 1e-9; }

#define NM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NM_MAX(a, b) ((a) > (b) ? (a) : (b))
#define NM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
