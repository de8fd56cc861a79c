/* oneDNN's matmul on the GGUF rows of BF16/F32 weights (contract and layout argument: onednn.h).
 * Built only with oneDNN (NM_HAVE_DNNL, kernels/onednn/onednn.cmake). The C API differs between
 * oneDNN 2.x (memory descriptors are structs, op descriptors) and 3.x (descriptors are handles,
 * dnnl_matmul_primitive_desc_create); the few calls that differ are wrapped in the md_* / pd_make
 * helpers below. Developed and tested with 2.6.3 (Debian bookworm's libdnnl-dev). */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl_debug.h"
#include "oneapi/dnnl/dnnl_version.h"
#if defined(NM_DNNL_OMP) && DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#define HAVE_OMP_THREADS 1
#else
#define HAVE_OMP_THREADS 0
#endif

#include "base.h"
#include "onednn.h"

#ifndef NM_HAVE_DNNL
#error "onednn.c is built only with oneDNN (NM_HAVE_DNNL); onednn_none.c otherwise"
#endif

/* ---- 2.x / 3.x differences ---------------------------------------------------------------- */

#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t md_t;           /* a handle, md_free destroys it */
typedef const_dnnl_memory_desc_t md_cref;
#define MD_REF(x) (x)
#define MD_NONE NULL
static void md_free(md_t md) {
    if (md) dnnl_memory_desc_destroy(md);
}
static dnnl_status_t md_tag(md_t *md, const dnnl_dims_t d, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    return dnnl_memory_desc_create_with_tag(md, 2, d, dt, tag);
}
static dnnl_status_t md_strides(md_t *md, const dnnl_dims_t d, dnnl_data_type_t dt, const dnnl_dims_t s) {
    return dnnl_memory_desc_create_with_strides(md, 2, d, dt, s);
}
static dnnl_status_t pd_make(dnnl_primitive_desc_t *pd, dnnl_engine_t eng, md_t src, md_t wei, md_t dst,
                             const_dnnl_primitive_attr_t attr) {
    return dnnl_matmul_primitive_desc_create(pd, eng, src, wei, NULL, dst, attr);
}
/* "blocked strides {a,b} blocks ..." or the format kind */
static void md_describe(md_cref md, char *buf, size_t len) {
    dnnl_format_kind_t fk = dnnl_format_kind_undef;
    dnnl_memory_desc_query(md, dnnl_query_format_kind, &fk);
    if (fk != dnnl_blocked) {
        snprintf(buf, len, "format kind %s", dnnl_fmt_kind2str(fk));
        return;
    }
    const dnnl_dims_t *s = NULL, *blks = NULL, *idxs = NULL;
    int nblks = 0;
    dnnl_memory_desc_query(md, dnnl_query_strides, &s);
    dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &nblks);
    dnnl_memory_desc_query(md, dnnl_query_inner_blks, &blks);
    dnnl_memory_desc_query(md, dnnl_query_inner_idxs, &idxs);
    int w = snprintf(buf, len, "strides {%" PRId64 ",%" PRId64 "}", (int64_t)(*s)[0], (int64_t)(*s)[1]);
    for (int i = 0; i < nblks && w > 0 && (size_t)w < len; i++)
        w += snprintf(buf + w, len - (size_t)w, " block %" PRId64 "%c", (int64_t)(*blks)[i], "ab"[(*idxs)[i] & 1]);
}
#else
typedef dnnl_memory_desc_t md_t;           /* a struct */
typedef const dnnl_memory_desc_t *md_cref;
#define MD_REF(x) (&(x))
#define MD_NONE {0}
static void md_free(md_t md) { (void)md; }
static dnnl_status_t md_tag(md_t *md, const dnnl_dims_t d, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    return dnnl_memory_desc_init_by_tag(md, 2, d, dt, tag);
}
static dnnl_status_t md_strides(md_t *md, const dnnl_dims_t d, dnnl_data_type_t dt, const dnnl_dims_t s) {
    return dnnl_memory_desc_init_by_strides(md, 2, d, dt, s);
}
static dnnl_status_t pd_make(dnnl_primitive_desc_t *pd, dnnl_engine_t eng, md_t src, md_t wei, md_t dst,
                             const_dnnl_primitive_attr_t attr) {
    dnnl_matmul_desc_t desc;
    dnnl_status_t st = dnnl_matmul_desc_init(&desc, &src, &wei, NULL, &dst);
    if (st != dnnl_success) return st;
    return dnnl_primitive_desc_create(pd, &desc, attr, eng, NULL);
}
static void md_describe(md_cref md, char *buf, size_t len) {
    if (md->format_kind != dnnl_blocked) {
        snprintf(buf, len, "format kind %s", dnnl_fmt_kind2str(md->format_kind));
        return;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int w = snprintf(buf, len, "strides {%" PRId64 ",%" PRId64 "}", (int64_t)b->strides[0], (int64_t)b->strides[1]);
    for (int i = 0; i < b->inner_nblks && w > 0 && (size_t)w < len; i++)
        w += snprintf(buf + w, len - (size_t)w, " block %" PRId64 "%c", (int64_t)b->inner_blks[i], "ab"[b->inner_idxs[i] & 1]);
}
#endif

/* ---- state --------------------------------------------------------------------------------- */

#define CACHE_SLOTS 32

struct prim_entry {
    bool used;
    enum dtype type;
    int m;
    int64_t k, n, ldy;
    uint64_t last_use;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst; /* handles set per call */
    dnnl_memory_t scr;           /* the primitive's scratchpad (NULL when it needs none) */
    size_t scr_bytes;
};

static struct {
    pthread_mutex_t mu; /* guards everything below and serializes the calls */
    bool tried, ok;
    char why[256];      /* why not ok */
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    struct prim_entry cache[CACHE_SLOTS];
    uint64_t clock;
    uint16_t *xb;       /* [m][k] bf16 activations (BF16 weights), grow-only */
    size_t xb_bytes;
    void *scr;          /* scratchpad shared by the cached primitives (calls are serialized) */
    size_t scr_bytes;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

__attribute__((format(printf, 3, 4))) static void say(char *why, size_t len, const char *fmt, ...) {
    if (!why || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* Start the CPU engine and stream once. Caller holds g.mu. */
static bool engine_start(void) {
    if (g.tried) return g.ok;
    g.tried = true;
    dnnl_status_t st = dnnl_engine_create(&g.eng, dnnl_cpu, 0);
    if (st != dnnl_success) {
        snprintf(g.why, sizeof g.why, "dnnl_engine_create(cpu, 0): %s", dnnl_status2str(st));
        return false;
    }
    st = dnnl_stream_create(&g.stream, g.eng, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        snprintf(g.why, sizeof g.why, "dnnl_stream_create: %s", dnnl_status2str(st));
        dnnl_engine_destroy(g.eng);
        g.eng = NULL;
        return false;
    }
    g.ok = true;
    return true;
}

bool kern_onednn_available(char *why, size_t len) {
    pthread_mutex_lock(&g.mu);
    const bool ok = engine_start();
    if (!ok) say(why, len, "%s", g.why);
    pthread_mutex_unlock(&g.mu);
    return ok;
}

const char *kern_onednn_describe(char *buf, size_t len) {
    const dnnl_version_t *v = dnnl_version();
    const char *rt = dnnl_runtime2str(v->cpu_runtime);
    const char *threads = HAVE_OMP_THREADS ? "threads set by omp_set_num_threads"
                          : v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP not linked here: threads from OMP_NUM_THREADS"
                                                               : "the library's default thread count";
    snprintf(buf, len, "oneDNN %d.%d.%d (git %s), CPU runtime %s (%s), ISA %s", v->major, v->minor, v->patch,
             v->hash ? v->hash : "?", rt, threads, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    return buf;
}

bool kern_onednn_type_supported(enum dtype type) { return type == DTYPE_BF16 || type == DTYPE_F32; }

/* ---- primitive creation and the layout check -------------------------------------------- */

/* Build the matmul for dst[m][n] (row stride ldy) = src[m][k] x weights{K = k, N = n} with the
 * weights descriptor `req`, and compare the layouts the primitive will read and write with the
 * plain ones: src {m,k} tag ab, weights {k,n} tag ba (the GGUF rows), dst {m,n} strides {ldy,1}.
 * OK: *out (when not NULL) receives the primitive and its memory objects. Caller holds g.mu and
 * has started the engine. why receives the implementation and the weights layout (OK or not). */
static enum kern_onednn_status prim_make(enum dtype type, int m, int64_t k, int64_t n, int64_t ldy,
                                         enum kern_onednn_weights_request req, struct prim_entry *out, char *why,
                                         size_t len) {
    const dnnl_data_type_t dt = type == DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_dims_t src_d = {m, k}, wei_d = {k, n}, dst_d = {m, n}, dst_s = {ldy, 1};
    const dnnl_format_tag_t req_tag = req == KERN_ONEDNN_WEIGHTS_ROWS       ? dnnl_ba
                                      : req == KERN_ONEDNN_WEIGHTS_TRANSPOSED ? dnnl_ab
                                                                              : dnnl_format_tag_any;
    md_t src = MD_NONE, wei_req = MD_NONE, wei_rows = MD_NONE, dst = MD_NONE;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    enum kern_onednn_status ret = KERN_ONEDNN_LIBRARY_ERROR;
    const char *call = "dnnl_memory_desc_init";
    dnnl_status_t st;
    if ((st = md_tag(&src, src_d, dt, dnnl_ab)) != dnnl_success || (st = md_tag(&wei_req, wei_d, dt, req_tag)) != dnnl_success ||
        (st = md_tag(&wei_rows, wei_d, dt, dnnl_ba)) != dnnl_success ||
        (st = md_strides(&dst, dst_d, dnnl_f32, dst_s)) != dnnl_success)
        goto fail_call;
    /* f32 stays f32: an environment default (ONEDNN_DEFAULT_FPMATH_MODE=bf16) must not
     * silently lower the F32 matmuls' precision. The scratchpad is ours (user mode): the
     * library's own is allocated per call, and its page faults cost more than small-m matmuls. */
    call = "dnnl_primitive_attr_create/set_fpmath_mode(strict)/set_scratchpad_mode(user)";
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success)
        goto fail_call;
    call = "matmul primitive descriptor";
    st = pd_make(&pd, g.eng, src, wei_req, dst, attr);
    if (st == dnnl_unimplemented) {
        say(why, len, "oneDNN has no matmul for %s weights {K=%" PRId64 ", N=%" PRId64 "} tag %s with m=%d, ldy=%" PRId64
            " on this CPU (dnnl_unimplemented)", dtype_get((uint32_t)type)->name, k, n, dnnl_fmt_tag2str(req_tag), m, ldy);
        ret = KERN_ONEDNN_UNSUPPORTED;
        goto fail;
    }
    if (st != dnnl_success) goto fail_call;

    /* The check (DESIGN lesson 7): what the primitive reads must be the bytes we hand it. */
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    md_cref got_w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    md_cref got_s = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    md_cref got_d = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    char wdesc[160];
    md_describe(got_w, wdesc, sizeof wdesc);
    const bool w_ok = got_w && dnnl_memory_desc_equal(got_w, MD_REF(wei_rows));
    const bool s_ok = got_s && dnnl_memory_desc_equal(got_s, MD_REF(src));
    const bool d_ok = got_d && dnnl_memory_desc_equal(got_d, MD_REF(dst));
    if (!w_ok || !s_ok || !d_ok) {
        say(why, len, "impl %s wants another layout for%s%s%s (weights: %s; the GGUF rows are strides {1,%" PRId64
            "}): refused, not reordered", impl, w_ok ? "" : " weights", s_ok ? "" : " src", d_ok ? "" : " dst", wdesc, k);
        ret = KERN_ONEDNN_LAYOUT_REFUSED;
        goto fail;
    }
    say(why, len, "impl %s, weights %s (the GGUF rows)", impl, wdesc);
    if (out) {
        call = "dnnl_primitive_create";
        if ((st = dnnl_primitive_create(&out->prim, pd)) != dnnl_success) goto fail_call;
        call = "dnnl_memory_create";
        if ((st = dnnl_memory_create(&out->src, MD_REF(src), g.eng, DNNL_MEMORY_NONE)) != dnnl_success ||
            (st = dnnl_memory_create(&out->wei, MD_REF(wei_rows), g.eng, DNNL_MEMORY_NONE)) != dnnl_success ||
            (st = dnnl_memory_create(&out->dst, MD_REF(dst), g.eng, DNNL_MEMORY_NONE)) != dnnl_success) {
            if (out->src) dnnl_memory_destroy(out->src);
            if (out->wei) dnnl_memory_destroy(out->wei);
            dnnl_primitive_destroy(out->prim);
            out->prim = NULL;
            out->src = out->wei = out->dst = NULL;
            goto fail_call;
        }
        md_cref scr = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        out->scr_bytes = scr ? dnnl_memory_desc_get_size(scr) : 0;
        if (out->scr_bytes && (st = dnnl_memory_create(&out->scr, scr, g.eng, DNNL_MEMORY_NONE)) != dnnl_success) {
            dnnl_memory_destroy(out->src);
            dnnl_memory_destroy(out->wei);
            dnnl_memory_destroy(out->dst);
            dnnl_primitive_destroy(out->prim);
            memset(out, 0, sizeof *out);
            goto fail_call;
        }
    }
    ret = KERN_ONEDNN_OK;
    goto fail;
fail_call:
    say(why, len, "%s: %s", call, dnnl_status2str(st));
    ret = KERN_ONEDNN_LIBRARY_ERROR;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    md_free(src);
    md_free(wei_req);
    md_free(wei_rows);
    md_free(dst);
    return ret;
}

static void entry_free(struct prim_entry *e) {
    if (!e->used) return;
    dnnl_memory_destroy(e->src);
    dnnl_memory_destroy(e->wei);
    dnnl_memory_destroy(e->dst);
    if (e->scr) dnnl_memory_destroy(e->scr);
    dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

/* The cached primitive for (type, m, k, n, ldy), made on a miss (replacing the least recently
 * used slot). Caller holds g.mu. */
static enum kern_onednn_status prim_get(enum dtype type, int m, int64_t k, int64_t n, int64_t ldy, struct prim_entry **out,
                                        char *why, size_t len) {
    struct prim_entry *victim = &g.cache[0];
    for (int i = 0; i < CACHE_SLOTS; i++) {
        struct prim_entry *e = &g.cache[i];
        if (e->used && e->type == type && e->m == m && e->k == k && e->n == n && e->ldy == ldy) {
            e->last_use = ++g.clock;
            *out = e;
            return KERN_ONEDNN_OK;
        }
        if (!e->used) {
            if (victim->used) victim = e;
        } else if (victim->used && e->last_use < victim->last_use) {
            victim = e;
        }
    }
    struct prim_entry fresh = {0};
    enum kern_onednn_status s = prim_make(type, m, k, n, ldy, KERN_ONEDNN_WEIGHTS_ROWS, &fresh, why, len);
    if (s != KERN_ONEDNN_OK) return s;
    entry_free(victim);
    fresh.used = true;
    fresh.type = type;
    fresh.m = m;
    fresh.k = k;
    fresh.n = n;
    fresh.ldy = ldy;
    fresh.last_use = ++g.clock;
    *victim = fresh;
    *out = victim;
    return KERN_ONEDNN_OK;
}

/* ---- the matmul ----------------------------------------------------------------------------- */

enum kern_onednn_status kern_onednn_matmul(const struct weight *w, const struct act *x, float *y, int64_t ldy,
                                           int n_threads, char *why, size_t len) {
    if (w->layout != WEIGHT_LAYOUT_ROWS) {
        say(why, len, "weight layout %s: kern_onednn_matmul reads only %s (the GGUF rows)", weight_layout_name(w->layout),
            weight_layout_name(WEIGHT_LAYOUT_ROWS));
        return KERN_ONEDNN_UNSUPPORTED;
    }
    if (!kern_onednn_type_supported(w->type)) {
        say(why, len, "weight type %s: kern_onednn_matmul takes BF16 and F32", dtype_get((uint32_t)w->type)->name);
        return KERN_ONEDNN_UNSUPPORTED;
    }
    if (x->m < 1 || x->k != w->k || w->k < 1 || w->n < 1 || ldy < w->n || !x->f32 || !w->data) {
        say(why, len, "shape: m=%d, x.k=%" PRId64 ", w.k=%" PRId64 ", w.n=%" PRId64 ", ldy=%" PRId64
            " (need m >= 1, x.k == w.k >= 1, n >= 1, ldy >= n, data)", x->m, x->k, w->k, w->n, ldy);
        return KERN_ONEDNN_UNSUPPORTED;
    }
    pthread_mutex_lock(&g.mu);
    enum kern_onednn_status ret = KERN_ONEDNN_UNAVAILABLE;
    if (!engine_start()) {
        say(why, len, "%s", g.why);
        goto out;
    }
    struct prim_entry *e = NULL;
    ret = prim_get(w->type, x->m, w->k, w->n, ldy, &e, why, len);
    if (ret != KERN_ONEDNN_OK) goto out;

    const void *src = x->f32;
    if (w->type == DTYPE_BF16) {
        /* The activations in bf16, rounded as the AMX bf16 tile path rounds them. */
        const size_t count = (size_t)x->m * (size_t)x->k;
        if (g.xb_bytes < count * 2) {
            nm_free(g.xb);
            g.xb_bytes = (count * 2 + 4095) & ~(size_t)4095;
            g.xb = nm_alloc(g.xb_bytes, 64, "oneDNN bf16 activations");
        }
        for (size_t i = 0; i < count; i++) g.xb[i] = fp32_to_bf16(x->f32[i]);
        src = g.xb;
    }
#if HAVE_OMP_THREADS
    if (n_threads > 0) omp_set_num_threads(n_threads);
#endif
    /* oneDNN's handles are non-const; the primitive only reads src and weights. */
    dnnl_status_t st;
    const char *call = "dnnl_memory_set_data_handle";
    if ((st = dnnl_memory_set_data_handle(e->src, (void *)src)) != dnnl_success ||
        (st = dnnl_memory_set_data_handle(e->wei, (void *)w->data)) != dnnl_success ||
        (st = dnnl_memory_set_data_handle(e->dst, y)) != dnnl_success)
        goto fail_call;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DST, e->dst}, {0, NULL}};
    int nargs = 3;
    if (e->scr) {
        if (g.scr_bytes < e->scr_bytes) {
            nm_free(g.scr);
            g.scr_bytes = (e->scr_bytes + 4095) & ~(size_t)4095;
            g.scr = nm_alloc(g.scr_bytes, 4096, "oneDNN scratchpad");
        }
        if ((st = dnnl_memory_set_data_handle(e->scr, g.scr)) != dnnl_success) goto fail_call;
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scr};
    }
    call = "dnnl_primitive_execute";
    if ((st = dnnl_primitive_execute(e->prim, g.stream, nargs, args)) != dnnl_success) goto fail_call;
    call = "dnnl_stream_wait";
    if ((st = dnnl_stream_wait(g.stream)) != dnnl_success) goto fail_call;
    ret = KERN_ONEDNN_OK;
    goto out;
fail_call:
    say(why, len, "%s: %s", call, dnnl_status2str(st));
    ret = KERN_ONEDNN_LIBRARY_ERROR;
out:
    pthread_mutex_unlock(&g.mu);
    return ret;
}

enum kern_onednn_status kern_onednn_weights_check(enum dtype type, int m, int64_t k, int64_t n,
                                                  enum kern_onednn_weights_request req, char *why, size_t len) {
    if (!kern_onednn_type_supported(type) || m < 1 || k < 1 || n < 1) {
        say(why, len, "type %s, m=%d, k=%" PRId64 ", n=%" PRId64 ": not a shape the wrapper takes",
            dtype_get((uint32_t)type)->name, m, k, n);
        return KERN_ONEDNN_UNSUPPORTED;
    }
    pthread_mutex_lock(&g.mu);
    enum kern_onednn_status ret = KERN_ONEDNN_UNAVAILABLE;
    if (engine_start())
        ret = prim_make(type, m, k, n, n, req, NULL, why, len);
    else
        say(why, len, "%s", g.why);
    pthread_mutex_unlock(&g.mu);
    return ret;
}

void kern_onednn_cache_clear(void) {
    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < CACHE_SLOTS; i++) entry_free(&g.cache[i]);
    nm_free(g.xb);
    g.xb = NULL;
    g.xb_bytes = 0;
    nm_free(g.scr);
    g.scr = NULL;
    g.scr_bytes = 0;
    pthread_mutex_unlock(&g.mu);
}
