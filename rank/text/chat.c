/* Chat templates (see chat.h). The formats follow the official Jinja templates of the model
 * families (as llama.cpp's llm_chat_apply_template renders them). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *p;
    size_t n, cap;
};

static void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) nm_fatal("out of memory formatting a chat prompt (%zu bytes)", c);
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static bool is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* s without leading and trailing whitespace (Jinja's trim / Python's strip for ASCII). */
static void sb_trimmed(struct sbuf *b, const char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && is_ws(s[a])) a++;
    while (n > a && is_ws(s[n - 1])) n--;
    sb_put(b, s + a, n - a);
}

static const char *const names[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_CHATML] = "chatml",
    [CHAT_TEMPLATE_LLAMA3] = "llama3",
    [CHAT_TEMPLATE_LLAMA2] = "llama2",
};

bool chat_template_from_name(const char *name, enum chat_template *out) {
    for (int i = 0; i < CHAT_TEMPLATE_COUNT; i++) {
        if (!strcmp(name, names[i])) {
            *out = (enum chat_template)i;
            return true;
        }
    }
    return false;
}

const char *chat_template_name(enum chat_template t) {
    return (unsigned)t < CHAT_TEMPLATE_COUNT ? names[t] : "?";
}

static bool contains(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, m) == 0) return true;
    return false;
}

enum nm_status chat_template_detect(const char *jinja, size_t len, enum chat_template *out, char *err,
                                    size_t errlen) {
    if (contains(jinja, len, "<|im_start|>")) {
        *out = CHAT_TEMPLATE_CHATML;
        return NM_OK;
    }
    if (contains(jinja, len, "<|start_header_id|>") && contains(jinja, len, "<|end_header_id|>")) {
        *out = CHAT_TEMPLATE_LLAMA3;
        return NM_OK;
    }
    if (contains(jinja, len, "[INST]")) {
        /* Mistral's later formats share [INST] but not Llama 2's layout */
        if (contains(jinja, len, "[SYSTEM_PROMPT]") || contains(jinja, len, "[AVAILABLE_TOOLS]"))
            return nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                           "tokenizer.chat_template is a Mistral template ([INST] with [SYSTEM_PROMPT] or "
                           "[AVAILABLE_TOOLS]), which numallm does not implement; choose one of chatml, llama3, "
                           "llama2 by name");
        *out = CHAT_TEMPLATE_LLAMA2;
        return NM_OK;
    }
    return nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                   "tokenizer.chat_template (%zu bytes, starting \"%.*s\") is not recognised: looked for "
                   "\"<|im_start|>\" (chatml), \"<|start_header_id|>\" + \"<|end_header_id|>\" (llama3) and "
                   "\"[INST]\" (llama2); choose one of chatml, llama3, llama2 by name",
                   len, (int)NM_MIN(len, 40), jinja);
}

enum nm_status chat_template_resolve(const char *name, const struct gguf_file *f, enum chat_template *out,
                                     char *err, size_t errlen) {
    if (strcmp(name, "auto") != 0) {
        if (chat_template_from_name(name, out)) return NM_OK;
        return nm_errf(err, errlen, NM_ERR_ARGS, "unknown chat template '%s': expected auto, chatml, llama3 or llama2",
                       name);
    }
    struct gguf_str s;
    enum nm_status st = gguf_get_str(f, "tokenizer.chat_template", &s, err, errlen);
    if (st == NM_ERR_NOT_FOUND)
        return nm_errf(err, errlen, NM_ERR_NOT_FOUND,
                       "%s has no tokenizer.chat_template, so the chat template cannot be detected; choose one "
                       "of chatml, llama3, llama2 by name",
                       f->path);
    if (st != NM_OK) return st;
    st = chat_template_detect(s.ptr, (size_t)s.len, out, err, errlen);
    if (st == NM_OK) nm_log_info("chat template: %s (detected from tokenizer.chat_template)", names[*out]);
    return st;
}

enum nm_status chat_format(enum chat_template t, const struct chat_msg *msgs, size_t n, bool add_assistant,
                           char **out, size_t *len, char *err, size_t errlen) {
    struct sbuf b = {0};
    enum nm_status st = NM_OK;
    *out = NULL;
    *len = 0;
    sb_put(&b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            st = nm_errf(err, errlen, NM_ERR_ARGS, "chat message %zu has no %s", i, msgs[i].role ? "content" : "role");
            goto fail;
        }
    }
    switch (t) {
    case CHAT_TEMPLATE_CHATML:
        for (size_t i = 0; i < n; i++) {
            sb_str(&b, "<|im_start|>");
            sb_str(&b, msgs[i].role);
            sb_str(&b, "\n");
            sb_str(&b, msgs[i].content);
            sb_str(&b, "<|im_end|>\n");
        }
        if (add_assistant) sb_str(&b, "<|im_start|>assistant\n");
        break;
    case CHAT_TEMPLATE_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            sb_str(&b, "<|start_header_id|>");
            sb_str(&b, msgs[i].role);
            sb_str(&b, "<|end_header_id|>\n\n");
            sb_trimmed(&b, msgs[i].content);
            sb_str(&b, "<|eot_id|>");
        }
        if (add_assistant) sb_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_TEMPLATE_LLAMA2: {
        /* [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
         * The very first <s> is the tokenizer's BOS. */
        const char *system = NULL;
        bool first_turn = true;
        for (size_t i = 0; i < n; i++) {
            const char *role = msgs[i].role;
            if (!strcmp(role, "system")) {
                if (i != 0) {
                    st = nm_errf(err, errlen, NM_ERR_ARGS,
                                 "llama2 chat template: the system message must come first (message %zu is one)", i);
                    goto fail;
                }
                system = msgs[i].content;
            } else if (!strcmp(role, "user")) {
                sb_str(&b, first_turn ? "[INST] " : "<s>[INST] ");
                if (system && first_turn) {
                    sb_str(&b, "<<SYS>>\n");
                    sb_str(&b, system);
                    sb_str(&b, "\n<</SYS>>\n\n");
                }
                sb_trimmed(&b, msgs[i].content);
                sb_str(&b, " [/INST]");
                first_turn = false;
            } else if (!strcmp(role, "assistant")) {
                sb_str(&b, " ");
                sb_trimmed(&b, msgs[i].content);
                sb_str(&b, " </s>");
            } else {
                st = nm_errf(err, errlen, NM_ERR_ARGS,
                             "llama2 chat template: message %zu has role '%s'; allowed: system, user, assistant", i,
                             role);
                goto fail;
            }
        }
        break;
    }
    default:
        st = nm_errf(err, errlen, NM_ERR_ARGS, "chat template %d does not exist", (int)t);
        goto fail;
    }
    *out = b.p;
    *len = b.n;
    return NM_OK;
fail:
    free(b.p);
    return st;
}
