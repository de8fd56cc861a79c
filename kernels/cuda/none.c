/* The CUDA layer in a build without nvcc: no devices, and every other entry point is
 * unreachable (callers stop at cuk_device_count == 0 or a NULL cuk_ctx_init). This is the
 * honest no-CUDA build path, not an emulation. */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "cuda_kernels.h"

#define CUK_NONE() nm_fatal("%s: numallm was built without CUDA (no nvcc at configure time)", __func__)

bool cuk_built_with_cuda(void) { return false; }

int cuk_device_count(char *why, size_t whylen) {
    if (why) snprintf(why, whylen, "no CUDA device: numallm was built without CUDA (no nvcc at configure time)");
    return 0;
}

int cuk_device_info_get(int dev, struct cuk_device_info *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    if (why) snprintf(why, whylen, "device %d: numallm was built without CUDA", dev);
    return -1;
}

struct cuk_ctx *cuk_ctx_init(int dev, char *why, size_t whylen) {
    cuk_device_count(why, whylen);
    return NULL;
}

void cuk_ctx_free(struct cuk_ctx *c) { (void)c; }
bool cuk_ctx_overlaps_launches(const struct cuk_ctx *c) { CUK_NONE(); }
int cuk_ctx_reserve_attention(struct cuk_ctx *c, int max_rows, int n_head, int64_t head_dim_v, int64_t n_ctx,
                              char *why, size_t whylen) { CUK_NONE(); }
size_t cuk_attention_scratch_bytes(int max_rows, int n_head, int64_t head_dim_v, int64_t n_ctx) { CUK_NONE(); }
int cuk_ctx_reserve_gemm(struct cuk_ctx *c, int max_rows, int64_t max_k, size_t tile_bytes, char *why, size_t whylen) { CUK_NONE(); }
void cuk_mem_info(struct cuk_ctx *c, uint64_t *free_bytes, uint64_t *total_bytes) { CUK_NONE(); }
void *cuk_malloc(struct cuk_ctx *c, size_t bytes, const char *what, char *why, size_t whylen) { CUK_NONE(); }
void cuk_free(void *p) {
    if (p) CUK_NONE();
}
void *cuk_host_alloc(size_t bytes, const char *what) { CUK_NONE(); }
void cuk_host_free(void *p) {
    if (p) CUK_NONE();
}
void cuk_h2d(struct cuk_ctx *c, void *dst, const void *src, size_t bytes) { CUK_NONE(); }
void cuk_d2h(struct cuk_ctx *c, void *dst, const void *src, size_t bytes) { CUK_NONE(); }
void cuk_d2d(struct cuk_ctx *c, void *dst, const void *src, size_t bytes) { CUK_NONE(); }
void cuk_sync(struct cuk_ctx *c) { CUK_NONE(); }
void cuk_profile(bool on) { (void)on; }
bool cuk_matmul_type_supported(enum dtype t) { return false; }
void cuk_matmul(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x, int64_t ldx,
                int m, float *y, int64_t ldy) { CUK_NONE(); }
void cuk_gemv(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x, int64_t ldx,
              int m, float *y, int64_t ldy) { CUK_NONE(); }
void cuk_gemm(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, const float *x, int64_t ldx,
              int m, float *y, int64_t ldy) { CUK_NONE(); }
void cuk_gemm_input(struct cuk_ctx *c, const float *x, int64_t ldx, int m, int64_t k, bool round_q8) { CUK_NONE(); }
void cuk_gemm_staged(struct cuk_ctx *c, enum dtype t, const void *w, const void *w16, int64_t k, int64_t n, int m,
                     float *y, int64_t ldy) { CUK_NONE(); }
void cuk_dequant_f16(struct cuk_ctx *c, enum dtype t, const void *w, int64_t k, int64_t n, void *dst) { CUK_NONE(); }
void cuk_matmul_id(struct cuk_ctx *c, enum dtype t, const void *w, size_t expert_bytes, int64_t k, int64_t n,
                   const float *x, int64_t ldx, int x_div, const int32_t *ids, int n_pairs, float *y, int64_t ldy) { CUK_NONE(); }
void cuk_rmsnorm(struct cuk_ctx *c, float *y, const float *x, const float *w, int rows, int64_t n, float eps) { CUK_NONE(); }
void cuk_add(struct cuk_ctx *c, float *x, const float *y, int64_t n) { CUK_NONE(); }
void cuk_add_bias(struct cuk_ctx *c, float *y, const float *b, int rows, int64_t n) { CUK_NONE(); }
void cuk_swiglu(struct cuk_ctx *c, float *out, const float *gate, const float *up, int64_t n) { CUK_NONE(); }
void cuk_act_round_q8(struct cuk_ctx *c, float *y, const float *x, int64_t n) { CUK_NONE(); }
void cuk_norm_rope(struct cuk_ctx *c, float *x, int m, int n_head, int64_t head_dim, int64_t row_stride,
                   const float *norm_w, float eps, const float *cos_sin, int64_t pos0, int64_t n_rot, int neox) { CUK_NONE(); }
void cuk_kv_store(struct cuk_ctx *c, void *cache, enum dtype kv_type, const float *src, int m, int64_t n,
                  int64_t pos0) { CUK_NONE(); }
void cuk_attention(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const void *k_cache,
                   const void *v_cache, enum dtype kv_type, int m, int64_t pos0, int n_head, int n_head_kv,
                   int64_t head_dim, int64_t head_dim_v, float scale) { CUK_NONE(); }
bool cuk_attention_tensor_cores(struct cuk_ctx *c, enum dtype kv_type, int m, int64_t head_dim, int64_t head_dim_v) {
    CUK_NONE();
}
void cuk_moe_route(struct cuk_ctx *c, const float *logits, int m, int n_expert, int n_used, int32_t *ids, float *w) { CUK_NONE(); }
void cuk_moe_combine(struct cuk_ctx *c, float *x, const float *y, const float *w, int m, int n_used, int64_t n) { CUK_NONE(); }
size_t cuk_topk_scratch_bytes(int64_t n) { return 0; }
void cuk_topk(struct cuk_ctx *c, const float *logits, int64_t ld, int64_t n, const struct cuk_topk_row *rows,
              int n_rows, void *scratch, int32_t *ids, float *vals) { CUK_NONE(); }
size_t cuk_q8_bytes(int m, int64_t k) { return 0; }
void cuk_quantize_q8(struct cuk_ctx *c, void *xq, const float *x, int64_t ldx, int m, int64_t k) { CUK_NONE(); }
void cuk_rmsnorm_q8(struct cuk_ctx *c, float *y, void *xq, const float *x, const float *w, int rows, int64_t n,
                    float eps) { CUK_NONE(); }
void cuk_swiglu_q8(struct cuk_ctx *c, float *out, void *xq, const float *gate, const float *up, int rows, int64_t n) { CUK_NONE(); }
bool cuk_gemv_q8_supported(enum dtype t) { return false; }
bool cuk_gemv_q8_takes(const struct cuk_ctx *c, enum dtype t, int m) { return false; }
bool cuk_q8_tensor_cores(const struct cuk_ctx *c, enum dtype t, int m) { return false; }
void cuk_gemv_q8(struct cuk_ctx *c, enum dtype t, int64_t k, const void *xq, int m, const struct cuk_gemv_out *outs,
                 int n_outs) { CUK_NONE(); }
void cuk_rope_store(struct cuk_ctx *c, float *q, float *k, const float *v, int m, int n_head, int n_head_kv,
                    int64_t head_dim, int64_t head_dim_v, const struct cuk_rope *rope, void *k_cache, void *v_cache,
                    enum dtype kv_type, const int64_t *rows) { CUK_NONE(); }
void cuk_attention_at(struct cuk_ctx *c, float *out, int64_t ldo, const float *q, const float *k, const float *v,
                      void *k_cache, void *v_cache, enum dtype kv_type, int m, const int64_t *rows, int n_head,
                      int n_head_kv, int64_t head_dim, int64_t head_dim_v, float scale, const struct cuk_rope *rope,
                      void *out_q8) { CUK_NONE(); }
bool cuk_host_pinned(const void *p) { return false; }
void cuk_capture_begin(struct cuk_ctx *c) { CUK_NONE(); }
struct cuk_graph *cuk_capture_end(struct cuk_ctx *c) { CUK_NONE(); }
void cuk_graph_launch(struct cuk_ctx *c, struct cuk_graph *g) { CUK_NONE(); }
void cuk_graph_free(struct cuk_graph *g) {
    if (g) CUK_NONE();
}
