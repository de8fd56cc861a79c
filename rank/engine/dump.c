/* Logits and layer dumps (formats in dump.h). */
#include "dump.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int write_header(FILE *fp, const char magic[4], uint32_t a, uint32_t b, uint32_t c) {
    const uint32_t hdr[4] = {0, a, b, c};
    return fwrite(magic, 1, 4, fp) == 4 && fwrite(hdr + 1, 4, 3, fp) == 3 ? 0 : -1;
}

enum nm_status dump_logits_open(struct dump_logits *d, const char *path, int64_t n_vocab, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->path = path;
    d->n_vocab = (uint32_t)n_vocab;
    d->fp = fopen(path, "wb");
    if (!d->fp) return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    if (write_header(d->fp, "NMLG", 1, d->n_vocab, 0))
        return nm_errf(err, errlen, NM_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return NM_OK;
}

enum nm_status dump_logits_row(struct dump_logits *d, enum dump_kind kind, int64_t pos, int32_t token,
                               const float *logits, char *err, size_t errlen) {
    const int32_t rec[3] = {(int32_t)kind, (int32_t)pos, token};
    if (fwrite(rec, 4, 3, d->fp) != 3 || fwrite(logits, 4, d->n_vocab, d->fp) != d->n_vocab)
        return nm_errf(err, errlen, NM_ERR_IO, "%s: write failed: %s", d->path, strerror(errno));
    d->n_rows++;
    return NM_OK;
}

enum nm_status dump_logits_close(struct dump_logits *d, char *err, size_t errlen) {
    if (!d->fp) return NM_OK;
    int bad = fseek(d->fp, 12, SEEK_SET) != 0 || fwrite(&d->n_rows, 4, 1, d->fp) != 1;
    bad |= fclose(d->fp) != 0;
    d->fp = NULL;
    if (bad) return nm_errf(err, errlen, NM_ERR_IO, "%s: write failed: %s", d->path, strerror(errno));
    return NM_OK;
}

enum nm_status dump_layers_open(struct dump_layers *d, const char *dir, int n_layer, int64_t n_tokens,
                                int64_t n_embd, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    d->dir = dir;
    d->n_layer = n_layer;
    d->n_tokens = n_tokens;
    d->n_embd = n_embd;
    d->files = calloc((size_t)n_layer + 2, sizeof *d->files);
    NM_ASSERT(d->files);
    return NM_OK;
}

void dump_layers_hook(void *ctx, int layer, int64_t pos0, const float *x, int n_tokens, int64_t n_embd) {
    struct dump_layers *d = ctx;
    if (d->status) return;
    const int slot = layer + 1;
    NM_ASSERT(slot >= 0 && slot <= d->n_layer + 1 && n_embd == d->n_embd);
    if (!d->files[slot]) {
        char path[4096];
        if (layer < 0) snprintf(path, sizeof path, "%s/embd.bin", d->dir);
        else if (layer == d->n_layer) snprintf(path, sizeof path, "%s/result_norm.bin", d->dir);
        else snprintf(path, sizeof path, "%s/blk.%d.bin", d->dir, layer);
        d->files[slot] = fopen(path, "wb");
        if (!d->files[slot] || write_header(d->files[slot], "NMLY", 1, (uint32_t)d->n_tokens, (uint32_t)d->n_embd)) {
            d->status = nm_errf(d->err, sizeof d->err, NM_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
            return;
        }
    }
    (void)pos0;
    const size_t n = (size_t)n_tokens * (size_t)n_embd;
    if (fwrite(x, sizeof(float), n, d->files[slot]) != n)
        d->status = nm_errf(d->err, sizeof d->err, NM_ERR_IO, "%s: write failed: %s", d->dir, strerror(errno));
}

enum nm_status dump_layers_close(struct dump_layers *d, char *err, size_t errlen) {
    for (int i = 0; d->files && i < d->n_layer + 2; i++)
        if (d->files[i] && fclose(d->files[i]) != 0 && !d->status)
            d->status = nm_errf(d->err, sizeof d->err, NM_ERR_IO, "%s: close failed", d->dir);
    free(d->files);
    d->files = NULL;
    if (d->status) nm_errf(err, errlen, d->status, "%s", d->err);
    return d->status;
}

enum nm_status dump_routes_open(struct dump_routes *d, const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/routes.txt", dir);
    d->fp = fopen(path, "w");
    if (!d->fp) return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return NM_OK;
}

void dump_routes_hook(void *ctx, int layer, int64_t pos, const int64_t *experts, int n_used) {
    struct dump_routes *d = ctx;
    fprintf(d->fp, "%d %lld", layer, (long long)pos);
    for (int i = 0; i < n_used; i++) fprintf(d->fp, " %lld", (long long)experts[i]);
    fputc('\n', d->fp);
}

void dump_routes_close(struct dump_routes *d) {
    if (d->fp) fclose(d->fp);
    d->fp = NULL;
}
