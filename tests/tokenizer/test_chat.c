/* Chat templates: exact prompts for ChatML, Llama 3 and Llama 2; detection from Jinja templates
 * (and clear refusals); Llama 2's markers becoming control tokens under the Llama 2 tokenizer.
 *
 * usage: test_chat [DATA_DIR]   (the tokenizer part is skipped without the data) */
#include "chat.h"
#include "tok_test_util.h"


static void expect_format(enum chat_template t, const struct chat_msg *m, size_t n, bool add, const char *want) {
    char err[512] = "", *out = NULL;
    size_t len = 0;
    enum nm_status st = chat_format(t, m, n, add, &out, &len, err, sizeof err);
    CHECK(st == NM_OK, "%s: %s", chat_template_name(t), err);
    if (st != NM_OK) return;
    bool ok = len == strlen(want) && !strcmp(out, want);
    CHECK(ok, "%s prompt differs", chat_template_name(t));
    if (!ok) {
        fprintf(stderr, "  got  ");
        tt_print_str(stderr, out, len);
        fprintf(stderr, "\n  want ");
        tt_print_str(stderr, want, strlen(want));
        fputc('\n', stderr);
    }
    free(out);
}

static void expect_detect(const char *jinja, enum nm_status want_st, enum chat_template want) {
    char err[512] = "";
    enum chat_template t = CHAT_TEMPLATE_COUNT;
    enum nm_status st = chat_template_detect(jinja, strlen(jinja), &t, err, sizeof err);
    CHECK(st == want_st, "detect %.50s...: status %s (%s)", jinja, nm_status_str(st), err);
    if (st == NM_OK && want_st == NM_OK) CHECK(t == want, "detect %.50s...: got %s", jinja, chat_template_name(t));
    if (want_st != NM_OK) CHECK(strstr(err, "chatml") != NULL, "refusal must say how to choose: %s", err);
}

int main(int argc, char **argv) {
    nm_log_level = 0;
    const struct chat_msg conv[] = {
        {"system", "You are terse."},
        {"user", "  Hi there!\n"},
        {"assistant", "Hello. "},
        {"user", "2+2?"},
    };
    expect_format(CHAT_TEMPLATE_CHATML, conv, 4, true,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\n  Hi there!\n<|im_end|>\n"
                  "<|im_start|>assistant\nHello. <|im_end|>\n"
                  "<|im_start|>user\n2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    expect_format(CHAT_TEMPLATE_CHATML, conv + 3, 1, false, "<|im_start|>user\n2+2?<|im_end|>\n");
    expect_format(CHAT_TEMPLATE_LLAMA3, conv, 4, true,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_format(CHAT_TEMPLATE_LLAMA2, conv, 4, true,
                  "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there! [/INST] Hello. </s>"
                  "<s>[INST] 2+2? [/INST]");
    expect_format(CHAT_TEMPLATE_LLAMA2, conv + 1, 1, true, "[INST] Hi there! [/INST]");

    /* errors */
    {
        char err[512] = "", *out;
        size_t len;
        const struct chat_msg late_sys[] = {{"user", "a"}, {"system", "b"}};
        CHECK(chat_format(CHAT_TEMPLATE_LLAMA2, late_sys, 2, true, &out, &len, err, sizeof err) == NM_ERR_ARGS &&
                  strstr(err, "system"),
              "late system message: %s", err);
        const struct chat_msg tool[] = {{"tool", "x"}};
        CHECK(chat_format(CHAT_TEMPLATE_LLAMA2, tool, 1, true, &out, &len, err, sizeof err) == NM_ERR_ARGS &&
                  strstr(err, "tool"),
              "unknown role: %s", err);
        const struct chat_msg null_content[] = {{"user", NULL}};
        CHECK(chat_format(CHAT_TEMPLATE_CHATML, null_content, 1, true, &out, &len, err, sizeof err) == NM_ERR_ARGS,
              "NULL content: %s", err);
    }

    /* names */
    enum chat_template t;
    CHECK(chat_template_from_name("llama3", &t) && t == CHAT_TEMPLATE_LLAMA3, "name llama3");
    CHECK(!chat_template_from_name("vicuna", &t), "unknown name accepted");
    {
        char err[512] = "";
        CHECK(chat_template_resolve("chatml", NULL, &t, err, sizeof err) == NM_OK && t == CHAT_TEMPLATE_CHATML, "%s",
              err);
        CHECK(chat_template_resolve("vicuna", NULL, &t, err, sizeof err) == NM_ERR_ARGS && strstr(err, "vicuna"),
              "%s", err);
    }

    /* detection from (abridged) official templates */
    expect_detect("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
                  "'<|im_end|>' + '\\n' }}{%- endfor %}",
                  NM_OK, CHAT_TEMPLATE_CHATML);
    expect_detect("{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
                  "message['content'] | trim + '<|eot_id|>' %}",
                  NM_OK, CHAT_TEMPLATE_LLAMA3);
    expect_detect("{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
                  "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{{ bos_token + '[INST] ' + "
                  "content.strip() + ' [/INST]' }}",
                  NM_OK, CHAT_TEMPLATE_LLAMA2);
    expect_detect("{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST]' + message['content'] "
                  "+ '[/INST]' }}",
                  NM_ERR_UNSUPPORTED, CHAT_TEMPLATE_COUNT);
    expect_detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
                  NM_ERR_UNSUPPORTED, CHAT_TEMPLATE_COUNT);

    /* with the data: auto-detection from a file and the Llama 2 markers as tokens */
    if (argc > 1) {
        char path[4096], err[512] = "";
        struct gguf_file *g = NULL;
        snprintf(path, sizeof path, "%s/ggml-vocab-phi-3.gguf", argv[1]);
        if (gguf_open(path, &g, err, sizeof err) == NM_OK) {
            /* Phi-3's <|user|>...<|end|> template is none of the three */
            enum nm_status st = chat_template_resolve("auto", g, &t, err, sizeof err);
            CHECK(st == NM_ERR_UNSUPPORTED && strstr(err, "not recognised"), "phi-3 auto: %s: %s", nm_status_str(st),
                  err);
            gguf_close(g);
        } else {
            printf("SKIP part: %s\n", err);
        }
        snprintf(path, sizeof path, "%s/ggml-vocab-gpt-2.gguf", argv[1]);
        if (gguf_open(path, &g, err, sizeof err) == NM_OK) {
            enum nm_status st = chat_template_resolve("auto", g, &t, err, sizeof err);
            CHECK(st == NM_ERR_NOT_FOUND && strstr(err, "no tokenizer.chat_template"), "gpt-2 auto: %s", err);
            gguf_close(g);
        }
        snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf", argv[1]);
        FILE *probe = fopen(path, "rb");
        if (probe) {
            fclose(probe);
            struct tokenizer *tok = tt_load(path);
            char *prompt;
            size_t len, n;
            CHECK(chat_format(CHAT_TEMPLATE_LLAMA2, conv, 4, true, &prompt, &len, err, sizeof err) == NM_OK, "%s", err);
            int32_t *ids = tok_encode_alloc(tok, prompt, len, true, true, &n);
            int n_bos = 0, n_eos = 0, eos_then_bos = 0;
            for (size_t i = 0; i < n; i++) {
                n_bos += ids[i] == tok_bos(tok);
                n_eos += ids[i] == tok_eos(tok);
                eos_then_bos += i + 1 < n && ids[i] == tok_eos(tok) && ids[i + 1] == tok_bos(tok);
            }
            CHECK(ids[0] == tok_bos(tok) && n_bos == 2 && n_eos == 1 && eos_then_bos == 1,
                  "llama2 prompt tokens: %d BOS, %d EOS", n_bos, n_eos);
            free(ids);
            free(prompt);
            tok_free(tok);
        }
    }
    if (failures) fprintf(stderr, "%d failures; reproduce: %s %s\n", failures, argv[0], argc > 1 ? argv[1] : "");
    else printf("all chat template checks pass\n");
    return failures ? 1 : 0;
}
