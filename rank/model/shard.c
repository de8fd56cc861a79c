/* Tensor-parallel partitioning (see shard.h). */
#include "shard.h"

#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "model.h"

struct range shard_split(int64_t n, int nranks, int r) {
    const int64_t base = n / nranks, rem = n % nranks;
    const int64_t begin = r * base + NM_MIN((int64_t)r, rem);
    return (struct range){begin, begin + base + (r < rem ? 1 : 0)};
}

static int block_size(enum dtype t) {
    const struct dtype_info *ti = dtype_get(t);
    return ti ? ti->blck_size : 1;
}

enum nm_status shard_plan(const struct model_config *c, const struct shard_types *t, int rank, int nranks,
                          struct shard *s, char *err, size_t errlen) {
    NM_ASSERT(nranks >= 1 && rank >= 0 && rank < nranks);
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->nranks = nranks;
    const int64_t group = c->n_head / c->n_head_kv;

    if (nranks > c->n_head)
        return nm_errf(err, errlen, NM_ERR_ARGS, "%d ranks but the model has only %lld attention heads to split",
                       nranks, (long long)c->n_head);
    if (c->n_head_kv >= nranks) {
        s->kv_heads = shard_split(c->n_head_kv, nranks, rank);
        s->q_heads = (struct range){s->kv_heads.begin * group, s->kv_heads.end * group};
    } else {
        s->q_heads = shard_split(c->n_head, nranks, rank);
        s->kv_heads = (struct range){s->q_heads.begin / group, (s->q_heads.end - 1) / group + 1};
    }

    /* Dense: a multiple of every block size (32, 256). MoE: the down projection's block. */
    const bool moe = c->n_expert > 0;
    const int64_t ff_align = moe ? NM_MAX((int64_t)SHARD_FF_CHUNK_MIN, block_size(t->w_down)) : SHARD_FF_CHUNK;
    const int64_t n_ff = moe ? c->n_ff_exp : c->n_ff;
    const int64_t ff_units = (n_ff + ff_align - 1) / ff_align;
    if (nranks > ff_units)
        return nm_errf(err, errlen, NM_ERR_ARGS, "%d ranks but %s = %lld splits into only %lld chunks of %lld values",
                       nranks, moe ? "n_ff_exp" : "n_ff", (long long)n_ff, (long long)ff_units, (long long)ff_align);
    const struct range u = shard_split(ff_units, nranks, rank);
    s->ff = (struct range){u.begin * ff_align, NM_MIN(u.end * ff_align, n_ff)};
    s->ff_unit = ff_align;

    if (nranks > c->n_vocab)
        return nm_errf(err, errlen, NM_ERR_ARGS, "%d ranks but only %lld vocabulary rows", nranks,
                       (long long)c->n_vocab);
    s->vocab = shard_split(c->n_vocab, nranks, rank);

    const int64_t blk = block_size(t->wo), n_cols = c->n_head * c->head_dim_v;
    s->wo_owned = (struct range){s->q_heads.begin * c->head_dim_v, s->q_heads.end * c->head_dim_v};
    s->wo_cols = (struct range){s->wo_owned.begin / blk * blk,
                                NM_MIN((s->wo_owned.end + blk - 1) / blk * blk, n_cols)};
    return NM_OK;
}

int shard_wo_chunks(const struct shard *s, const struct model_config *c, enum dtype wo, struct kern_chunk *out) {
    const int64_t blk = block_size(wo), n_cols = c->n_head * c->head_dim_v, base = s->wo_cols.begin;
    int n = 0;
    for (int64_t h = s->q_heads.begin; h < s->q_heads.end; h++) {
        const int64_t a0 = h * c->head_dim_v, a1 = a0 + c->head_dim_v;
        const int64_t w0 = a0 / blk * blk, w1 = NM_MIN((a1 + blk - 1) / blk * blk, n_cols);
        out[n++] = (struct kern_chunk){.w0 = w0 - base, .w1 = w1 - base, .a0 = a0 - base, .a1 = a1 - base};
    }
    return n;
}

int shard_down_chunks(const struct shard *s, struct kern_chunk *out) {
    int n = 0;
    for (int64_t f = s->ff.begin; f < s->ff.end; f += s->ff_unit) {
        const int64_t e = NM_MIN(f + s->ff_unit, s->ff.end);
        out[n++] = (struct kern_chunk){.w0 = f - s->ff.begin, .w1 = e - s->ff.begin, .a0 = f - s->ff.begin,
                                       .a1 = e - s->ff.begin};
    }
    return n;
}

/* How a tensor is cut, by the name after "blk.N.". */
enum cut {
    CUT_REPLICATED,
    CUT_ROWS_Q,     /* rows by query heads (attn_q weight/bias, q_norm is replicated) */
    CUT_ROWS_KV,    /* rows by KV heads (attn_k, attn_v weights/biases) */
    CUT_COLS_WO,    /* columns of attn_output */
    CUT_ROWS_FF,    /* ffn_gate, ffn_up */
    CUT_COLS_FF,    /* ffn_down */
    CUT_ROWS_FF_EXPS, /* ffn_gate_exps, ffn_up_exps: rows ff of every expert */
    CUT_COLS_FF_EXPS, /* ffn_down_exps: columns ff of every expert */
    CUT_ROWS_VOCAB, /* output.weight, output.bias */
};

static enum cut cut_of(const char *name) {
    const char *p = name;
    if (strncmp(p, "blk.", 4) == 0) {
        p = strchr(p + 4, '.');
        p = p ? p + 1 : name;
    }
    if (!strcmp(p, "attn_q.weight") || !strcmp(p, "attn_q.bias")) return CUT_ROWS_Q;
    if (!strcmp(p, "attn_k.weight") || !strcmp(p, "attn_k.bias") || !strcmp(p, "attn_v.weight") ||
        !strcmp(p, "attn_v.bias"))
        return CUT_ROWS_KV;
    if (!strcmp(p, "attn_output.weight")) return CUT_COLS_WO;
    if (!strcmp(p, "ffn_gate.weight") || !strcmp(p, "ffn_up.weight")) return CUT_ROWS_FF;
    if (!strcmp(p, "ffn_down.weight")) return CUT_COLS_FF;
    if (!strcmp(p, "ffn_gate_exps.weight") || !strcmp(p, "ffn_up_exps.weight")) return CUT_ROWS_FF_EXPS;
    if (!strcmp(p, "ffn_down_exps.weight")) return CUT_COLS_FF_EXPS;
    if (!strcmp(name, "output.weight") || !strcmp(name, "output.bias")) return CUT_ROWS_VOCAB;
    return CUT_REPLICATED;
}

static uint64_t row_bytes(uint32_t type, int64_t n) {
    int blck, size;
    if (!gguf_ggml_type_geometry(type, &blck, &size)) return 0;
    return (uint64_t)((n + blck - 1) / blck) * (uint64_t)size;
}

enum nm_status shard_weight_bytes(const struct gguf_file *f, const struct model_config *c, int rank, int nranks,
                                  uint64_t *bytes, char *err, size_t errlen) {
    const struct gguf_tensor *wo = gguf_find_tensor(f, "blk.0.attn_output.weight");
    const struct gguf_tensor *down = gguf_find_tensor(f, c->n_expert ? "blk.0.ffn_down_exps.weight" : "blk.0.ffn_down.weight");
    struct shard_types t = {.wo = wo ? (enum dtype)wo->type : DTYPE_F32,
                            .w_down = down ? (enum dtype)down->type : DTYPE_F32};
    struct shard s;
    enum nm_status st = shard_plan(c, &t, rank, nranks, &s, err, errlen);
    if (st) return st;
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *g = &f->tensors[i];
        const int64_t ne0 = g->ne[0], rows = g->size ? (int64_t)(g->size / NM_MAX(row_bytes(g->type, ne0), 1)) : 0;
        /* Rows of a bias are single values: a 1-D tensor is one row of ne0 values. */
        const bool vec = g->n_dims == 1;
        int64_t part_rows = rows, part_cols = ne0;
        switch (cut_of(g->name)) {
        case CUT_REPLICATED: break;
        case CUT_ROWS_Q:
            if (vec) part_cols = range_len(s.q_heads) * c->head_dim;
            else part_rows = range_len(s.q_heads) * c->head_dim;
            break;
        case CUT_ROWS_KV: {
            const int64_t per_head = ne0 == c->n_embd && !vec ? rows / c->n_head_kv : ne0 / c->n_head_kv;
            if (vec) part_cols = range_len(s.kv_heads) * per_head;
            else part_rows = range_len(s.kv_heads) * per_head;
            break;
        }
        case CUT_COLS_WO: part_cols = range_len(s.wo_cols); break;
        case CUT_ROWS_FF: part_rows = range_len(s.ff); break;
        case CUT_COLS_FF: part_cols = range_len(s.ff); break;
        case CUT_ROWS_FF_EXPS: part_rows = range_len(s.ff) * c->n_expert; break;
        case CUT_COLS_FF_EXPS: part_cols = range_len(s.ff); break;
        case CUT_ROWS_VOCAB:
            if (vec) part_cols = range_len(s.vocab);
            else part_rows = range_len(s.vocab);
            break;
        }
        total += (uint64_t)part_rows * row_bytes(g->type, part_cols);
    }
    *bytes = total;
    return NM_OK;
}
