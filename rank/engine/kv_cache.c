/* KV cache allocation (see kv_cache.h). */
#include "kv_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

enum nm_status kv_cache_init(struct kv_cache *kv, enum dtype type, int64_t n_layer, int64_t n_ctx, int64_t n_seq,
                             int64_t k_row, int64_t v_row, char *err, size_t errlen) {
    memset(kv, 0, sizeof *kv);
    NM_ASSERT(type == DTYPE_F16 || type == DTYPE_F32);
    NM_ASSERT(n_seq >= 1);
    if (n_ctx < n_seq)
        return nm_errf(err, errlen, NM_ERR_ARGS, "a context of %lld positions cannot be divided among %lld sequences "
                       "(raise -c to at least -np)", (long long)n_ctx, (long long)n_seq);
    const int64_t n_ctx_seq = n_ctx / n_seq;
    n_ctx = n_ctx_seq * n_seq; /* the remainder would belong to no sequence */
    const uint64_t es = type == DTYPE_F16 ? 2 : 4;
    uint64_t kb, vb, per_layer = (uint64_t)n_ctx * es;
    if (nm_mul_overflow_u64(per_layer * (uint64_t)n_layer, (uint64_t)k_row, &kb) ||
        nm_mul_overflow_u64(per_layer * (uint64_t)n_layer, (uint64_t)v_row, &vb))
        return nm_errf(err, errlen, NM_ERR_NOMEM, "KV cache size overflows for n_ctx %lld", (long long)n_ctx);
    kv->k = aligned_alloc(64, NM_MAX((kb + 63) / 64 * 64, (uint64_t)64)); /* 0 layers: every one on the GPU */
    kv->v = aligned_alloc(64, NM_MAX((vb + 63) / 64 * 64, (uint64_t)64));
    if (!kv->k || !kv->v) {
        free(kv->k);
        free(kv->v);
        kv->k = kv->v = NULL;
        return nm_errf(err, errlen, NM_ERR_NOMEM,
                       "cannot allocate the KV cache: %.1f MiB for n_ctx %lld (lower -c, or use the default F16 cache)",
                       (double)(kb + vb) / (1 << 20), (long long)n_ctx);
    }
    memset(kv->k, 0, kb);
    memset(kv->v, 0, vb);
    kv->type = type;
    kv->n_ctx = n_ctx;
    kv->n_seq = n_seq;
    kv->n_ctx_seq = n_ctx_seq;
    kv->n_layer = n_layer;
    kv->k_row = k_row;
    kv->v_row = v_row;
    kv->bytes = kb + vb;
    return NM_OK;
}

void kv_cache_free(struct kv_cache *kv) {
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

enum nm_status kv_batch_check(int n, const int32_t *seq, const int64_t *pos, int n_seq, const int64_t *seq_pos,
                              int64_t n_ctx_seq, uint8_t *seen, const char *holder, char *err, size_t errlen) {
    memset(seen, 0, (size_t)n_seq);
    for (int i = 0; i < n; i++) {
        const int32_t s = seq[i];
        const bool continues = i > 0 && seq[i - 1] == s;
        if (s < 0 || s >= n_seq)
            return nm_errf(err, errlen, NM_ERR_ARGS, "row %d: sequence %d; %s holds 0..%d", i, s, holder, n_seq - 1);
        if (!continues && seen[s])
            return nm_errf(err, errlen, NM_ERR_ARGS, "row %d: the rows of sequence %d are not adjacent", i, s);
        const int64_t next = continues ? pos[i - 1] + 1 : seq_pos[s];
        if (pos[i] != next)
            return nm_errf(err, errlen, NM_ERR_ARGS, "row %d: position %lld of sequence %d; the next one is %lld", i,
                           (long long)pos[i], s, (long long)next);
        if (pos[i] >= n_ctx_seq)
            return nm_errf(err, errlen, NM_ERR_ARGS,
                           "row %d: position %lld of sequence %d does not fit in its context of %lld positions (raise -c)",
                           i, (long long)pos[i], s, (long long)n_ctx_seq);
        seen[s] = 1;
    }
    return NM_OK;
}
