/* Shard planner: for many (model shape, rank count) pairs, 1 to 8 ranks, the ranks' slices
 * cover every head, KV head, n_ff column and vocabulary row exactly once (KV heads: at least
 * once, replicated only where query heads of one group sit on several ranks); splits are as
 * even as the units allow; n_ff cuts fall on ffn_down's block boundaries; attn_output column
 * ranges are whole blocks containing the owned columns. Plus the cases DESIGN.md names: 14
 * heads over 4 ranks, n_ff = 4864 over 3 ranks. */
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "shard.h"

static int failures, checks;
#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        checks++;                                                                           \
        if (!(cond)) {                                                                      \
            failures++;                                                                     \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                          \
            printf(__VA_ARGS__);                                                            \
            printf("\n  repro: build/test_shard\n");                                       \
        }                                                                                   \
    } while (0)

struct shape {
    const char *name;
    int64_t n_head, n_head_kv, head_dim, n_ff, n_vocab, n_embd;
};

static void check_plan(const struct shape *sh, enum dtype wo, enum dtype down, int nranks) {
    struct model_config c = {.n_head = sh->n_head, .n_head_kv = sh->n_head_kv, .head_dim = sh->head_dim,
                             .head_dim_v = sh->head_dim, .n_ff = sh->n_ff, .n_vocab = sh->n_vocab,
                             .n_embd = sh->n_embd};
    struct shard_types t = {.wo = wo, .w_down = down};
    const int64_t group = c.n_head / c.n_head_kv, ff_align = SHARD_FF_CHUNK,
                  blk = dtype_get(wo)->blck_size;
    int64_t next_q = 0, next_ff = 0, next_v = 0, min_q = 1 << 30, max_q = 0;
    static int kv_seen[4096];
    memset(kv_seen, 0, sizeof kv_seen);
    for (int r = 0; r < nranks; r++) {
        struct shard s;
        char err[256];
        enum nm_status st = shard_plan(&c, &t, r, nranks, &s, err, sizeof err);
        if (nranks > c.n_head || nranks > (c.n_ff + ff_align - 1) / ff_align) {
            CHECK(st == NM_ERR_ARGS, "%s over %d ranks must be refused", sh->name, nranks);
            return;
        }
        CHECK(st == NM_OK, "%s rank %d/%d: %s", sh->name, r, nranks, err);
        if (st) return;
        CHECK(s.q_heads.begin == next_q && s.q_heads.end > s.q_heads.begin, "%s %d/%d: q heads [%lld,%lld)", sh->name,
              r, nranks, (long long)s.q_heads.begin, (long long)s.q_heads.end);
        next_q = s.q_heads.end;
        min_q = NM_MIN(min_q, range_len(s.q_heads));
        max_q = NM_MAX(max_q, range_len(s.q_heads));
        /* Every KV head its query heads need, and no other. */
        CHECK(s.kv_heads.begin == s.q_heads.begin / group && s.kv_heads.end == (s.q_heads.end - 1) / group + 1,
              "%s %d/%d: kv heads [%lld,%lld) for q [%lld,%lld)", sh->name, r, nranks, (long long)s.kv_heads.begin,
              (long long)s.kv_heads.end, (long long)s.q_heads.begin, (long long)s.q_heads.end);
        for (int64_t k = s.kv_heads.begin; k < s.kv_heads.end; k++) kv_seen[k]++;
        if (c.n_head_kv >= nranks)
            CHECK(s.q_heads.begin % group == 0 && s.q_heads.end % group == 0,
                  "%s %d/%d: with n_head_kv >= ranks the split is by whole KV groups", sh->name, r, nranks);
        CHECK(s.ff.begin == next_ff && s.ff.end > s.ff.begin && s.ff.begin % ff_align == 0 &&
                  (s.ff.end % ff_align == 0 || s.ff.end == c.n_ff),
              "%s %d/%d: ff [%lld,%lld) not on %lld boundaries", sh->name, r, nranks, (long long)s.ff.begin,
              (long long)s.ff.end, (long long)ff_align);
        next_ff = s.ff.end;
        CHECK(s.vocab.begin == next_v && s.vocab.end > s.vocab.begin, "%s %d/%d: vocab", sh->name, r, nranks);
        next_v = s.vocab.end;
        CHECK(s.wo_owned.begin == s.q_heads.begin * c.head_dim_v && s.wo_owned.end == s.q_heads.end * c.head_dim_v,
              "%s %d/%d: wo owned", sh->name, r, nranks);
        CHECK(s.wo_cols.begin <= s.wo_owned.begin && s.wo_cols.end >= s.wo_owned.end && s.wo_cols.begin % blk == 0 &&
                  (s.wo_cols.end % blk == 0 || s.wo_cols.end == c.n_head * c.head_dim_v) &&
                  s.wo_cols.begin > s.wo_owned.begin - blk && s.wo_cols.end < s.wo_owned.end + blk,
              "%s %d/%d: wo cols [%lld,%lld) for owned [%lld,%lld), block %lld", sh->name, r, nranks,
              (long long)s.wo_cols.begin, (long long)s.wo_cols.end, (long long)s.wo_owned.begin,
              (long long)s.wo_owned.end, (long long)blk);
    }
    CHECK(next_q == c.n_head && next_ff == c.n_ff && next_v == c.n_vocab, "%s over %d ranks: coverage", sh->name,
          nranks);
    CHECK(max_q - min_q <= (c.n_head_kv >= nranks ? group : 1), "%s over %d ranks: heads %lld..%lld per rank",
          sh->name, nranks, (long long)min_q, (long long)max_q);
    for (int64_t k = 0; k < c.n_head_kv; k++) CHECK(kv_seen[k] >= 1, "%s: KV head %lld on no rank", sh->name, (long long)k);
}

int main(void) {
    static const struct shape shapes[] = {
        {"qwen2.5-0.5b", 14, 2, 64, 4864, 151936, 896},  {"llama-3.2-1b", 32, 8, 64, 8192, 128256, 2048},
        {"llama-3-8b", 32, 8, 128, 14336, 128256, 4096}, {"qwen3-0.6b", 16, 8, 128, 3072, 151936, 1024},
        {"tiny-llama", 4, 2, 64, 1024, 512, 256},        {"mha-7", 7, 7, 64, 2816, 1000, 448},
        {"mqa-12", 12, 1, 64, 2048, 999, 768},
    };
    /* 32-value blocks (Q4_0, Q5_0, IQ4_NL), 256-value super-blocks (K-quants, IQ types), floats */
    const enum dtype types[] = {DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_F16,     DTYPE_Q6_K, DTYPE_F32,
                                DTYPE_Q5_0, DTYPE_IQ4_NL, DTYPE_Q2_K, DTYPE_IQ2_XXS, DTYPE_IQ1_M};
    for (size_t i = 0; i < NM_ARRAY_LEN(shapes); i++)
        for (size_t t = 0; t < NM_ARRAY_LEN(types); t++)
            for (int n = 1; n <= 8; n++) check_plan(&shapes[i], types[t], types[t], n);

    /* The named cases. */
    struct model_config q = {.n_head = 14, .n_head_kv = 2, .head_dim = 64, .head_dim_v = 64, .n_ff = 4864,
                             .n_vocab = 151936, .n_embd = 896};
    struct shard_types tq = {.wo = DTYPE_Q4_0, .w_down = DTYPE_Q4_0};
    const int64_t heads4[4][2] = {{0, 4}, {4, 8}, {8, 11}, {11, 14}};
    for (int r = 0; r < 4; r++) {
        struct shard s;
        shard_plan(&q, &tq, r, 4, &s, NULL, 0);
        CHECK(s.q_heads.begin == heads4[r][0] && s.q_heads.end == heads4[r][1], "14 heads over 4: rank %d [%lld,%lld)",
              r, (long long)s.q_heads.begin, (long long)s.q_heads.end);
    }
    struct shard s1;
    shard_plan(&q, &tq, 1, 4, &s1, NULL, 0);
    CHECK(s1.kv_heads.begin == 0 && s1.kv_heads.end == 2, "rank 1 of 4 has query heads of both KV groups");
    const int64_t ff3[3][2] = {{0, 1792}, {1792, 3328}, {3328, 4864}};
    for (int r = 0; r < 3; r++) {
        struct shard s;
        shard_plan(&q, &tq, r, 3, &s, NULL, 0);
        CHECK(s.ff.begin == ff3[r][0] && s.ff.end == ff3[r][1], "n_ff 4864 over 3 (q4_0): rank %d [%lld,%lld)", r,
              (long long)s.ff.begin, (long long)s.ff.end);
    }
    tq.w_down = DTYPE_Q4_K;
    const int64_t ff3k[3][2] = {{0, 1792}, {1792, 3328}, {3328, 4864}};
    for (int r = 0; r < 3; r++) {
        struct shard s;
        shard_plan(&q, &tq, r, 3, &s, NULL, 0);
        CHECK(s.ff.begin == ff3k[r][0] && s.ff.end == ff3k[r][1], "n_ff 4864 over 3 (q4_k): rank %d [%lld,%lld)", r,
              (long long)s.ff.begin, (long long)s.ff.end);
    }
    /* qwen3moe (Qwen3-30B-A3B: n_ff_exp 768): every expert cut the same way, in units of
     * ffn_down_exps' block; 32-value types split 24 ways, K-quants only 3, and a fourth rank is
     * refused by name. The down chunks cover the rank's columns in whole units. */
    struct model_config moe = {.n_head = 32, .n_head_kv = 4, .head_dim = 128, .head_dim_v = 128, .n_ff = 0,
                               .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768, .n_vocab = 151936, .n_embd = 2048};
    const enum dtype moe_types[] = {DTYPE_Q4_0, DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_F16, DTYPE_Q5_1, DTYPE_IQ4_NL, DTYPE_IQ2_XS};
    for (size_t t = 0; t < NM_ARRAY_LEN(moe_types); t++) {
        const int64_t unit = NM_MAX(32, dtype_get(moe_types[t])->blck_size), units = 768 / unit;
        struct shard_types tm = {.wo = moe_types[t], .w_down = moe_types[t]};
        for (int n = 1; n <= 8; n++) {
            int64_t next = 0;
            for (int r = 0; r < n; r++) {
                struct shard s;
                char err[256] = "";
                enum nm_status st = shard_plan(&moe, &tm, r, n, &s, err, sizeof err);
                if (n > units) {
                    CHECK(st == NM_ERR_ARGS && strstr(err, "n_ff_exp"), "moe %s over %d ranks must be refused: %s",
                          dtype_get(moe_types[t])->name, n, err);
                    break;
                }
                CHECK(st == NM_OK && s.ff_unit == unit && s.ff.begin == next && s.ff.begin % unit == 0 &&
                          range_len(s.ff) >= units / n * unit && range_len(s.ff) <= (units / n + 1) * unit,
                      "moe %s rank %d/%d: ff [%lld,%lld) unit %lld", dtype_get(moe_types[t])->name, r, n,
                      (long long)s.ff.begin, (long long)s.ff.end, (long long)s.ff_unit);
                struct kern_chunk ch[64];
                const int nc = shard_down_chunks(&s, ch);
                int64_t covered = 0;
                for (int i = 0; i < nc; i++) {
                    CHECK(ch[i].w0 == covered && ch[i].a0 == ch[i].w0 && ch[i].a1 == ch[i].w1 &&
                              ch[i].w1 - ch[i].w0 == unit,
                          "moe %s rank %d/%d: chunk %d", dtype_get(moe_types[t])->name, r, n, i);
                    covered = ch[i].w1;
                }
                CHECK(covered == range_len(s.ff), "moe rank %d/%d: chunks cover %lld of %lld", r, n, (long long)covered,
                      (long long)range_len(s.ff));
                next = s.ff.end;
            }
            if (n <= units) CHECK(next == 768, "moe %s over %d ranks: coverage %lld", dtype_get(moe_types[t])->name, n,
                                  (long long)next);
        }
    }
    printf("%s: test_shard: %d checks, %d failures\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}
