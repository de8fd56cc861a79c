/* Tensor-parallel partitioning: which slice of every weight each rank owns (DESIGN.md,
 * "Tensor-parallel partitioning"). A pure function of the model configuration, the weight types
 * and the rank count, so it can be tested for any shape and any number of ranks.
 *
 * - Attention: with n_head_kv >= nranks the units split over ranks are whole KV groups (a KV head
 *   and its query heads); otherwise the units are query heads, and each rank holds every KV head
 *   its query heads use (a KV head shared by two ranks is replicated on both). Q/K/V are
 *   column-parallel (a rank computes only its heads); attn_output is row-parallel: a rank
 *   multiplies the columns of its query heads and an allreduce sums the partial outputs.
 * - FFN: ffn_gate/ffn_up are column-parallel over n_ff, ffn_down row-parallel; n_ff is cut on
 *   multiples of SHARD_FF_CHUNK (256) values: every quantization block stays whole on one rank.
 * - MoE FFN (qwen3moe): the same cut applied to every expert: each rank holds columns ff of every
 *   expert's n_ff_exp, so its share of the work is the same whichever experts the router picks.
 *   The unit is ffn_down_exps' block size (32, or 256 for K-quants; SHARD_FF_CHUNK_MIN at
 *   least): experts are narrow (768 in Qwen3-30B-A3B), and 256-value units would allow only 3
 *   ranks. The router is replicated.
 * - A row-parallel slice whose column range is not block aligned (attn_output with K-quants and
 *   64-wide heads) is widened outward to whole blocks; the rank feeds zeros into the columns it
 *   does not own, so the allreduce still sums every column exactly once.
 * - Output head: split by vocabulary rows. Norms, biases of replicated outputs and the embedding
 *   table are replicated.
 * Uneven splits are normal: units are dealt out as evenly as possible, earlier ranks taking the
 * remainder.
 *
 * Exactness. A row-parallel matmul is summed over fixed chunks of its input columns that do not
 * depend on the rank count: one query head's columns for attn_output, SHARD_FF_CHUNK columns of
 * n_ff for ffn_down. Each chunk's partial sum is computed the same way by whichever rank owns it,
 * the partials are added in double, and ranks only ever split between chunks; so 1, 2, ... N
 * ranks add the same numbers and round once, and give the same bits (up to double rounding,
 * ~1e-16). Without this, the int8 activation quantization turns 1-ulp differences in partial-sum
 * order into rounding flips that grow to the size of the quantization noise. */
#ifndef NM_SHARD_H
#define NM_SHARD_H

#include <stdint.h>

#include "base.h"
#include "matmul.h"
#include "types.h"

#define SHARD_FF_CHUNK 256
#define SHARD_FF_CHUNK_MIN 32 /* the smallest MoE unit: one block of the 32-value types */

struct model_config;

/* A half-open range [begin, end). */
struct range {
    int64_t begin, end;
};
static inline int64_t range_len(struct range r) { return r.end - r.begin; }

struct shard {
    int rank, nranks;
    struct range q_heads;   /* query heads this rank computes */
    struct range kv_heads;  /* KV heads it holds (covers every KV head of q_heads) */
    struct range ff;        /* its columns of n_ff (qwen3moe: of every expert's n_ff_exp) */
    int64_t ff_unit;        /* n_ff is cut, and ffn_down summed, in chunks of this many values */
    struct range vocab;     /* its rows of the output head */
    /* attn_output columns (in units of values) it reads, widened to whole blocks of
     * attn_output's type, and the part of that range it owns (q_heads * head_dim_v). */
    struct range wo_cols;
    struct range wo_owned;
};

/* Block sizes the planner must respect, from the tensors' types in the file. */
struct shard_types {
    enum dtype wo;     /* attn_output.weight (of layer 0; layers share a type in practice) */
    enum dtype w_down; /* ffn_down.weight (qwen3moe: ffn_down_exps.weight) */
};

/* Plan rank `rank` of `nranks`. Fails with NM_ERR_ARGS and a message when the model cannot be
 * split that many ways (more ranks than query heads, or than n_ff/ff_align units, or than
 * vocabulary rows). */
enum nm_status shard_plan(const struct model_config *c, const struct shard_types *t, int rank, int nranks,
                          struct shard *out, char *err, size_t errlen);

/* The canonical chunks of this rank's row-parallel matmuls, in the rank's local columns (see
 * "Exactness" above): one per local query head for attn_output (weight columns widened to whole
 * blocks of `wo`'s type, activation kept on the head's columns only), one per ff_unit
 * columns for ffn_down (ffn_down_exps). out must hold range_len(q_heads) resp. ceil(ff/ff_unit) entries. Returns
 * the count. */
int shard_wo_chunks(const struct shard *s, const struct model_config *c, enum dtype wo, struct kern_chunk *out);
int shard_down_chunks(const struct shard *s, struct kern_chunk *out);

/* Split n units into nranks nearly equal parts; part r of them (earlier parts are longer). */
struct range shard_split(int64_t n, int nranks, int r);

/* Bytes of weights rank `rank` holds (replicated tensors included), from the configuration and
 * the per-tensor types of the file, for planning memory per node before loading. */
struct gguf_file;
enum nm_status shard_weight_bytes(const struct gguf_file *f, const struct model_config *c, int rank, int nranks,
                                  uint64_t *bytes, char *err, size_t errlen);

#endif
