/* Private to kernels/: the packed-layout matmul driver shared by kern_matmul and
 * kern_matmul_chunked_f64 (matmul_pk.c), and the AMX kernels' entry points (x86-amx/). */
#ifndef NM_MATMUL_INTERNAL_H
#define NM_MATMUL_INTERNAL_H

#include "matmul.h"
#include "packed.h"

/* Packed weight times x. Without chunks (chunks == NULL): y = W x in f32 (yf, ldy). With
 * chunks: yd = sum over chunks in double of each chunk's f32 partial (kern_matmul_chunked_f64's
 * contract). */
void pk_matmul(struct pool *pool, const struct weight *w, struct act *x, const struct kern_chunk *chunks,
               int n_chunks, float *yf, double *yd, int64_t ldy);

/* pk_matmul of up to PK_MULTI_MAX weights (unchunked, y[i] with ldy w[i]->n) that share x, in one
 * pool run (kern_matmul_multi): each row gets the bits pk_matmul gives it. The weights must
 * fit together (pk_multi_fits: one packed layout, type and k). */
#define PK_MULTI_MAX 4
bool pk_multi_fits(const struct weight *a, const struct weight *b);
void pk_matmul_multi(struct pool *pool, int nw, const struct weight *const *w, struct act *x, float *const *y);

/* Whether pk_matmul takes this ROWS-layout weight for m rows: a block decoder type when the
 * bf16 tiles are allowed and chosen (kern_matmul_allow_bf16_tiles; AMX, its emulation, or the
 * plain-C twin where a test forces those paths). kern_matmul and kern_matmul_chunked_f64 ask. */
bool pk_takes_rows(const struct weight *w, int m);

/* For tests: the chunked matmuls pk_matmul has run so far with all their chunks in one kernel
 * call (pk_args.chunk_end), and whether the kernel it chooses for type t and m rows takes any
 * chunks that cover K end to end, ending on 32-column blocks, so. */
uint64_t pk_one_call_chunked(void);
bool pk_takes_block_chunks(enum dtype t, int m);

/* The software prefetch distance of the packed kernels that stream weights (the VNNI GEMV and
 * first tiles, x86-avx512/packed.c; the AMX one-tile path): NM_PK_PREFETCH, else 2048 bytes. */
int pk_prefetch_bytes(void);

/* AMX tile kernels (x86-amx/amx.c), same contract as pk_gemm_ref. For F16/BF16 a->act is the
 * activations as bf16, [m][32 * n_units] (zero-padded), a->act_stride bytes apart. */
void pk_gemm_amx(const struct pk_args *a);
/* The same code over a plain-C emulation of the tile instructions (x86-amx/amx_emu.c). */
void pk_gemm_amx_emu(const struct pk_args *a);

#endif
