/* Robustness of the GGUF reader (rank/model/gguf.c) and the model loader (rank/model/model.c) against bad
 * files. Valid tiny models are written with mkmodel_write, read back into an editable image
 * (header, key/values as raw bytes, tensor infos, data), corrupted one named way at a time,
 * serialized again and loaded twice: from memory (gguf_parse + model_load_file) and from a
 * file (model_load). Each case names the status and a substring of the message it expects.
 * Then every truncation offset of the metadata (and a sample of the data), and a sweep of byte
 * mutations over the header, key headers and tensor infos: each must fail cleanly.
 *
 *   test_gguf_corrupt                       run everything
 *   test_gguf_corrupt --case NAME           run one case (the repro a failure prints)
 *   test_gguf_corrupt --list                list the cases
 *   test_gguf_corrupt --write-dir DIR       write every case as DIR/NAME.gguf and DIR/cases.tsv
 *                                           (name, status, expected substring) for the CLI test
 *   test_gguf_corrupt --write-seeds DIR [--vocab-dir D]
 *                                           write the fuzzer's seed corpus: tiny models of every
 *                                           preset and type, micro models, trimmed vocab files
 *   -v                                      show the loader's log lines */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_tmpdir.h"
#include "mkmodel.h"
#include "model.h"
#include "pool.h"

#define MAX_KV 160
#define MAX_T 64

static const char *g_argv0 = "test_gguf_corrupt";
static const char *g_tmpdir;
static int g_failures;

/* ---- byte buffer ------------------------------------------------------------------------ */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void buf_put(struct buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        NM_ASSERT(b->p);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void buf_u32(struct buf *b, uint32_t v) { buf_put(b, &v, 4); }
static void buf_u64(struct buf *b, uint64_t v) { buf_put(b, &v, 8); }
static void buf_zeros(struct buf *b, size_t n) {
    static const uint8_t z[256];
    while (n) {
        size_t k = NM_MIN(n, sizeof z);
        buf_put(b, z, k);
        n -= k;
    }
}
static void patch_u64(struct buf *b, size_t at, uint64_t v) {
    NM_ASSERT(at + 8 <= b->n);
    memcpy(b->p + at, &v, 8);
}

/* ---- editable image of a GGUF file ---------------------------------------------------- */

struct ekv {
    char *key;
    int32_t type;
    uint8_t *val; /* raw bytes after the type field (arrays: element type, count, elements) */
    size_t val_len;
};

struct eten {
    char name[128];
    size_t name_len; /* may include an embedded NUL */
    uint32_t n_dims;
    int64_t ne[8];
    uint32_t type;
    bool has_offset; /* offset given explicitly; otherwise laid out after the previous tensor */
    uint64_t offset;
    const uint8_t *src; /* data to copy (NULL: zeros); borrowed from the base file */
    uint64_t src_size;
};

struct img {
    char magic[4];
    uint32_t version;
    bool big_endian;             /* byte-swap the header numbers */
    bool set_n_kv, set_n_tensors; /* write these counts instead of the real ones */
    uint64_t n_kv_field, n_tensors_field;
    uint32_t align; /* alignment used to lay out the data */
    int n_kv, n_t;
    struct ekv kv[MAX_KV];
    struct eten t[MAX_T];
};

/* Where things landed in the serialized bytes, for byte-level patches. */
struct layout {
    size_t kv_pos[MAX_KV];     /* key length field */
    size_t kv_val_pos[MAX_KV]; /* first byte after the type field */
    size_t t_pos[MAX_T];       /* name length field */
    size_t t_off_pos[MAX_T];   /* offset field */
    uint64_t t_off[MAX_T], t_size[MAX_T];
    size_t ti_end;   /* end of the tensor infos */
    size_t data_off; /* start of the data section */
    size_t valid_end; /* end of the last tensor's data: a truncation below this must fail */
};

static void img_free(struct img *m) {
    for (int i = 0; i < m->n_kv; i++) {
        free(m->kv[i].key);
        free(m->kv[i].val);
    }
    free(m);
}

static struct img *img_clone(const struct img *m) {
    struct img *c = malloc(sizeof *c);
    NM_ASSERT(c);
    memcpy(c, m, sizeof *c);
    for (int i = 0; i < m->n_kv; i++) {
        c->kv[i].key = strdup(m->kv[i].key);
        c->kv[i].val = malloc(m->kv[i].val_len ? m->kv[i].val_len : 1);
        NM_ASSERT(c->kv[i].key && c->kv[i].val);
        memcpy(c->kv[i].val, m->kv[i].val, m->kv[i].val_len);
    }
    return c;
}

static const int k_esize[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* Raw value bytes of a parsed kv: start and length. */
static void kv_raw_span(const struct gguf_kv *kv, const uint8_t **start, size_t *len) {
    if (kv->type == GGUF_TYPE_STRING) {
        uint64_t l;
        memcpy(&l, kv->data, 8);
        *start = kv->data;
        *len = 8 + (size_t)l;
    } else if (kv->type != GGUF_TYPE_ARRAY) {
        *start = kv->data;
        *len = (size_t)k_esize[kv->type];
    } else if (kv->arr_type != GGUF_TYPE_STRING) {
        *start = kv->data - 12;
        *len = 12 + (size_t)kv->n * (size_t)k_esize[kv->arr_type];
    } else {
        size_t body = 0;
        if (kv->n) {
            struct gguf_str s = gguf_arr_str(kv, kv->n - 1);
            body = (size_t)kv->str_offsets[kv->n - 1] + 8 + (size_t)s.len;
        }
        *start = kv->data - 12;
        *len = 12 + body;
    }
}

/* Build an image from a parsed file; tensor data is borrowed from the file's bytes. */
static struct img *img_from_file(const struct gguf_file *f) {
    struct img *m = calloc(1, sizeof *m);
    NM_ASSERT(m && f->n_kv <= MAX_KV && f->n_tensors <= MAX_T);
    memcpy(m->magic, "GGUF", 4);
    m->version = f->version;
    m->align = f->alignment;
    m->n_kv = (int)f->n_kv;
    for (int i = 0; i < m->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        struct ekv *e = &m->kv[i];
        e->key = strndup(kv->key.ptr, (size_t)kv->key.len);
        e->type = (int32_t)kv->type;
        const uint8_t *start;
        kv_raw_span(kv, &start, &e->val_len);
        e->val = malloc(e->val_len ? e->val_len : 1);
        NM_ASSERT(e->key && e->val);
        memcpy(e->val, start, e->val_len);
    }
    m->n_t = (int)f->n_tensors;
    for (int i = 0; i < m->n_t; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        struct eten *e = &m->t[i];
        snprintf(e->name, sizeof e->name, "%s", t->name);
        e->name_len = strlen(t->name);
        e->n_dims = t->n_dims;
        for (int d = 0; d < 8; d++) e->ne[d] = d < GGUF_MAX_DIMS ? t->ne[d] : 1;
        e->type = t->type;
        e->src = t->data;
        e->src_size = t->size;
    }
    return m;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Bytes of a tensor as the serializer lays it out: 0 for shapes the reader must reject. */
static uint64_t eten_size(const struct eten *t) {
    int blck, tsize;
    if (!gguf_ggml_type_geometry(t->type, &blck, &tsize) || t->n_dims < 1 || t->n_dims > 4) return 0;
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] < 0 || nm_mul_overflow_u64(n, (uint64_t)t->ne[d], &n) || n > ((uint64_t)1 << 32)) return 0;
    }
    if (t->ne[0] % blck) return 0;
    return n / (uint64_t)blck * (uint64_t)tsize;
}

static void img_write(const struct img *m, struct buf *b, struct layout *L) {
    memset(L, 0, sizeof *L);
    b->n = 0;
    uint32_t version = m->version;
    uint64_t n_t = m->set_n_tensors ? m->n_tensors_field : (uint64_t)m->n_t;
    uint64_t n_kv = m->set_n_kv ? m->n_kv_field : (uint64_t)m->n_kv;
    if (m->big_endian) {
        version = __builtin_bswap32(version);
        n_t = __builtin_bswap64(n_t);
        n_kv = __builtin_bswap64(n_kv);
    }
    buf_put(b, m->magic, 4);
    buf_u32(b, version);
    buf_u64(b, n_t);
    buf_u64(b, n_kv);
    for (int i = 0; i < m->n_kv; i++) {
        const struct ekv *e = &m->kv[i];
        L->kv_pos[i] = b->n;
        buf_u64(b, strlen(e->key));
        buf_put(b, e->key, strlen(e->key));
        buf_u32(b, (uint32_t)e->type);
        L->kv_val_pos[i] = b->n;
        buf_put(b, e->val, e->val_len);
    }
    uint64_t cur = 0;
    for (int i = 0; i < m->n_t; i++) {
        const struct eten *t = &m->t[i];
        L->t_size[i] = eten_size(t);
        L->t_off[i] = t->has_offset ? t->offset : cur;
        if (!t->has_offset) cur = align_up(cur + L->t_size[i], m->align);
        L->t_pos[i] = b->n;
        buf_u64(b, t->name_len);
        buf_put(b, t->name, t->name_len);
        buf_u32(b, t->n_dims);
        for (uint32_t d = 0; d < NM_MIN(t->n_dims, 8u); d++) buf_u64(b, (uint64_t)t->ne[d]);
        buf_u32(b, t->type);
        L->t_off_pos[i] = b->n;
        buf_u64(b, L->t_off[i]);
    }
    L->ti_end = b->n;
    if (m->n_t == 0) {
        L->data_off = L->valid_end = b->n;
        return;
    }
    buf_zeros(b, align_up(b->n, m->align) - b->n);
    L->data_off = b->n;
    buf_zeros(b, cur);
    uint64_t end = 0;
    for (int i = 0; i < m->n_t; i++) {
        const struct eten *t = &m->t[i];
        if (L->t_off[i] > cur || L->t_size[i] > cur - L->t_off[i]) continue;
        if (t->src) memcpy(b->p + L->data_off + L->t_off[i], t->src, NM_MIN(t->src_size, L->t_size[i]));
        end = NM_MAX(end, L->t_off[i] + L->t_size[i]);
    }
    L->valid_end = L->data_off + end;
}

/* ---- edit helpers (assert on misuse: a case that edits nothing would pass for a wrong reason) */

static int kv_find(const struct img *m, const char *key) {
    for (int i = 0; i < m->n_kv; i++)
        if (strcmp(m->kv[i].key, key) == 0) return i;
    return -1;
}
static int kv_need(const struct img *m, const char *key) {
    int i = kv_find(m, key);
    if (i < 0) nm_fatal("test bug: no key %s in the base image", key);
    return i;
}
static void kv_del(struct img *m, const char *key) {
    int i = kv_need(m, key);
    free(m->kv[i].key);
    free(m->kv[i].val);
    memmove(&m->kv[i], &m->kv[i + 1], (size_t)(m->n_kv - i - 1) * sizeof m->kv[0]);
    m->n_kv--;
}
/* Replace the value of key (keeping its position) or append it. */
static void kv_set_raw(struct img *m, const char *key, int32_t type, const void *val, size_t len) {
    int i = kv_find(m, key);
    if (i < 0) {
        NM_ASSERT(m->n_kv < MAX_KV);
        i = m->n_kv++;
        m->kv[i].key = strdup(key);
        m->kv[i].val = NULL;
    }
    free(m->kv[i].val);
    m->kv[i].type = type;
    m->kv[i].val = malloc(len ? len : 1);
    NM_ASSERT(m->kv[i].key && m->kv[i].val);
    memcpy(m->kv[i].val, val, len);
    m->kv[i].val_len = len;
}
static void kv_append_raw(struct img *m, const char *key, int32_t type, const void *val, size_t len) {
    NM_ASSERT(m->n_kv < MAX_KV);
    int i = m->n_kv++;
    m->kv[i].key = strdup(key);
    m->kv[i].type = type;
    m->kv[i].val = malloc(len ? len : 1);
    NM_ASSERT(m->kv[i].key && m->kv[i].val);
    memcpy(m->kv[i].val, val, len);
    m->kv[i].val_len = len;
}
static void kv_set_u32(struct img *m, const char *key, uint32_t v) { kv_set_raw(m, key, GGUF_TYPE_UINT32, &v, 4); }
static void kv_set_i32(struct img *m, const char *key, int32_t v) { kv_set_raw(m, key, GGUF_TYPE_INT32, &v, 4); }
static void kv_set_u64(struct img *m, const char *key, uint64_t v) { kv_set_raw(m, key, GGUF_TYPE_UINT64, &v, 8); }
static void kv_set_f32(struct img *m, const char *key, float v) { kv_set_raw(m, key, GGUF_TYPE_FLOAT32, &v, 4); }
static void kv_set_str(struct img *m, const char *key, const char *s) {
    struct buf b = {0};
    buf_u64(&b, strlen(s));
    buf_put(&b, s, strlen(s));
    kv_set_raw(m, key, GGUF_TYPE_STRING, b.p, b.n);
    free(b.p);
}
static void kv_set_arr(struct img *m, const char *key, int32_t et, const void *data, uint64_t n) {
    struct buf b = {0};
    buf_u32(&b, (uint32_t)et);
    buf_u64(&b, n);
    buf_put(&b, data, (size_t)n * (size_t)k_esize[et]);
    kv_set_raw(m, key, GGUF_TYPE_ARRAY, b.p, b.n);
    free(b.p);
}
/* Keep the first n elements of an array kv. */
static void kv_trim_array(struct ekv *e, uint64_t n) {
    if (e->type != GGUF_TYPE_ARRAY || e->val_len < 12) return;
    int32_t et;
    uint64_t cnt;
    memcpy(&et, e->val, 4);
    memcpy(&cnt, e->val + 4, 8);
    if (cnt <= n) return;
    size_t len;
    if (et != GGUF_TYPE_STRING) {
        len = 12 + (size_t)n * (size_t)k_esize[et];
    } else {
        len = 12;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t l;
            memcpy(&l, e->val + len, 8);
            len += 8 + (size_t)l;
        }
    }
    memcpy(e->val + 4, &n, 8);
    e->val_len = len;
}

static int t_find(const struct img *m, const char *name) {
    for (int i = 0; i < m->n_t; i++)
        if (m->t[i].name_len == strlen(name) && memcmp(m->t[i].name, name, m->t[i].name_len) == 0) return i;
    return -1;
}
static struct eten *t_need(struct img *m, const char *name) {
    int i = t_find(m, name);
    if (i < 0) nm_fatal("test bug: no tensor %s in the base image", name);
    return &m->t[i];
}
static void t_del(struct img *m, const char *name) {
    struct eten *t = t_need(m, name);
    int i = (int)(t - m->t);
    memmove(&m->t[i], &m->t[i + 1], (size_t)(m->n_t - i - 1) * sizeof m->t[0]);
    m->n_t--;
}
static void t_rename(struct img *m, const char *from, const char *to) {
    struct eten *t = t_need(m, from);
    snprintf(t->name, sizeof t->name, "%s", to);
    t->name_len = strlen(to);
}
static void t_shape(struct img *m, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2) {
    struct eten *t = t_need(m, name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
}

/* ---- the valid bases ------------------------------------------------------------------ */

enum base_id { BASE_LLAMA, BASE_QWEN2, BASE_QWEN3, BASE_VOCAB, BASE_MICRO, BASE_MICRO_QWEN3, BASE_COUNT };
static const char *const k_base_names[BASE_COUNT] = {"tiny-llama q4_0", "tiny-qwen2 q8_0", "tiny-qwen3 q4_k",
                                                     "vocab-only (tiny-llama keys)", "micro-llama q4_0",
                                                     "micro-qwen3 q8_0"};

struct base {
    uint8_t *bytes; /* the file as mkmodel wrote it (tensor data is borrowed from here) */
    size_t size;
    struct img *img;
};
static struct base g_base[BASE_COUNT];

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) nm_fatal("cannot open %s: %s", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    NM_ASSERT(p);
    if (n > 0 && fread(p, 1, (size_t)n, fp) != (size_t)n) nm_fatal("cannot read %s", path);
    fclose(fp);
    *size = (size_t)n;
    return p;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(p, 1, n, fp) != n) || fclose(fp) != 0) nm_fatal("cannot write %s: %s", path, strerror(errno));
}

static enum nm_status make_preset(const char *preset, enum dtype type, const char *path, char *err, size_t errlen) {
    static struct pool *pool;
    if (!pool) pool = pool_init(1, NULL);
    struct mkmodel_params p = {.preset = mkmodel_find_preset(preset), .type = type, .output_type = -1, .seed = 1};
    if (!p.preset) nm_fatal("test bug: no preset %s", preset);
    return mkmodel_write(&p, path, pool, err, errlen);
}

static void load_base(struct base *b, const char *preset, enum dtype type) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s-%d.gguf", g_tmpdir, preset, (int)type);
    if (make_preset(preset, type, path, err, sizeof err)) nm_fatal("mkmodel %s: %s", preset, err);
    b->bytes = read_file(path, &b->size);
    unlink(path);
    struct gguf_file *f;
    if (gguf_parse(b->bytes, b->size, preset, &f, err, sizeof err)) nm_fatal("base %s does not parse: %s", preset, err);
    b->img = img_from_file(f);
    gguf_close(f);
}

/* A model of the same architecture with every size shrunk (1 layer, n_embd 64 or 256 for
 * k-quants, 32 tokens), matmul weights in `type` and zero data: small fuzz seeds. */
static struct img *make_micro(const struct img *base, const char *arch, enum dtype type) {
    struct img *m = img_clone(base);
    const int64_t blck = dtype_get(type)->blck_size;
    const int64_t E = blck == 256 ? 256 : 64, V = 32, F = 2 * E, H = 2, Hkv = 1, hd = E / H;
    char key[128];
#define K(s) (snprintf(key, sizeof key, "%s." s, arch), key)
    kv_set_u32(m, K("context_length"), 64);
    kv_set_u32(m, K("embedding_length"), (uint32_t)E);
    kv_set_u32(m, K("block_count"), 1);
    kv_set_u32(m, K("feed_forward_length"), (uint32_t)F);
    kv_set_u32(m, K("attention.head_count"), (uint32_t)H);
    kv_set_u32(m, K("attention.head_count_kv"), (uint32_t)Hkv);
    if (kv_find(m, K("attention.key_length")) >= 0) {
        kv_set_u32(m, K("attention.key_length"), (uint32_t)hd);
        kv_set_u32(m, K("attention.value_length"), (uint32_t)hd);
    }
    if (kv_find(m, K("vocab_size")) >= 0) kv_set_u32(m, K("vocab_size"), (uint32_t)V);
#undef K
    for (int i = 0; i < m->n_kv; i++)
        if (strncmp(m->kv[i].key, "tokenizer.", 10) == 0) kv_trim_array(&m->kv[i], (uint64_t)V);
    for (int i = 0; i < m->n_t;) {
        struct eten *t = &m->t[i];
        if (strncmp(t->name, "blk.", 4) == 0 && strncmp(t->name, "blk.0.", 6) != 0) {
            t_del(m, t->name);
            continue;
        }
        const char *s = strncmp(t->name, "blk.0.", 6) == 0 ? t->name + 6 : t->name;
        int64_t ne0 = 0, ne1 = 0;
        if (!strcmp(s, "token_embd.weight") || !strcmp(s, "output.weight")) ne0 = E, ne1 = V;
        else if (!strcmp(s, "attn_norm.weight") || !strcmp(s, "ffn_norm.weight") || !strcmp(s, "output_norm.weight"))
            ne0 = E;
        else if (!strcmp(s, "attn_q_norm.weight") || !strcmp(s, "attn_k_norm.weight")) ne0 = hd;
        else if (!strcmp(s, "rope_freqs.weight")) ne0 = hd / 2;
        else if (!strcmp(s, "attn_q.weight")) ne0 = E, ne1 = H * hd;
        else if (!strcmp(s, "attn_k.weight") || !strcmp(s, "attn_v.weight")) ne0 = E, ne1 = Hkv * hd;
        else if (!strcmp(s, "attn_output.weight")) ne0 = H * hd, ne1 = E;
        else if (!strcmp(s, "attn_q.bias")) ne0 = H * hd;
        else if (!strcmp(s, "attn_k.bias") || !strcmp(s, "attn_v.bias")) ne0 = Hkv * hd;
        else if (!strcmp(s, "ffn_gate.weight") || !strcmp(s, "ffn_up.weight")) ne0 = E, ne1 = F;
        else if (!strcmp(s, "ffn_down.weight")) ne0 = F, ne1 = E;
        else nm_fatal("test bug: make_micro does not know tensor %s", t->name);
        if (ne1) {
            t_shape(m, t->name, 2, ne0, ne1, 1);
            t->type = (uint32_t)type;
            t->src = NULL;
        } else {
            t_shape(m, t->name, 1, ne0, 1, 1); /* f32 vectors: keep the base's values */
        }
        i++;
    }
    return m;
}

/* ---- running one file ----------------------------------------------------------------- */

/* Parse bytes (in an exact-size heap copy, so that ASan sees any read past the end) and, if
 * that works, bind the model. Returns the first failing status; err gets its message. */
static enum nm_status load_bytes(const uint8_t *bytes, size_t n, const char *name, char *err, size_t errlen) {
    uint8_t *copy = malloc(n ? n : 1);
    NM_ASSERT(copy);
    if (n) memcpy(copy, bytes, n);
    err[0] = 0;
    struct gguf_file *f;
    enum nm_status st = gguf_parse(copy, n, name, &f, err, errlen);
    if (st == NM_OK) {
        struct model *m;
        st = model_load_file(f, NULL, &m, err, errlen); /* takes f over, also on failure */
        if (st == NM_OK) {
            /* Touch the first and last embedding rows: the bound data must lie in the file. */
            float *row = malloc((size_t)m->cfg.n_embd * sizeof(float));
            NM_ASSERT(row);
            model_embed_row(m, 0, row);
            model_embed_row(m, (int32_t)(m->cfg.n_vocab - 1), row);
            free(row);
            model_free(m);
        }
    }
    free(copy);
    return st;
}

static enum nm_status load_path(const uint8_t *bytes, size_t n, const char *name, char *err, size_t errlen) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmpdir, name);
    write_file(path, bytes, n);
    err[0] = 0;
    struct model *m;
    enum nm_status st = model_load(path, NULL, &m, err, errlen);
    if (st == NM_OK) model_free(m);
    unlink(path);
    return st;
}

/* A message is clear when it is not empty and names the problem: a truncation or bound
 * message has one of these words. */
static bool truncation_message(const char *err) {
    static const char *const words[] = {"truncated", "bytes left", "can hold", "past the", "more than"};
    for (size_t i = 0; i < NM_ARRAY_LEN(words); i++)
        if (strstr(err, words[i])) return true;
    return false;
}

/* ---- the cases -------------------------------------------------------------------------- */

struct ccase {
    const char *name;
    enum base_id base;
    void (*edit)(struct img *m);                             /* may be NULL */
    void (*patch)(struct buf *b, const struct layout *L, const struct img *m); /* may be NULL */
    enum nm_status want;
    const char *msg; /* substring the message must contain; '*' matches anything (numbers that
                      * depend on the preset's shapes or the file layout) */
};

/* Header */
static void p_empty(struct buf *b, const struct layout *L, const struct img *m) { b->n = 0; }
static void p_three_bytes(struct buf *b, const struct layout *L, const struct img *m) { b->n = 3; }
static void e_magic_ggml(struct img *m) { memcpy(m->magic, "GGML", 4); }
static void e_magic_lower(struct img *m) { memcpy(m->magic, "gguf", 4); }
static void e_version1(struct img *m) { m->version = 1; }
static void e_version0(struct img *m) { m->version = 0; }
static void e_version2(struct img *m) { m->version = 2; /* same layout as v3 for little-endian files */ }
static void e_version4(struct img *m) { m->version = 4; }
static void e_big_endian(struct img *m) { m->big_endian = true; }
static void e_n_kv_huge(struct img *m) { m->set_n_kv = true, m->n_kv_field = (uint64_t)1 << 62; }
static void e_n_kv_max(struct img *m) { m->set_n_kv = true, m->n_kv_field = UINT64_MAX; }
static void e_n_tensors_huge(struct img *m) { m->set_n_tensors = true, m->n_tensors_field = UINT64_MAX; }
static void e_n_tensors_plus1(struct img *m) { m->set_n_tensors = true, m->n_tensors_field = (uint64_t)m->n_t + 1; }
static void e_n_kv_minus1(struct img *m) { m->set_n_kv = true, m->n_kv_field = (uint64_t)m->n_kv - 1; }
static void e_n_kv_plus1(struct img *m) { m->set_n_kv = true, m->n_kv_field = (uint64_t)m->n_kv + 1; }

/* Key/values */
static void e_kv_type13(struct img *m) { m->kv[kv_need(m, "general.name")].type = 13; }
static void e_kv_type_neg(struct img *m) { m->kv[kv_need(m, "general.name")].type = -1; }
static void p_key_len_huge(struct buf *b, const struct layout *L, const struct img *m) {
    patch_u64(b, L->kv_pos[kv_need(m, "llama.block_count")], (uint64_t)1 << 40);
}
static void p_key_len_max(struct buf *b, const struct layout *L, const struct img *m) {
    patch_u64(b, L->kv_pos[kv_need(m, "llama.block_count")], UINT64_MAX);
}
static void p_str_len_huge(struct buf *b, const struct layout *L, const struct img *m) {
    patch_u64(b, L->kv_val_pos[kv_need(m, "general.name")], (uint64_t)1 << 40);
}
static void p_last_str_len_plus1(struct buf *b, const struct layout *L, const struct img *m) {
    int i = m->n_kv - 1;
    NM_ASSERT(m->kv[i].type == GGUF_TYPE_STRING);
    uint64_t l;
    memcpy(&l, b->p + L->kv_val_pos[i], 8);
    patch_u64(b, L->kv_val_pos[i], l + 1);
}
static void e_arr_of_arr(struct img *m) {
    int32_t t = GGUF_TYPE_ARRAY;
    memcpy(m->kv[kv_need(m, "tokenizer.ggml.scores")].val, &t, 4);
}
static void e_arr_etype_bad(struct img *m) {
    int32_t t = 13;
    memcpy(m->kv[kv_need(m, "tokenizer.ggml.scores")].val, &t, 4);
}
static void e_arr_n_huge(struct img *m) {
    uint64_t n = (uint64_t)1 << 61;
    memcpy(m->kv[kv_need(m, "tokenizer.ggml.scores")].val + 4, &n, 8);
}
static void e_arr_n_overflow(struct img *m) {
    uint64_t n = ((uint64_t)1 << 62) + 1; /* times 4 bytes wraps around to 4 */
    memcpy(m->kv[kv_need(m, "tokenizer.ggml.scores")].val + 4, &n, 8);
}
static void e_str_arr_n_huge(struct img *m) {
    uint64_t n = (uint64_t)1 << 60;
    memcpy(m->kv[kv_need(m, "tokenizer.ggml.tokens")].val + 4, &n, 8);
}
static void e_str_arr_elem_huge(struct img *m) {
    uint64_t n = (uint64_t)1 << 40; /* the first token's length */
    memcpy(m->kv[kv_need(m, "tokenizer.ggml.tokens")].val + 12, &n, 8);
}
static void e_dup_key(struct img *m) {
    uint32_t v = 2;
    kv_append_raw(m, "llama.block_count", GGUF_TYPE_UINT32, &v, 4);
}
static void e_empty_key(struct img *m) {
    free(m->kv[0].key);
    m->kv[0].key = strdup("");
}
static void e_align_u64(struct img *m) { kv_set_u64(m, "general.alignment", 32); }
static void e_align_str(struct img *m) { kv_set_str(m, "general.alignment", "32"); }
static void e_align_48(struct img *m) { kv_set_u32(m, "general.alignment", 48); }
static void e_align_0(struct img *m) { kv_set_u32(m, "general.alignment", 0); }
static void e_align_64_ok(struct img *m) {
    kv_set_u32(m, "general.alignment", 64);
    m->align = 64;
}
static void e_align_64_mislaid(struct img *m) { kv_set_u32(m, "general.alignment", 64); /* data laid out at 32 */ }

/* Tensor infos */
static void e_ndims0(struct img *m) { t_need(m, "blk.0.attn_q.weight")->n_dims = 0; }
static void e_ndims5(struct img *m) { t_shape(m, "blk.0.attn_q.weight", 5, 256, 256, 1); }
static void e_ndims_max(struct img *m) { t_need(m, "blk.0.attn_q.weight")->n_dims = UINT32_MAX; }
static void e_dim_negative(struct img *m) { t_shape(m, "blk.0.ffn_up.weight", 2, 256, -5, 1); }
static void e_dim_product_overflow(struct img *m) {
    t_shape(m, "blk.0.ffn_up.weight", 3, (int64_t)1 << 32, (int64_t)1 << 32, (int64_t)1 << 32);
}
static void e_dim_product_int64(struct img *m) { t_shape(m, "blk.0.ffn_up.weight", 2, (int64_t)1 << 62, 2, 1); }
static void e_size_overflow(struct img *m) {
    struct eten *t = t_need(m, "blk.0.attn_norm.weight"); /* f32: 2^62 elements are 2^64 bytes */
    t_shape(m, t->name, 1, (int64_t)1 << 62, 1, 1);
}
static void e_ne0_not_block(struct img *m) { t_shape(m, "token_embd.weight", 2, 100, 512, 1); }
static void e_ne0_not_kblock(struct img *m) {
    struct eten *t = t_need(m, "blk.0.ffn_up.weight");
    t->type = DTYPE_Q4_K;
    t_shape(m, t->name, 2, 288, 512, 1);
}
static void e_type_4(struct img *m) { t_need(m, "blk.0.attn_k.weight")->type = 4; }
static void e_type_retired(struct img *m) { t_need(m, "blk.0.attn_k.weight")->type = 31; }
static void e_type_huge(struct img *m) { t_need(m, "blk.0.attn_k.weight")->type = 0xdeadbeef; }
/* Types ggml knows and numallm does not (yet): refused by name, with the supported list, before
 * any weight is read. */
static void e_type_tq1_0(struct img *m) { t_need(m, "blk.1.attn_v.weight")->type = 34; /* laid out again */ }
static void e_type_mxfp4(struct img *m) { t_need(m, "blk.0.ffn_gate.weight")->type = 39; /* laid out again */ }
static void e_type_norm_i32(struct img *m) { t_need(m, "output_norm.weight")->type = 26; /* i32, same size */ }
static void e_name_empty(struct img *m) { t_need(m, "blk.0.ffn_norm.weight")->name_len = 0; }
static void e_name_long(struct img *m) {
    struct eten *t = t_need(m, "blk.0.ffn_norm.weight");
    memset(t->name, 'a', 64);
    t->name_len = 64;
}
static void e_name_nul(struct img *m) {
    struct eten *t = t_need(m, "blk.0.ffn_norm.weight");
    t->name[5] = 0; /* "blk.0\0ffn_norm.weight" */
}
static void p_name_len_huge(struct buf *b, const struct layout *L, const struct img *m) {
    patch_u64(b, L->t_pos[t_find(m, "blk.1.ffn_up.weight")], (uint64_t)1 << 40);
}
static void e_dup_tensor(struct img *m) { t_rename(m, "blk.1.ffn_up.weight", "blk.1.ffn_gate.weight"); }
static void p_offset_misaligned(struct buf *b, const struct layout *L, const struct img *m) {
    int i = t_find(m, "blk.0.attn_k.weight");
    patch_u64(b, L->t_off_pos[i], L->t_off[i] + 1);
}
static void p_offset_plus_32(struct buf *b, const struct layout *L, const struct img *m) {
    int i = t_find(m, "blk.0.attn_k.weight");
    patch_u64(b, L->t_off_pos[i], L->t_off[i] + 32);
}
static void p_offset_overlap(struct buf *b, const struct layout *L, const struct img *m) {
    int i = t_find(m, "blk.0.attn_k.weight");
    patch_u64(b, L->t_off_pos[i], L->t_off[i - 1]);
}
static void p_offset_past_end(struct buf *b, const struct layout *L, const struct img *m) {
    patch_u64(b, L->t_off_pos[t_find(m, "output.weight")], (uint64_t)1 << 40);
}
static void p_offset_wrap(struct buf *b, const struct layout *L, const struct img *m) {
    patch_u64(b, L->t_off_pos[t_find(m, "output.weight")], UINT64_MAX - 31); /* aligned; offset+size wraps */
}
static void p_data_cut_1(struct buf *b, const struct layout *L, const struct img *m) { b->n = L->valid_end - 1; }
static void p_data_cut_half(struct buf *b, const struct layout *L, const struct img *m) {
    b->n = L->data_off + (L->valid_end - L->data_off) / 2;
}
static void p_data_none(struct buf *b, const struct layout *L, const struct img *m) { b->n = L->ti_end; }
static void p_data_none_aligned(struct buf *b, const struct layout *L, const struct img *m) { b->n = L->data_off; }

/* Configuration (the file parses; the loader refuses it) */
static void e_arch_gpt2(struct img *m) { kv_set_str(m, "general.architecture", "gpt2"); }
static void e_arch_empty(struct img *m) { kv_set_str(m, "general.architecture", ""); }
static void e_arch_long(struct img *m) {
    kv_set_str(m, "general.architecture", "llama-but-a-very-long-architecture-name-x");
}
static void e_arch_u32(struct img *m) { kv_set_u32(m, "general.architecture", 1); }
static void e_no_arch(struct img *m) { kv_del(m, "general.architecture"); }
static void e_no_ctx(struct img *m) { kv_del(m, "llama.context_length"); }
static void e_no_embd(struct img *m) { kv_del(m, "llama.embedding_length"); }
static void e_no_blocks(struct img *m) { kv_del(m, "llama.block_count"); }
static void e_no_ff(struct img *m) { kv_del(m, "llama.feed_forward_length"); }
static void e_no_heads(struct img *m) { kv_del(m, "llama.attention.head_count"); }
static void e_no_eps(struct img *m) { kv_del(m, "llama.attention.layer_norm_rms_epsilon"); }
static void e_qwen2_no_ctx(struct img *m) { kv_del(m, "qwen2.context_length"); }
static void e_qwen3_no_heads(struct img *m) { kv_del(m, "qwen3.attention.head_count"); }
static void e_blocks_str(struct img *m) { kv_set_str(m, "llama.block_count", "2"); }
static void e_blocks_0(struct img *m) { kv_set_u32(m, "llama.block_count", 0); }
static void e_blocks_3(struct img *m) { kv_set_u32(m, "llama.block_count", 3); }
static void e_blocks_huge(struct img *m) { kv_set_u32(m, "llama.block_count", (uint32_t)1 << 31); }
static void e_embd_neg(struct img *m) { kv_set_i32(m, "llama.embedding_length", -1); }
static void e_embd_u64_huge(struct img *m) { kv_set_u64(m, "llama.embedding_length", UINT64_MAX); }
static void e_head_kv_3(struct img *m) { kv_set_u32(m, "llama.attention.head_count_kv", 3); }
static void e_heads_nonuniform(struct img *m) {
    const uint32_t v[2] = {4, 8};
    kv_set_arr(m, "llama.attention.head_count", GGUF_TYPE_UINT32, v, 2);
}
static void e_heads_empty_arr(struct img *m) { kv_set_arr(m, "llama.attention.head_count", GGUF_TYPE_UINT32, NULL, 0); }
static void e_heads_float_arr(struct img *m) {
    const float v[2] = {4, 4};
    kv_set_arr(m, "llama.attention.head_count", GGUF_TYPE_FLOAT32, v, 2);
}
static void e_heads_u64_arr_huge(struct img *m) {
    const uint64_t v[2] = {UINT64_MAX, UINT64_MAX};
    kv_set_arr(m, "llama.feed_forward_length", GGUF_TYPE_UINT64, v, 2);
}
static void e_heads_uniform_arr_ok(struct img *m) {
    const int16_t v[2] = {4, 4};
    kv_set_arr(m, "llama.attention.head_count", GGUF_TYPE_INT16, v, 2);
}
static void e_eps_0(struct img *m) { kv_set_f32(m, "llama.attention.layer_norm_rms_epsilon", 0.0f); }
static void e_eps_nan(struct img *m) { kv_set_f32(m, "llama.attention.layer_norm_rms_epsilon", __builtin_nanf("")); }
static void e_eps_int(struct img *m) { kv_set_u32(m, "llama.attention.layer_norm_rms_epsilon", 1); }
static void e_rope_dim_odd(struct img *m) { kv_set_u32(m, "llama.rope.dimension_count", 63); }
static void e_rope_base_neg(struct img *m) { kv_set_f32(m, "llama.rope.freq_base", -1.0f); }
static void e_rope_yarn(struct img *m) { kv_set_str(m, "qwen2.rope.scaling.type", "yarn"); }
static void e_vocab_0(struct img *m) { kv_set_u32(m, "llama.vocab_size", 0); }
static void e_tokens_not_array(struct img *m) {
    kv_del(m, "llama.vocab_size");
    kv_set_u32(m, "tokenizer.ggml.tokens", 512); /* falls back to token_embd: still loads */
}

/* Shapes that disagree with the metadata */
static void e_embd_128(struct img *m) { kv_set_u32(m, "llama.embedding_length", 128); }
static void e_vocab_1000(struct img *m) { kv_set_u32(m, "llama.vocab_size", 1000); }
static void e_ffn_up_shape(struct img *m) { t_shape(m, "blk.1.ffn_up.weight", 2, 256, 256, 1); }
static void e_attn_k_3d(struct img *m) { t_shape(m, "blk.0.attn_k.weight", 3, 256, 128, 1); }
static void e_norm_2d(struct img *m) { t_shape(m, "blk.1.attn_norm.weight", 2, 256, 1, 1); }
static void e_head_kv_4(struct img *m) { kv_set_u32(m, "llama.attention.head_count_kv", 4); }
static void e_ff_double(struct img *m) {
    uint32_t n_ff;
    memcpy(&n_ff, m->kv[kv_need(m, "llama.feed_forward_length")].val, 4);
    kv_set_u32(m, "llama.feed_forward_length", 2 * n_ff);
}
static void e_output_bias_bad(struct img *m) {
    NM_ASSERT(m->n_t < MAX_T);
    struct eten *t = &m->t[m->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "output.bias");
    t->name_len = strlen(t->name);
    t->n_dims = 1;
    t->ne[0] = 100;
    t->ne[1] = t->ne[2] = t->ne[3] = 1;
    t->type = DTYPE_F32;
}
static void e_no_ffn_down(struct img *m) { t_del(m, "blk.1.ffn_down.weight"); }
static void e_no_tok_embd(struct img *m) { t_del(m, "token_embd.weight"); }
static void e_no_output_norm(struct img *m) { t_del(m, "output_norm.weight"); }
static void e_qwen2_no_bias(struct img *m) { t_del(m, "blk.0.attn_k.bias"); }
static void e_qwen2_bias_shape(struct img *m) { t_shape(m, "blk.1.attn_q.bias", 1, 128, 1, 1); }
static void e_qwen3_no_qnorm(struct img *m) { t_del(m, "blk.2.attn_q_norm.weight"); }
static void e_qwen3_no_key_length(struct img *m) {
    kv_del(m, "qwen3.attention.key_length");
    kv_del(m, "qwen3.attention.value_length");
}
static void e_qwen3_q4k_row(struct img *m) { t_shape(m, "blk.0.attn_q.weight", 2, 256, 512, 1); /* valid */ }

/* Vocab-only */
static void e_vocab_only(struct img *m) { m->n_t = 0; }

#define OKC(name, base, edit) {name, base, edit, NULL, NM_OK, ""}
static const struct ccase k_cases[] = {
    /* positive controls: the editor itself must not break anything */
    OKC("valid_llama", BASE_LLAMA, NULL),
    OKC("valid_qwen2", BASE_QWEN2, NULL),
    OKC("valid_qwen3", BASE_QWEN3, NULL),
    OKC("valid_micro", BASE_MICRO, NULL),
    OKC("valid_micro_qwen3", BASE_MICRO_QWEN3, NULL),
    OKC("valid_version_2", BASE_LLAMA, e_version2),
    OKC("valid_alignment_64", BASE_LLAMA, e_align_64_ok),
    OKC("valid_head_count_uniform_array", BASE_LLAMA, e_heads_uniform_arr_ok),
    OKC("valid_tokens_not_array_falls_back", BASE_LLAMA, e_tokens_not_array),
    OKC("valid_qwen3_reshaped", BASE_QWEN3, e_qwen3_q4k_row),
    /* header */
    {"empty_file", BASE_LLAMA, NULL, p_empty, NM_ERR_FORMAT, "magic needs 4 bytes at offset 0, but the file has 0"},
    {"three_bytes", BASE_LLAMA, NULL, p_three_bytes, NM_ERR_FORMAT, "truncated file: magic"},
    {"magic_ggml", BASE_LLAMA, e_magic_ggml, NULL, NM_ERR_FORMAT, "not a GGUF file: magic is 47 47 4d 4c"},
    {"magic_lowercase", BASE_LLAMA, e_magic_lower, NULL, NM_ERR_FORMAT, "not a GGUF file"},
    {"version_1", BASE_LLAMA, e_version1, NULL, NM_ERR_UNSUPPORTED, "GGUF version 1 is not supported"},
    {"version_0", BASE_LLAMA, e_version0, NULL, NM_ERR_FORMAT, "GGUF version 0; allowed are 2 and 3"},
    {"version_4", BASE_LLAMA, e_version4, NULL, NM_ERR_FORMAT, "GGUF version 4; allowed are 2 and 3"},
    {"big_endian", BASE_LLAMA, e_big_endian, NULL, NM_ERR_UNSUPPORTED, "big-endian"},
    {"n_kv_huge", BASE_LLAMA, e_n_kv_huge, NULL, NM_ERR_FORMAT, "key/value count 4611686018427387904 is more than"},
    {"n_kv_max", BASE_LLAMA, e_n_kv_max, NULL, NM_ERR_FORMAT, "key/value count 18446744073709551615"},
    {"n_tensors_huge", BASE_LLAMA, e_n_tensors_huge, NULL, NM_ERR_FORMAT, "tensor count 18446744073709551615"},
    {"n_tensors_plus_1", BASE_LLAMA, e_n_tensors_plus1, NULL, NM_ERR_FORMAT, "tensor"},
    {"n_kv_minus_1", BASE_LLAMA, e_n_kv_minus1, NULL, NM_ERR_FORMAT, "tensor"},
    {"n_kv_plus_1", BASE_LLAMA, e_n_kv_plus1, NULL, NM_ERR_FORMAT, "tensor name at offset"},
    /* key/values */
    {"kv_type_13", BASE_LLAMA, e_kv_type13, NULL, NM_ERR_FORMAT, "key 'general.name' (#1) has value type 13"},
    {"kv_type_negative", BASE_LLAMA, e_kv_type_neg, NULL, NM_ERR_FORMAT, "has value type -1; allowed are 0..12"},
    {"key_length_past_end", BASE_LLAMA, NULL, p_key_len_huge, NM_ERR_FORMAT, "key at offset"},
    {"key_length_max", BASE_LLAMA, NULL, p_key_len_max, NM_ERR_FORMAT, "has length 18446744073709551615"},
    {"string_length_past_end", BASE_LLAMA, NULL, p_str_len_huge, NM_ERR_FORMAT,
     "string value at offset * has length 1099511627776, more than the * bytes left"},
    {"array_of_arrays", BASE_LLAMA, e_arr_of_arr, NULL, NM_ERR_FORMAT,
     "array 'tokenizer.ggml.scores' has element type 9"},
    {"array_element_type_13", BASE_LLAMA, e_arr_etype_bad, NULL, NM_ERR_FORMAT, "has element type 13"},
    {"array_count_huge", BASE_LLAMA, e_arr_n_huge, NULL, NM_ERR_FORMAT,
     "array 'tokenizer.ggml.scores' claims 2305843009213693952 elements of float32"},
    {"array_count_overflow", BASE_LLAMA, e_arr_n_overflow, NULL, NM_ERR_FORMAT, "claims 4611686018427387905 elements"},
    {"string_array_count_huge", BASE_LLAMA, e_str_arr_n_huge, NULL, NM_ERR_FORMAT,
     "string array 'tokenizer.ggml.tokens' claims 1152921504606846976 elements"},
    {"string_array_element_past_end", BASE_LLAMA, e_str_arr_elem_huge, NULL, NM_ERR_FORMAT,
     "string array element at offset"},
    {"duplicate_key", BASE_LLAMA, e_dup_key, NULL, NM_ERR_FORMAT, "duplicate key 'llama.block_count'"},
    {"empty_key", BASE_LLAMA, e_empty_key, NULL, NM_ERR_FORMAT, "key #0 is empty"},
    {"alignment_uint64", BASE_LLAMA, e_align_u64, NULL, NM_ERR_FORMAT, "general.alignment has type uint64; it must be uint32"},
    {"alignment_string", BASE_LLAMA, e_align_str, NULL, NM_ERR_FORMAT, "general.alignment has type string"},
    {"alignment_48", BASE_LLAMA, e_align_48, NULL, NM_ERR_FORMAT, "general.alignment is 48; it must be a power of two"},
    {"alignment_0", BASE_LLAMA, e_align_0, NULL, NM_ERR_FORMAT, "general.alignment is 0"},
    {"alignment_64_data_at_32", BASE_LLAMA, e_align_64_mislaid, NULL, NM_ERR_FORMAT, "ends past the data section"},
    {"offset_not_multiple_of_alignment_64", BASE_LLAMA, e_align_64_ok, p_offset_plus_32, NM_ERR_FORMAT,
     "tensor 'blk.0.attn_k.weight' has offset *, not a multiple of the alignment 64"},
    /* tensor infos */
    {"n_dims_0", BASE_LLAMA, e_ndims0, NULL, NM_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has n_dims 0; allowed are 1..4"},
    {"n_dims_5", BASE_LLAMA, e_ndims5, NULL, NM_ERR_FORMAT, "has n_dims 5"},
    {"n_dims_max", BASE_LLAMA, e_ndims_max, NULL, NM_ERR_FORMAT, "has n_dims 4294967295"},
    {"dim_negative", BASE_LLAMA, e_dim_negative, NULL, NM_ERR_FORMAT, "'blk.0.ffn_up.weight' dimension 1 is -5"},
    {"dim_product_overflow", BASE_LLAMA, e_dim_product_overflow, NULL, NM_ERR_FORMAT, "dimension 1 is 4294967296; dimensions must be >= 0 and their product fit in int64"},
    {"dim_product_past_int64", BASE_LLAMA, e_dim_product_int64, NULL, NM_ERR_FORMAT, "product fit in int64"},
    {"size_overflow", BASE_LLAMA, e_size_overflow, NULL, NM_ERR_FORMAT, "'blk.0.attn_norm.weight' size overflows"},
    {"ne0_not_block_multiple", BASE_LLAMA, e_ne0_not_block, NULL, NM_ERR_FORMAT,
     "'token_embd.weight' has rows of 100 values, not a multiple of its type's block size 32"},
    {"ne0_not_kquant_block_multiple", BASE_LLAMA, e_ne0_not_kblock, NULL, NM_ERR_FORMAT, "rows of 288 values"},
    {"type_id_4", BASE_LLAMA, e_type_4, NULL, NM_ERR_FORMAT, "'blk.0.attn_k.weight' has type id 4, which is not a ggml type"},
    {"type_id_retired_31", BASE_LLAMA, e_type_retired, NULL, NM_ERR_FORMAT, "type id 31"},
    {"type_id_huge", BASE_LLAMA, e_type_huge, NULL, NM_ERR_FORMAT, "type id 3735928559"},
    {"type_tq1_0_unsupported", BASE_LLAMA, e_type_tq1_0, NULL, NM_ERR_UNSUPPORTED,
     "tensor blk.1.attn_v.weight has type tq1_0; supported types are f32, f16, bf16, q4_0"},
    {"type_mxfp4_unsupported", BASE_LLAMA, e_type_mxfp4, NULL, NM_ERR_UNSUPPORTED,
     "tensor blk.0.ffn_gate.weight has type mxfp4; supported types are"},
    {"type_i32_norm_unsupported", BASE_LLAMA, e_type_norm_i32, NULL, NM_ERR_UNSUPPORTED, "output_norm.weight has type i32"},
    {"tensor_name_empty", BASE_LLAMA, e_name_empty, NULL, NM_ERR_FORMAT, "has a name of 0 bytes; allowed are 1..63"},
    {"tensor_name_64_bytes", BASE_LLAMA, e_name_long, NULL, NM_ERR_FORMAT, "has a name of 64 bytes"},
    {"tensor_name_nul", BASE_LLAMA, e_name_nul, NULL, NM_ERR_FORMAT, "NUL byte in its name"},
    {"tensor_name_length_past_end", BASE_LLAMA, NULL, p_name_len_huge, NM_ERR_FORMAT, "tensor name at offset"},
    {"duplicate_tensor_name", BASE_LLAMA, e_dup_tensor, NULL, NM_ERR_FORMAT,
     "duplicate tensor name 'blk.1.ffn_gate.weight'"},
    {"offset_misaligned", BASE_LLAMA, NULL, p_offset_misaligned, NM_ERR_FORMAT,
     "tensor 'blk.0.attn_k.weight' has offset"},
    {"offset_overlap", BASE_LLAMA, NULL, p_offset_overlap, NM_ERR_FORMAT, "overlap"},
    {"offset_past_end", BASE_LLAMA, NULL, p_offset_past_end, NM_ERR_FORMAT,
     "tensor 'output.weight' (offset 1099511627776, * bytes) ends past the data section"},
    {"offset_wraps_around", BASE_LLAMA, NULL, p_offset_wrap, NM_ERR_FORMAT, "ends past the data section"},
    {"data_cut_1_byte", BASE_LLAMA, NULL, p_data_cut_1, NM_ERR_FORMAT, "ends past the data section"},
    {"data_cut_half", BASE_LLAMA, NULL, p_data_cut_half, NM_ERR_FORMAT, "truncated file?"},
    {"data_missing", BASE_LLAMA, NULL, p_data_none, NM_ERR_FORMAT, "past the"},
    {"data_empty", BASE_LLAMA, NULL, p_data_none_aligned, NM_ERR_FORMAT, "ends past the data section (0 bytes)"},
    /* configuration */
    {"arch_unknown", BASE_LLAMA, e_arch_gpt2, NULL, NM_ERR_UNSUPPORTED, "unknown architecture 'gpt2'"},
    {"arch_empty", BASE_LLAMA, e_arch_empty, NULL, NM_ERR_UNSUPPORTED, "unknown architecture ''"},
    {"arch_long", BASE_LLAMA, e_arch_long, NULL, NM_ERR_UNSUPPORTED, "unknown architecture 'llama-but-a-very"},
    {"arch_not_string", BASE_LLAMA, e_arch_u32, NULL, NM_ERR_FORMAT, "general.architecture has type uint32"},
    {"missing_general.architecture", BASE_LLAMA, e_no_arch, NULL, NM_ERR_NOT_FOUND,
     "missing required key general.architecture"},
    {"missing_llama.context_length", BASE_LLAMA, e_no_ctx, NULL, NM_ERR_NOT_FOUND, "missing required key llama.context_length"},
    {"missing_llama.embedding_length", BASE_LLAMA, e_no_embd, NULL, NM_ERR_NOT_FOUND,
     "missing required key llama.embedding_length"},
    {"missing_llama.block_count", BASE_LLAMA, e_no_blocks, NULL, NM_ERR_NOT_FOUND, "missing required key llama.block_count"},
    {"missing_llama.feed_forward_length", BASE_LLAMA, e_no_ff, NULL, NM_ERR_NOT_FOUND,
     "missing required key llama.feed_forward_length"},
    {"missing_llama.attention.head_count", BASE_LLAMA, e_no_heads, NULL, NM_ERR_NOT_FOUND,
     "missing required key llama.attention.head_count"},
    {"missing_llama.attention.layer_norm_rms_epsilon", BASE_LLAMA, e_no_eps, NULL, NM_ERR_NOT_FOUND,
     "missing required key llama.attention.layer_norm_rms_epsilon"},
    {"missing_qwen2.context_length", BASE_QWEN2, e_qwen2_no_ctx, NULL, NM_ERR_NOT_FOUND,
     "missing required key qwen2.context_length"},
    {"missing_qwen3.attention.head_count", BASE_QWEN3, e_qwen3_no_heads, NULL, NM_ERR_NOT_FOUND,
     "missing required key qwen3.attention.head_count"},
    {"block_count_string", BASE_LLAMA, e_blocks_str, NULL, NM_ERR_FORMAT, "key llama.block_count has type string; expected an integer"},
    {"block_count_0", BASE_LLAMA, e_blocks_0, NULL, NM_ERR_FORMAT, "key llama.block_count is 0; allowed are 1.."},
    {"block_count_3_of_2", BASE_LLAMA, e_blocks_3, NULL, NM_ERR_NOT_FOUND, "missing tensor blk.2.attn_norm.weight"},
    {"block_count_2pow31", BASE_LLAMA, e_blocks_huge, NULL, NM_ERR_MISMATCH, "llama.block_count is 2147483648, but the file has only * tensors"},
    {"embedding_length_negative", BASE_LLAMA, e_embd_neg, NULL, NM_ERR_FORMAT, "key llama.embedding_length is -1"},
    {"embedding_length_uint64_max", BASE_LLAMA, e_embd_u64_huge, NULL, NM_ERR_FORMAT,
     "key llama.embedding_length is 18446744073709551615; it does not fit in int64"},
    {"head_count_kv_not_divisor", BASE_LLAMA, e_head_kv_3, NULL, NM_ERR_FORMAT,
     "llama.attention.head_count (4) is not a multiple of head_count_kv (3)"},
    {"head_count_per_layer_differs", BASE_LLAMA, e_heads_nonuniform, NULL, NM_ERR_UNSUPPORTED,
     "llama.attention.head_count differs between layers"},
    {"head_count_empty_array", BASE_LLAMA, e_heads_empty_arr, NULL, NM_ERR_FORMAT,
     "llama.attention.head_count is an array of 0 uint32"},
    {"head_count_float_array", BASE_LLAMA, e_heads_float_arr, NULL, NM_ERR_FORMAT, "is an array of 2 float32"},
    {"feed_forward_uint64_array_huge", BASE_LLAMA, e_heads_u64_arr_huge, NULL, NM_ERR_FORMAT,
     "key llama.feed_forward_length[0] is 18446744073709551615; it does not fit"},
    {"rms_eps_0", BASE_LLAMA, e_eps_0, NULL, NM_ERR_FORMAT, "llama.attention.layer_norm_rms_epsilon is 0; allowed is (0, 1)"},
    {"rms_eps_nan", BASE_LLAMA, e_eps_nan, NULL, NM_ERR_FORMAT, "must be finite"},
    {"rms_eps_integer", BASE_LLAMA, e_eps_int, NULL, NM_ERR_FORMAT, "expected float32 or float64"},
    {"rope_dimension_odd", BASE_LLAMA, e_rope_dim_odd, NULL, NM_ERR_FORMAT, "llama.rope.dimension_count is 63"},
    {"rope_freq_base_negative", BASE_LLAMA, e_rope_base_neg, NULL, NM_ERR_FORMAT, "llama.rope.freq_base is -1"},
    {"rope_scaling_yarn", BASE_QWEN2, e_rope_yarn, NULL, NM_ERR_UNSUPPORTED, "qwen2.rope.scaling.type is 'yarn'"},
    {"vocab_size_0", BASE_LLAMA, e_vocab_0, NULL, NM_ERR_FORMAT, "vocabulary size 0"},
    /* shapes against the metadata */
    {"shape_embedding_length_128", BASE_LLAMA, e_embd_128, NULL, NM_ERR_MISMATCH,
     "tensor token_embd.weight has shape {256, *}; the configuration expects {128, *}"},
    {"shape_vocab_size_1000", BASE_LLAMA, e_vocab_1000, NULL, NM_ERR_MISMATCH, "expects {256, 1000}"},
    {"shape_ffn_up", BASE_LLAMA, e_ffn_up_shape, NULL, NM_ERR_MISMATCH,
     "tensor blk.1.ffn_up.weight has shape {256, 256}; the configuration expects {256, *}"},
    {"shape_attn_k_3d", BASE_LLAMA, e_attn_k_3d, NULL, NM_ERR_MISMATCH, "blk.0.attn_k.weight has shape {256, 128, 1}"},
    {"shape_norm_2d", BASE_LLAMA, e_norm_2d, NULL, NM_ERR_MISMATCH,
     "blk.1.attn_norm.weight has shape {256, 1}; the configuration expects {256}"},
    {"shape_head_count_kv_4", BASE_LLAMA, e_head_kv_4, NULL, NM_ERR_MISMATCH,
     "blk.0.attn_k.weight has shape {256, 128}; the configuration expects {256, 256}"},
    {"shape_feed_forward_doubled", BASE_LLAMA, e_ff_double, NULL, NM_ERR_MISMATCH, "blk.0.ffn_gate.weight has shape {256, *}; the configuration expects {256, *}"},
    {"shape_optional_output_bias", BASE_LLAMA, e_output_bias_bad, NULL, NM_ERR_MISMATCH,
     "output.bias has shape {100}; the configuration expects {*}"},
    {"shape_qwen2_bias", BASE_QWEN2, e_qwen2_bias_shape, NULL, NM_ERR_MISMATCH, "blk.1.attn_q.bias has shape {128}"},
    {"shape_qwen3_without_key_length", BASE_QWEN3, e_qwen3_no_key_length, NULL, NM_ERR_MISMATCH,
     "blk.0.attn_q.weight has shape {256, 512}; the configuration expects {256, 256}"},
    {"missing_tensor_ffn_down", BASE_LLAMA, e_no_ffn_down, NULL, NM_ERR_NOT_FOUND, "missing tensor blk.1.ffn_down.weight"},
    {"missing_tensor_token_embd", BASE_LLAMA, e_no_tok_embd, NULL, NM_ERR_NOT_FOUND, "missing tensor token_embd.weight"},
    {"missing_tensor_output_norm", BASE_LLAMA, e_no_output_norm, NULL, NM_ERR_NOT_FOUND,
     "missing tensor output_norm.weight"},
    {"missing_tensor_qwen2_bias", BASE_QWEN2, e_qwen2_no_bias, NULL, NM_ERR_NOT_FOUND, "missing tensor blk.0.attn_k.bias"},
    {"missing_tensor_qwen3_q_norm", BASE_QWEN3, e_qwen3_no_qnorm, NULL, NM_ERR_NOT_FOUND,
     "missing tensor blk.2.attn_q_norm.weight"},
    /* vocab-only files */
    {"vocab_only", BASE_VOCAB, NULL, NULL, NM_ERR_NOT_FOUND, "no tensors"},
    {"vocab_only_from_model", BASE_LLAMA, e_vocab_only, NULL, NM_ERR_NOT_FOUND, "vocabulary-only"},
    {"vocab_only_last_string_past_end", BASE_VOCAB, NULL, p_last_str_len_plus1, NM_ERR_FORMAT,
     "has length"},
};

/* Does err contain the parts of pat (split at '*'), in order? */
static bool msg_match(const char *err, const char *pat) {
    const char *e = err;
    for (const char *p = pat;;) {
        const char *star = strchr(p, '*');
        size_t n = star ? (size_t)(star - p) : strlen(p);
        if (n) {
            char part[512];
            NM_ASSERT(n < sizeof part);
            memcpy(part, p, n);
            part[n] = 0;
            if (!(e = strstr(e, part))) return false;
            e += n;
        }
        if (!star) return true;
        p = star + 1;
    }
}

static const char *status_name(enum nm_status s) {
    static const char *const n[] = {"NM_OK", "NM_ERR_IO", "NM_ERR_FORMAT", "NM_ERR_UNSUPPORTED", "NM_ERR_NOT_FOUND",
                                    "NM_ERR_MISMATCH", "NM_ERR_ARGS", "NM_ERR_NOMEM"};
    return (unsigned)s < NM_ARRAY_LEN(n) ? n[s] : "?";
}

/* Serialize case c into b. */
static void build_case(const struct ccase *c, struct buf *b) {
    struct img *m = img_clone(g_base[c->base].img);
    if (c->edit) c->edit(m);
    struct layout L;
    img_write(m, b, &L);
    if (c->patch) c->patch(b, &L, m);
    img_free(m);
}

static bool run_case(const struct ccase *c) {
    struct buf b = {0};
    build_case(c, &b);
    char err[1024], err2[1024];
    enum nm_status st = load_bytes(b.p, b.n, c->name, err, sizeof err);
    enum nm_status st2 = load_path(b.p, b.n, c->name, err2, sizeof err2);
    free(b.p);
    bool ok = st == c->want && st2 == c->want && msg_match(err, c->msg) && msg_match(err2, c->msg) &&
              (c->want == NM_OK || strlen(err) > 0);
    if (!ok) {
        printf("FAIL %s: want %s with \"%s\"\n  got  %s: %s\n  file %s: %s\n  repro: %s --case %s\n", c->name,
               status_name(c->want), c->msg, status_name(st), err, status_name(st2), err2, g_argv0, c->name);
        g_failures++;
    } else if (nm_log_level > 0) {
        printf("ok   %-40s %s: %s\n", c->name, status_name(st), err);
    }
    return ok;
}

/* ---- sweeps ----------------------------------------------------------------------------- */

/* Every truncation in [0, data_off] and a sample of the data must fail with a clear message. */
static int sweep_truncations(enum base_id id, int data_step) {
    struct buf b = {0};
    struct layout L;
    img_write(g_base[id].img, &b, &L);
    char err[1024], name[64];
    int n = 0;
    for (size_t cut = 0; cut < L.valid_end; n++) {
        snprintf(name, sizeof name, "%s@%zu", k_base_names[id], cut);
        enum nm_status st = load_bytes(b.p, cut, name, err, sizeof err);
        if (st != NM_ERR_FORMAT || !truncation_message(err)) {
            printf("FAIL truncation of %s at %zu bytes: want NM_ERR_FORMAT with a truncation message, got %s: %s\n"
                   "  repro: %s --case truncate  (base %d, offset %zu)\n",
                   k_base_names[id], cut, status_name(st), err, g_argv0, (int)id, cut);
            g_failures++;
        }
        if (cut < L.data_off) cut++;
        else if (cut + (size_t)data_step < L.valid_end) cut += (size_t)data_step;
        else cut = cut + 1 < L.valid_end ? L.valid_end - 1 : L.valid_end; /* the very last byte, then stop */
    }
    free(b.p);
    return n;
}

/* Overwrite each byte of the header, of every key's length/type and the first bytes of its
 * value, and of every tensor info with a few values; the loader may accept or refuse, but must
 * not crash (the sanitizer build turns any bad access into a failure). */
static int sweep_mutations(enum base_id id) {
    struct buf b = {0};
    struct layout L;
    const struct img *m = g_base[id].img;
    img_write(m, &b, &L);
    uint8_t *work = malloc(b.n);
    NM_ASSERT(work);
    memcpy(work, b.p, b.n);
    char err[1024];
    int n = 0;
    static const uint8_t vals[] = {0x00, 0x01, 0x07, 0x3f, 0x80, 0xff};
    for (size_t pos = 0; pos < L.ti_end; pos++) {
        bool hot = pos < 24 || pos >= L.t_pos[0];
        for (int i = 0; i < m->n_kv && !hot; i++)
            hot = (pos >= L.kv_pos[i] && pos < L.kv_pos[i] + 8) || (pos + 4 >= L.kv_val_pos[i] && pos < L.kv_val_pos[i] + 12);
        if (!hot) continue;
        for (size_t v = 0; v < NM_ARRAY_LEN(vals); v++) {
            if (b.p[pos] == vals[v]) continue;
            work[pos] = vals[v];
            enum nm_status st = load_bytes(work, b.n, "mutation", err, sizeof err);
            if (st != NM_OK && err[0] == 0) {
                printf("FAIL mutation of %s: byte %zu = 0x%02x gives %s with an empty message\n"
                       "  repro: %s --case mutate  (base %d)\n",
                       k_base_names[id], pos, vals[v], status_name(st), g_argv0, (int)id);
                g_failures++;
            }
            n++;
        }
        work[pos] = b.p[pos];
    }
    free(work);
    free(b.p);
    return n;
}

/* ---- setup and modes ------------------------------------------------------------------ */

static void setup_bases(void) {
    load_base(&g_base[BASE_LLAMA], "tiny-llama", DTYPE_Q4_0);
    load_base(&g_base[BASE_QWEN2], "tiny-qwen2", DTYPE_Q8_0);
    load_base(&g_base[BASE_QWEN3], "tiny-qwen3", DTYPE_Q4_K);
    /* Self-test of the editor: an unedited image serializes to the very bytes mkmodel wrote. */
    for (int i = 0; i <= BASE_QWEN3; i++) {
        struct buf b = {0};
        struct layout L;
        img_write(g_base[i].img, &b, &L);
        if (b.n != g_base[i].size || memcmp(b.p, g_base[i].bytes, b.n) != 0)
            nm_fatal("test bug: the image of %s does not serialize to the original file (%zu vs %zu bytes)",
                     k_base_names[i], b.n, g_base[i].size);
        free(b.p);
    }
    g_base[BASE_VOCAB].img = img_clone(g_base[BASE_LLAMA].img);
    g_base[BASE_VOCAB].img->n_t = 0;
    /* The vocab-only base ends with a string, for the "last string past the end" case. */
    kv_set_str(g_base[BASE_VOCAB].img, "tokenizer.chat_template", "{{ messages }}");
    g_base[BASE_MICRO].img = make_micro(g_base[BASE_LLAMA].img, "llama", DTYPE_Q4_0);
    g_base[BASE_MICRO_QWEN3].img = make_micro(g_base[BASE_QWEN3].img, "qwen3", DTYPE_Q8_0);
}

static void free_bases(void) {
    for (int i = 0; i < BASE_COUNT; i++) {
        if (g_base[i].img) img_free(g_base[i].img);
        free(g_base[i].bytes);
    }
}

static void write_img(const struct img *m, const char *dir, const char *name) {
    struct buf b = {0};
    struct layout L;
    img_write(m, &b, &L);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    write_file(path, b.p, b.n);
    free(b.p);
}

static int write_cases(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cases.tsv", dir);
    FILE *tsv = fopen(path, "w");
    if (!tsv) nm_fatal("cannot create %s: %s", path, strerror(errno));
    for (size_t i = 0; i < NM_ARRAY_LEN(k_cases); i++) {
        const struct ccase *c = &k_cases[i];
        struct buf b = {0};
        build_case(c, &b);
        snprintf(path, sizeof path, "%s/%s.gguf", dir, c->name);
        write_file(path, b.p, b.n);
        free(b.p);
        fprintf(tsv, "%s\t%s\t%s\n", c->name, status_name(c->want), c->msg);
    }
    fclose(tsv);
    printf("wrote %zu cases to %s (index in cases.tsv)\n", NM_ARRAY_LEN(k_cases), dir);
    return 0;
}

/* Fuzz seeds: tiny presets in every type (those over max_bytes skipped), micro models of each
 * architecture in every type, the vocab-only image, and the tokenizer files of vocab_dir with
 * every array cut to 64 elements. */
static int write_seeds(const char *dir, const char *vocab_dir, long max_bytes) {
    char path[1024], name[256], err[512];
    int n = 0, skipped = 0;
    for (const struct mkmodel_preset *p = mkmodel_presets(); p->name; p++) {
        if (strncmp(p->name, "tiny-", 5) != 0) continue;
        for (uint32_t t = 0; t < DTYPE_COUNT; t++) {
            if (!dtype_get(t)) continue;
            /* Skip, without writing it, a model whose weights alone pass max_bytes. */
            const int64_t hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
            const double params = (double)p->n_vocab * (double)p->n_embd * (p->tied ? 1 : 2) +
                                  (double)p->n_layer * ((double)p->n_embd * (double)hd * 2 * (double)(p->n_head + p->n_head_kv) +
                                                        3.0 * (double)p->n_embd * (double)p->n_ff);
            if (params * dtype_get(t)->type_size / dtype_get(t)->blck_size > (double)max_bytes) {
                skipped++;
                continue;
            }
            snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, p->name, dtype_get(t)->name);
            if (make_preset(p->name, (enum dtype)t, path, err, sizeof err)) nm_fatal("mkmodel: %s", err);
            struct stat sb;
            if (stat(path, &sb) == 0 && sb.st_size > max_bytes) {
                unlink(path);
                skipped++;
            } else {
                n++;
            }
        }
    }
    static const struct { enum base_id base; const char *arch; } archs[] = {
        {BASE_LLAMA, "llama"}, {BASE_QWEN2, "qwen2"}, {BASE_QWEN3, "qwen3"}};
    for (size_t a = 0; a < NM_ARRAY_LEN(archs); a++)
        for (uint32_t t = 0; t < DTYPE_COUNT; t++) {
            if (!dtype_get(t)) continue;
            struct img *m = make_micro(g_base[archs[a].base].img, archs[a].arch, (enum dtype)t);
            snprintf(name, sizeof name, "micro-%s-%s", archs[a].arch, dtype_get(t)->name);
            write_img(m, dir, name);
            img_free(m);
            n++;
        }
    struct img *v = img_clone(g_base[BASE_VOCAB].img);
    for (int i = 0; i < v->n_kv; i++) kv_trim_array(&v->kv[i], 64);
    write_img(v, dir, "vocab-only-tiny");
    img_free(v);
    n++;
    DIR *d = vocab_dir ? opendir(vocab_dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", vocab_dir, e->d_name);
        struct gguf_file *f;
        if (gguf_open(path, &f, err, sizeof err)) {
            printf("skip %s: %s\n", path, err);
            continue;
        }
        if (f->n_kv <= MAX_KV && f->n_tensors <= MAX_T) {
            struct img *m = img_from_file(f);
            for (int i = 0; i < m->n_kv; i++) kv_trim_array(&m->kv[i], 64);
            snprintf(name, sizeof name, "trimmed-%.*s", (int)(len - 5), e->d_name);
            m->n_t = 0; /* vocab files have none; never keep pointers into f */
            write_img(m, dir, name);
            img_free(m);
            n++;
        }
        gguf_close(f);
    }
    if (d) closedir(d);
    printf("wrote %d seeds to %s (%d tiny models over %ld bytes skipped)\n", n, dir, skipped, max_bytes);
    return 0;
}

int main(int argc, char **argv) {
    g_argv0 = argv[0];
    const char *one = NULL, *write_dir = NULL, *seed_dir = NULL, *vocab_dir = NULL;
    bool list = false;
    long max_bytes = 1 << 20;
    nm_log_level = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc) one = argv[++i];
        else if (!strcmp(argv[i], "--write-dir") && i + 1 < argc) write_dir = argv[++i];
        else if (!strcmp(argv[i], "--write-seeds") && i + 1 < argc) seed_dir = argv[++i];
        else if (!strcmp(argv[i], "--vocab-dir") && i + 1 < argc) vocab_dir = argv[++i];
        else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) max_bytes = atol(argv[++i]);
        else if (!strcmp(argv[i], "--list")) list = true;
        else if (!strcmp(argv[i], "-v")) nm_log_level = 1;
        else {
            fprintf(stderr, "usage: %s [--case NAME | --list | --write-dir DIR | --write-seeds DIR [--vocab-dir D]] [-v]\n",
                    argv[0]);
            return 2;
        }
    }
    if (list) {
        for (size_t i = 0; i < NM_ARRAY_LEN(k_cases); i++)
            printf("%-48s %-20s %s\n", k_cases[i].name, status_name(k_cases[i].want), k_cases[i].msg);
        return 0;
    }
    g_tmpdir = gguf_tmpdir_make("nm_gguf_corrupt");
    setup_bases();
    int rc = 0;
    if (write_dir) {
        rc = write_cases(write_dir);
    } else if (seed_dir) {
        rc = write_seeds(seed_dir, vocab_dir, max_bytes);
    } else {
        int n_cases = 0, n_trunc = 0, n_mut = 0;
        bool all = one == NULL;
        for (size_t i = 0; i < NM_ARRAY_LEN(k_cases); i++) {
            if (!all && strcmp(one, k_cases[i].name) != 0) continue;
            run_case(&k_cases[i]);
            n_cases++;
        }
        if (all || !strcmp(one, "truncate")) {
            n_trunc += sweep_truncations(BASE_LLAMA, 4093);
            n_trunc += sweep_truncations(BASE_QWEN3, 8191);
            n_trunc += sweep_truncations(BASE_VOCAB, 1);
            n_trunc += sweep_truncations(BASE_MICRO, 61);
        }
        if (all || !strcmp(one, "mutate")) {
            n_mut += sweep_mutations(BASE_MICRO);
            n_mut += sweep_mutations(BASE_MICRO_QWEN3);
        }
        if (n_cases + n_trunc + n_mut == 0) {
            fprintf(stderr, "no case named '%s' (--list shows them)\n", one);
            rc = 2;
        } else {
            printf("test_gguf_corrupt: %d named cases, %d truncations, %d mutations: %d failures\n", n_cases, n_trunc,
                   n_mut, g_failures);
            rc = g_failures ? 1 : 0;
        }
    }
    free_bases();
    return rc;
}
