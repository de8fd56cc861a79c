/* Inspection dumps, so a divergence from another engine can be found layer by layer.
 *
 * Logits file (--dump-logits), little-endian:
 *   char magic[4] = "NMLG"; uint32 version = 1; uint32 n_vocab; uint32 n_rows;
 *   n_rows records of { int32 kind (0 prompt position, 1 generated step); int32 pos;
 *                       int32 token (the input token at pos); float32 logits[n_vocab] }.
 * Layer files (--dump-layers DIR), one per point of the residual stream, for the prompt:
 *   DIR/embd.bin (after the embedding lookup), DIR/blk.N.bin (after block N),
 *   DIR/result_norm.bin (after the output norm), each:
 *   char magic[4] = "NMLY"; uint32 version = 1; uint32 n_tokens; uint32 n_embd;
 *   float32 x[n_tokens][n_embd].
 * Routes (qwen3moe, with --dump-layers): DIR/routes.txt, a line per MoE layer and prompt token,
 *   "layer pos e1 e2 ..." (the experts the router chose, in the order chosen). */
#ifndef NM_DUMP_H
#define NM_DUMP_H

#include <stdint.h>
#include <stdio.h>

#include "base.h"

enum dump_kind { DUMP_KIND_PROMPT = 0, DUMP_KIND_GENERATED = 1 };

struct dump_logits {
    FILE *fp;
    const char *path;
    uint32_t n_vocab, n_rows;
};
enum nm_status dump_logits_open(struct dump_logits *d, const char *path, int64_t n_vocab, char *err, size_t errlen);
enum nm_status dump_logits_row(struct dump_logits *d, enum dump_kind kind, int64_t pos, int32_t token,
                               const float *logits, char *err, size_t errlen);
/* Writes the final row count into the header and closes. */
enum nm_status dump_logits_close(struct dump_logits *d, char *err, size_t errlen);

struct dump_layers {
    const char *dir;
    int64_t n_tokens, n_embd;
    int n_layer;
    FILE **files; /* [n_layer + 2]: embd, blk.0 .. blk.n_layer-1, result_norm */
    enum nm_status status; /* first error, reported by dump_layers_close */
    char err[256];
};
/* Create DIR if needed; files are opened on first use. */
enum nm_status dump_layers_open(struct dump_layers *d, const char *dir, int n_layer, int64_t n_tokens,
                                int64_t n_embd, char *err, size_t errlen);
/* An engine_layer_hook (ctx = struct dump_layers *). */
void dump_layers_hook(void *ctx, int layer, int64_t pos0, const float *x, int n_tokens, int64_t n_embd);
enum nm_status dump_layers_close(struct dump_layers *d, char *err, size_t errlen);

/* The router's choices as text (see above). open: NM_ERR_IO with a message on failure. */
struct dump_routes {
    FILE *fp;
};
enum nm_status dump_routes_open(struct dump_routes *d, const char *dir, char *err, size_t errlen);
/* An engine_route_hook (forward.h) with ctx = struct dump_routes *. */
void dump_routes_hook(void *ctx, int layer, int64_t pos, const int64_t *experts, int n_used);
void dump_routes_close(struct dump_routes *d);

#endif
