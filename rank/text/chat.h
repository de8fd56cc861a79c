/* Chat templates: turn a list of {role, content} messages into the prompt text a chat model was
 * trained on. Three families are built in (no Jinja interpreter): ChatML (Qwen2/2.5/3 and other
 * <|im_start|> models), Llama 3 and Llama 2. `auto` recognises the family from the
 * tokenizer.chat_template string of the GGUF file by distinctive substrings.
 *
 * The prompt is meant to be tokenized with add_special = true (the model's BOS comes from the
 * tokenizer, not from the text) and parse_special = true (the markers are control tokens). */
#ifndef NM_CHAT_H
#define NM_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "base.h"
#include "gguf.h"

enum chat_template {
    CHAT_TEMPLATE_CHATML, /* <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n */
    CHAT_TEMPLATE_LLAMA3, /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> ... */
    CHAT_TEMPLATE_LLAMA2, /* [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ... */
    CHAT_TEMPLATE_COUNT,
};

struct chat_msg {
    const char *role;    /* "system", "user" or "assistant" (ChatML and Llama 3 accept any role) */
    const char *content; /* NUL-terminated */
};

/* "chatml", "llama3", "llama2" -> template; false for any other name. */
bool chat_template_from_name(const char *name, enum chat_template *out);
const char *chat_template_name(enum chat_template t);

/* Recognise a Jinja chat template (jinja[0..len)) by distinctive substrings: "<|im_start|>" ->
 * ChatML; "<|start_header_id|>" and "<|end_header_id|>" -> Llama 3; "[INST]" with "<<SYS>>" or
 * without Mistral's markers -> Llama 2. NM_ERR_UNSUPPORTED, with a message saying what was looked
 * for and how to choose a template by name, when none matches. */
enum nm_status chat_template_detect(const char *jinja, size_t len, enum chat_template *out, char *err,
                                    size_t errlen);

/* A template by name, or "auto": detect from tokenizer.chat_template of f (NM_ERR_NOT_FOUND
 * when the file has none, NM_ERR_UNSUPPORTED when it is not recognised; NM_ERR_ARGS for an
 * unknown name). Messages name the value and the allowed names. */
enum nm_status chat_template_resolve(const char *name, const struct gguf_file *f, enum chat_template *out,
                                     char *err, size_t errlen);

/* Format msgs[0..n) and, when add_assistant, the opener of the assistant's turn (nothing extra
 * for Llama 2, whose user turn ends with "[/INST]"). Llama 3 and Llama 2 trim surrounding
 * whitespace from contents as their official templates do; ChatML keeps contents verbatim and
 * adds no default system message. *out is malloc'ed and NUL-terminated (free with free()), *len
 * its length. NM_ERR_ARGS (with a message) for a NULL role/content, or for Llama 2 a role other
 * than system/user/assistant or a system message that is not first. */
enum nm_status chat_format(enum chat_template t, const struct chat_msg *msgs, size_t n, bool add_assistant,
                           char **out, size_t *len, char *err, size_t errlen);

#endif
