/* GGUF reader and writer (see gguf.h). The reader walks the file with a cursor that checks
 * every read against the bytes left, so no length or count from the file is trusted before it
 * has been bounded by the file size. */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const k_type_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
static const int k_type_sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? k_type_names[t] : "invalid";
}

/* Block geometry of every ggml type id (ggml.h / ggml.c type traits). Ids 4, 5 and the retired
 * repack ids 31-33, 36-38 are absent. */
static const struct { int blck, size; } k_ggml_geometry[] = {
    [0] = {1, 4},     /* f32 */
    [1] = {1, 2},     /* f16 */
    [2] = {32, 18},   /* q4_0 */
    [3] = {32, 20},   /* q4_1 */
    [6] = {32, 22},   /* q5_0 */
    [7] = {32, 24},   /* q5_1 */
    [8] = {32, 34},   /* q8_0 */
    [9] = {32, 36},   /* q8_1 */
    [10] = {256, 84}, /* q2_k */
    [11] = {256, 110}, /* q3_k */
    [12] = {256, 144}, /* q4_k */
    [13] = {256, 176}, /* q5_k */
    [14] = {256, 210}, /* q6_k */
    [15] = {256, 292}, /* q8_k */
    [16] = {256, 66},  /* iq2_xxs */
    [17] = {256, 74},  /* iq2_xs */
    [18] = {256, 98},  /* iq3_xxs */
    [19] = {256, 50},  /* iq1_s */
    [20] = {32, 18},   /* iq4_nl */
    [21] = {256, 110}, /* iq3_s */
    [22] = {256, 82},  /* iq2_s */
    [23] = {256, 136}, /* iq4_xs */
    [24] = {1, 1},     /* i8 */
    [25] = {1, 2},     /* i16 */
    [26] = {1, 4},     /* i32 */
    [27] = {1, 8},     /* i64 */
    [28] = {1, 8},     /* f64 */
    [29] = {256, 56},  /* iq1_m */
    [30] = {1, 2},     /* bf16 */
    [34] = {256, 54},  /* tq1_0 */
    [35] = {256, 66},  /* tq2_0 */
    [39] = {32, 17},   /* mxfp4 */
};

bool gguf_ggml_type_geometry(uint32_t type, int *blck_size, int *type_size) {
    if (type >= NM_ARRAY_LEN(k_ggml_geometry) || k_ggml_geometry[type].blck == 0) return false;
    if (blck_size) *blck_size = k_ggml_geometry[type].blck;
    if (type_size) *type_size = k_ggml_geometry[type].size;
    return true;
}

/* ---- reader ---------------------------------------------------------------------------- */

struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    char *err;
    size_t errlen;
};

static enum nm_status truncated(struct cursor *c, const char *what, uint64_t need) {
    return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                   "%s: truncated file: %s needs %llu bytes at offset %llu, but the file has %llu bytes",
                   c->path, what, (unsigned long long)need, (unsigned long long)c->pos,
                   (unsigned long long)c->size);
}

static enum nm_status rd(struct cursor *c, void *dst, uint64_t n, const char *what) {
    if (n > c->size - c->pos) return truncated(c, what, n);
    memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return NM_OK;
}

static enum nm_status rd_str(struct cursor *c, struct gguf_str *s, const char *what) {
    uint64_t len = 0; /* gcc -O2 cannot see that rd() sets it on NM_OK */
    enum nm_status st = rd(c, &len, 8, what);
    if (st) return st;
    if (len > c->size - c->pos)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                       "%s: %s at offset %llu has length %llu, more than the %llu bytes left in the file",
                       c->path, what, (unsigned long long)(c->pos - 8), (unsigned long long)len,
                       (unsigned long long)(c->size - c->pos));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return NM_OK;
}

bool gguf_str_eq(struct gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static int str_cmp(struct gguf_str a, struct gguf_str b) {
    uint64_t n = a.len < b.len ? a.len : b.len;
    int r = memcmp(a.ptr, b.ptr, n);
    if (r) return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* Read the value of a KV (after its key and type). */
static enum nm_status rd_value(struct cursor *c, struct gguf_kv *kv, uint64_t index) {
    enum nm_status st;
    int32_t t;
    if ((st = rd(c, &t, 4, "key/value type"))) return st;
    if (t < 0 || t >= GGUF_TYPE_COUNT)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                       "%s: key '%.*s' (#%llu) has value type %d; allowed are 0..%d", c->path,
                       (int)NM_MIN(kv->key.len, 200), kv->key.ptr, (unsigned long long)index, t,
                       GGUF_TYPE_COUNT - 1);
    kv->type = (enum gguf_type)t;
    kv->n = 1;
    if (kv->type == GGUF_TYPE_STRING) {
        struct gguf_str s;
        kv->data = c->base + c->pos;
        return rd_str(c, &s, "string value");
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        kv->data = c->base + c->pos;
        if ((uint64_t)k_type_sizes[t] > c->size - c->pos) return truncated(c, "scalar value", k_type_sizes[t]);
        c->pos += k_type_sizes[t];
        return NM_OK;
    }
    int32_t et;
    uint64_t n;
    if ((st = rd(c, &et, 4, "array element type"))) return st;
    if ((st = rd(c, &n, 8, "array length"))) return st;
    if (et < 0 || et >= GGUF_TYPE_COUNT || et == GGUF_TYPE_ARRAY)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                       "%s: array '%.*s' has element type %d; allowed are 0..%d except 9 (arrays of arrays)",
                       c->path, (int)NM_MIN(kv->key.len, 200), kv->key.ptr, et, GGUF_TYPE_COUNT - 1);
    kv->arr_type = (enum gguf_type)et;
    kv->n = n;
    kv->data = c->base + c->pos;
    if (et != GGUF_TYPE_STRING) {
        uint64_t bytes;
        if (nm_mul_overflow_u64(n, (uint64_t)k_type_sizes[et], &bytes) || bytes > c->size - c->pos)
            return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                           "%s: array '%.*s' claims %llu elements of %s, more than the %llu bytes left",
                           c->path, (int)NM_MIN(kv->key.len, 200), kv->key.ptr, (unsigned long long)n,
                           k_type_names[et], (unsigned long long)(c->size - c->pos));
        c->pos += bytes;
        return NM_OK;
    }
    /* Every string takes at least its 8-byte length: bound n before allocating offsets. */
    if (n > (c->size - c->pos) / 8)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                       "%s: string array '%.*s' claims %llu elements, more than the %llu bytes left can hold",
                       c->path, (int)NM_MIN(kv->key.len, 200), kv->key.ptr, (unsigned long long)n,
                       (unsigned long long)(c->size - c->pos));
    kv->str_offsets = malloc((n ? n : 1) * sizeof(uint64_t));
    if (!kv->str_offsets)
        return nm_errf(c->err, c->errlen, NM_ERR_NOMEM, "%s: out of memory for %llu strings", c->path,
                       (unsigned long long)n);
    uint64_t start = c->pos;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        kv->str_offsets[i] = c->pos - start;
        if ((st = rd_str(c, &s, "string array element"))) return st;
    }
    return NM_OK;
}

static int cmp_kv_keys(const void *a, const void *b) {
    const struct gguf_kv *x = *(struct gguf_kv *const *)a, *y = *(struct gguf_kv *const *)b;
    return str_cmp(x->key, y->key);
}

static int cmp_tensor_names(const void *a, const void *b) {
    const struct gguf_tensor *x = *(struct gguf_tensor *const *)a, *y = *(struct gguf_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_tensor_offsets(const void *a, const void *b) {
    const struct gguf_tensor *x = *(struct gguf_tensor *const *)a, *y = *(struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Sorted indexes for look-ups by name in O(log n) (a crafted file may hold millions of keys or
 * tensors); adjacent equal names in them are the duplicates. */
static enum nm_status index_keys(struct gguf_file *f, char *err, size_t errlen) {
    f->kv_sorted = malloc((f->n_kv ? f->n_kv : 1) * sizeof *f->kv_sorted);
    if (!f->kv_sorted) return nm_errf(err, errlen, NM_ERR_NOMEM, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < f->n_kv; i++) f->kv_sorted[i] = &f->kv[i];
    qsort(f->kv_sorted, f->n_kv, sizeof *f->kv_sorted, cmp_kv_keys);
    for (uint64_t i = 1; i < f->n_kv; i++) {
        const struct gguf_kv *a = f->kv_sorted[i - 1], *b = f->kv_sorted[i];
        if (str_cmp(a->key, b->key) == 0)
            return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: duplicate key '%.*s'", f->path,
                           (int)NM_MIN(a->key.len, 200), a->key.ptr);
    }
    return NM_OK;
}

/* The name index and the duplicate check over f's tensors; with check_overlap (one file's own
 * tensors, not a split model's, whose offsets count from their own part's data), the overlap
 * check too. */
static enum nm_status index_tensors(struct gguf_file *f, bool check_overlap, char *err, size_t errlen) {
    const uint64_t n = f->n_tensors ? f->n_tensors : 1;
    f->tensor_sorted = malloc(n * sizeof *f->tensor_sorted);
    struct gguf_tensor **by_offset = malloc(n * sizeof *by_offset);
    enum nm_status st = NM_OK;
    if (!f->tensor_sorted || !by_offset) {
        free(by_offset);
        return nm_errf(err, errlen, NM_ERR_NOMEM, "%s: out of memory", f->path);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) f->tensor_sorted[i] = by_offset[i] = &f->tensors[i];
    qsort(f->tensor_sorted, f->n_tensors, sizeof *f->tensor_sorted, cmp_tensor_names);
    for (uint64_t i = 1; i < f->n_tensors && !st; i++) {
        const struct gguf_tensor *a = f->tensor_sorted[i - 1], *b = f->tensor_sorted[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (f->n_parts > 1)
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: duplicate tensor name '%s' (in parts %u and %u of %u)",
                         f->path, a->name, NM_MIN(a->part, b->part) + 1, NM_MAX(a->part, b->part) + 1, f->n_parts);
        else
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: duplicate tensor name '%s'", f->path, a->name);
    }
    /* Overlap: sorted by offset, each tensor must end at or before the next one starts. */
    if (!st && check_overlap) qsort(by_offset, f->n_tensors, sizeof *by_offset, cmp_tensor_offsets);
    for (uint64_t i = 1; i < f->n_tensors && !st && check_overlap; i++) {
        const struct gguf_tensor *a = by_offset[i - 1], *b = by_offset[i];
        if (a->offset + a->size > b->offset)
            st = nm_errf(err, errlen, NM_ERR_FORMAT,
                         "%s: tensors '%s' (offset %llu, %llu bytes) and '%s' (offset %llu) overlap",
                         f->path, a->name, (unsigned long long)a->offset, (unsigned long long)a->size,
                         b->name, (unsigned long long)b->offset);
    }
    free(by_offset);
    return st;
}

static enum nm_status rd_tensor_info(struct cursor *c, struct gguf_tensor *t, uint64_t i) {
    enum nm_status st;
    struct gguf_str name;
    if ((st = rd_str(c, &name, "tensor name"))) return st;
    if (name.len == 0 || name.len >= GGUF_MAX_NAME)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                       "%s: tensor #%llu has a name of %llu bytes; allowed are 1..%d", c->path,
                       (unsigned long long)i, (unsigned long long)name.len, GGUF_MAX_NAME - 1);
    if (memchr(name.ptr, 0, name.len))
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT, "%s: tensor #%llu has a NUL byte in its name",
                       c->path, (unsigned long long)i);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = 0;
    if ((st = rd(c, &t->n_dims, 4, "tensor n_dims"))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT, "%s: tensor '%s' has n_dims %u; allowed are 1..%d",
                       c->path, t->name, t->n_dims, GGUF_MAX_DIMS);
    uint64_t nelem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((st = rd(c, &t->ne[d], 8, "tensor dimension"))) return st;
        if (t->ne[d] < 0 || nm_mul_overflow_u64(nelem, (uint64_t)t->ne[d], &nelem) || nelem > (uint64_t)INT64_MAX)
            return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                           "%s: tensor '%s' dimension %u is %lld; dimensions must be >= 0 and their product fit in int64",
                           c->path, t->name, d, (long long)t->ne[d]);
    }
    if ((st = rd(c, &t->type, 4, "tensor type"))) return st;
    int blck, tsize;
    if (!gguf_ggml_type_geometry(t->type, &blck, &tsize))
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT, "%s: tensor '%s' has type id %u, which is not a ggml type",
                       c->path, t->name, t->type);
    if (t->ne[0] % blck != 0)
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT,
                       "%s: tensor '%s' has rows of %lld values, not a multiple of its type's block size %d",
                       c->path, t->name, (long long)t->ne[0], blck);
    if (nm_mul_overflow_u64(nelem / blck, (uint64_t)tsize, &t->size))
        return nm_errf(c->err, c->errlen, NM_ERR_FORMAT, "%s: tensor '%s' size overflows", c->path, t->name);
    return rd(c, &t->offset, 8, "tensor offset");
}

enum nm_status gguf_parse(const void *data, uint64_t size, const char *name, struct gguf_file **out,
                          char *err, size_t errlen) {
    *out = NULL;
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f) return nm_errf(err, errlen, NM_ERR_NOMEM, "%s: out of memory", name);
    f->path = name;
    f->n_parts = 1;
    f->base = data;
    f->size = size;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    struct cursor c = {.base = data, .size = size, .path = name, .err = err, .errlen = errlen};
    enum nm_status st;
    char magic[4];
    if ((st = rd(&c, magic, 4, "magic"))) goto fail;
    if (memcmp(magic, "GGUF", 4) != 0) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT,
                     "%s: not a GGUF file: magic is %02x %02x %02x %02x, expected \"GGUF\" (47 47 55 46)", name,
                     (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
        goto fail;
    }
    if ((st = rd(&c, &f->version, 4, "version"))) goto fail;
    if (f->version == 1) {
        st = nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported; allowed are 2 and 3", name);
        goto fail;
    }
    if (f->version != 2 && f->version != 3) {
        uint32_t v = f->version;
        uint32_t swapped = __builtin_bswap32(v);
        if (swapped == 2 || swapped == 3)
            st = nm_errf(err, errlen, NM_ERR_UNSUPPORTED, "%s: big-endian GGUF files are not supported", name);
        else
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: GGUF version %u; allowed are 2 and 3", name, v);
        goto fail;
    }
    if ((st = rd(&c, &f->n_tensors, 8, "tensor count"))) goto fail;
    if ((st = rd(&c, &f->n_kv, 8, "key/value count"))) goto fail;
    /* A KV takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info at least
     * 8 + 1 + 4 + 8 + 4 + 8: bound both counts by the file size before allocating. */
    if (f->n_kv > (size - c.pos) / 13) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key/value count %llu is more than the file can hold",
                     name, (unsigned long long)f->n_kv);
        goto fail;
    }
    if (f->n_tensors > (size - c.pos) / 33) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: tensor count %llu is more than the file can hold", name,
                     (unsigned long long)f->n_tensors);
        goto fail;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        st = nm_errf(err, errlen, NM_ERR_NOMEM, "%s: out of memory", name);
        goto fail;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        if ((st = rd_str(&c, &kv->key, "key"))) goto fail;
        if (kv->key.len == 0) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key #%llu is empty", name, (unsigned long long)i);
            goto fail;
        }
        if ((st = rd_value(&c, kv, i))) goto fail;
    }
    if ((st = index_keys(f, err, errlen))) goto fail;
    const struct gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: general.alignment has type %s; it must be uint32", name,
                         gguf_type_name(al->type));
            goto fail;
        }
        memcpy(&f->alignment, al->data, 4);
        if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) != 0) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: general.alignment is %u; it must be a power of two",
                         name, f->alignment);
            goto fail;
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((st = rd_tensor_info(&c, &f->tensors[i], i))) goto fail;
    uint64_t data_off = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors > 0 && data_off > size) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT,
                     "%s: truncated file: the data section would start at %llu, past the end (%llu bytes)", name,
                     (unsigned long long)data_off, (unsigned long long)size);
        goto fail;
    }
    f->data_offset = data_off;
    uint64_t data_size = f->n_tensors > 0 ? size - data_off : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT,
                         "%s: tensor '%s' has offset %llu, not a multiple of the alignment %u", name, t->name,
                         (unsigned long long)t->offset, f->alignment);
            goto fail;
        }
        if (t->offset > data_size || t->size > data_size - t->offset) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT,
                         "%s: tensor '%s' (offset %llu, %llu bytes) ends past the data section (%llu bytes); truncated file?",
                         name, t->name, (unsigned long long)t->offset, (unsigned long long)t->size,
                         (unsigned long long)data_size);
            goto fail;
        }
        t->data = f->base + data_off + t->offset;
    }
    if ((st = index_tensors(f, true, err, errlen))) goto fail;
    *out = f;
    return NM_OK;
fail:
    gguf_close(f);
    return st;
}

/* Map and validate one file. */
static enum nm_status open_file(const char *path, struct gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return nm_errf(err, errlen, NM_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return nm_errf(err, errlen, NM_ERR_IO, "%s: mmap of %llu bytes failed: %s", path,
                           (unsigned long long)size, strerror(e));
        }
    }
    close(fd);
    static const uint8_t empty[1];
    enum nm_status st = gguf_parse(map ? map : empty, size, path, out, err, errlen);
    if (st != NM_OK) {
        if (map) munmap(map, size);
        return st;
    }
    (*out)->mapped = map != NULL;
    return NM_OK;
}

/* ---- Models split into several files (llama.cpp's gguf-split) ------------------------------
 * Part i (0-based) of n is named PREFIX-%05d-of-%05d.gguf (i + 1, n) and holds the keys split.no
 * = i and split.count = n; the first part holds the model's keys and split.tensors.count, the
 * tensors of all parts together. A tensor's offset counts from its own part's data section. */

#define SPLIT_MAX_PARTS 99999 /* the names' 5 digits */

/* f's split.no and split.count (*count = 1, *no = 0 for a file without them). */
static enum nm_status split_keys(const struct gguf_file *f, int64_t *no, int64_t *count, char *err, size_t errlen) {
    *no = 0, *count = 1;
    if (!gguf_find_kv(f, "split.count")) return NM_OK;
    enum nm_status st = gguf_get_int(f, "split.count", count, err, errlen);
    if (st) return st;
    if (*count < 1 || *count > SPLIT_MAX_PARTS)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: split.count is %lld; allowed are 1..%d", f->path,
                       (long long)*count, SPLIT_MAX_PARTS);
    if (*count == 1 && !gguf_find_kv(f, "split.no")) return NM_OK;
    if ((st = gguf_get_int(f, "split.no", no, err, errlen)) == NM_ERR_NOT_FOUND)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: split.count is %lld but split.no (which part this is) is missing",
                       f->path, (long long)*count);
    if (st) return st;
    if (*no < 0 || *no >= *count)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: split.no is %lld; allowed are 0..%lld (split.count %lld)",
                       f->path, (long long)*no, (long long)*count - 1, (long long)*count);
    return NM_OK;
}

static void close_parts(struct gguf_file **parts, int64_t n) {
    for (int64_t i = 0; parts && i < n; i++) gguf_close(parts[i]);
    free(parts);
}

/* f (at path) is part no of count: open the others by their names, check them, and give the
 * first part, holding every part's tensors, in *out (f is taken over, closed on error). */
static enum nm_status open_split(struct gguf_file *f, const char *path, int64_t no, int64_t count,
                                 struct gguf_file **out, char *err, size_t errlen) {
    char suffix[40];
    snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf", (long long)no + 1, (long long)count);
    const size_t pl = strlen(path), sl = strlen(suffix);
    if (pl <= sl || strcmp(path + pl - sl, suffix) != 0) {
        gguf_close(f);
        return nm_errf(err, errlen, NM_ERR_FORMAT,
                       "%s: this is part %lld of a model split into %lld files (split.no, split.count), but its "
                       "name does not end with %s, so the other parts cannot be found: keep the names gguf-split gave them",
                       path, (long long)no + 1, (long long)count, suffix);
    }
    struct gguf_file **parts = calloc((size_t)count, sizeof *parts);
    NM_ASSERT(parts);
    parts[no] = f;
    enum nm_status st = NM_OK;
    for (int64_t i = 0; i < count && !st; i++) {
        if (i == no) continue;
        char *pi = malloc(pl + 1);
        NM_ASSERT(pi);
        snprintf(pi, pl + 1, "%.*s-%05lld-of-%05lld.gguf", (int)(pl - sl), path, (long long)i + 1, (long long)count);
        char why[768];
        if ((st = open_file(pi, &parts[i], why, sizeof why))) {
            nm_errf(err, errlen, st, "%s (part %lld of the %lld files of %s)", why, (long long)i + 1, (long long)count, path);
            free(pi);
            break;
        }
        parts[i]->path = parts[i]->path_owned = pi;
        int64_t pno, pcount;
        if ((st = split_keys(parts[i], &pno, &pcount, err, errlen))) break;
        if (!gguf_find_kv(parts[i], "split.count"))
            st = nm_errf(err, errlen, NM_ERR_FORMAT,
                         "%s: not a part of a split model (no split.count), though its name makes it part %lld of %lld",
                         pi, (long long)i + 1, (long long)count);
        else if (pno != i || pcount != count)
            st = nm_errf(err, errlen, NM_ERR_FORMAT,
                         "%s: its keys say part %lld of %lld (split.no %lld, split.count %lld), its name part %lld of "
                         "%lld: a part of another model, or renamed",
                         pi, (long long)pno + 1, (long long)pcount, (long long)pno, (long long)pcount, (long long)i + 1,
                         (long long)count);
    }
    if (st) {
        close_parts(parts, count);
        return st;
    }
    /* The first part, with the model's keys, takes every part's tensors. */
    struct gguf_file *first = parts[0];
    uint64_t total = 0;
    for (int64_t i = 0; i < count; i++) total += parts[i]->n_tensors;
    int64_t want;
    st = gguf_get_int(first, "split.tensors.count", &want, err, errlen);
    if (st == NM_ERR_NOT_FOUND)
        st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: the first of %lld parts has no split.tensors.count", first->path,
                     (long long)count);
    struct gguf_tensor *all = st ? NULL : calloc(total ? total : 1, sizeof *all);
    if (!st && !all) st = nm_errf(err, errlen, NM_ERR_NOMEM, "%s: out of memory", first->path);
    if (st) {
        close_parts(parts, count);
        return st;
    }
    uint64_t n = 0;
    for (int64_t i = 0; i < count; i++)
        for (uint64_t j = 0; j < parts[i]->n_tensors; j++) {
            all[n] = parts[i]->tensors[j];
            all[n++].part = (uint32_t)i;
        }
    free(first->tensors);
    free(first->tensor_sorted);
    first->tensors = all;
    first->tensor_sorted = NULL;
    first->n_tensors = total;
    first->n_parts = (uint32_t)count;
    first->parts = parts;
    parts[0] = NULL;
    /* a tensor in two parts, then one missing or too many */
    if (!(st = index_tensors(first, false, err, errlen)) && (want < 0 || (uint64_t)want != total))
        st = nm_errf(err, errlen, NM_ERR_FORMAT,
                     "%s: split.tensors.count is %lld, but its %lld parts hold %llu tensors: a part is missing tensors "
                     "or belongs to another model",
                     first->path, (long long)want, (long long)count, (unsigned long long)total);
    if (st) {
        gguf_close(first);
        return st;
    }
    *out = first;
    return NM_OK;
}

enum nm_status gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen) {
    struct gguf_file *f;
    enum nm_status st = open_file(path, &f, err, errlen);
    if (st) return st;
    int64_t no, count;
    if ((st = split_keys(f, &no, &count, err, errlen))) {
        gguf_close(f);
        return st;
    }
    if (count == 1) {
        *out = f;
        return NM_OK;
    }
    return open_split(f, path, no, count, out, err, errlen);
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    for (uint32_t i = 1; f->parts && i < f->n_parts; i++) gguf_close(f->parts[i]);
    free(f->parts);
    free(f->path_owned);
    for (uint64_t i = 0; f->kv && i < f->n_kv; i++) free(f->kv[i].str_offsets);
    free(f->kv);
    free(f->tensors);
    free(f->kv_sorted);
    free(f->tensor_sorted);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) {
    const struct gguf_str k = {.ptr = key, .len = strlen(key)};
    uint64_t lo = 0, hi = f->kv_sorted ? f->n_kv : 0;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        const int c = str_cmp(f->kv_sorted[mid]->key, k);
        if (c == 0) return f->kv_sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    uint64_t lo = 0, hi = f->tensor_sorted ? f->n_tensors : 0;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(f->tensor_sorted[mid]->name, name);
        if (c == 0) return f->tensor_sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static bool int_value(enum gguf_type t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_TYPE_UINT8: *out = *p; return true;
    case GGUF_TYPE_INT8: *out = (int8_t)*p; return true;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case GGUF_TYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    default: return false;
    }
}

static bool float_value(enum gguf_type t, const uint8_t *p, double *out) {
    if (t == GGUF_TYPE_FLOAT32) { float v; memcpy(&v, p, 4); *out = v; return true; }
    if (t == GGUF_TYPE_FLOAT64) { memcpy(out, p, 8); return true; }
    return false;
}

enum nm_status gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out, char *err, size_t errlen) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return NM_ERR_NOT_FOUND;
    if (kv->type == GGUF_TYPE_UINT64 && !int_value(kv->type, kv->data, out)) {
        uint64_t u;
        memcpy(&u, kv->data, 8);
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key %s is %llu; it does not fit in int64", f->path, key,
                       (unsigned long long)u);
    }
    if (kv->type == GGUF_TYPE_ARRAY || !int_value(kv->type, kv->data, out))
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key %s has type %s; expected an integer", f->path, key,
                       gguf_type_name(kv->type));
    return NM_OK;
}

enum nm_status gguf_get_float(const struct gguf_file *f, const char *key, double *out, char *err, size_t errlen) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return NM_ERR_NOT_FOUND;
    if (kv->type == GGUF_TYPE_ARRAY || !float_value(kv->type, kv->data, out))
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key %s has type %s; expected float32 or float64", f->path,
                       key, gguf_type_name(kv->type));
    return NM_OK;
}

enum nm_status gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, char *err, size_t errlen) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return NM_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_BOOL)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key %s has type %s; expected bool", f->path, key,
                       gguf_type_name(kv->type));
    *out = kv->data[0] != 0;
    return NM_OK;
}

enum nm_status gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out, char *err,
                            size_t errlen) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return NM_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_STRING)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key %s has type %s; expected string", f->path, key,
                       gguf_type_name(kv->type));
    memcpy(&out->len, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    return NM_OK;
}

enum nm_status gguf_get_arr(const struct gguf_file *f, const char *key, const struct gguf_kv **kv_out, char *err,
                            size_t errlen) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return NM_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_ARRAY)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: key %s has type %s; expected an array", f->path, key,
                       gguf_type_name(kv->type));
    *kv_out = kv;
    return NM_OK;
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i) {
    NM_ASSERT(kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING && i < kv->n);
    const uint8_t *p = kv->data + kv->str_offsets[i];
    struct gguf_str s;
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

int64_t gguf_arr_int(const struct gguf_kv *kv, uint64_t i) {
    NM_ASSERT(kv->type == GGUF_TYPE_ARRAY && i < kv->n);
    int64_t v = 0;
    bool ok = int_value(kv->arr_type, kv->data + i * (uint64_t)k_type_sizes[kv->arr_type], &v);
    NM_ASSERT(ok);
    return v;
}

double gguf_arr_float(const struct gguf_kv *kv, uint64_t i) {
    NM_ASSERT(kv->type == GGUF_TYPE_ARRAY && i < kv->n);
    double v = 0;
    bool ok = float_value(kv->arr_type, kv->data + i * (uint64_t)k_type_sizes[kv->arr_type], &v);
    NM_ASSERT(ok);
    return v;
}

/* ---- writer ---------------------------------------------------------------------------- */

/* Keys and tensor infos are serialized into one growing buffer as they are added; tensor data
 * is streamed after it. */
struct wbuf {
    uint8_t *p;
    size_t n, cap;
};

static void wbuf_put(struct wbuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        NM_ASSERT(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void wbuf_put_str(struct wbuf *b, const char *s, uint64_t len) {
    wbuf_put(b, &len, 8);
    wbuf_put(b, s, len);
}

struct gguf_writer {
    struct wbuf kv, ti;
    uint64_t n_kv, n_tensors;
    uint64_t *sizes; /* bytes of each declared tensor */
    uint64_t data_size;
    FILE *fp;
    const char *path;
    uint64_t next;        /* next tensor whose data must be written */
    uint64_t cur_written; /* bytes of tensor `next` written so far */
};

struct gguf_writer *gguf_writer_init(void) {
    struct gguf_writer *w = calloc(1, sizeof *w);
    NM_ASSERT(w);
    return w;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    free(w->kv.p);
    free(w->ti.p);
    free(w->sizes);
    free(w);
}

static void put_key(struct gguf_writer *w, const char *key, enum gguf_type t) {
    wbuf_put_str(&w->kv, key, strlen(key));
    int32_t ti = t;
    wbuf_put(&w->kv, &ti, 4);
    w->n_kv++;
}

void gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v) {
    put_key(w, key, GGUF_TYPE_UINT16);
    wbuf_put(&w->kv, &v, 2);
}
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    put_key(w, key, GGUF_TYPE_UINT32);
    wbuf_put(&w->kv, &v, 4);
}
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) {
    put_key(w, key, GGUF_TYPE_INT32);
    wbuf_put(&w->kv, &v, 4);
}
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) {
    put_key(w, key, GGUF_TYPE_FLOAT32);
    wbuf_put(&w->kv, &v, 4);
}
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v) {
    put_key(w, key, GGUF_TYPE_BOOL);
    uint8_t b = v;
    wbuf_put(&w->kv, &b, 1);
}
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v) {
    put_key(w, key, GGUF_TYPE_STRING);
    wbuf_put_str(&w->kv, v, strlen(v));
}
void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type t, const void *data, uint64_t n) {
    NM_ASSERT(t < GGUF_TYPE_COUNT && t != GGUF_TYPE_STRING && t != GGUF_TYPE_ARRAY);
    put_key(w, key, GGUF_TYPE_ARRAY);
    int32_t et = t;
    wbuf_put(&w->kv, &et, 4);
    wbuf_put(&w->kv, &n, 8);
    wbuf_put(&w->kv, data, n * (uint64_t)k_type_sizes[t]);
}
void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    put_key(w, key, GGUF_TYPE_ARRAY);
    int32_t et = GGUF_TYPE_STRING;
    wbuf_put(&w->kv, &et, 4);
    wbuf_put(&w->kv, &n, 8);
    for (uint64_t i = 0; i < n; i++) wbuf_put_str(&w->kv, v[i], strlen(v[i]));
}

void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv) {
    wbuf_put_str(&w->kv, kv->key.ptr, kv->key.len);
    int32_t t = kv->type;
    wbuf_put(&w->kv, &t, 4);
    w->n_kv++;
    if (kv->type == GGUF_TYPE_STRING) {
        uint64_t len;
        memcpy(&len, kv->data, 8);
        wbuf_put(&w->kv, kv->data, 8 + len);
    } else if (kv->type != GGUF_TYPE_ARRAY) {
        wbuf_put(&w->kv, kv->data, k_type_sizes[kv->type]);
    } else {
        int32_t et = kv->arr_type;
        wbuf_put(&w->kv, &et, 4);
        wbuf_put(&w->kv, &kv->n, 8);
        if (kv->arr_type != GGUF_TYPE_STRING) {
            wbuf_put(&w->kv, kv->data, kv->n * (uint64_t)k_type_sizes[kv->arr_type]);
        } else {
            for (uint64_t i = 0; i < kv->n; i++) {
                struct gguf_str s = gguf_arr_str(kv, i);
                wbuf_put_str(&w->kv, s.ptr, s.len);
            }
        }
    }
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                            uint32_t type) {
    int blck, tsize;
    NM_ASSERT(n_dims >= 1 && n_dims <= GGUF_MAX_DIMS && strlen(name) < GGUF_MAX_NAME);
    NM_ASSERT(gguf_ggml_type_geometry(type, &blck, &tsize) && ne[0] % blck == 0);
    uint64_t nelem = 1;
    for (uint32_t d = 0; d < n_dims; d++) nelem *= (uint64_t)ne[d];
    uint64_t bytes = nelem / blck * tsize;
    wbuf_put_str(&w->ti, name, strlen(name));
    wbuf_put(&w->ti, &n_dims, 4);
    wbuf_put(&w->ti, ne, 8 * (size_t)n_dims);
    wbuf_put(&w->ti, &type, 4);
    wbuf_put(&w->ti, &w->data_size, 8);
    w->sizes = realloc(w->sizes, (w->n_tensors + 1) * sizeof *w->sizes);
    NM_ASSERT(w->sizes);
    w->sizes[w->n_tensors++] = bytes;
    w->data_size = align_up(w->data_size + bytes, GGUF_DEFAULT_ALIGNMENT);
}

static enum nm_status write_all(struct gguf_writer *w, const void *p, size_t n, char *err, size_t errlen) {
    if (n && fwrite(p, 1, n, w->fp) != n)
        return nm_errf(err, errlen, NM_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return NM_OK;
}

static enum nm_status write_zeros(struct gguf_writer *w, size_t n, char *err, size_t errlen) {
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    return write_all(w, zeros, n, err, errlen);
}

enum nm_status gguf_writer_begin(struct gguf_writer *w, const char *path, char *err, size_t errlen) {
    w->path = path;
    w->fp = fopen(path, "wb");
    if (!w->fp) return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    struct wbuf h = {0};
    uint32_t version = 3;
    wbuf_put(&h, "GGUF", 4);
    wbuf_put(&h, &version, 4);
    wbuf_put(&h, &w->n_tensors, 8);
    wbuf_put(&h, &w->n_kv, 8);
    enum nm_status st = write_all(w, h.p, h.n, err, errlen);
    uint64_t pos = h.n + w->kv.n + w->ti.n;
    free(h.p);
    if (!st) st = write_all(w, w->kv.p, w->kv.n, err, errlen);
    if (!st) st = write_all(w, w->ti.p, w->ti.n, err, errlen);
    if (!st && w->n_tensors) st = write_zeros(w, align_up(pos, GGUF_DEFAULT_ALIGNMENT) - pos, err, errlen);
    return st;
}

enum nm_status gguf_writer_write_data(struct gguf_writer *w, uint64_t i, const void *data, uint64_t bytes,
                                      char *err, size_t errlen) {
    NM_ASSERT(w->fp && i == w->next && i < w->n_tensors && bytes <= w->sizes[i] - w->cur_written);
    enum nm_status st = write_all(w, data, bytes, err, errlen);
    w->cur_written += bytes;
    if (!st && w->cur_written == w->sizes[i]) {
        st = write_zeros(w, align_up(w->sizes[i], GGUF_DEFAULT_ALIGNMENT) - w->sizes[i], err, errlen);
        w->next++;
        w->cur_written = 0;
    }
    return st;
}

enum nm_status gguf_writer_end(struct gguf_writer *w, char *err, size_t errlen) {
    NM_ASSERT(w->next == w->n_tensors);
    int rc = fclose(w->fp);
    w->fp = NULL;
    if (rc != 0) return nm_errf(err, errlen, NM_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    return NM_OK;
}

const char *gguf_tensor_shape_str(const struct gguf_tensor *t, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "{");
    for (uint32_t d = 0; d < t->n_dims && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (n < len) snprintf(buf + n, len - n, "}");
    return buf;
}
