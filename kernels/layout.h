/* The layout planner (DESIGN lesson 3): every weight tensor gets its layout from a priority list
 * chosen by its use and type, filtered by what the CPU can run, falling back to the plain GGUF
 * rows. Embeddings (row lookup), norms, biases and F32 tensors are never packed. The planner
 * also names the kernels a layout runs with, says whether the choice is a downgrade from the
 * best this type could get on any CPU and why, prints the table per tensor class at start-up,
 * and lets --strict turn a downgrade into an error (the caller decides; layout_report counts).
 *
 * Priority lists (first entry whose needs the CPU meets wins):
 *   matmul, Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K and the block types Q5_0/Q5_1/IQ4_NL/Q2_K/Q3_K/IQ4_XS:
 *     1. q_tile16 with AMX-INT8 tiles (prompt) + AVX-512 VNNI (decode)   needs avx512 + AMX-INT8
 *     2. q_tile16 with AVX-512 VNNI (decode and prompt)                   needs avx512
 *     3. q_tile16 with AVX2 (vpmaddubsw; decode and prompt)               needs avx2 + its kernel
 *     4. rows with AVX2 kernels on the GGUF blocks (the block types)     needs avx2
 *     5. rows with plain-C kernels                                        always
 *   matmul, the IQ grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M):
 *     1. rows with AMX-BF16 tiles (prompt of one sequence) + AVX-512 VNNI needs avx512 + AMX-BF16
 *     2. rows with AVX-512 VNNI, 3. rows with AVX2, 4. rows with plain C
 *   matmul, F16/BF16:
 *     1. f_pair16 with AMX-BF16 tiles (prompt) + AVX-512 FMA (decode)     needs avx512 + AMX-BF16
 *     2. f_pair16 with AVX-512 FMA                                        needs avx512
 *     3. f_pair16 with AVX2 FMA                                           needs avx2
 *     4. rows with plain-C kernels                                        always
 *   matmul, F32:  1. rows, AVX-512 FMA   2. rows, plain C
 *   row lookup (token embedding), vector (norm, bias): rows, always (never a downgrade).
 * "avx512" is the kernel path of cpu.h (AVX512F/BW/VL/DQ + VNNI, FMA, F16C, AVX2); "avx2" the one
 * of CPUs without AVX-512 (AVX2, FMA, F16C): packed layouts for the packed types, plain C for the
 * block types and F32. */
#ifndef NM_LAYOUT_H
#define NM_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu.h"
#include "matmul.h"
#include "types.h"

enum tensor_use {
    TENSOR_USE_MATMUL, /* a matmul weight: attn_q/k/v/output, ffn_*, output head */
    TENSOR_USE_ROWS,   /* row lookup: token embedding */
    TENSOR_USE_VECTOR, /* norm, bias */
};
const char *tensor_use_name(enum tensor_use use);

/* What layout_plan decided, beyond the layout. */
struct layout_why {
    const char *kernels;    /* the kernels that will run, e.g. "AMX-INT8 tiles + AVX-512 VNNI" */
    bool downgrade;         /* a better entry of the list exists for this type on some CPU */
    enum weight_layout best_layout; /* the list's first entry */
    const char *best_kernels;
    char reason[160];       /* for a downgrade: what is missing, e.g. "no AMX-INT8 (...)" */
};

/* The layout for a tensor of `type` used as `use` on a CPU with features `cpu` (a real one from
 * cpu_features_get, or a simulated one in tests). why may be NULL. A type numallm does not
 * support aborts (bug: the loader rejects those by name first). */
enum weight_layout layout_plan(enum tensor_use use, enum dtype type, const struct cpu_features *cpu,
                               struct layout_why *why);

/* The CPU this process plans for: cpu_features_get(), or a CPU without extensions when the
 * kernel path is the plain-C one (NM_ISA=ref), whose kernels read only plain rows, or one with
 * AVX2/FMA/F16C only when it is the avx2 path (chosen, or forced by NM_ISA=avx2). */
const struct cpu_features *layout_cpu(void);

/* One class of tensors for the start-up table, e.g. {"blk.*.ffn_down", TENSOR_USE_MATMUL, q6_k}. */
struct layout_tensor_class {
    const char *name;
    enum tensor_use use;
    enum dtype type;
};

/* Log the table "class  type  use -> layout (kernels)" (nm_log_info, one line per class), with
 * each downgrade's reason as a warning. Returns the number of downgraded classes; when it is > 0
 * and err is not NULL, err receives a message naming the first one (for --strict: the caller
 * turns a non-zero count into an error). */
int layout_report(const struct layout_tensor_class *classes, int n_classes, const struct cpu_features *cpu,
                  char *err, size_t errlen);

#endif
