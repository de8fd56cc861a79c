/* The layout planner (see layout.h): priority lists per (use, type), filtered by CPU features. */
#include "layout.h"

#include <stdio.h>
#include <string.h>

#include "base.h"

const char *tensor_use_name(enum tensor_use use) {
    switch (use) {
    case TENSOR_USE_MATMUL: return "matmul";
    case TENSOR_USE_ROWS: return "rows";
    case TENSOR_USE_VECTOR: return "vector";
    }
    return "unknown";
}

/* NEED_AVX512_BLOCKS: the avx512 path, and an AVX-512 kernel for the type on its GGUF blocks
 * (kern_isa_avx512_has: the types of the block decoder interface get theirs one by one).
 * NEED_AVX2_PACKED: the avx2 path and its packed-layout kernel for the type.
 * NEED_AVX2_BLOCKS: the avx2 path and its kernel for the type on its GGUF blocks. */
enum need {
    NEED_NONE,
    NEED_AVX512,
    NEED_AVX512_BLOCKS,
    NEED_AVX2_PACKED,
    NEED_AVX2_BLOCKS,
    NEED_AMX_INT8,
    NEED_AMX_BF16,
    NEED_AMX_BF16_BLOCKS
};

struct plan_entry {
    enum weight_layout layout;
    enum need need;
    const char *kernels;
};

static const struct plan_entry k_quant_list[] = {
    {WEIGHT_LAYOUT_Q_TILE16, NEED_AMX_INT8,
     "AMX tiles (prompt: BF16 for one sequence, INT8 batched) + AVX-512 VNNI (decode)"},
    {WEIGHT_LAYOUT_Q_TILE16, NEED_AVX512, "AVX-512 VNNI tiles (prompt and decode)"},
    {WEIGHT_LAYOUT_Q_TILE16, NEED_AVX2_PACKED, "AVX2 tiles, vpmaddubsw (prompt and decode)"},
    {WEIGHT_LAYOUT_ROWS, NEED_NONE, "plain C"},
};
/* Types without a packed layout (the IQ grid types: IQ2_*, IQ3_*, IQ1_*): their GGUF blocks as
 * stored, decoded by table lookups inside the kernels. */
static const struct plan_entry k_block_list[] = {
    {WEIGHT_LAYOUT_ROWS, NEED_AMX_BF16_BLOCKS,
     "AMX-BF16 tiles (prompt of one sequence) + AVX-512 VNNI on the GGUF blocks (decode)"},
    {WEIGHT_LAYOUT_ROWS, NEED_AVX512_BLOCKS, "AVX-512 VNNI on the GGUF blocks (prompt and decode)"},
    {WEIGHT_LAYOUT_ROWS, NEED_AVX2_BLOCKS, "AVX2 on the GGUF blocks (prompt and decode)"},
    {WEIGHT_LAYOUT_ROWS, NEED_NONE, "plain C"},
};
static const struct plan_entry k_half_list[] = {
    {WEIGHT_LAYOUT_F_PAIR16, NEED_AMX_BF16, "AMX-BF16 tiles (prompt) + AVX-512 FMA (decode)"},
    {WEIGHT_LAYOUT_F_PAIR16, NEED_AVX512, "AVX-512 FMA (prompt and decode)"},
    {WEIGHT_LAYOUT_F_PAIR16, NEED_AVX2_PACKED, "AVX2 FMA (prompt and decode)"},
    {WEIGHT_LAYOUT_ROWS, NEED_NONE, "plain C"},
};
static const struct plan_entry k_f32_list[] = {
    {WEIGHT_LAYOUT_ROWS, NEED_AVX512, "AVX-512 FMA"},
    {WEIGHT_LAYOUT_ROWS, NEED_NONE, "plain C"},
};
static const struct plan_entry k_plain_list[] = {
    {WEIGHT_LAYOUT_ROWS, NEED_NONE, "plain rows (never packed)"},
};

/* NULL when cpu meets the need for type t, else what is missing. */
static const char *need_missing(enum need need, enum dtype t, const struct cpu_features *cpu, char *buf, size_t len) {
    const char *m = NULL;
    switch (need) {
    case NEED_NONE: return NULL;
    case NEED_AVX512: m = cpu_avx512_missing(cpu); break;
    case NEED_AVX512_BLOCKS:
        if ((m = cpu_avx512_missing(cpu)) != NULL) break;
        if (kern_isa_avx512_has(t)) return NULL;
        snprintf(buf, len, "no AVX-512 kernel for %s yet", dtype_get((uint32_t)t)->name);
        return buf;
    case NEED_AVX2_PACKED:
    case NEED_AVX2_BLOCKS:
        if ((m = cpu_avx2_missing(cpu)) != NULL) break;
        if (need == NEED_AVX2_PACKED ? kern_isa_avx2_has_packed(t) : kern_isa_avx2_has(t)) return NULL;
        snprintf(buf, len, "no AVX2 kernel for %s", dtype_get((uint32_t)t)->name);
        return buf;
    case NEED_AMX_INT8:
    case NEED_AMX_BF16:
    case NEED_AMX_BF16_BLOCKS: {
        if (need == NEED_AMX_BF16_BLOCKS && !kern_isa_avx512_has(t)) {
            snprintf(buf, len, "no AVX-512 kernel for %s yet", dtype_get((uint32_t)t)->name);
            return buf;
        }
        const bool bits = cpu->amx_tile && (need == NEED_AMX_INT8 ? cpu->amx_int8 : cpu->amx_bf16);
        const char *what = need == NEED_AMX_INT8 ? "AMX-INT8" : "AMX-BF16";
        if (!bits) snprintf(buf, len, cpu->amx_env_off ? "%s turned off by NM_AMX=0" : "no %s in CPUID", what);
        else if (!cpu->amx_os_perm) snprintf(buf, len, "no %s: the OS refused the AMX permission", what);
        else if ((m = cpu_avx512_missing(cpu)) != NULL) snprintf(buf, len, "no %s path: %s", what, m);
        else return NULL;
        return buf;
    }
    }
    if (!m) return NULL;
    snprintf(buf, len, "%s", m);
    return buf;
}

enum weight_layout layout_plan(enum tensor_use use, enum dtype type, const struct cpu_features *cpu,
                               struct layout_why *why) {
    NM_ASSERT(dtype_get((uint32_t)type) != NULL && cpu != NULL);
    const struct plan_entry *list = k_plain_list;
    int len = 1;
    if (use == TENSOR_USE_MATMUL) {
        if (type == DTYPE_F32) {
            list = k_f32_list, len = (int)NM_ARRAY_LEN(k_f32_list);
        } else if (type == DTYPE_F16 || type == DTYPE_BF16) {
            list = k_half_list, len = (int)NM_ARRAY_LEN(k_half_list);
        } else if (weight_layout_supports(WEIGHT_LAYOUT_Q_TILE16, type)) {
            list = k_quant_list, len = (int)NM_ARRAY_LEN(k_quant_list);
        } else {
            list = k_block_list, len = (int)NM_ARRAY_LEN(k_block_list);
        }
    }
    char first_reason[160] = "";
    for (int i = 0; i < len; i++) {
        char buf[160];
        const char *missing = need_missing(list[i].need, type, cpu, buf, sizeof buf);
        if (i == 0 && missing) snprintf(first_reason, sizeof first_reason, "%s", missing);
        if (missing) continue;
        NM_ASSERT(weight_layout_supports(list[i].layout, type));
        if (why) {
            why->kernels = list[i].kernels;
            why->downgrade = i > 0;
            why->best_layout = list[0].layout;
            why->best_kernels = list[0].kernels;
            if (i > 0) {
                const int n = snprintf(why->reason, sizeof why->reason, "%s: %s %s", first_reason,
                                       weight_layout_name(list[i].layout), list[i].kernels);
                (void)(n >= (int)sizeof why->reason); /* a display string: cut if it must be */
            } else
                why->reason[0] = '\0';
        }
        return list[i].layout;
    }
    nm_bug(__FILE__, __LINE__, "layout_plan: every list ends with an entry that needs nothing");
}

int layout_report(const struct layout_tensor_class *classes, int n_classes, const struct cpu_features *cpu,
                  char *err, size_t errlen) {
    int downgrades = 0;
    nm_log_info("layouts: %-24s %-6s %-7s -> %-9s %s", "tensor class", "type", "use", "layout", "kernels");
    for (int i = 0; i < n_classes; i++) {
        const struct layout_tensor_class *c = &classes[i];
        struct layout_why why;
        const enum weight_layout l = layout_plan(c->use, c->type, cpu, &why);
        nm_log_info("layouts: %-24s %-6s %-7s -> %-9s %s", c->name, dtype_get((uint32_t)c->type)->name,
                    tensor_use_name(c->use), weight_layout_name(l), why.kernels);
        if (why.downgrade) {
            nm_log_warn("layouts: %s (%s) is downgraded from %s %s (%s)", c->name, dtype_get((uint32_t)c->type)->name,
                        weight_layout_name(why.best_layout), why.best_kernels, why.reason);
            if (downgrades++ == 0 && err)
                snprintf(err, errlen, "%s (%s): downgraded from %s %s (%s); --strict forbids downgrades", c->name,
                         dtype_get((uint32_t)c->type)->name, weight_layout_name(why.best_layout), why.best_kernels,
                         why.reason);
        }
    }
    return downgrades;
}

const struct cpu_features *layout_cpu(void) {
    static const struct cpu_features plain;
    static struct cpu_features avx2;
    const char *isa = kern_isa_get()->name;
    if (strcmp(isa, "ref") == 0) return &plain;
    if (strcmp(isa, "avx2") == 0) { /* chosen or forced (NM_ISA=avx2): the CPU as that path sees it */
        const struct cpu_features *f = cpu_features_get();
        avx2 = plain;
        avx2.avx2 = f->avx2, avx2.fma = f->fma, avx2.f16c = f->f16c;
        return &avx2;
    }
    return cpu_features_get();
}
