/* A private temporary directory for a tests/gguf program: made under $TMPDIR (or /tmp) as
 * PREFIX.XXXXXX and removed, with everything in it, when the program exits. */
#ifndef NM_GGUF_TMPDIR_H
#define NM_GGUF_TMPDIR_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

static char g_gguf_tmpdir[512];

static void gguf_tmpdir_remove(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_gguf_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_gguf_tmpdir);
}

static const char *gguf_tmpdir_make(const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_gguf_tmpdir, sizeof g_gguf_tmpdir, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    if (!mkdtemp(g_gguf_tmpdir))
        nm_fatal("mkdtemp %s failed: %s (set TMPDIR to a writable directory)", g_gguf_tmpdir, strerror(errno));
    atexit(gguf_tmpdir_remove);
    return g_gguf_tmpdir;
}

#endif
