/* AVX-512 twin of op_attention_head (ops.h): same contract, same arguments. */
#ifndef NM_ATTN_AVX512_H
#define NM_ATTN_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

void attn_head_avx512(float *out, const float *q, const void *k, const void *v, enum dtype kv_type, int64_t n_kv,
                      int64_t k_stride, int64_t v_stride, int64_t head_dim, int64_t head_dim_v, float scale,
                      float *scratch);

/* AVX-512 twin of op_attention_queries (ops.h); its scratch in floats. */
size_t attn_queries_avx512_scratch(int64_t head_dim, int64_t head_dim_v);
void attn_queries_avx512(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q, int64_t pos0,
                         const void *k, const void *v, enum dtype kv_type, int64_t k_stride, int64_t v_stride,
                         int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);

#endif
