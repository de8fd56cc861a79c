/* OpenAI's API in JSON (jansson): request bodies of /v1/chat/completions and /v1/completions into
 * serve_requests, and the bodies numallm serve answers with (completions, stream chunks, usage,
 * errors, /tokenize and /detokenize). Pure functions of their inputs: no HTTP, no scheduler. */
#ifndef NM_SERVE_API_H
#define NM_SERVE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "scheduler.h"
#include "tokenizer.h"

enum api_kind {
    API_KIND_CHAT,       /* /v1/chat/completions: messages through the chat template */
    API_KIND_COMPLETION, /* /v1/completions: prompt text or token ids */
};

/* What the parser needs of the model. */
struct api_model {
    const struct tokenizer *tok;  /* NULL: the file has no vocabulary (token id prompts only) */
    enum chat_template tmpl;
    bool have_tmpl;               /* false: chat requests are refused (no template) */
    int64_t n_vocab;
    const char *name;             /* the "model" of responses */
};

/* Options of the response, from the request body. */
struct api_opts {
    bool stream;
    bool include_usage; /* stream_options.include_usage */
};

/* Why api_parse refused a body: the HTTP status and OpenAI's error code. */
enum api_refusal {
    API_REFUSAL_BAD_REQUEST, /* 400 invalid_request_error */
    API_REFUSAL_NO_MODEL,    /* 404 invalid_request_error, code model_not_found: "model" names another */
};

/* Parse a request body into a new request (one reference, prompt tokenized, sampling settings
 * checked). A "model" other than m->name is refused (absent or null means the one served). NULL
 * on a refused body, with *why and err naming the field and what was allowed. */
struct serve_request *api_parse(const struct api_model *m, enum api_kind kind, const char *body, size_t len,
                                struct api_opts *o, enum api_refusal *why, char *err, size_t errlen);

/* The bodies below are malloc'ed, NUL-terminated JSON; free with free(). */

/* {"error":{"message","type","param","code"}}: type as OpenAI names it (invalid_request_error,
 * authentication_error, not_found_error, server_error, unavailable_error); code is OpenAI's string
 * code (e.g. "model_not_found") when given, else the HTTP status as a number (llama-server's
 * habit); param is null. */
char *api_error(int status, const char *type, const char *code, const char *message);

/* A whole completion: chat.completion or text_completion, with usage (n_cached: the prompt
 * tokens reused from the slot's KV cache, as prompt_tokens_details.cached_tokens). */
char *api_completion(enum api_kind kind, uint64_t id, int64_t created, const char *model, const char *text,
                     size_t len, enum serve_finish finish, int64_t n_prompt, int64_t n_gen, int64_t n_cached);

/* One stream chunk (without the "data: " framing): text[0..len) as the delta; for chat, role
 * adds "role":"assistant"; finish != NONE ends the choice with its finish_reason. */
char *api_chunk(enum api_kind kind, uint64_t id, int64_t created, const char *model, const char *text, size_t len,
                bool role, enum serve_finish finish);
/* The usage chunk of stream_options.include_usage (empty choices). */
char *api_usage_chunk(enum api_kind kind, uint64_t id, int64_t created, const char *model, int64_t n_prompt,
                      int64_t n_gen, int64_t n_cached);

/* GET /v1/models (the list of one), and GET /v1/models/{model} (the model object alone). */
char *api_models(const char *model, int64_t created, int64_t n_ctx_slot);
char *api_model_object(const char *model, int64_t created, int64_t n_ctx_slot);

/* The 404 of a model that is not served: OpenAI's message, type and code (model_not_found). */
char *api_error_no_model(const char *asked);

/* POST /tokenize {"content", "add_special", "with_pieces"} -> {"tokens": [...]} and POST
 * /detokenize {"tokens"} -> {"content"}, as llama-server. NULL on a bad body (err says why). */
char *api_tokenize(const struct api_model *m, const char *body, size_t len, char *err, size_t errlen);
char *api_detokenize(const struct api_model *m, const char *body, size_t len, char *err, size_t errlen);

/* "stop", "length" (cancelled: "stop"). */
const char *api_finish_reason(enum serve_finish f);

#endif
