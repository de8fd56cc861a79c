/* Private interface of the AVX2 kernels (AVX2 + FMA + F16C: x86-64 CPUs without AVX-512, such
 * as AMD Zen 2 and 3): the functions that fill the avx2 kernel table. Safe to include from files
 * built without AVX2 flags; only call them after CPUID said the path can run (cpu.c does). */
#ifndef NM_X86_AVX2_H
#define NM_X86_AVX2_H

#include "../cpu.h"

/* For the AVX2 kernel files: always-inlined helpers, fully unrolled small loops. */
#define NM_INLINE static inline __attribute__((always_inline))
#define NM_UNROLL _Pragma("GCC unroll 16")

/* Overwrite the slots of t that have an AVX2 kernel (t starts as a copy of the ref table). */
void kern_isa_avx2_fill(struct kern_isa *t);

void avx2_fill_packed(struct kern_isa *t); /* pk_gemm (every packed type): packed.c */
void avx2_fill_attn(struct kern_isa *t);   /* attention (decode and prompt): attn.c */
void avx2_fill_blocks(struct kern_isa *t); /* vec_dot, gemm of the block decoder types: blocks.c */
void avx2_fill_act(struct kern_isa *t);    /* quantize_act_q8x: act.c */

#endif
