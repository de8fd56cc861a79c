/* The ISA path of this process, chosen once at start-up from CPUID (and, for AMX, the OS's
 * permission), and the table of kernel entry points for it. Every fast kernel in the table has
 * a _ref twin in quant.h/ops.h that is the fallback and the test oracle. */
#ifndef NM_CPU_H
#define NM_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "packed.h"
#include "quant.h"

struct cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    bool avx512dq;      /* added: the avx512 files are built with -mavx512dq */
    bool avx512vbmi;    /* optional: dot_iq_vbmi.c's grid lookups */
    bool os_avx512;     /* added: XCR0 says the OS saves the zmm/opmask state */
    bool amx_tile, amx_int8, amx_bf16; /* CPUID bits only; OS permission is separate */
    bool amx_env_off;                  /* CPUID has AMX, and NM_AMX=0 cleared the bits above */
    /* Added (issue 4): the OS let this process use the AMX tile data state. Linux asks for it
     * with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18); cpu_features_get requests
     * it once (when CPUID has AMX-TILE) and logs a refusal once. A refusal means no AMX. */
    bool amx_os_perm;
};

/* Kernel table for one ISA path. Slots never NULL once kern_isa_get() returned. */
struct kern_isa {
    const char *name; /* "avx512", "avx2" or "ref" */
    const char *note; /* a downgrade inside the path, printed when it is chosen; NULL: none */
    /* y[i] = dot(row i of w, act) for one weight row; see vec_dot_ref. Indexed by dtype. */
    float (*vec_dot[DTYPE_COUNT])(int64_t n, const void *w_row, const void *act_row);
    /* quantize_act_q8x_ref twin */
    void (*quantize_act_q8x)(const float *x, block_q8x *y, int64_t n);
    /* Added. A block of dot products: y[c * ldy + r] = vec_dot(n, weight row r, act row c) for
     * r < nr and c < nc; weight rows lie w_stride bytes apart, activation rows (q8x or f32, as
     * for vec_dot) act_stride bytes apart. Fast kernels keep a tile of weight rows x activation
     * rows in registers, so each weight byte loaded serves several activation rows (prefill)
     * and each activation load serves several weight rows (decode, nc = 1). Indexed by dtype. */
    void (*gemm[DTYPE_COUNT])(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                              size_t act_stride, int nc, float *y, int64_t ldy);
    /* Added (issue 4). The packed layouts' kernel (packed.h: struct pk_args); pk_gemm_ref in the
     * ref table. */
    void (*pk_gemm)(const struct pk_args *a);
    /* The types pk_gemm takes (NULL: every type with a packed layout). */
    bool (*pk_has)(enum dtype t);
    /* fp32_to_bf16_row_ref twin (types.h): the same bits (the activations of the bf16 tiles). */
    void (*to_bf16)(const float *x, uint16_t *y, int64_t n);
    /* op_swiglu_ref twin (ops.h). */
    void (*swiglu)(float *out, const float *gate, const float *up, int64_t n);
    /* op_argmax_ref twin (ops.h): the same index for every input. */
    int64_t (*argmax)(const float *x, int64_t n);
    /* op_attention_heads_ref and op_attention_queries_ref twins (ops.h; same arguments), and the
     * scratch floats the latter needs. */
    void (*attn_heads)(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                       const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                       int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);
    void (*attn_queries)(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q, int64_t pos0,
                         const void *k, const void *v, enum dtype kv_type, int64_t k_stride, int64_t v_stride,
                         int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);
    size_t (*attn_queries_scratch)(int64_t head_dim, int64_t head_dim_v);
};

/* CPUID, read once (and the AMX permission requested once, see amx_os_perm). */
const struct cpu_features *cpu_features_get(void);

/* Why a CPU with features f cannot run the avx512 kernel path (a short phrase such as "no
 * AVX512_VNNI"), or NULL if it can. Works on any feature set (the layout planner's simulated
 * CPUs too). */
const char *cpu_avx512_missing(const struct cpu_features *f);

/* Likewise for the avx2 path (AVX2 + FMA + F16C): a short phrase, or NULL if f can run it. */
const char *cpu_avx2_missing(const struct cpu_features *f);

/* Whether f can run AMX int8 / bf16 tiles: the CPUID bits, the OS permission and the avx512
 * path (the tile kernels use AVX-512 around the tiles). */
bool cpu_has_amx_int8(const struct cpu_features *f);
bool cpu_has_amx_bf16(const struct cpu_features *f);

/* The kernel table. The first call chooses the path: "avx512" when AVX512F+BW+VL+VNNI are
 * present, else "avx2" when AVX2+FMA+F16C are, else "ref"; NM_ISA=avx2 or NM_ISA=ref in the
 * environment forces that path. The choice is logged once, with the reason when a faster path
 * is declined. */
const struct kern_isa *kern_isa_get(void);

/* Whether the avx512 table has a kernel of its own for type t (not the plain-C one it starts
 * with): a property of the build, whatever this CPU runs. The layout planner asks it. */
bool kern_isa_avx512_has(enum dtype t);

/* Whether the avx2 table has a packed-layout kernel (pk_gemm) for type t, and whether it has
 * vec_dot/gemm kernels of its own for type t on its GGUF rows (the block decoder types): a
 * property of the build, whatever this CPU runs. The layout planner asks them. */
bool kern_isa_avx2_has_packed(enum dtype t);
bool kern_isa_avx2_has(enum dtype t);

/* Reference table (always available; tests compare the others with it). */
const struct kern_isa *kern_isa_ref(void);

/* Added. The table of the named path ("avx512", "avx2", "ref") if this CPU can run it, else NULL with
 * the reason in *why (when why is not NULL). Ignores NM_ISA; for tests and benchmarks. */
const struct kern_isa *kern_isa_find(const char *name, const char **why);

#endif
