/* Packed activations for the AVX-512 gemm kernels (layout in simd.h); they live in the calling
 * thread's NM_TBUF_KERNEL buffer (base.h). */
#include <stdlib.h>
#include <string.h>

#include "simd.h"

/* ---- packing ----------------------------------------------------------------------------- */

static void pack_row(enum nm_pack_order order, const block_q8x *a, int64_t nb, uint8_t *dst) {
    const int64_t nbp = nm_pack_nbp(nb * 32);
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)(dst + 32 * nbp), *sa = (float *)(dst + 36 * nbp);
    float *sh = (float *)(dst + 40 * nbp);
    for (int64_t b = 0; b < nb; b++) {
        d[b] = a[b].d;
        sa[b] = a[b].d * (float)a[b].isum;
        int32_t s0 = 0, s1 = 0;
        for (int l = 0; l < 16; l++) s0 += a[b].qs[l], s1 += a[b].qs[16 + l];
        sh[2 * b] = a[b].d * (float)s0;
        sh[2 * b + 1] = a[b].d * (float)s1;
    }
    for (int64_t b = nb; b < nbp; b++) d[b] = sa[b] = sh[2 * b] = sh[2 * b + 1] = 0.0f;
    memset(qs + 32 * nb, 0, (size_t)(32 * (nbp - nb)));
    switch (order) {
    case NM_PACK_NATURAL:
        for (int64_t b = 0; b < nb; b++)
            _mm256_store_si256((__m256i *)(qs + 32 * b), _mm256_loadu_si256((const __m256i *)a[b].qs));
        break;
    case NM_PACK_QUAD_HALVES:
        /* block b = 4q + i: codes 0..15 at 128q + 16i, codes 16..31 at 128q + 64 + 16i */
        for (int64_t b = 0; b < nb; b++) {
            int8_t *o = qs + 128 * (b / 4) + 16 * (b % 4);
            _mm_store_si128((__m128i *)o, _mm_loadu_si128((const __m128i *)a[b].qs));
            _mm_store_si128((__m128i *)(o + 64), _mm_loadu_si128((const __m128i *)(a[b].qs + 16)));
        }
        break;
    case NM_PACK_K4: {
        /* block 8s + j goes to slot 8s + pos[j] (n is a multiple of 256 for k-quants) */
        static const int pos[8] = {0, 2, 1, 3, 4, 6, 5, 7};
        for (int64_t b = 0; b < nb; b++)
            _mm256_store_si256((__m256i *)(qs + 32 * (8 * (b / 8) + pos[b % 8])),
                               _mm256_loadu_si256((const __m256i *)a[b].qs));
        break;
    }
    }
}

void nm_pack_act(enum nm_pack_order order, const uint8_t *x, size_t xs, int nc, int64_t n,
                 uint8_t *dst, size_t ds) {
    NM_ASSERT(n % 32 == 0 && ds % 64 == 0 && ((uintptr_t)dst & 63) == 0);
    for (int c = 0; c < nc; c++)
        pack_row(order, (const block_q8x *)(x + (size_t)c * xs), n / 32, dst + (size_t)c * ds);
}
