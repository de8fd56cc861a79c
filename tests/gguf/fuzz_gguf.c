/* libFuzzer target for the GGUF reader and the model loader: parse the bytes, read every
 * key/value through the typed getters, read the configuration, then bind the model and touch
 * the first and last embedding rows. Any input may be refused; none may crash, leak, hang or
 * read outside the buffer (built with -fsanitize=fuzzer,address,undefined by fuzz.sh).
 * A refusal must come with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"

static void check_message(enum nm_status st, const char *err) {
    if (st != NM_OK && st != NM_ERR_NOT_FOUND && err[0] == 0) NM_ASSERT(!"a refusal without a message");
}

/* Read every kv the way the loader and the tokenizer do. */
static void touch_kvs(const struct gguf_file *f) {
    char key[256], err[512];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        if (kv->key.len >= sizeof key || memchr(kv->key.ptr, 0, kv->key.len)) continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        int64_t iv;
        double dv;
        bool bv;
        struct gguf_str sv;
        const struct gguf_kv *arr;
        err[0] = 0;
        check_message(gguf_get_int(f, key, &iv, err, sizeof err), err);
        err[0] = 0;
        check_message(gguf_get_float(f, key, &dv, err, sizeof err), err);
        err[0] = 0;
        check_message(gguf_get_bool(f, key, &bv, err, sizeof err), err);
        err[0] = 0;
        if (gguf_get_str(f, key, &sv, err, sizeof err) == NM_OK && sv.len) {
            volatile char c = sv.ptr[0];
            c = sv.ptr[sv.len - 1];
            (void)c;
        }
        if (gguf_get_arr(f, key, &arr, err, sizeof err) != NM_OK) continue;
        for (uint64_t j = 0; j < arr->n && j < 256; j++) {
            switch (arr->arr_type) {
            case GGUF_TYPE_STRING: {
                struct gguf_str s = gguf_arr_str(arr, j);
                if (s.len) {
                    volatile char c = s.ptr[s.len - 1];
                    (void)c;
                }
                break;
            }
            case GGUF_TYPE_FLOAT32:
            case GGUF_TYPE_FLOAT64: (void)gguf_arr_float(arr, j); break;
            case GGUF_TYPE_UINT64: {
                uint64_t u; /* gguf_arr_int's contract: the value must fit in int64 */
                memcpy(&u, arr->data + 8 * j, 8);
                if (u <= (uint64_t)INT64_MAX) (void)gguf_arr_int(arr, j);
                break;
            }
            case GGUF_TYPE_BOOL: break;
            default: (void)gguf_arr_int(arr, j); break;
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nm_log_level = -1; /* silence the loader's info and warning lines */
    char err[1024] = "";
    struct gguf_file *f;
    enum nm_status st = gguf_parse(data, size, "fuzz", &f, err, sizeof err);
    check_message(st, err);
    if (st != NM_OK) return 0;
    touch_kvs(f);
    struct model_config cfg;
    err[0] = 0;
    check_message(model_config_read(f, &cfg, err, sizeof err), err);
    struct model *m;
    err[0] = 0;
    st = model_load_file(f, NULL, &m, err, sizeof err); /* takes f over, also when it fails */
    check_message(st, err);
    if (st != NM_OK) return 0;
    if (m->cfg.n_embd <= (1 << 20)) {
        float *row = malloc((size_t)m->cfg.n_embd * sizeof(float));
        NM_ASSERT(row);
        model_embed_row(m, 0, row);
        model_embed_row(m, (int32_t)(m->cfg.n_vocab - 1), row);
        free(row);
    }
    char desc[128];
    model_describe(m, desc, sizeof desc);
    model_free(m);
    return 0;
}
