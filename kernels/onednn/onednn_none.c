/* The oneDNN candidate in a build without oneDNN (CMake did not find it): the same API
 * (onednn.h), every call reporting "built without oneDNN", so callers and tests link the same way
 * in both builds and decline the path with a reason. This is the honest no-oneDNN build path, not
 * an emulation. */
#include <stdio.h>

#include "onednn.h"

#define NONE_WHY \
    "numallm was built without oneDNN (not found at configure time, or NM_ONEDNN=OFF; launcher/setup.sh installs libdnnl-dev)"

static void say_none(char *why, size_t len) {
    if (why && len) snprintf(why, len, "%s", NONE_WHY);
}

bool kern_onednn_available(char *why, size_t len) {
    say_none(why, len);
    return false;
}

const char *kern_onednn_describe(char *buf, size_t len) {
    say_none(buf, len);
    return buf;
}

bool kern_onednn_type_supported(enum dtype type) {
    (void)type;
    return false;
}

enum kern_onednn_status kern_onednn_matmul(const struct weight *w, const struct act *x, float *y, int64_t ldy,
                                           int n_threads, char *why, size_t len) {
    (void)w, (void)x, (void)y, (void)ldy, (void)n_threads;
    say_none(why, len);
    return KERN_ONEDNN_UNAVAILABLE;
}

enum kern_onednn_status kern_onednn_weights_check(enum dtype type, int m, int64_t k, int64_t n,
                                                  enum kern_onednn_weights_request req, char *why, size_t len) {
    (void)type, (void)m, (void)k, (void)n, (void)req;
    say_none(why, len);
    return KERN_ONEDNN_UNAVAILABLE;
}

void kern_onednn_cache_clear(void) {}
