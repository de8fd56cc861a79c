/* oneDNN (Intel's oneAPI Deep Neural Network Library) as a candidate matmul for BF16 and F32
 * weights, called through its C API (dnnl.h) on the GGUF rows themselves (DESIGN lesson 7: a
 * library must not reorder weights behind the engine's back).
 *
 * Weight layout. A GGUF matmul weight of k inputs and n outputs is n rows of k values (row j
 * holds output j's weights). oneDNN's matmul computes dst[M][N] = src[M][K] x weights[K][N];
 * the GGUF rows are exactly oneDNN's {K, N} weights with format tag `ba` (strides {1, K}: element
 * (k, j) at j * K + k). This module describes the weights with that explicit tag (never
 * format_tag::any), checks with dnnl_memory_desc_equal that the primitive's weights_md (and its
 * src_md and dst_md) equal the plain descriptors it passed, and refuses (KERN_ONEDNN_LAYOUT_REFUSED)
 * instead of reordering when they do not. No weight byte is ever copied or reordered; the only
 * conversion is of the activations (BF16 weights, below). tests/kernels/test_onednn.c checks the
 * results against kern_matmul_ref and the checker itself (kern_onednn_weights_check).
 *
 * Precision. F32 weights: f32 activations, f32 products and sums (the library's summation
 * order). BF16 weights: the activations are rounded to bf16 first (fp32_to_bf16: round to nearest
 * even, as numallm's AMX bf16 tile path rounds them), the weights are used as they are, products
 * are exact in f32 and summed in f32: relative error <= 2^-8 per product from the activation
 * rounding (8 significant bits), the precision of the AMX-BF16 tiles for BF16 weights (which
 * also round the activations and keep the bf16 weights as they are).
 *
 * Threads. Debian's libdnnl (2.6.3, bookworm) is built with the OpenMP runtime (libgomp): the
 * n_threads argument sets omp_set_num_threads on the calling thread before each call. OpenMP's
 * threads are created at the first call and inherit the calling thread's CPU affinity at that
 * moment: a caller pinned to one core (pool_init pins its caller) gets every OpenMP thread on
 * that core. Widen the caller's affinity to the cores oneDNN should use before the first call
 * (or set OMP_PLACES/OMP_PROC_BIND). With a TBB or sequential build the library's own default
 * is used and kern_onednn_describe says so. The OpenMP threads are not numallm's pool: while a
 * pool's workers spin (pool.h) they compete with them for the same cores.
 *
 * Built only where CMake finds oneDNN (kernels/onednn/onednn.cmake); elsewhere onednn_none.c
 * provides the same functions, which report "built without oneDNN". Calls are serialized by a
 * mutex (one primitive cache, one bf16 scratch buffer); oneDNN runs each call on its own threads. */
#ifndef NM_ONEDNN_H
#define NM_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "types.h"

enum kern_onednn_status {
    KERN_ONEDNN_OK = 0,
    KERN_ONEDNN_UNAVAILABLE,    /* built without oneDNN, or its CPU engine failed to start */
    KERN_ONEDNN_UNSUPPORTED,    /* a weight layout, type or shape this wrapper does not take */
    KERN_ONEDNN_LAYOUT_REFUSED, /* the primitive wants another weight/src/dst layout: refused */
    KERN_ONEDNN_LIBRARY_ERROR,  /* a oneDNN call failed (the message names the call and status) */
};
const char *kern_onednn_status_str(enum kern_onednn_status s);

/* Whether this build has oneDNN and its CPU engine starts. why (may be NULL) receives the reason
 * when it returns false ("built without oneDNN (...)", or the failing call). Cheap after the
 * first call. */
bool kern_onednn_available(char *why, size_t len);

/* One line about the library: version, git hash, CPU threading runtime and whether n_threads is
 * honoured, and the effective CPU ISA, e.g. "oneDNN 2.6.3 (...), CPU runtime OpenMP (threads
 * settable), ISA avx512_core_bf16". Returns buf. */
const char *kern_onednn_describe(char *buf, size_t len);

/* Whether kern_onednn_matmul takes weights of `type` (BF16, F32). */
bool kern_onednn_type_supported(enum dtype type);

/* y[i][j] = sum_k w[j][k] * x[i][k] for i < x->m, j < w->n, as kern_matmul (matmul.h), through a
 * oneDNN matmul primitive. w: WEIGHT_LAYOUT_ROWS (the GGUF rows, read in place, not owned), type
 * BF16 or F32, n rows of k values, k a multiple of 32. x->f32: [m][k] row-major; x->q8 is not used.
 * y: [m][n] with row stride ldy >= n floats; columns n..ldy-1 are not written. n_threads > 0 sets
 * the library's thread count (OpenMP builds; see the file comment), 0 leaves it as it is.
 * Primitives are cached per (m, k, n, type, ldy) in a small table (least recently used replaced).
 * Returns KERN_ONEDNN_OK, or a status with the reason in why (may be NULL) and y untouched:
 * UNAVAILABLE, UNSUPPORTED (layout other than ROWS, type, k % 32, m < 1, ldy < n),
 * LAYOUT_REFUSED (oneDNN wants the weights, src or dst in another layout than the plain ones),
 * LIBRARY_ERROR. Precision: see the file comment. */
enum kern_onednn_status kern_onednn_matmul(const struct weight *w, const struct act *x, float *y, int64_t ldy,
                                           int n_threads, char *why, size_t len);

/* The weights descriptor a layout check is asked about (tests). */
enum kern_onednn_weights_request {
    KERN_ONEDNN_WEIGHTS_ROWS,       /* {K, N}, tag ba: the GGUF rows (what kern_onednn_matmul uses) */
    KERN_ONEDNN_WEIGHTS_TRANSPOSED, /* {K, N}, tag ab: K rows of N, not the GGUF rows: must be refused */
    KERN_ONEDNN_WEIGHTS_ANY,        /* format_tag::any: the library picks; refused unless it picks
                                     * exactly the plain rows */
};

/* The layout check of kern_onednn_matmul, on its own, with a chosen weights request: creates
 * the primitive descriptor for (type, m, k, n, ldy = n) with that weights descriptor and compares
 * what the primitive will read with the plain GGUF rows. Returns OK when the weights (and src,
 * dst) are exactly the plain layouts, LAYOUT_REFUSED when they are not; why receives the
 * implementation name and the layout the primitive wants (dnnl_md2fmt_str) in both cases. For
 * tests: TRANSPOSED must be refused (the checker's self-test); ANY shows what the library would
 * have reordered to. */
enum kern_onednn_status kern_onednn_weights_check(enum dtype type, int m, int64_t k, int64_t n,
                                                  enum kern_onednn_weights_request req, char *why, size_t len);

/* Destroy the cached primitives and the scratch buffer (also done at exit). */
void kern_onednn_cache_clear(void);

#endif
