/* Private interface of the AVX-512 kernels (AVX512F/BW/VL/DQ + VNNI): the function that fills
 * the avx512 kernel table. Safe to include from files built without AVX-512 flags; only call it
 * after CPUID said the path can run (cpu.c does). */
#ifndef NM_X86_AVX512_H
#define NM_X86_AVX512_H

#include "../cpu.h"

/* Overwrite the slots of t that have an AVX-512 kernel (t starts as a copy of the ref table). */
void kern_isa_avx512_fill(struct kern_isa *t);

/* Per-family fillers, one per source file. */
void avx512_fill_q(struct kern_isa *t);     /* q4_0, q4_1, q8_0: dot_q.c */
void avx512_fill_k(struct kern_isa *t);     /* q4_k, q5_k, q6_k: dot_k.c */
void avx512_fill_q5(struct kern_isa *t);    /* q5_0, q5_1: dot_q5.c */
void avx512_fill_k23(struct kern_isa *t);   /* q2_k, q3_k: dot_k23.c */
void avx512_fill_iq4(struct kern_isa *t);   /* iq4_nl, iq4_xs: dot_iq4.c */
void avx512_fill_iq(struct kern_isa *t);    /* iq2_*, iq3_*, iq1_*: dot_iq.c */
/* iq2_*, iq3_* with AVX512_VBMI (dot_iq_vbmi.c, over dot_iq.c's): NULL when filled, else why not */
const char *avx512_fill_iq_vbmi(struct kern_isa *t);
void avx512_fill_f(struct kern_isa *t);     /* f32, f16, bf16:   dot_f.c */
void avx512_fill_act(struct kern_isa *t);   /* quantize_act_q8x, to_bf16, swiglu, argmax: act.c */
void avx512_fill_packed(struct kern_isa *t); /* pk_gemm (packed layouts): packed.c */
void avx512_fill_attn(struct kern_isa *t);   /* attention (decode and prompt): attn.c */

#endif
