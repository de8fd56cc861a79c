/* OpenAI's request and response bodies (see api.h). */
#include "api.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dump(json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    NM_ASSERT(s);
    return s;
}

const char *api_finish_reason(enum serve_finish f) { return f == SERVE_FINISH_LENGTH ? "length" : "stop"; }

char *api_error(int status, const char *type, const char *code, const char *message) {
    return dump(json_pack("{s:{s:s, s:s, s:n, s:o}}", "error", "message", message, "type", type, "param", "code",
                          code ? json_string(code) : json_integer(status)));
}

char *api_error_no_model(const char *asked) {
    char msg[512];
    snprintf(msg, sizeof msg, "The model '%.300s' does not exist: GET /v1/models lists the one served", asked);
    return api_error(404, "invalid_request_error", "model_not_found", msg);
}

/* ---- request parsing --------------------------------------------------------------------- */

/* A number field in [lo, hi] into *out; absent or null leaves *out. */
static bool get_num(json_t *o, const char *key, double lo, double hi, double *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) {
        snprintf(err, errlen, "'%s' must be a number in %g..%g", key, lo, hi);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

static bool get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, errlen, "'%s' must be an integer in %lld..%lld", key, lo, hi);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

static bool get_bool(json_t *o, const char *key, bool *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        snprintf(err, errlen, "'%s' must be true or false", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* OpenAI fields numallm does not implement: refused with a 400 naming the field when a request
 * asks for them. A value that asks for nothing passes: null, false, 0, "", [], {}, the text
 * response_format, "none" or "auto" for a tool choice, and best_of 1. */
static bool asks_nothing(json_t *v) {
    const char *str = json_string_value(v);
    json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    return !v || json_is_null(v) || json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0) ||
           (str && (!*str || strcmp(str, "none") == 0 || strcmp(str, "auto") == 0)) ||
           (json_is_array(v) && json_array_size(v) == 0) || (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_string(type) && strcmp(json_string_value(type), "text") == 0 && json_object_size(v) == 1);
}

static bool refuse_unsupported(json_t *o, enum api_kind kind, char *err, size_t errlen) {
    static const char *const k_both[] = {"logprobs", "top_logprobs", "response_format", "tools", "functions",
                                         "tool_choice", "function_call", "logit_bias"};
    static const char *const k_completion[] = {"echo", "best_of", "suffix"};
    const char *what = NULL;
    for (size_t i = 0; i < NM_ARRAY_LEN(k_both) && !what; i++)
        if (!asks_nothing(json_object_get(o, k_both[i]))) what = k_both[i];
    for (size_t i = 0; kind == API_KIND_COMPLETION && i < NM_ARRAY_LEN(k_completion) && !what; i++)
        if (!asks_nothing(json_object_get(o, k_completion[i])) &&
            !(strcmp(k_completion[i], "best_of") == 0 && json_integer_value(json_object_get(o, "best_of")) == 1))
            what = k_completion[i];
    if (!what) return true;
    snprintf(err, errlen, "'%s' is not supported by numallm serve; leave it out", what);
    return false;
}

/* Sampling, length, stop strings and streaming: the fields both endpoints share. */
static bool parse_common(json_t *o, struct serve_request *r, struct api_opts *opt, char *err, size_t errlen) {
    double d;
    long long ll;
    ll = 1;
    if (!get_int(o, "n", 1, 128, &ll, err, errlen)) return false;
    if (ll != 1) {
        snprintf(err, errlen, "'n' is %lld; only n = 1 is supported", ll);
        return false;
    }
    ll = -1;
    if (!get_int(o, "max_tokens", 1, 1 << 24, &ll, err, errlen) ||
        !get_int(o, "max_completion_tokens", 1, 1 << 24, &ll, err, errlen) ||
        !get_int(o, "n_predict", -1, 1 << 24, &ll, err, errlen)) /* llama-server's name */
        return false;
    r->max_tokens = ll;
    d = r->sp.temp;
    if (!get_num(o, "temperature", 0, 100, &d, err, errlen)) return false;
    r->sp.temp = (float)d;
    d = r->sp.top_p;
    if (!get_num(o, "top_p", 0, 1, &d, err, errlen)) return false;
    r->sp.top_p = (float)d;
    d = r->sp.min_p;
    if (!get_num(o, "min_p", 0, 1, &d, err, errlen)) return false;
    r->sp.min_p = (float)d;
    ll = r->sp.top_k;
    if (!get_int(o, "top_k", 0, 1 << 30, &ll, err, errlen)) return false;
    r->sp.top_k = (int)ll;
    d = 0;
    if (!get_num(o, "presence_penalty", -2, 2, &d, err, errlen)) return false;
    r->sp.presence_penalty = (float)d;
    d = 0;
    if (!get_num(o, "frequency_penalty", -2, 2, &d, err, errlen)) return false;
    r->sp.frequency_penalty = (float)d;
    d = r->sp.repeat_penalty;
    if (!get_num(o, "repeat_penalty", 0.01, 100, &d, err, errlen)) return false;
    r->sp.repeat_penalty = (float)d;
    ll = r->sp.repeat_last_n;
    if (!get_int(o, "repeat_last_n", 0, 1 << 20, &ll, err, errlen)) return false;
    r->sp.repeat_last_n = (int)ll;
    ll = -1;
    if (!get_int(o, "seed", INT64_MIN, INT64_MAX, &ll, err, errlen)) return false;
    if (ll != -1) r->sp.seed = (uint64_t)ll;
    if (!get_bool(o, "ignore_eos", &r->ignore_eos, err, errlen) || !get_bool(o, "stream", &opt->stream, err, errlen))
        return false;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            snprintf(err, errlen, "'stream_options' must be an object");
            return false;
        }
        if (!get_bool(so, "include_usage", &opt->include_usage, err, errlen)) return false;
    }
    json_t *stop = json_object_get(o, "stop");
    if (stop && !json_is_null(stop)) {
        json_t *one[1] = {stop};
        json_t **list = one;
        size_t n = 1;
        if (json_is_array(stop)) n = json_array_size(stop);
        if (n > SERVE_MAX_STOP) {
            snprintf(err, errlen, "'stop' has %zu strings; at most %d are allowed", n, SERVE_MAX_STOP);
            return false;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_is_array(stop) ? json_array_get(stop, i) : list[0];
            if (!json_is_string(v) || json_string_length(v) == 0) {
                snprintf(err, errlen, "'stop' must be a non-empty string or an array of them");
                return false;
            }
            r->stop[r->n_stop++] = strdup(json_string_value(v));
        }
    }
    return true;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts (joined). */
static char *message_text(json_t *content, char *err, size_t errlen) {
    if (json_is_string(content)) return strdup(json_string_value(content));
    if (json_is_null(content)) return strdup("");
    if (!json_is_array(content)) {
        snprintf(err, errlen, "a message's 'content' must be a string or an array of text parts");
        return NULL;
    }
    size_t len = 0;
    char *out = calloc(1, 1);
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *part = json_array_get(content, i), *text = json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text)) {
            snprintf(err, errlen, "content part %zu: only {\"type\": \"text\", \"text\": ...} parts are supported", i);
            free(out);
            return NULL;
        }
        const size_t n = json_string_length(text);
        out = realloc(out, len + n + 1);
        memcpy(out + len, json_string_value(text), n + 1);
        len += n;
    }
    return out;
}

static bool parse_chat_prompt(const struct api_model *m, json_t *o, struct serve_request *r, char *err,
                              size_t errlen) {
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, errlen, "'messages' must be a non-empty array");
        return false;
    }
    if (!m->tok || !m->have_tmpl) {
        snprintf(err, errlen, "the model has no %s: use /v1/completions", m->tok ? "chat template" : "tokenizer");
        return false;
    }
    const size_t n = json_array_size(msgs);
    struct chat_msg *cm = calloc(n, sizeof *cm);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        json_t *msg = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (!role) {
            snprintf(err, errlen, "messages[%zu] has no 'role' string", i);
            ok = false;
            break;
        }
        /* OpenAI's "developer" is its newer name for "system"; tool results need tools, which
         * are not supported (refuse_unsupported) */
        if (strcmp(role, "developer") == 0) role = "system";
        if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0) {
            snprintf(err, errlen, "messages[%zu]: role '%.64s' is not supported (system, developer, user, assistant)",
                     i, role);
            ok = false;
            break;
        }
        cm[i].role = role;
        if (!(cm[i].content = message_text(json_object_get(msg, "content"), err, errlen))) ok = false;
    }
    char *text = NULL;
    size_t tlen = 0;
    if (ok && chat_format(m->tmpl, cm, n, true, &text, &tlen, err, errlen) != NM_OK) ok = false;
    for (size_t i = 0; i < n; i++) free((char *)cm[i].content);
    free(cm);
    if (!ok) return false;
    size_t n_ids;
    r->prompt = tok_encode_alloc(m->tok, text, tlen, true, true, &n_ids);
    r->n_prompt = (int64_t)n_ids;
    free(text);
    return true;
}

static bool parse_ids(const struct api_model *m, json_t *arr, int32_t **ids, int64_t *n, char *err, size_t errlen) {
    *n = (int64_t)json_array_size(arr);
    *ids = malloc((size_t)NM_MAX(*n, 1) * sizeof **ids);
    NM_ASSERT(*ids);
    for (int64_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->n_vocab) {
            snprintf(err, errlen, "token %lld of the list is not an id in 0..%lld", (long long)i, (long long)m->n_vocab - 1);
            free(*ids);
            *ids = NULL;
            return false;
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    return true;
}

static bool parse_completion_prompt(const struct api_model *m, json_t *o, struct serve_request *r, char *err,
                                    size_t errlen) {
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0); /* ["text"]: one prompt */
    if (json_is_string(p)) {
        if (!m->tok) {
            snprintf(err, errlen, "the model has no tokenizer: give 'prompt' as token ids");
            return false;
        }
        size_t n_ids;
        r->prompt = tok_encode_alloc(m->tok, json_string_value(p), json_string_length(p), true, true, &n_ids);
        r->n_prompt = (int64_t)n_ids;
        return true;
    }
    if (json_is_array(p)) return parse_ids(m, p, &r->prompt, &r->n_prompt, err, errlen);
    snprintf(err, errlen, "'prompt' must be a string or an array of token ids (one prompt: n = 1)");
    return false;
}

struct serve_request *api_parse(const struct api_model *m, enum api_kind kind, const char *body, size_t len,
                                struct api_opts *o, enum api_refusal *why, char *err, size_t errlen) {
    *o = (struct api_opts){0};
    *why = API_REFUSAL_BAD_REQUEST;
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    if (!j || !json_is_object(j)) {
        if (j) snprintf(err, errlen, "the body must be a JSON object");
        else snprintf(err, errlen, "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        json_decref(j);
        return NULL;
    }
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_null(model) && (!json_is_string(model) || strcmp(json_string_value(model), m->name) != 0)) {
        if (json_is_string(model)) {
            *why = API_REFUSAL_NO_MODEL;
            snprintf(err, errlen, "%s", json_string_value(model)); /* api_error_no_model words it */
        } else {
            snprintf(err, errlen, "'model' must be a string");
        }
        json_decref(j);
        return NULL;
    }
    if (!refuse_unsupported(j, kind, err, errlen)) {
        json_decref(j);
        return NULL;
    }
    struct serve_request *r = serve_request_new();
    const bool ok = parse_common(j, r, o, err, errlen) &&
                    (kind == API_KIND_CHAT ? parse_chat_prompt(m, j, r, err, errlen)
                                           : parse_completion_prompt(m, j, r, err, errlen));
    json_decref(j);
    if (!ok) {
        serve_request_release(r);
        return NULL;
    }
    return r;
}

/* ---- responses --------------------------------------------------------------------------- */

static json_t *id_of(enum api_kind kind, uint64_t id) {
    char s[48];
    snprintf(s, sizeof s, "%s-%llu", kind == API_KIND_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)id);
    return json_string(s);
}

/* OpenAI's usage, with the prompt tokens a slot's KV cache already held (prefix reuse) as
 * prompt_tokens_details.cached_tokens. */
static json_t *usage(int64_t n_prompt, int64_t n_gen, int64_t n_cached) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)n_prompt, "completion_tokens",
                     (json_int_t)n_gen, "total_tokens", (json_int_t)(n_prompt + n_gen), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)n_cached);
}

char *api_completion(enum api_kind kind, uint64_t id, int64_t created, const char *model, const char *text,
                     size_t len, enum serve_finish finish, int64_t n_prompt, int64_t n_gen, int64_t n_cached) {
    json_t *choice;
    if (kind == API_KIND_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role", "assistant", "content",
                           text, len, "logprobs", "finish_reason", api_finish_reason(finish));
    else
        choice = json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", text, len, "logprobs", "finish_reason",
                           api_finish_reason(finish));
    return dump(json_pack("{s:o, s:s, s:I, s:s, s:[o], s:o}", "id", id_of(kind, id), "object",
                          kind == API_KIND_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)created,
                          "model", model, "choices", choice, "usage", usage(n_prompt, n_gen, n_cached)));
}

char *api_chunk(enum api_kind kind, uint64_t id, int64_t created, const char *model, const char *text, size_t len,
                bool role, enum serve_finish finish) {
    json_t *fin = finish == SERVE_FINISH_NONE ? json_null() : json_string(api_finish_reason(finish));
    json_t *choice;
    if (kind == API_KIND_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (len > 0 || role) json_object_set_new(delta, "content", json_stringn(text, len));
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs", "finish_reason", fin);
    } else {
        choice = json_pack("{s:i, s:s%, s:n, s:o}", "index", 0, "text", text, len, "logprobs", "finish_reason", fin);
    }
    return dump(json_pack("{s:o, s:s, s:I, s:s, s:[o]}", "id", id_of(kind, id), "object",
                          kind == API_KIND_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)created, "model", model, "choices", choice));
}

char *api_usage_chunk(enum api_kind kind, uint64_t id, int64_t created, const char *model, int64_t n_prompt,
                      int64_t n_gen, int64_t n_cached) {
    return dump(json_pack("{s:o, s:s, s:I, s:s, s:[], s:o}", "id", id_of(kind, id), "object",
                          kind == API_KIND_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)created, "model", model, "choices", "usage", usage(n_prompt, n_gen, n_cached)));
}

static json_t *model_object(const char *model, int64_t created, int64_t n_ctx_slot) {
    return json_pack("{s:s, s:s, s:I, s:s, s:{s:I}}", "id", model, "object", "model", "created", (json_int_t)created,
                     "owned_by", "numallm", "meta", "n_ctx_slot", (json_int_t)n_ctx_slot);
}

char *api_models(const char *model, int64_t created, int64_t n_ctx_slot) {
    return dump(json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(model, created, n_ctx_slot)));
}

char *api_model_object(const char *model, int64_t created, int64_t n_ctx_slot) {
    return dump(model_object(model, created, n_ctx_slot));
}

char *api_tokenize(const struct api_model *m, const char *body, size_t len, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    json_t *content = json_object_get(j, "content");
    bool add_special = false, with_pieces = false;
    char *out = NULL;
    if (!j) snprintf(err, errlen, "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    else if (!json_is_string(content)) snprintf(err, errlen, "'content' must be a string");
    else if (!m->tok) snprintf(err, errlen, "the model has no tokenizer");
    else if (get_bool(j, "add_special", &add_special, err, errlen) && get_bool(j, "with_pieces", &with_pieces, err, errlen)) {
        size_t n;
        int32_t *ids = tok_encode_alloc(m->tok, json_string_value(content), json_string_length(content), add_special,
                                        true, &n);
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            if (!with_pieces) {
                json_array_append_new(arr, json_integer(ids[i]));
                continue;
            }
            const size_t pl = tok_piece(m->tok, ids[i], true, NULL, 0);
            char *piece = malloc(pl + 1);
            tok_piece(m->tok, ids[i], true, piece, pl);
            json_t *ps = json_stringn(piece, pl); /* NULL when the piece is not UTF-8 alone: its bytes, */
            if (!ps) {                            /* as llama-server gives them */
                ps = json_array();
                for (size_t k = 0; k < pl; k++) json_array_append_new(ps, json_integer((uint8_t)piece[k]));
            }
            json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece", ps));
            free(piece);
        }
        free(ids);
        out = dump(json_pack("{s:o}", "tokens", arr));
    }
    json_decref(j);
    return out;
}

char *api_detokenize(const struct api_model *m, const char *body, size_t len, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    json_t *toks = json_object_get(j, "tokens");
    char *out = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!j) snprintf(err, errlen, "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    else if (!json_is_array(toks)) snprintf(err, errlen, "'tokens' must be an array of token ids");
    else if (!m->tok) snprintf(err, errlen, "the model has no tokenizer");
    else if (parse_ids(m, toks, &ids, &n, err, errlen)) {
        /* through the streaming decoder, so that bytes that do not form a character (a token
         * holding part of one) become U+FFFD and the rest of the text stays; special tokens
         * rendered, as llama-server does */
        struct tok_stream *ts = tok_stream_init(m->tok, TOK_DECODE_SPECIAL);
        size_t tl = 0, cap = 64, pl;
        char *text = malloc(cap);
        for (int64_t i = 0; i <= n; i++) {
            const char *p = i < n ? tok_stream_feed(ts, ids[i], &pl) : tok_stream_flush(ts, &pl);
            if (tl + pl > cap) text = realloc(text, cap = 2 * (tl + pl));
            NM_ASSERT(text);
            memcpy(text + tl, p, pl);
            tl += pl;
        }
        tok_stream_free(ts);
        json_t *s = json_stringn(text, tl); /* (the decoder's output is UTF-8) */
        if (s) out = dump(json_pack("{s:o}", "content", s));
        else snprintf(err, errlen, "the tokens' text could not be made a JSON string");
        free(text);
        free(ids);
    }
    json_decref(j);
    return out;
}
