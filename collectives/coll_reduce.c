/* Rank-order sums, the arithmetic of every allreduce: out[i] = ((s0[i] + s1[i]) + s2[i]) + ...
 * in f32 (f32 or bf16 inputs) or in f64. The fixed order is what makes every rank (and every
 * transport, and every run) end with the same bits; vectorizing across i keeps it,
 * reassociating across ranks would not.
 * The fast version (coll_reduce_body.h) is compiled twice, for the baseline ISA here and for
 * AVX-512 in x86-avx512/; the first call picks one from CPUID. coll_reduce_sum_ref is the
 * plain one-element-at-a-time twin the tests compare them with. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#define COLL_REDUCE_FN coll_reduce_sum_generic
#include "coll_reduce_body.h"

#ifdef NM_COLL_HAVE_AVX512
void coll_reduce_sum_avx512(void *out, const void *const *src, int nsrc, enum coll_dtype dt,
                            size_t n);
#endif

typedef void coll_reduce_fn(void *out, const void *const *src, int nsrc, enum coll_dtype dt,
                            size_t n);

static coll_reduce_fn *coll_reduce_pick(const char **name) {
#ifdef NM_COLL_HAVE_AVX512
    const struct cpu_features *f = cpu_features_get();
    const char *isa = getenv("NM_ISA");
    if (f->avx512f && f->os_avx512 && !(isa && !strcmp(isa, "ref"))) {
        *name = "avx512";
        return coll_reduce_sum_avx512;
    }
#endif
    *name = "generic";
    return coll_reduce_sum_generic;
}

const char *coll_reduce_isa(void) {
    const char *name;
    coll_reduce_pick(&name);
    return name;
}

void coll_reduce_sum(void *out, const void *const *src, int nsrc, enum coll_dtype dt, size_t n) {
    static coll_reduce_fn *fn; /* collectives run on one thread per process */
    if (!fn) {
        const char *name;
        fn = coll_reduce_pick(&name);
    }
    NM_ASSERT(nsrc >= 1);
    fn(out, src, nsrc, dt, n);
}

void coll_reduce_sum_ref(void *out, const void *const *src, int nsrc, enum coll_dtype dt,
                         size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == COLL_DTYPE_F64) {
            double s = 0;
            for (int r = 0; r < nsrc; r++) {
                double x = ((const double *)src[r])[i];
                s = r ? s + x : x; /* start from x, not 0 + x: -0.0 stays -0.0 */
            }
            ((double *)out)[i] = s;
            continue;
        }
        float s = 0;
        for (int r = 0; r < nsrc; r++) {
            float x = dt == COLL_DTYPE_BF16 ? coll_reduce_widen(((const uint16_t *)src[r])[i])
                                            : ((const float *)src[r])[i];
            s = r ? s + x : x;
        }
        ((float *)out)[i] = s;
    }
}
