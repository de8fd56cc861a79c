/* The IQ grid types' AVX-512 kernels with their grid lookups by gathers (dot_iq.h): every
 * AVX-512 CPU; dot_iq_vbmi.c replaces those of IQ2_XXS and IQ3_XXS where AVX512_VBMI is there. */
#include "dot_iq.h"

NM_BLK_DEFINE(iq2_xxs, 66, NM_BLK_SIGNS)
NM_BLK_DEFINE(iq2_xs, 74, NM_BLK_SIGNS)
NM_BLK_DEFINE(iq2_s, 82, NM_BLK_SIGNS)
NM_BLK_DEFINE(iq3_xxs, 98, NM_BLK_SIGNS)
NM_BLK_DEFINE(iq3_s, 110, NM_BLK_SIGNS)
NM_BLK_DEFINE(iq1_s, 50, NM_BLK_OFF)
NM_BLK_DEFINE(iq1_m, 56, NM_BLK_OFF)

void avx512_fill_iq(struct kern_isa *t) {
    t->vec_dot[DTYPE_IQ2_XXS] = vec_dot_iq2_xxs;
    t->gemm[DTYPE_IQ2_XXS] = gemm_iq2_xxs;
    t->vec_dot[DTYPE_IQ2_XS] = vec_dot_iq2_xs;
    t->gemm[DTYPE_IQ2_XS] = gemm_iq2_xs;
    t->vec_dot[DTYPE_IQ2_S] = vec_dot_iq2_s;
    t->gemm[DTYPE_IQ2_S] = gemm_iq2_s;
    t->vec_dot[DTYPE_IQ3_XXS] = vec_dot_iq3_xxs;
    t->gemm[DTYPE_IQ3_XXS] = gemm_iq3_xxs;
    t->vec_dot[DTYPE_IQ3_S] = vec_dot_iq3_s;
    t->gemm[DTYPE_IQ3_S] = gemm_iq3_s;
    t->vec_dot[DTYPE_IQ1_S] = vec_dot_iq1_s;
    t->gemm[DTYPE_IQ1_S] = gemm_iq1_s;
    t->vec_dot[DTYPE_IQ1_M] = vec_dot_iq1_m;
    t->gemm[DTYPE_IQ1_M] = gemm_iq1_m;
}
