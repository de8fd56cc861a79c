/* The one KV cache of a rank (DESIGN lesson 5): allocated once at start-up from the model's
 * dimensions and the requested context, never grown or copied by a request. Layout per layer:
 * K as [n_ctx][n_head_kv * head_dim], V as [n_ctx][n_head_kv * head_dim_v], F16 or F32.
 *
 * The n_ctx cells are divided among n_seq sequences (the slots of a server) in equal regions of
 * n_ctx_seq = n_ctx / n_seq consecutive cells: position pos of sequence seq lives in cell
 * seq * n_ctx_seq + pos (kv_cell), so a sequence's keys are contiguous, as attention reads them. */
#ifndef NM_KV_CACHE_H
#define NM_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "types.h"

struct kv_cache {
    enum dtype type;      /* DTYPE_F16 (default) or DTYPE_F32 */
    int64_t n_ctx;        /* cells per layer: n_seq * n_ctx_seq */
    int64_t n_seq;        /* sequences, each with its own region of cells */
    int64_t n_ctx_seq;    /* cells (positions) per sequence */
    int64_t n_layer;
    int64_t k_row;        /* elements per position in K: n_head_kv * head_dim */
    int64_t v_row;        /* elements per position in V: n_head_kv * head_dim_v */
    uint8_t *k, *v;       /* all layers, contiguous */
    uint64_t bytes;       /* K and V together */
};

/* Allocate (zero-filled) n_ctx_seq = n_ctx / n_seq positions for each of n_seq >= 1 sequences.
 * Returns NM_ERR_ARGS when n_ctx < n_seq (no position per sequence), NM_ERR_NOMEM with a message
 * naming the size when the allocation fails. */
enum nm_status kv_cache_init(struct kv_cache *kv, enum dtype type, int64_t n_layer, int64_t n_ctx, int64_t n_seq,
                             int64_t k_row, int64_t v_row, char *err, size_t errlen);
void kv_cache_free(struct kv_cache *kv);

/* The cell of position pos of sequence seq (0 <= pos < n_ctx_seq). */
static inline int64_t kv_cell(const struct kv_cache *kv, int64_t seq, int64_t pos) { return seq * kv->n_ctx_seq + pos; }

/* K and V of a cell (kv_cell) of a layer. */
static inline void *kv_k(const struct kv_cache *kv, int64_t layer, int64_t cell) {
    const size_t es = kv->type == DTYPE_F16 ? 2 : 4;
    return kv->k + ((size_t)(layer * kv->n_ctx + cell) * (size_t)kv->k_row) * es;
}
static inline void *kv_v(const struct kv_cache *kv, int64_t layer, int64_t cell) {
    const size_t es = kv->type == DTYPE_F16 ? 2 : 4;
    return kv->v + ((size_t)(layer * kv->n_ctx + cell) * (size_t)kv->v_row) * es;
}

/* The sequence rules of a batch (forward.h's engine_batch, pipeline.h's stage_batch), checked
 * before anything changes: row i is at position pos[i] of sequence seq[i] (0 .. n_seq-1), a
 * sequence's rows are adjacent and continue it from seq_pos[seq] (the positions it holds), and
 * every position fits in its n_ctx_seq. seen: n_seq bytes of scratch. NM_ERR_ARGS with a
 * message naming the row ("holder" names who holds the sequences), else NM_OK. */
enum nm_status kv_batch_check(int n, const int32_t *seq, const int64_t *pos, int n_seq, const int64_t *seq_pos,
                              int64_t n_ctx_seq, uint8_t *seen, const char *holder, char *err, size_t errlen);

#endif
