/* Tokenizers built from the vocabulary in a GGUF file: byte-level BPE (tokenizer.ggml.model =
 * "gpt2") with the pre-tokenizers of Llama 3, Qwen2/2.5/3, GPT-2, deepseek-llm/-coder, Falcon and
 * StarCoder, and SentencePiece BPE ("llama") as in Llama 2. The behaviour follows llama.cpp's
 * llama-vocab.cpp, whose public test vectors (tests/tokenizer) pin it: token types, special
 * tokens matched in the text before pre-tokenization, add_bos/add_eos from metadata, EOG tokens.
 * Detokenization is exact (pieces concatenated, no clean-up of spaces) so that
 * decode(encode(x)) == x; a streaming decoder never emits half a UTF-8 character. */
#ifndef NM_TOKENIZER_H
#define NM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "gguf.h"

#define TOK_NULL (-1) /* "no such token" (e.g. a model without an EOT token) */

enum tok_model {
    TOK_MODEL_SPM, /* "llama": SentencePiece BPE over scores, byte fallback <0xXX> */
    TOK_MODEL_BPE, /* "gpt2": byte-level BPE over ranked merges */
};

/* Pre-tokenizers (regex splits before BPE). Values of tokenizer.ggml.pre map onto these. */
enum tok_pre {
    TOK_PRE_NONE,           /* SentencePiece: no pre-tokenizer */
    TOK_PRE_DEFAULT,        /* "default" (BPE) */
    TOK_PRE_GPT2,           /* "gpt-2", "mpt", "olmo", "phi-2", ... */
    TOK_PRE_LLAMA3,         /* "llama-bpe", "llama3", "llama-v3", ... */
    TOK_PRE_QWEN2,          /* "qwen2", "deepseek-r1-qwen", ... */
    TOK_PRE_DEEPSEEK_LLM,   /* "deepseek-llm" */
    TOK_PRE_DEEPSEEK_CODER, /* "deepseek-coder" */
    TOK_PRE_FALCON,         /* "falcon" */
    TOK_PRE_STARCODER,      /* "starcoder", "refact", "command-r", "smollm", ... */
    TOK_PRE_COUNT,
};

/* Token types, with the values of tokenizer.ggml.token_type. */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

struct tokenizer;

/* Build a tokenizer from the tokenizer.* keys of f. Everything needed is copied, so f may be
 * closed afterwards. Logs one info line describing the choice (model, pre-tokenizer, special
 * ids). Failures: NM_ERR_NOT_FOUND (tokenizer.ggml.model/tokens/merges missing),
 * NM_ERR_UNSUPPORTED (a model or pre-tokenizer numallm does not implement; the message lists
 * the supported values), NM_ERR_FORMAT (wrong key types, array lengths that disagree). On
 * failure *out is NULL and err holds one message naming the key, the value and what was
 * allowed. */
enum nm_status tok_init(struct tokenizer **out, const struct gguf_file *f, char *err, size_t errlen);
void tok_free(struct tokenizer *t); /* NULL is fine */

/* Vocabulary facts. Ids passed in must be in [0, tok_n_vocab) (asserted). */
int32_t tok_n_vocab(const struct tokenizer *t);
enum tok_model tok_model(const struct tokenizer *t);
enum tok_pre tok_pre(const struct tokenizer *t);
const char *tok_pre_name(enum tok_pre pre);
int32_t tok_bos(const struct tokenizer *t); /* TOK_NULL when the model has none */
int32_t tok_eos(const struct tokenizer *t);
int32_t tok_eot(const struct tokenizer *t); /* end of turn (e.g. <|eot_id|>, <|im_end|>) */
bool tok_add_bos(const struct tokenizer *t); /* whether encode(add_special) prepends BOS */
bool tok_add_eos(const struct tokenizer *t);
/* End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by their text
 * (<|eot_id|>, <|im_end|>, <|endoftext|>, <|end|>, ...). Any id may be passed (false when out of
 * range). */
bool tok_is_eog(const struct tokenizer *t, int32_t id);
/* Type after load-time fixes (end-of-turn-like tokens are forced to CONTROL, as llama.cpp
 * does). */
enum tok_type tok_token_type(const struct tokenizer *t, int32_t id);
/* The vocabulary string of a token (not NUL-terminated; byte-level BPE text is in the GPT-2
 * alphabet, SentencePiece text uses U+2581 for spaces). */
const char *tok_token_text(const struct tokenizer *t, int32_t id, size_t *len);
/* Id of the token whose vocabulary string is exactly s[0..len), or TOK_NULL. */
int32_t tok_find(const struct tokenizer *t, const char *s, size_t len);

#define TOK_MAX_TEXT ((size_t)1 << 30) /* longest text tok_encode accepts (asserted) */

/* Tokenize text[0..len), len <= TOK_MAX_TEXT (any bytes; invalid UTF-8 is kept byte for byte by
 * byte-level BPE and by SentencePiece's byte fallback). Thread-safe: t is only read.
 * add_special: prepend BOS / append EOS as the model's add_bos/add_eos say.
 * parse_special: control tokens written in the text (e.g. "<|im_start|>") become their ids;
 * user-defined tokens are always matched, as in llama.cpp and HF tokenizers.
 * Writes at most max ids and sets *n_out to the full count. Returns NM_OK, or NM_ERR_NOMEM when
 * the count exceeds max (then ids holds the first max ids). */
enum nm_status tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *ids, size_t max, size_t *n_out);
/* As tok_encode, into a malloc'ed array the caller frees with free(). Never fails (allocation
 * failure is fatal). */
int32_t *tok_encode_alloc(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, size_t *n_out);

/* Decoding flags. */
enum tok_decode_flags {
    TOK_DECODE_SPECIAL = 1 << 0, /* render control/unknown/unused tokens as their text (else "") */
    /* Undo the space SentencePiece puts in front of the text: the first piece after an optional
     * leading BOS loses one leading space. No effect for byte-level BPE. */
    TOK_DECODE_STRIP_PREFIX = 1 << 1,
};

/* The bytes of one token: `special` as TOK_DECODE_SPECIAL. Copies min(len, cap) bytes into buf
 * (no NUL; buf may be NULL when cap is 0) and returns the full length. */
size_t tok_piece(const struct tokenizer *t, int32_t id, bool special, char *buf, size_t cap);
/* Longest piece of any token, in bytes. */
size_t tok_max_piece_len(const struct tokenizer *t);
/* Concatenate the pieces of ids[0..n) (flags: enum tok_decode_flags). Copies min(total, cap)
 * bytes into buf (no NUL; buf may be NULL when cap is 0) and returns the total length. */
size_t tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char *buf,
                  size_t cap);

/* Streaming decoder for generation: feed tokens one at a time, print what comes back. Output is
 * always valid UTF-8: bytes of a character split across tokens are held back until it is
 * complete, and bytes that can never form a character become U+FFFD (one per maximal invalid
 * subpart). */
struct tok_stream;
/* flags: enum tok_decode_flags. Borrows t (must outlive the stream). */
struct tok_stream *tok_stream_init(const struct tokenizer *t, unsigned flags);
void tok_stream_free(struct tok_stream *s); /* NULL is fine */
/* Feed one token. Returns text ready to print (not NUL-terminated, *len bytes, possibly 0),
 * valid until the next call on s. */
const char *tok_stream_feed(struct tok_stream *s, int32_t id, size_t *len);
/* End of stream: returns what is still held back (an incomplete character becomes U+FFFD) and
 * resets s for a new stream. */
const char *tok_stream_flush(struct tok_stream *s, size_t *len);

/* The pre-tokenizer alone, for tests: splits text[0..len) into pieces and returns their count;
 * (*ends)[i] is the byte offset where piece i ends (malloc'ed, caller frees with free()).
 * TOK_PRE_NONE yields one piece. */
size_t tok_pre_split(enum tok_pre pre, const char *text, size_t len, size_t **ends);
/* tokenizer.ggml.pre value -> pre-tokenizer; false when unknown. */
bool tok_pre_from_name(const char *name, size_t len, enum tok_pre *out);

#endif
