/* CPU feature detection (CPUID + XGETBV) and the choice of the kernel table for this process
 * (see cpu.h). The reference table wraps the _ref functions of quant.h; the avx512 table is
 * filled by kernels/x86-avx512/, the avx2 table by kernels/x86-avx2/. */
#include "cpu.h"

#include "ops.h"

#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "blocks/block.h"
#include "x86-avx2/avx2.h"
#include "x86-avx512/avx512.h"

/* ---------------------------------------------------------------------------------------- */
/* CPUID                                                                                    */

static struct cpu_features g_features;
static pthread_once_t g_features_once = PTHREAD_ONCE_INIT;

static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static void features_detect(void) {
    struct cpu_features *f = &g_features;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = (c >> 27) & 1;
    const bool avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const bool os_ymm = (xcr0 & 0x6) == 0x6;     /* SSE + AVX state */
    const bool os_zmm = (xcr0 & 0xE6) == 0xE6;   /* + opmask, ZMM_Hi256, Hi16_ZMM */
    const bool os_amx = (xcr0 & 0x60000) == 0x60000; /* XTILECFG + XTILEDATA */
    f->os_avx512 = os_zmm;
    if (!(avx && os_ymm)) {
        f->fma = f->f16c = false;
        return;
    }
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = (b >> 5) & 1;
    f->avx512f = os_zmm && ((b >> 16) & 1);
    f->avx512dq = os_zmm && ((b >> 17) & 1);
    f->avx512bw = os_zmm && ((b >> 30) & 1);
    f->avx512vl = os_zmm && ((b >> 31) & 1);
    f->avx512vnni = os_zmm && ((c >> 11) & 1);
    f->avx512vbmi = os_zmm && ((c >> 1) & 1);
    f->amx_bf16 = os_amx && ((d >> 22) & 1);
    f->amx_tile = os_amx && ((d >> 24) & 1);
    f->amx_int8 = os_amx && ((d >> 25) & 1);
    const unsigned max_sub = a;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512bf16 = os_zmm && ((a >> 5) & 1);
    }
    const char *no_amx = getenv("NM_AMX");
    if (f->amx_tile && no_amx && strcmp(no_amx, "0") == 0) { /* measurements: the AVX-512 kernels alone */
        f->amx_tile = f->amx_int8 = f->amx_bf16 = false;
        f->amx_env_off = true;
        nm_log_info("kernels: AMX turned off by NM_AMX=0 (the layout table says no AMX): the AVX-512 kernels instead");
    }
    if (f->amx_tile) {
        /* Linux >= 5.16 keeps the 8 KiB tile data state off until the process asks for it;
         * without the permission the first tile instruction raises SIGILL. */
        enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) {
            f->amx_os_perm = true;
        } else {
            nm_log_warn("kernels: the OS refused AMX (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %s);"
                        " no AMX tiles, AVX-512 kernels instead", nm_strerror_errno());
        }
    }
}

bool cpu_has_amx_int8(const struct cpu_features *f) {
    return f->amx_tile && f->amx_int8 && f->amx_os_perm && cpu_avx512_missing(f) == NULL;
}
bool cpu_has_amx_bf16(const struct cpu_features *f) {
    return f->amx_tile && f->amx_bf16 && f->amx_os_perm && cpu_avx512_missing(f) == NULL;
}

const struct cpu_features *cpu_features_get(void) {
    pthread_once(&g_features_once, features_detect);
    return &g_features;
}

/* ---------------------------------------------------------------------------------------- */
/* Reference table                                                                          */

/* Slots of ids numallm does not support: a caller that reaches one has a bug (the loader
 * rejects such tensors by name). */
static float vec_dot_unsupported(int64_t n, const void *w, const void *a) {
    (void)n, (void)w, (void)a;
    nm_bug(__FILE__, __LINE__, "vec_dot on an unsupported dtype");
}
static void gemm_unsupported(int64_t n, const void *w, size_t ws, int nr, const void *a,
                             size_t as, int nc, float *y, int64_t ldy) {
    (void)n, (void)w, (void)ws, (void)nr, (void)a, (void)as, (void)nc, (void)y, (void)ldy;
    nm_bug(__FILE__, __LINE__, "gemm on an unsupported dtype");
}

static void gemm_ref(enum dtype t, int64_t n, const void *w, size_t ws, int nr, const void *a,
                     size_t as, int nc, float *y, int64_t ldy) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            y[c * ldy + r] = vec_dot_ref(t, n, (const uint8_t *)w + (size_t)r * ws,
                                         (const uint8_t *)a + (size_t)c * as);
}

#define REF_SLOTS(T)                                                                        \
    static float vec_dot_ref_##T(int64_t n, const void *w, const void *a) {                 \
        return vec_dot_ref(DTYPE_##T, n, w, a);                                             \
    }                                                                                       \
    static void gemm_ref_##T(int64_t n, const void *w, size_t ws, int nr, const void *a,    \
                             size_t as, int nc, float *y, int64_t ldy) {                    \
        gemm_ref(DTYPE_##T, n, w, ws, nr, a, as, nc, y, ldy);                               \
    }
REF_SLOTS(F32)
REF_SLOTS(F16)
REF_SLOTS(BF16)
REF_SLOTS(Q4_0)
REF_SLOTS(Q4_1)
REF_SLOTS(Q8_0)
REF_SLOTS(Q4_K)
REF_SLOTS(Q5_K)
REF_SLOTS(Q6_K)
#define BLOCK_REF_SLOTS(T, t) REF_SLOTS(T)
BLOCK_TYPES(BLOCK_REF_SLOTS)
#undef BLOCK_REF_SLOTS

static struct kern_isa g_ref, g_avx512, g_avx2;
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
    g_ref.name = "ref";
    for (int t = 0; t < DTYPE_COUNT; t++) {
        g_ref.vec_dot[t] = vec_dot_unsupported;
        g_ref.gemm[t] = gemm_unsupported;
    }
#define SET_REF(T)                                                                          \
    g_ref.vec_dot[DTYPE_##T] = vec_dot_ref_##T;                                             \
    g_ref.gemm[DTYPE_##T] = gemm_ref_##T;
    SET_REF(F32)
    SET_REF(F16)
    SET_REF(BF16)
    SET_REF(Q4_0)
    SET_REF(Q4_1)
    SET_REF(Q8_0)
    SET_REF(Q4_K)
    SET_REF(Q5_K)
    SET_REF(Q6_K)
#define BLOCK_SET_REF(T, t) SET_REF(T)
    BLOCK_TYPES(BLOCK_SET_REF)
#undef BLOCK_SET_REF
#undef SET_REF
    g_ref.quantize_act_q8x = quantize_act_q8x_ref;
    g_ref.to_bf16 = fp32_to_bf16_row_ref;
    g_ref.swiglu = op_swiglu_ref;
    g_ref.argmax = op_argmax_ref;
    g_ref.pk_gemm = pk_gemm_ref;
    g_ref.attn_heads = op_attention_heads_ref;
    g_ref.attn_queries = op_attention_queries_ref;
    g_ref.attn_queries_scratch = op_attention_queries_ref_scratch;

    /* The avx512 table starts as a copy of ref, so a type without a fast kernel still works;
     * the x86-avx512 files overwrite the slots they implement. */
    g_avx512 = g_ref;
    g_avx512.name = "avx512";
    kern_isa_avx512_fill(&g_avx512);
    g_avx2 = g_ref;
    g_avx2.name = "avx2";
    kern_isa_avx2_fill(&g_avx2);
}

bool kern_isa_avx512_has(enum dtype t) {
    pthread_once(&g_tables_once, tables_init);
    NM_ASSERT((unsigned)t < DTYPE_COUNT);
    return g_avx512.vec_dot[t] != g_ref.vec_dot[t] && g_avx512.gemm[t] != g_ref.gemm[t];
}

bool kern_isa_avx2_has(enum dtype t) {
    pthread_once(&g_tables_once, tables_init);
    NM_ASSERT((unsigned)t < DTYPE_COUNT);
    return g_avx2.vec_dot[t] != g_ref.vec_dot[t] && g_avx2.gemm[t] != g_ref.gemm[t];
}

bool kern_isa_avx2_has_packed(enum dtype t) {
    pthread_once(&g_tables_once, tables_init);
    return pk_unit_bytes(t) > 0 && g_avx2.pk_gemm != g_ref.pk_gemm && (!g_avx2.pk_has || g_avx2.pk_has(t));
}

const struct kern_isa *kern_isa_ref(void) {
    pthread_once(&g_tables_once, tables_init);
    return &g_ref;
}

const char *cpu_avx512_missing(const struct cpu_features *f) {
    if (!f->os_avx512) return "the CPU or OS lacks AVX-512 state (XCR0)";
    if (!f->avx512f) return "no AVX512F";
    if (!f->avx512bw) return "no AVX512BW";
    if (!f->avx512vl) return "no AVX512VL";
    if (!f->avx512dq) return "no AVX512DQ";
    if (!f->avx512vnni) return "no AVX512_VNNI";
    if (!f->fma || !f->f16c || !f->avx2) return "no FMA/F16C/AVX2";
    return NULL;
}

const char *cpu_avx2_missing(const struct cpu_features *f) {
    if (!f->avx2) return "no AVX2 (or no AVX state saved by the OS)";
    if (!f->fma) return "no FMA";
    if (!f->f16c) return "no F16C";
    return NULL;
}

const struct kern_isa *kern_isa_find(const char *name, const char **why) {
    pthread_once(&g_tables_once, tables_init);
    const char *missing = NULL;
    if (strcmp(name, "ref") == 0) return &g_ref;
    if (strcmp(name, "avx512") == 0) {
        missing = cpu_avx512_missing(cpu_features_get());
        if (!missing) return &g_avx512;
    } else if (strcmp(name, "avx2") == 0) {
        missing = cpu_avx2_missing(cpu_features_get());
        if (!missing) return &g_avx2;
    } else {
        missing = "unknown ISA name (known: avx512, avx2, ref)";
    }
    if (why) *why = missing;
    return NULL;
}

static const struct kern_isa *g_chosen;
static pthread_once_t g_chosen_once = PTHREAD_ONCE_INIT;

static void isa_choose(void) {
    const char *env = getenv("NM_ISA");
    const char *why = NULL, *why2 = NULL;
    if (env && strcmp(env, "ref") == 0) {
        g_chosen = kern_isa_find("ref", NULL);
        nm_log_info("kernels: ISA ref (forced by NM_ISA=ref)");
        return;
    }
    const bool force_avx2 = env && strcmp(env, "avx2") == 0;
    if (env && *env && strcmp(env, "avx512") != 0 && !force_avx2)
        nm_log_warn("kernels: NM_ISA=%s is not a known ISA (avx512, avx2, ref); choosing from CPUID", env);
    if (!force_avx2) {
        g_chosen = kern_isa_find("avx512", &why);
        if (g_chosen) {
            nm_log_info("kernels: ISA avx512 (AVX512F/BW/VL/DQ + VNNI%s)", g_chosen->note ? "" : " + VBMI");
            if (g_chosen->note) nm_log_info("kernels: avx512: %s", g_chosen->note);
            return;
        }
    } else {
        why = "NM_ISA=avx2";
    }
    g_chosen = kern_isa_find("avx2", &why2);
    if (g_chosen) {
        nm_log_warn("kernels: ISA avx2 (AVX2 + FMA + F16C); the avx512 path is declined: %s", why);
        return;
    }
    g_chosen = kern_isa_find("ref", NULL);
    nm_log_warn("kernels: ISA ref; the avx512 path is declined: %s; the avx2 path: %s", why, why2);
}

const struct kern_isa *kern_isa_get(void) {
    pthread_once(&g_chosen_once, isa_choose);
    return g_chosen;
}
