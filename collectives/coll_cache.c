/* Cache hints of the shared-memory transport (coll_impl.h, enum coll_shm_hint): their names,
 * and the portable fallback of the streaming copy. Non-temporal stores are x86 instructions, in
 * x86/coll_cache_x86.c; elsewhere the streaming copy is memcpy. */
#include <string.h>

#include "coll_impl.h"

static const struct {
    const char *name;
    unsigned bit;
} coll_shm_hint_names[] = {
    {"nt-out", COLL_SHM_HINT_NT_OUT},
    {"nt-slot", COLL_SHM_HINT_NT_SLOT},
    {"nt-slot-mid", COLL_SHM_HINT_NT_SLOT_MID},
};

unsigned coll_shm_hints_parse(const char *s) {
    unsigned hints = 0;
    if (!strcmp(s, "none")) return 0;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, "+,");
        size_t i = 0;
        for (; i < NM_ARRAY_LEN(coll_shm_hint_names); i++)
            if (strlen(coll_shm_hint_names[i].name) == len &&
                !strncmp(p, coll_shm_hint_names[i].name, len))
                break;
        if (i == NM_ARRAY_LEN(coll_shm_hint_names))
            nm_fatal("collectives: shm hints \"%s\": \"%.*s\" is not a hint; allowed: none, or "
                     "nt-out, nt-slot, nt-slot-mid joined by '+' or ','",
                     s, (int)len, p);
        hints |= coll_shm_hint_names[i].bit;
        p += len;
        if (*p) p++;
    }
    return hints;
}

void coll_shm_hints_str(unsigned hints, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < NM_ARRAY_LEN(coll_shm_hint_names); i++)
        if (hints & coll_shm_hint_names[i].bit && at < len)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "+" : "",
                                   coll_shm_hint_names[i].name);
    if (!at) snprintf(buf, len, "none");
}

#ifndef NM_COLL_HAVE_X86_CACHE
void coll_cache_copy_stream(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void coll_cache_stream_fence(void) {}
#endif
