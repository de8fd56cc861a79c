/* Element-wise and attention operations of the forward pass, plain C (a small share of a step
 * next to the matmuls), except attention, whose cost grows with the context, and SwiGLU, whose
 * exponentials were 6% of a prompt: they run AVX-512 twins when that ISA path was chosen, with
 * the _ref functions as references. Each has a
 * contract that the reference implementation in tests/reference mirrors in float64. */
#ifndef NM_OPS_H
#define NM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

/* y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; y may equal x. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* RoPE on one head vector x[head_dim] at position pos; only the first n_rot values rotate.
 * cos_sin holds n_rot/2 (cos, sin) pairs for this position (op_rope_cache). neox selects the
 * pairing: (x[i], x[i+n_rot/2]) if set, (x[2i], x[2i+1]) otherwise. */
void op_rope(float *x, const float *cos_sin, int64_t n_rot, int neox);

/* cos_sin[2i], cos_sin[2i+1] = cos, sin of theta_i = pos * freq_scale * base^(-2i/n_rot) /
 * freq_factors[i] (freq_factors may be NULL), for i < n_rot/2. Computed in double. */
void op_rope_cache(float *cos_sin, int64_t pos, int64_t n_rot, float base, float freq_scale,
                   const float *freq_factors);

/* out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may equal gate. Runs the
 * ISA path's version (AVX-512: a polynomial exp, within a few ulp of expf); _ref is plain C. */
void op_swiglu(float *out, const float *gate, const float *up, int64_t n);
void op_swiglu_ref(float *out, const float *gate, const float *up, int64_t n);

/* x[i] += y[i] */
void op_add(float *x, const float *y, int64_t n);

/* The index of the largest of x[0..n) (n >= 1), the lowest one among equal values (-0.0 and
 * +0.0 are equal): greedy sampling's choice over a row of logits. _ref is the scan in that order:
 * i replaces the best so far where x[i] != x[best] and !(x[i] < x[best]), which makes a NaN win
 * and then be replaced by each later value; the fast versions give the same index for every
 * input (a row with a NaN goes to the scan). Runs the ISA path's version: a vector maximum, then
 * the first index that holds it (a 152k-token row, AVX2 on the development VM: 99 -> 24 us;
 * tests/bench/RESULTS.md). */
int64_t op_argmax(const float *x, int64_t n);
int64_t op_argmax_ref(const float *x, int64_t n);

/* Decode attention of one row: n_q query heads that share one KV head (a GQA group; 1 without
 * GQA), each over positions [0, n_kv): scores = q . k_t * scale, softmax, out = sum_t p_t v_t.
 * Query head j's q starts at q + j * q_stride, its output at out + j * out_stride (head_dim_v
 * floats). Row t of k starts k_stride elements after row t-1 (v: v_stride); both of type kv_type
 * (F32 or F16); n_kv >= 1. A head's result has the same bits whatever n_q (the fast versions
 * read each block of keys once for up to ATTN_HEADS_PASS heads). scratch holds
 * min(n_q, ATTN_HEADS_PASS) * n_kv floats. Runs the ISA path's version. */
#define ATTN_HEADS_PASS 16
void op_attention_heads(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                        const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                        int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);
/* The plain-C reference of op_attention_heads: one head after the other. */
void op_attention_heads_ref(float *out, int64_t out_stride, const float *q, int64_t q_stride, int n_q, const void *k,
                            const void *v, enum dtype kv_type, int64_t n_kv, int64_t k_stride, int64_t v_stride,
                            int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);

/* Prompt attention (issue 4), flash-style: n_q consecutive query rows of one head, query i at
 * position pos0 + i, causal (it sees KV positions 0 .. pos0 + i, so n_kv >= pos0 + n_q rows of k
 * and v must be present). q row i starts at q + i * q_stride, out row i at out + i * out_stride
 * (head_dim_v floats). Keys are taken in blocks of ATTN_KV_BLOCK with an online softmax (running
 * max and sum per query, the output rescaled when the max grows), so no [n_q][n_kv] score matrix
 * exists; the AVX-512 and AVX2 versions take queries in blocks of ATTN_Q_BLOCK (one per vector
 * lane: two zmm, four ymm) so every K/V value loaded serves the block. k, v, kv_type, strides, head dims and
 * scale as op_attention_heads. scratch: op_attention_queries_scratch(head_dim, head_dim_v)
 * floats. Runs the ISA path's version. */
#define ATTN_KV_BLOCK 64
#define ATTN_Q_BLOCK 32
size_t op_attention_queries_scratch(int64_t head_dim, int64_t head_dim_v);
/* The scratch floats of op_attention_queries_ref alone. */
size_t op_attention_queries_ref_scratch(int64_t head_dim, int64_t head_dim_v);
void op_attention_queries(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q, int64_t pos0,
                          const void *k, const void *v, enum dtype kv_type, int64_t k_stride, int64_t v_stride,
                          int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);
/* The plain-C reference of op_attention_queries (same blocking and online softmax, one query at a
 * time, expf). */
void op_attention_queries_ref(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_q,
                              int64_t pos0, const void *k, const void *v, enum dtype kv_type, int64_t k_stride,
                              int64_t v_stride, int64_t head_dim, int64_t head_dim_v, float scale, float *scratch);

/* Store n floats into a KV row of type F32 or F16. */
void op_store_kv(void *dst, const float *src, int64_t n, enum dtype kv_type);

#endif
