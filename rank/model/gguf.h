/* GGUF v2/v3 reader (memory-mapped, every field validated) and a streaming writer.
 *
 * The reader checks everything before it trusts it: counts and lengths against the bytes left,
 * overflow before multiplying, key and tensor type ids, n_dims, alignment (uint32, power of
 * two), block divisibility, tensor offsets aligned, inside the data section and not
 * overlapping, duplicate keys and tensor names. A bad file gets NM_ERR_FORMAT (or
 * NM_ERR_UNSUPPORTED) and one message naming the field, the value and what was allowed. */
#ifndef NM_GGUF_H
#define NM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT,
};
const char *gguf_type_name(enum gguf_type t);

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* tensor names are shorter than this, as in ggml */

/* A string inside the mapped file: not NUL-terminated. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;     /* value type; ARRAY for arrays */
    enum gguf_type arr_type; /* element type of an array */
    uint64_t n;              /* array length (1 for scalars) */
    const uint8_t *data;     /* scalar value or first array element, in the file */
    uint64_t *str_offsets;   /* string arrays: byte offset of element i from data (owned) */
};

struct gguf_tensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    uint32_t type;             /* ggml type id (may be one numallm cannot compute with) */
    uint64_t offset;           /* from the start of the data section */
    uint64_t size;             /* bytes */
    const void *data;          /* into the mapped file (of its part, in a split model) */
    uint32_t part;             /* the file it is in: 0, or its part's split.no in a split model */
};

struct gguf_file {
    const char *path; /* for messages; "<buffer>" when parsed from memory */
    const uint8_t *base;
    uint64_t size;
    bool mapped; /* base is an mmap of the whole file, unmapped by gguf_close */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    struct gguf_kv **kv_sorted;           /* by key, for gguf_find_kv */
    struct gguf_tensor **tensor_sorted;   /* by name, for gguf_find_tensor */
    /* A model split into several files (gguf_open): n_parts of them; this is the first, with the
     * model's keys and every part's tensors, and owns parts[1 .. n_parts - 1] (parts[0] is NULL). */
    uint32_t n_parts;
    struct gguf_file **parts;
    char *path_owned; /* path, when gguf_open made it (the other parts of a split model) */
};

/* Map and validate a file. On success *out owns the mapping; free with gguf_close.
 * A model split into several files by llama.cpp's gguf-split (NAME-00001-of-00003.gguf, ...: keys
 * split.no, split.count, split.tensors.count) opens from any one of them: the others are found by
 * their names, each is validated as a file, and *out is the first part (the model's keys) with
 * the tensors of all parts. A missing, renamed or foreign part is an error naming it. */
enum nm_status gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen);
/* Validate a file image in memory (borrowed: must outlive the result). Used by the fuzzer. */
enum nm_status gguf_parse(const void *data, uint64_t size, const char *name, struct gguf_file **out,
                          char *err, size_t errlen);
void gguf_close(struct gguf_file *f);

/* Look-ups: NULL when absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);
/* A tensor's shape as "{ne0, ne1, ...}" for messages; returns buf. */
const char *gguf_tensor_shape_str(const struct gguf_tensor *t, char *buf, size_t len);

/* Typed getters. NM_ERR_NOT_FOUND when the key is absent (no message written: the caller
 * decides whether that is an error or a default); NM_ERR_FORMAT with a message when the value
 * has the wrong type or does not fit. Integers accept any integer type whose value fits. */
enum nm_status gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out, char *err, size_t errlen);
enum nm_status gguf_get_float(const struct gguf_file *f, const char *key, double *out, char *err, size_t errlen);
enum nm_status gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, char *err, size_t errlen);
enum nm_status gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out, char *err, size_t errlen);
/* An array of any element type: *kv_out points at it (check arr_type and n yourself). */
enum nm_status gguf_get_arr(const struct gguf_file *f, const char *key, const struct gguf_kv **kv_out,
                            char *err, size_t errlen);

/* Element i of an array kv (bounds asserted). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
int64_t gguf_arr_int(const struct gguf_kv *kv, uint64_t i);   /* any integer element type */
double gguf_arr_float(const struct gguf_kv *kv, uint64_t i);  /* f32/f64 elements */

/* Compare a gguf_str with a C string. */
bool gguf_str_eq(struct gguf_str s, const char *c);

/* Geometry of any ggml type id, supported for compute or not: false for an unknown id. */
bool gguf_ggml_type_geometry(uint32_t type, int *blck_size, int *type_size);

/* ---- Writer: header and tensor infos first, then tensor data streamed in order. ---- */
struct gguf_writer;
struct gguf_writer *gguf_writer_init(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Numeric array: n elements of type t copied from data. */
void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type t, const void *data, uint64_t n);
void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Copy a key (any type) from another file, as is. */
void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Declare the next tensor (data comes later, in declaration order). */
void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type);
/* Create the file and write header, KVs and tensor infos. */
enum nm_status gguf_writer_begin(struct gguf_writer *w, const char *path, char *err, size_t errlen);
/* Append bytes of tensor i's data. Tensors are written in declaration order, each in one or
 * more calls whose sizes add up to the tensor's size; padding follows automatically. */
enum nm_status gguf_writer_write_data(struct gguf_writer *w, uint64_t i, const void *data, uint64_t bytes,
                                      char *err, size_t errlen);
enum nm_status gguf_writer_end(struct gguf_writer *w, char *err, size_t errlen);

#endif
