/* The GPU rank's engine: layers [layer_first, n_layer) of a model, its output norm and output
 * head, on one CUDA device (DESIGN "Processes and data flow"). Only activations cross: the
 * residual stream after layer layer_first-1 comes in from the host, logits (or just the top-k
 * candidates) go out. The weights of its layers are read from the mapped GGUF file and uploaded
 * once, at open; every weight upload goes through one function that counts the bytes and aborts
 * if it is ever called after loading finished (DESIGN lesson 1), so
 * gpu_stage_weight_bytes_after_load() stays 0 and tests check it.
 *
 * Decode (chunks of up to CUK_GEMV_MAX_ROWS rows: one token, or one of each of up to 16
 * sequences; up to CUK_MMQ_MAX_ROWS where every matmul of the stage runs on the int8 tensor cores,
 * so that a server's step of 16 decode rows and a piece of a new prompt stays on this path)
 * multiplies block-quantized weights with int8 activations quantized exactly as the CPU ranks
 * quantize them, in fused kernels (cuk_gemv_q8: the types with tensor-core decoders read each
 * weight once for all the rows; the others once per 8 rows); a step whose first row asks for
 * logits, without a layer hook, replays the CUDA graph of its row count (captured at the first
 * such step; the rows' places are read from device memory). The matmuls' summation
 * order depends on the step's row count (the GEMV, int8 tensor cores from CUK_MMQ_MIN_ROWS rows,
 * cuBLAS above 16 rows, or above CUK_MMQ_MAX_ROWS for the tensor cores' types), so on the GPU a
 * row's low bits do too. NM_GPU_GRAPHS=0 in the environment launches the
 * kernels one by one;
 * NM_GPU_PDL=0 makes each decode kernel wait for the one before to finish before it starts
 * (kernels/cuda/cuk_internal.h, cuk_launch).
 *
 * The stage keeps its own KV cache (its layers only, F16 or F32, allocated once at open for
 * n_ctx positions: lesson 5), divided among n_seq sequences as the CPU engine divides its own
 * (a server's slots: each sequence n_ctx / n_seq positions), and chunks any batch by n_batch
 * internally. A batch may hold rows of several sequences: the matmuls take all its rows, the
 * RoPE, KV stores and attention each row at its own place (in a chunk past the decode path's
 * rows, rows of one sequence that come together as a run of 8 or more run the tensor-core
 * attention).
 *
 * Supported: llama, qwen2, qwen3 and qwen3moe (cfg->n_expert > 0: softmax router ffn_gate_inp,
 * the top n_expert_used experts with renormalized weights, SiLU-gated experts in the 3-D
 * ffn_{gate,up,down}_exps, expert e being the e-th [n_ff_exp x n_embd] slice), matmul weights in
 * every type with a CUDA kernel (cuk_matmul_type_supported: the written-out Q4_0 .. Q6_K, F16,
 * BF16, F32 and the types of the block decoder interface), kept in their GGUF block form on the
 * device. Any other type is refused at open, naming the tensor and the type.
 *
 * In a build without CUDA the same functions exist: gpu_device_count returns 0 and
 * gpu_stage_open fails with "no CUDA device: numallm was built without CUDA ...". */
#ifndef NM_GPU_STAGE_H
#define NM_GPU_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "cuda_kernels.h" /* struct cuk_device_info */
#include "forward.h" /* engine_layer_hook */
#include "gguf.h"
#include "model.h"

/* ---- devices ------------------------------------------------------------------------------ */

/* Number of CUDA devices; 0 with the reason in why ("no CUDA device: <cudaGetErrorString>", or
 * "... built without CUDA") when none can be used. */
int gpu_device_count(char *why, size_t whylen);
/* Facts about device dev (cuda_kernels.h: name, memory, bandwidth, PCI id, ...).
 * NM_ERR_ARGS/NM_ERR_UNSUPPORTED with a message when it cannot be read. */
enum nm_status gpu_device_info(int dev, struct cuk_device_info *out, char *err, size_t errlen);

/* ---- the stage ---------------------------------------------------------------------------- */

struct gpu_stage_params {
    int device;          /* CUDA device index */
    int64_t layer_first; /* 0..n_layer; n_layer: only output_norm and the output head */
    int64_t n_ctx;       /* positions the KV cache holds; 0 = the model's training context */
    int n_batch;         /* most tokens per device chunk; > 0 */
    int n_seq;           /* sequences held, each with n_ctx / n_seq positions; 0 = 1 */
    enum dtype kv_type;  /* DTYPE_F16 or DTYPE_F32 */
};

struct gpu_stage;

/* Read the tensors of layers [layer_first, n_layer), output_norm and the output head
 * (output.weight, or token_embd.weight when tied; optional output.bias) from the mapped file f,
 * check their shapes against cfg, upload them once and allocate the KV cache and scratch. f and
 * cfg are borrowed for the call only (nothing keeps pointers into f after it returns). MoE
 * sizes come from cfg (n_expert, n_expert_used, n_ff_exp). Logs "GPU: uploaded N tensors, X MiB, layers a..b +
 * output head". Failures, with a message, and nothing left allocated:
 *   NM_ERR_UNSUPPORTED  no CUDA device ("no CUDA device: ..."), or a tensor of a type without
 *                       a CUDA kernel (named, with its type);
 *   NM_ERR_NOMEM        the device is too small (the sizes needed and free are named);
 *   NM_ERR_NOT_FOUND / NM_ERR_MISMATCH  a missing tensor or key, or a shape that disagrees;
 *   NM_ERR_ARGS         bad params. */
enum nm_status gpu_stage_open(struct gpu_stage **out, const struct gguf_file *f, const struct model_config *cfg,
                              const struct gpu_stage_params *p, char *err, size_t errlen);
void gpu_stage_free(struct gpu_stage *s);

/* Evaluate a batch of rows (pipeline.h's stage_batch: hidden states [n][n_embd] f32 on the host,
 * each row's sequence and position) through the stage's layers, then output_norm and the head for
 * the rows that ask. logits (host), when not NULL, receives [rows asking][n_vocab] in row order;
 * the logits of the last chunk's rows that ask (all of them when at most PIPELINE_KEPT_ROWS do:
 * pipeline.h) and of the last row, asking or not, stay on the device for gpu_stage_topk. Any n
 * works: chunks of n_batch run one after the other. NM_ERR_ARGS, naming the row, with no state
 * change, when a sequence id, a position (each sequence's rows adjacent, continuing it:
 * gpu_stage_seq_pos) or a context limit is wrong. */
enum nm_status gpu_stage_eval_batch(struct gpu_stage *s, const struct stage_batch *b, float *logits, char *err,
                                    size_t errlen);
/* Sequence 0 alone: n rows at positions pos0 .. pos0+n-1 (pos0 = gpu_stage_n_past), logits
 * [n][n_vocab] when logits_all, else [1][n_vocab] for the last row. */
enum nm_status gpu_stage_eval(struct gpu_stage *s, const float *hidden, int n, int64_t pos0, bool logits_all,
                              float *logits, char *err, size_t errlen);

/* For each of n rows of the last evaluation (pipeline.h's stage_topk), on the device, its k best
 * candidates after llama.cpp's repetition penalty over its tokens (each distinct id once: a
 * positive logit divided by the penalty, a negative one multiplied; 1 = off): row i's after the
 * k of the rows before it in ids, vals (host), in descending order, ties the lower id first: the
 * (id, logit) candidates the CPU sampler builds in local_candidates, so its picking step can take
 * them as they are. Greedy is k = 1. NM_ERR_ARGS when nothing was evaluated yet, a row's logits
 * are not kept, or a k is outside 1..min(1024, n_vocab). */
enum nm_status gpu_stage_topk(struct gpu_stage *s, int n, const struct stage_topk *q, int32_t *ids, float *vals,
                              char *err, size_t errlen);

/* Positions sequence seq holds (the position its next row takes); sequence seq keeps its first n
 * (n <= gpu_stage_seq_pos) and forgets the rest: a rewind, a reused prefix, or 0 to reset. */
int64_t gpu_stage_seq_pos(const struct gpu_stage *s, int seq);
void gpu_stage_seq_keep(struct gpu_stage *s, int seq, int64_t n);
/* Sequence 0's: gpu_stage_seq_keep(s, 0, n_past) and gpu_stage_seq_pos(s, 0). */
void gpu_stage_truncate(struct gpu_stage *s, int64_t n_past);
int64_t gpu_stage_n_past(const struct gpu_stage *s);
/* Positions the cache holds for all sequences together. */
int64_t gpu_stage_n_ctx(const struct gpu_stage *s);
/* The most rows of a chunk that take the decode path (its fused kernels and CUDA graphs): 16, or
 * up to CUK_MMQ_MAX_ROWS where every matmul runs on the int8 tensor cores. */
int gpu_stage_decode_rows(const struct gpu_stage *s);

/* Weight bytes uploaded at open, and weight bytes moved after open finished (0 unless a bug:
 * such an upload aborts). */
uint64_t gpu_stage_weight_bytes_uploaded(const struct gpu_stage *s);
uint64_t gpu_stage_weight_bytes_after_load(const struct gpu_stage *s);
/* Device bytes of the KV cache. */
uint64_t gpu_stage_kv_bytes(const struct gpu_stage *s);

/* Called like the CPU engine's hook (forward.h) with the residual stream of each chunk copied
 * to the host: layer il after each of the stage's layers, n_layer after output_norm. Costs a
 * synchronizing copy per layer: for tests and dumps. */
void gpu_stage_set_layer_hook(struct gpu_stage *s, engine_layer_hook hook, void *ctx);

#endif
