/* op_attention_queries (flash-style prompt attention) and its _ref twin against the one-query
 * reference op_attention_heads_ref run per query with n_kv = pos0 + i + 1 (the causal window),
 * for F32 and F16 KV, odd head dims (tails of 16), n_q 1..67 with pos0 > 0 (a prompt continuing
 * a cache) and windows crossing ATTN_KV_BLOCK; scores spread widely (large |q|) so the running
 * max must be rescaled. Outputs get guard values between rows (out_stride > head_dim_v) and
 * after the last; NaN/inf fail. Tolerance: relative to max |v| (attention outputs are convex
 * combinations of V rows): TOL_ATTN 2e-5 (polynomial exp, different summation order). */
#include "ktest.h"
#include "ops.h"
#include "cpu.h"

#define TOL_ATTN 2e-5

int main(int argc, char **argv) {
    ktest_init(argc, argv);
    krng r = {ktest_seed};
    /* pass 0: the plain-C twin; then each fast table this CPU runs */
    const struct kern_isa *tables[3] = {kern_isa_ref(), kern_isa_find("avx512", NULL), kern_isa_find("avx2", NULL)};
    printf("test_attn_queries: ISA %s; tested: ref%s%s\n", kern_isa_get()->name, tables[1] ? ", avx512" : "",
           tables[2] ? ", avx2" : "");
    double worst = 0.0;
    for (int trial = 0; trial < 60; trial++) {
        const enum dtype kv = trial % 2 ? DTYPE_F16 : DTYPE_F32;
        const int64_t hd = 1 + krng_int(&r, 140), hdv = trial % 3 ? hd : 1 + krng_int(&r, 140);
        const int64_t n_q = 1 + krng_int(&r, 67), pos0 = krng_int(&r, 3) ? krng_int(&r, 150) : 0;
        const int64_t n_kv = pos0 + n_q, ks = hd + krng_int(&r, 5), vs = hdv + krng_int(&r, 5);
        const size_t es = kv == DTYPE_F16 ? 2 : 4;
        uint8_t *k = malloc((size_t)(n_kv * ks) * es), *v = malloc((size_t)(n_kv * vs) * es);
        float *tmp = malloc((size_t)NM_MAX(ks, vs) * 4), vmax = 0.0f;
        for (int64_t t = 0; t < n_kv; t++) {
            for (int64_t c = 0; c < ks; c++) tmp[c] = krng_normal(&r);
            op_store_kv(k + (size_t)(t * ks) * es, tmp, ks, kv);
            for (int64_t c = 0; c < vs; c++) tmp[c] = krng_normal(&r);
            op_store_kv(v + (size_t)(t * vs) * es, tmp, vs, kv);
            for (int64_t c = 0; c < hdv; c++) vmax = fmaxf(vmax, fabsf(tmp[c]));
        }
        const int64_t qs = hd + 3, os = hdv + 2;
        float *q = malloc((size_t)(n_q * qs) * 4);
        const float qscale = trial % 4 == 0 ? 4.0f : 1.0f; /* wide score range */
        for (int64_t i = 0; i < n_q * qs; i++) q[i] = qscale * krng_normal(&r);
        const float scale = 1.0f / sqrtf((float)hd);
        float *want = malloc((size_t)(n_q * hdv) * 4), *sc = malloc((size_t)n_kv * 4);
        for (int64_t i = 0; i < n_q; i++)
            op_attention_heads_ref(want + i * hdv, 0, q + i * qs, 0, 1, k, v, kv, pos0 + i + 1, ks, vs, hd, hdv, scale, sc);
        size_t sfl = 0;
        for (int p = 0; p < 3; p++)
            if (tables[p]) sfl = NM_MAX(sfl, tables[p]->attn_queries_scratch(hd, hdv));
        float *scratch = malloc(sfl * 4);
        const int64_t ytot = n_q * os + 16;
        float *y = malloc((size_t)ytot * 4);
        for (int pass = 0; pass < 3; pass++) {
            if (!tables[pass]) continue;
            kguard_fill(y, ytot);
            tables[pass]->attn_queries(y, os, q, qs, n_q, pos0, k, v, kv, ks, vs, hd, hdv, scale, scratch);
            int64_t bad = kguard_count_bad(y + n_q * os, 16);
            for (int64_t i = 0; i < n_q; i++) bad += kguard_count_bad(y + i * os + hdv, os - hdv);
            if (bad) ktest_fail("attention %s trial %d: %" PRId64 " guard values overwritten", tables[pass]->name, trial, bad);
            for (int64_t i = 0; i < n_q; i++)
                for (int64_t c = 0; c < hdv; c++) {
                    const float g = y[i * os + c], w = want[i * hdv + c];
                    const double err = isfinite(g) ? fabs((double)g - w) / fmax(vmax, 1e-30) : INFINITY;
                    if (err > worst) worst = err;
                    if (!(err <= TOL_ATTN)) {
                        ktest_fail("attention %s %s hd=%" PRId64 " hdv=%" PRId64 " n_q=%" PRId64 " pos0=%" PRId64
                                   " query %" PRId64 " [%" PRId64 "]: %.9g, want %.9g (error %.2e)",
                                   tables[pass]->name, dtype_get(kv)->name, hd, hdv, n_q, pos0, i, c, g, w, err);
                        i = n_q;
                        break;
                    }
                }
        }
        free(k); free(v); free(tmp); free(q); free(want); free(sc); free(scratch); free(y);
        if (ktest_failures > 10) break;
    }
    printf("  worst error %.2e (tolerance %.0e)\n", worst, TOL_ATTN);
    return ktest_finish("test_attn_queries");
}
