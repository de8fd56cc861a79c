/* Tokenizers (see tokenizer.h): vocabulary loading from GGUF, special-token partition,
 * pre-tokenizers, byte-level BPE and SentencePiece BPE, pieces, exact and streaming decoding.
 *
 * Fidelity notes (the conformance tests in tests/tokenizer pin these against llama.cpp's
 * vectors):
 * - Special tokens are cut out of the text first, longest first (ties: lower id first), each
 *   searched left to right in the text that is still raw; control and unknown tokens only when
 *   parse_special, user-defined tokens always.
 * - Pre-tokenizer regexes are implemented as hand-written matchers with the semantics of a
 *   backtracking regex engine (leftmost match, alternatives in order, greedy quantifiers); text a
 *   pattern does not match stays as its own piece. Several patterns apply in sequence, each to
 *   the pieces of the previous one. The explicit-range classes of the deepseek patterns do not
 *   match non-ASCII White_Space, as in llama.cpp (which maps those to U+000B before matching).
 * - BPE merges the lowest-ranked adjacent pair first (ties: leftmost), via a binary heap of
 *   candidate pairs with lazy invalidation; ranks come from a hash table keyed by the two
 *   strings. SentencePiece merges the highest-scoring pair whose concatenation is a token.
 * - Invalid UTF-8 in the input is kept byte for byte (llama.cpp replaces it with U+FFFD, and
 *   its SentencePiece lets an invalid lead byte swallow the next bytes); the pre-tokenizers class
 *   such a byte like U+FFFD. Valid text is unaffected. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "unicode.h"

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */

static void *xrealloc(void *p, size_t n, const char *what) {
    void *q = realloc(p, n ? n : 1);
    if (!q) nm_fatal("out of memory allocating %zu bytes for %s", n, what);
    return q;
}

static void *xcalloc(size_t n, size_t size, const char *what) {
    void *q = calloc(n ? n : 1, size ? size : 1);
    if (!q) nm_fatal("out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return q;
}

/* Grow a dynamic array so that it holds at least `need` elements. */
#define VEC_RESERVE(ptr, cap, need, what)                                                   \
    do {                                                                                    \
        if ((need) > (cap)) {                                                               \
            size_t nc_ = (cap) ? (cap) : 16;                                                \
            while (nc_ < (need)) nc_ *= 2;                                                  \
            (ptr) = xrealloc((ptr), nc_ * sizeof *(ptr), (what));                           \
            (cap) = nc_;                                                                    \
        }                                                                                   \
    } while (0)

#define HASH_SEED 1469598103934665603ull
static inline uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

static inline bool c_isspace(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* ------------------------------------------------------------------------------------------ */
/* The tokenizer object                                                                        */

enum { STRIP_LEFT = 1, STRIP_RIGHT = 2 };

struct tok_token {
    uint32_t off, len; /* vocabulary string in t->text */
    float score;       /* SentencePiece score (0 for BPE) */
    uint8_t type;      /* enum tok_type */
    uint8_t strip;     /* STRIP_LEFT/STRIP_RIGHT: whitespace eaten next to a matched special */
};

struct hslot {
    uint32_t hash; /* low 32 bits of the key hash */
    int32_t val;   /* token id or merge rank; -1 = empty */
};

struct merge {
    uint32_t loff, llen, roff, rlen; /* the two parts, in t->mtext */
};

struct tokenizer {
    enum tok_model model;
    enum tok_pre pre;
    int32_t n_vocab;
    struct tok_token *tok; /* [n_vocab] */
    char *text;            /* all vocabulary strings */

    struct hslot *vmap; /* vocabulary string -> id (last id wins on duplicates, as llama.cpp) */
    size_t vmask;

    uint32_t n_merges;
    struct merge *merges; /* [n_merges], rank = index */
    char *mtext;
    struct hslot *mmap; /* (left, right) -> rank (first rank wins on duplicates) */
    size_t mmask;

    char *piece;          /* decoded bytes of every token */
    uint32_t *piece_off;  /* [n_vocab] */
    uint32_t *piece_len;  /* [n_vocab] */
    uint8_t *hidden;      /* [n_vocab] piece is "" unless TOK_DECODE_SPECIAL */
    uint8_t *eog;         /* [n_vocab] end-of-generation token */
    size_t max_piece;

    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool spm_split_words; /* no token has U+2581 after another character (see spm_fragment) */

    int32_t *special; /* control/user-defined/unknown ids, longest text first */
    size_t n_special;
    /* The same, compact for the per-call scan in partition(): */
    struct special_tok {
        int32_t id;
        uint32_t filter; /* bit of its first 1-3 bytes in partition()'s filter */
        bool control;    /* control or unknown: only matched with parse_special */
    } *sp;

    int32_t byte_tok[256];        /* SentencePiece byte fallback: <0xXX> (or the 1-byte string) */
    int32_t single_byte_tok[256]; /* BPE fallback: the token whose string is the one byte */
    char byte_utf8[256][2];       /* byte-level BPE: UTF-8 of the code point standing for a byte */
    uint8_t byte_utf8_len[256];
    int16_t cp_byte[0x144];       /* reverse: code point (< U+0144) -> byte, or -1 */
};

static int32_t map_find(const struct tokenizer *t, const char *s, size_t len) {
    uint64_t h = hash_bytes(HASH_SEED, s, len);
    for (size_t i = h & t->vmask;; i = (i + 1) & t->vmask) {
        const struct hslot *e = &t->vmap[i];
        if (e->val < 0) return TOK_NULL;
        if (e->hash == (uint32_t)h) {
            const struct tok_token *k = &t->tok[e->val];
            if (k->len == len && memcmp(t->text + k->off, s, len) == 0) return e->val;
        }
    }
}

static void map_insert(struct tokenizer *t, int32_t id) {
    const struct tok_token *k = &t->tok[id];
    uint64_t h = hash_bytes(HASH_SEED, t->text + k->off, k->len);
    for (size_t i = h & t->vmask;; i = (i + 1) & t->vmask) {
        struct hslot *e = &t->vmap[i];
        if (e->val < 0) {
            e->hash = (uint32_t)h;
            e->val = id;
            return;
        }
        if (e->hash == (uint32_t)h) {
            const struct tok_token *o = &t->tok[e->val];
            if (o->len == k->len && memcmp(t->text + o->off, t->text + k->off, k->len) == 0) {
                e->val = id; /* duplicate string: the later id wins */
                return;
            }
        }
    }
}

static uint64_t merge_hash(const char *l, size_t ll, const char *r, size_t rl) {
    uint64_t h = hash_bytes(HASH_SEED, l, ll);
    h = hash_bytes(h ^ 0xFF, "\x01", 1);
    return hash_bytes(h, r, rl);
}

static int32_t merge_find(const struct tokenizer *t, const char *l, size_t ll, const char *r, size_t rl) {
    uint64_t h = merge_hash(l, ll, r, rl);
    for (size_t i = h & t->mmask;; i = (i + 1) & t->mmask) {
        const struct hslot *e = &t->mmap[i];
        if (e->val < 0) return -1;
        if (e->hash == (uint32_t)h) {
            const struct merge *m = &t->merges[e->val];
            if (m->llen == ll && m->rlen == rl && memcmp(t->mtext + m->loff, l, ll) == 0 &&
                memcmp(t->mtext + m->roff, r, rl) == 0)
                return e->val;
        }
    }
}

static void merge_insert(struct tokenizer *t, int32_t rank) {
    const struct merge *m = &t->merges[rank];
    const char *l = t->mtext + m->loff, *r = t->mtext + m->roff;
    if (merge_find(t, l, m->llen, r, m->rlen) >= 0) return; /* first rank wins */
    uint64_t h = merge_hash(l, m->llen, r, m->rlen);
    for (size_t i = h & t->mmask;; i = (i + 1) & t->mmask) {
        struct hslot *e = &t->mmap[i];
        if (e->val < 0) {
            e->hash = (uint32_t)h;
            e->val = rank;
            return;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Pre-tokenizers                                                                              */

/* Text decoded into code points. A byte that is not valid UTF-8 is one "code point" UNI_INVALID
 * (classed like U+FFFD) so that the pieces still cover the original bytes exactly. */
struct cpbuf {
    uint32_t *cp;
    uint8_t *fl;  /* uni_flags */
    size_t *off;  /* [n + 1] byte offset of each code point */
    size_t n, cap;
};

static void cpbuf_fill(struct cpbuf *b, const char *text, size_t len) {
    VEC_RESERVE(b->cp, b->cap, len + 1, "pre-tokenizer code points");
    b->fl = xrealloc(b->fl, b->cap * sizeof *b->fl, "pre-tokenizer flags");
    b->off = xrealloc(b->off, b->cap * sizeof *b->off, "pre-tokenizer offsets");
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0, n = 0;
    while (i < len) {
        size_t l;
        uint32_t cp = uni_decode(s + i, len - i, &l);
        b->cp[n] = cp;
        b->fl[n] = (uint8_t)uni_flags(cp);
        b->off[n] = i;
        n++;
        i += l;
    }
    b->off[n] = len;
    b->n = n;
}

static void cpbuf_free(struct cpbuf *b) {
    free(b->cp);
    free(b->fl);
    free(b->off);
}

/* Character predicates of the single-class patterns. */
enum pred {
    PRED_CRLF,          /* [\r\n] */
    PRED_DIGIT,         /* [0-9] */
    PRED_N,             /* \p{N} */
    PRED_L,             /* \p{L} */
    PRED_P,             /* \p{P} */
    PRED_PUNCT_DEFAULT, /* [\p{P}\$\+<=>\^~\|] */
    PRED_PUNCT_FALCON,  /* [\p{P}\$\+<=>\^~\|`] */
    PRED_DS_LETTERS,    /* deepseek-llm letters */
    PRED_DS_PUNCT,      /* deepseek-llm punctuation */
    PRED_DS_CJK,        /* [一-龥ࠀ-一가-퟿] */
};

static bool pred_match(enum pred p, uint32_t cp, unsigned fl) {
    switch (p) {
    case PRED_CRLF: return cp == '\r' || cp == '\n';
    case PRED_DIGIT: return cp >= '0' && cp <= '9';
    case PRED_N: return fl & UNI_N;
    case PRED_L: return fl & UNI_L;
    case PRED_P: return fl & UNI_P;
    case PRED_PUNCT_DEFAULT:
        return (fl & UNI_P) || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' ||
               cp == '^' || cp == '~' || cp == '|';
    case PRED_PUNCT_FALCON: return pred_match(PRED_PUNCT_DEFAULT, cp, fl) || cp == '`';
    case PRED_DS_LETTERS:
    case PRED_DS_PUNCT:
    case PRED_DS_CJK:
        /* llama.cpp turns non-ASCII White_Space into U+000B before these classes see it */
        if (cp >= 0x80 && (fl & UNI_WS)) return false;
        return uni_in_set(p == PRED_DS_LETTERS  ? UNI_SET_DEEPSEEK_LLM_LETTERS
                          : p == PRED_DS_PUNCT ? UNI_SET_DEEPSEEK_LLM_PUNCT
                                               : UNI_SET_DEEPSEEK_CJK,
                          cp);
    }
    return false;
}

enum stage_kind {
    STAGE_GPT2,        /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
    STAGE_LLAMA3,      /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    STAGE_QWEN2,       /* as LLAMA3 with \p{N} instead of \p{N}{1,3} */
    STAGE_CLASS,       /* (\s?)[class]+ or [class] or [class]{3} */
    STAGE_TRAILING_WS, /* \s+$ */
};

struct stage {
    enum stage_kind kind;
    enum pred pred;  /* STAGE_CLASS */
    bool opt_space;  /* STAGE_CLASS: leading \s? */
    int rep;         /* STAGE_CLASS: 0 = one or more, 1 = exactly one, 3 = exactly three */
};

#define CLASS(p, sp, r) {STAGE_CLASS, (p), (sp), (r)}
static const struct stage stages_default[] = {
    CLASS(PRED_PUNCT_DEFAULT, false, 0), {STAGE_GPT2, 0, false, 0}, CLASS(PRED_N, false, 0),
    CLASS(PRED_DIGIT, false, 3)};
static const struct stage stages_gpt2[] = {{STAGE_GPT2, 0, false, 0}};
static const struct stage stages_llama3[] = {{STAGE_LLAMA3, 0, false, 0}};
static const struct stage stages_qwen2[] = {{STAGE_QWEN2, 0, false, 0}};
static const struct stage stages_deepseek_llm[] = {
    CLASS(PRED_CRLF, false, 1),         CLASS(PRED_DS_LETTERS, true, 0), CLASS(PRED_DS_PUNCT, true, 0),
    {STAGE_TRAILING_WS, 0, false, 0},   CLASS(PRED_DS_CJK, false, 0),    CLASS(PRED_N, false, 0)};
static const struct stage stages_deepseek_coder[] = {
    CLASS(PRED_CRLF, false, 1), CLASS(PRED_L, true, 0), CLASS(PRED_P, true, 0),
    CLASS(PRED_DS_CJK, false, 0), CLASS(PRED_N, false, 1)};
static const struct stage stages_falcon[] = {
    CLASS(PRED_PUNCT_FALCON, false, 0), {STAGE_GPT2, 0, false, 0}, CLASS(PRED_DIGIT, false, 3)};
static const struct stage stages_starcoder[] = {CLASS(PRED_N, false, 1), {STAGE_GPT2, 0, false, 0}};
#undef CLASS

static const struct {
    const struct stage *stages;
    size_t n;
} pre_stages[TOK_PRE_COUNT] = {
    [TOK_PRE_NONE] = {NULL, 0},
    [TOK_PRE_DEFAULT] = {stages_default, NM_ARRAY_LEN(stages_default)},
    [TOK_PRE_GPT2] = {stages_gpt2, 1},
    [TOK_PRE_LLAMA3] = {stages_llama3, 1},
    [TOK_PRE_QWEN2] = {stages_qwen2, 1},
    [TOK_PRE_DEEPSEEK_LLM] = {stages_deepseek_llm, NM_ARRAY_LEN(stages_deepseek_llm)},
    [TOK_PRE_DEEPSEEK_CODER] = {stages_deepseek_coder, NM_ARRAY_LEN(stages_deepseek_coder)},
    [TOK_PRE_FALCON] = {stages_falcon, NM_ARRAY_LEN(stages_falcon)},
    [TOK_PRE_STARCODER] = {stages_starcoder, NM_ARRAY_LEN(stages_starcoder)},
};

#define IS_L(i) (b->fl[i] & UNI_L)
#define IS_N(i) (b->fl[i] & UNI_N)
#define IS_WS(i) (b->fl[i] & UNI_WS)
#define IS_OTHER(i) (!(b->fl[i] & (UNI_L | UNI_N | UNI_WS))) /* [^\s\p{L}\p{N}] */

/* Each matcher returns the length (in code points) of the match starting exactly at p within
 * [p, end), or 0 when the pattern does not match at p. */

static size_t match_gpt2(const struct cpbuf *b, size_t end, size_t p) {
    uint32_t c = b->cp[p];
    if (c == '\'' && p + 1 < end) { /* 's|'t|'re|'ve|'m|'ll|'d */
        uint32_t n1 = b->cp[p + 1];
        if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
        if (p + 2 < end) {
            uint32_t n2 = b->cp[p + 2];
            if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
        }
    }
    /* ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: a space can only be the optional prefix */
    size_t q = (c == ' ' && p + 1 < end) ? p + 1 : p;
    size_t r = q;
    if (IS_L(q)) {
        while (r < end && IS_L(r)) r++;
        return r - p;
    }
    if (IS_N(q)) {
        while (r < end && IS_N(r)) r++;
        return r - p;
    }
    if (IS_OTHER(q)) {
        while (r < end && IS_OTHER(r)) r++;
        return r - p;
    }
    /* \s+(?!\S): all of the run at the end of the text, else all but its last character */
    if (IS_WS(p)) {
        r = p;
        while (r < end && IS_WS(r)) r++;
        if (r == end) return r - p;
        if (r - p >= 2) return r - p - 1;
    }
    return 0;
}

static size_t match_llama3(const struct cpbuf *b, size_t end, size_t p, size_t max_digits) {
    uint32_t c = b->cp[p];
    if (c == '\'' && p + 1 < end) { /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        uint32_t n1 = uni_fold_ascii(b->cp[p + 1]);
        if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
        if (p + 2 < end) {
            uint32_t n2 = uni_fold_ascii(b->cp[p + 2]);
            if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
        }
    }
    size_t r;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!(c == '\r' || c == '\n' || IS_L(p) || IS_N(p)) && p + 1 < end && IS_L(p + 1)) {
        r = p + 1;
        while (r < end && IS_L(r)) r++;
        return r - p;
    }
    if (IS_L(p)) {
        r = p;
        while (r < end && IS_L(r)) r++;
        return r - p;
    }
    /* \p{N}{1,max_digits} */
    if (IS_N(p)) {
        r = p + 1;
        while (r < end && r - p < max_digits && IS_N(r)) r++;
        return r - p;
    }
    /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
    size_t q = (c == ' ' && p + 1 < end && IS_OTHER(p + 1)) ? p + 1 : p;
    if (IS_OTHER(q)) {
        r = q;
        while (r < end && IS_OTHER(r)) r++;
        while (r < end && (b->cp[r] == '\r' || b->cp[r] == '\n')) r++;
        return r - p;
    }
    if (!IS_WS(p)) return 0;
    size_t last_crlf = 0;
    bool have_crlf = false;
    for (r = p; r < end && IS_WS(r); r++) {
        if (b->cp[r] == '\r' || b->cp[r] == '\n') {
            last_crlf = r;
            have_crlf = true;
        }
    }
    /* \s*[\r\n]+: backtracking \s* stops at the last CR/LF of the run */
    if (have_crlf) return last_crlf + 1 - p;
    /* \s+(?!\S) */
    if (r == end) return r - p;
    if (r - p >= 2) return r - p - 1;
    /* \s+ */
    return r - p;
}

static size_t match_class(const struct cpbuf *b, size_t end, size_t p, const struct stage *st) {
    size_t q = p;
    if (st->opt_space && IS_WS(p) && p + 1 < end && pred_match(st->pred, b->cp[p + 1], b->fl[p + 1]))
        q = p + 1; /* greedy \s? */
    else if (!pred_match(st->pred, b->cp[p], b->fl[p]))
        return 0;
    switch (st->rep) {
    case 1: return q + 1 - p;
    case 3:
        if (q + 3 <= end && pred_match(st->pred, b->cp[q + 1], b->fl[q + 1]) &&
            pred_match(st->pred, b->cp[q + 2], b->fl[q + 2]))
            return q + 3 - p;
        return 0;
    default: {
        size_t r = q + 1;
        while (r < end && pred_match(st->pred, b->cp[r], b->fl[r])) r++;
        return r - p;
    }
    }
}

#undef IS_L
#undef IS_N
#undef IS_WS
#undef IS_OTHER

struct ends {
    size_t *v;
    size_t n, cap;
};

static void ends_push(struct ends *e, size_t x) {
    VEC_RESERVE(e->v, e->cap, e->n + 1, "pre-tokenizer pieces");
    e->v[e->n++] = x;
}

/* Split [start, end) by one stage, as a regex iterator does: matches and the unmatched text
 * between them both become pieces. Appends piece ends (code point indices) to out. */
static void stage_split(const struct stage *st, const struct cpbuf *b, size_t start, size_t end, struct ends *out) {
    if (st->kind == STAGE_TRAILING_WS) {
        size_t t = end;
        while (t > start && (b->fl[t - 1] & UNI_WS)) t--;
        if (t > start && t < end) ends_push(out, t);
        ends_push(out, end);
        return;
    }
    size_t gap = start, p = start;
    while (p < end) {
        size_t m;
        switch (st->kind) {
        case STAGE_GPT2: m = match_gpt2(b, end, p); break;
        case STAGE_LLAMA3: m = match_llama3(b, end, p, 3); break;
        case STAGE_QWEN2: m = match_llama3(b, end, p, 1); break;
        default: m = match_class(b, end, p, st); break;
        }
        if (m == 0) {
            p++;
            continue;
        }
        if (p > gap) ends_push(out, p);
        p += m;
        ends_push(out, p);
        gap = p;
    }
    if (gap < end) ends_push(out, end);
}

/* Pre-tokenize text[0..len) (already decoded into b) into pieces; out receives byte ends. */
static void pre_split(enum tok_pre pre, const struct cpbuf *b, struct ends *cur, struct ends *tmp) {
    cur->n = 0;
    if (b->n == 0) return;
    ends_push(cur, b->n);
    for (size_t s = 0; s < pre_stages[pre].n; s++) {
        tmp->n = 0;
        size_t start = 0;
        for (size_t i = 0; i < cur->n; i++) {
            stage_split(&pre_stages[pre].stages[s], b, start, cur->v[i], tmp);
            start = cur->v[i];
        }
        struct ends sw = *cur;
        *cur = *tmp;
        *tmp = sw;
    }
}

size_t tok_pre_split(enum tok_pre pre, const char *text, size_t len, size_t **ends_out) {
    NM_ASSERT((unsigned)pre < TOK_PRE_COUNT);
    struct cpbuf b = {0};
    struct ends cur = {0}, tmp = {0};
    cpbuf_fill(&b, text, len);
    pre_split(pre, &b, &cur, &tmp);
    for (size_t i = 0; i < cur.n; i++) cur.v[i] = b.off[cur.v[i]];
    cpbuf_free(&b);
    free(tmp.v);
    if (!cur.v) cur.v = xcalloc(1, sizeof(size_t), "pre-tokenizer pieces");
    *ends_out = cur.v;
    return cur.n;
}

static const struct {
    const char *name;
    enum tok_pre pre;
} pre_names[] = {
    {"default", TOK_PRE_DEFAULT},
    {"llama-bpe", TOK_PRE_LLAMA3},
    {"llama3", TOK_PRE_LLAMA3},
    {"llama-v3", TOK_PRE_LLAMA3},
    {"falcon3", TOK_PRE_LLAMA3},
    {"qwen2", TOK_PRE_QWEN2},
    {"deepseek-r1-qwen", TOK_PRE_QWEN2},
    {"megrez", TOK_PRE_QWEN2},
    {"stablelm2", TOK_PRE_QWEN2},
    {"gpt-2", TOK_PRE_GPT2},
    {"phi-2", TOK_PRE_GPT2},
    {"mpt", TOK_PRE_GPT2},
    {"olmo", TOK_PRE_GPT2},
    {"jais", TOK_PRE_GPT2},
    {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM},
    {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER},
    {"falcon", TOK_PRE_FALCON},
    {"starcoder", TOK_PRE_STARCODER},
    {"refact", TOK_PRE_STARCODER},
    {"command-r", TOK_PRE_STARCODER},
    {"smollm", TOK_PRE_STARCODER},
    {"codeshell", TOK_PRE_STARCODER},
};

bool tok_pre_from_name(const char *name, size_t len, enum tok_pre *out) {
    for (size_t i = 0; i < NM_ARRAY_LEN(pre_names); i++) {
        if (strlen(pre_names[i].name) == len && memcmp(pre_names[i].name, name, len) == 0) {
            *out = pre_names[i].pre;
            return true;
        }
    }
    return false;
}

const char *tok_pre_name(enum tok_pre pre) {
    switch (pre) {
    case TOK_PRE_NONE: return "none (SentencePiece)";
    case TOK_PRE_DEFAULT: return "default";
    case TOK_PRE_GPT2: return "gpt-2";
    case TOK_PRE_LLAMA3: return "llama3";
    case TOK_PRE_QWEN2: return "qwen2";
    case TOK_PRE_DEEPSEEK_LLM: return "deepseek-llm";
    case TOK_PRE_DEEPSEEK_CODER: return "deepseek-coder";
    case TOK_PRE_FALCON: return "falcon";
    case TOK_PRE_STARCODER: return "starcoder";
    case TOK_PRE_COUNT: break;
    }
    return "?";
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                    */

struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes in ctx->buf; n == 0 once merged into its left neighbour */
};

struct bigram {
    double key; /* higher first: -rank for BPE, score for SentencePiece */
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued: stale if they changed since */
};

/* Scratch space for one tok_encode call. */
struct enc {
    const struct tokenizer *t;
    int32_t *out;
    size_t n_out, cap_out;
    char *buf;
    size_t cap_buf;
    struct sym *sym;
    size_t cap_sym;
    struct bigram *heap;
    size_t n_heap, cap_heap;
    struct cpbuf cps;
    struct ends cur, tmp;
    /* Word cache for long texts (words repeat): word bytes -> ids, open addressing. */
    struct wslot {
        uint32_t hash, key_off, key_len, ids_off, n_ids; /* key_len 0 = empty */
    } *wc;
    size_t wc_mask, wc_used;
    char *wc_keys;
    size_t wc_keys_n, wc_keys_cap;
    int32_t *wc_ids;
    size_t wc_ids_n, wc_ids_cap;
};

#define WC_MIN_TEXT (16u << 10) /* use the word cache for fragments at least this long */
#define WC_SLOTS (1u << 16)
#define WC_MAX_WORD 64

static void out_push(struct enc *e, int32_t id) {
    VEC_RESERVE(e->out, e->cap_out, e->n_out + 1, "token ids");
    e->out[e->n_out++] = id;
}

static bool bigram_before(const struct bigram *a, const struct bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static void heap_push(struct enc *e, struct bigram g) {
    VEC_RESERVE(e->heap, e->cap_heap, e->n_heap + 1, "merge queue");
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&g, &e->heap[parent])) break;
        e->heap[i] = e->heap[parent];
        i = parent;
    }
    e->heap[i] = g;
}

static struct bigram heap_pop(struct enc *e) {
    struct bigram top = e->heap[0];
    struct bigram last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!bigram_before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n > 0) e->heap[i] = last;
    return top;
}

/* Split e->buf[start..end) into symbols of one UTF-8 character each (a byte that is not part of
 * a valid character is a symbol of its own; llama.cpp would let an invalid lead byte swallow
 * the bytes after it, which only matters for invalid input); returns the count. */
static size_t make_symbols(struct enc *e, size_t start, size_t end) {
    size_t n = 0, off = start;
    VEC_RESERVE(e->sym, e->cap_sym, end - start + 1, "merge symbols");
    while (off < end) {
        size_t l;
        const uint8_t *p = (const uint8_t *)e->buf + off;
        if (p[0] < 0x80 || uni_check_seq(p, end - off, &l) != UNI_SEQ_COMPLETE) l = 1;
        e->sym[n] = (struct sym){.prev = (int32_t)n - 1, .next = off + l == end ? -1 : (int32_t)n + 1,
                                 .off = (uint32_t)off, .n = (uint32_t)l};
        n++;
        off += l;
    }
    return n;
}

static void bpe_add(struct enc *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const struct sym *a = &e->sym[l], *b = &e->sym[r];
    int32_t rank = merge_find(e->t, e->buf + a->off, a->n, e->buf + b->off, b->n);
    if (rank < 0) return;
    heap_push(e, (struct bigram){.key = -(double)rank, .left = l, .right = r, .size = a->n + b->n});
}

static void spm_add(struct enc *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const struct sym *a = &e->sym[l], *b = &e->sym[r];
    int32_t id = map_find(e->t, e->buf + a->off, a->n + b->n); /* adjacent: contiguous bytes */
    if (id < 0) return;
    heap_push(e, (struct bigram){.key = e->t->tok[id].score, .left = l, .right = r, .size = a->n + b->n});
}

/* Merge loop shared by both models: pop the best pair, skip it if either side changed since it
 * was queued, else merge right into left and queue the two new neighbour pairs. */
static void merge_all(struct enc *e, void (*add)(struct enc *, int32_t, int32_t)) {
    while (e->n_heap > 0) {
        struct bigram g = heap_pop(e);
        struct sym *l = &e->sym[g.left], *r = &e->sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) e->sym[r->next].prev = g.left;
        add(e, l->prev, g.left);
        add(e, g.left, l->next);
    }
}

/* Push the ids of the merged symbols 0, next, ...: a symbol that is a token gives its id; one
 * that is not gives its single bytes through byte_tok (BPE: the bytes that are tokens, as
 * llama.cpp does; SentencePiece: the <0xXX> byte-fallback tokens), skipping bytes with none. */
static void emit_symbols(struct enc *e, size_t ns, const int32_t *byte_tok) {
    for (int32_t i = ns ? 0 : -1; i >= 0; i = e->sym[i].next) {
        const struct sym *s = &e->sym[i];
        const int32_t id = map_find(e->t, e->buf + s->off, s->n);
        if (id >= 0) {
            out_push(e, id);
            continue;
        }
        for (uint32_t j = 0; j < s->n; j++) {
            const int32_t b = byte_tok[(uint8_t)e->buf[s->off + j]];
            if (b >= 0) out_push(e, b);
        }
    }
}

/* Byte-level BPE of one pre-tokenized word w[0..n). */
static void bpe_word(struct enc *e, const uint8_t *w, size_t n) {
    const struct tokenizer *t = e->t;
    VEC_RESERVE(e->buf, e->cap_buf, 2 * n + 1, "token text");
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(e->buf + len, t->byte_utf8[w[i]], t->byte_utf8_len[w[i]]);
        len += t->byte_utf8_len[w[i]];
    }
    if (t->ignore_merges) {
        int32_t id = map_find(t, e->buf, len);
        if (id >= 0) {
            out_push(e, id);
            return;
        }
    }
    size_t ns = make_symbols(e, 0, len);
    e->n_heap = 0;
    for (size_t i = 1; i < ns; i++) bpe_add(e, (int32_t)i - 1, (int32_t)i);
    merge_all(e, bpe_add);
    emit_symbols(e, ns, t->single_byte_tok);
}

/* bpe_word through the word cache: the ids of a word depend on its bytes only. */
static void bpe_word_cached(struct enc *e, const uint8_t *w, size_t n) {
    if (n > WC_MAX_WORD) {
        bpe_word(e, w, n);
        return;
    }
    if (!e->wc) {
        e->wc = xcalloc(WC_SLOTS, sizeof *e->wc, "word cache");
        e->wc_mask = WC_SLOTS - 1;
    }
    uint32_t h = (uint32_t)hash_bytes(HASH_SEED, w, n);
    size_t i = h & e->wc_mask;
    for (; e->wc[i].key_len; i = (i + 1) & e->wc_mask) {
        const struct wslot *ws = &e->wc[i];
        if (ws->hash == h && ws->key_len == n && memcmp(e->wc_keys + ws->key_off, w, n) == 0) {
            VEC_RESERVE(e->out, e->cap_out, e->n_out + ws->n_ids, "token ids");
            memcpy(e->out + e->n_out, e->wc_ids + ws->ids_off, ws->n_ids * sizeof(int32_t));
            e->n_out += ws->n_ids;
            return;
        }
    }
    size_t first = e->n_out;
    bpe_word(e, w, n);
    if (e->wc_used >= WC_SLOTS / 2) return; /* full enough: stop caching */
    size_t k = e->n_out - first;
    VEC_RESERVE(e->wc_keys, e->wc_keys_cap, e->wc_keys_n + n, "word cache");
    VEC_RESERVE(e->wc_ids, e->wc_ids_cap, e->wc_ids_n + k, "word cache");
    memcpy(e->wc_keys + e->wc_keys_n, w, n);
    memcpy(e->wc_ids + e->wc_ids_n, e->out + first, k * sizeof(int32_t));
    e->wc[i] = (struct wslot){.hash = h, .key_off = (uint32_t)e->wc_keys_n, .key_len = (uint32_t)n,
                              .ids_off = (uint32_t)e->wc_ids_n, .n_ids = (uint32_t)k};
    e->wc_keys_n += n;
    e->wc_ids_n += k;
    e->wc_used++;
}

static void bpe_fragment(struct enc *e, const char *text, size_t len) {
    cpbuf_fill(&e->cps, text, len);
    pre_split(e->t->pre, &e->cps, &e->cur, &e->tmp);
    size_t start = 0;
    for (size_t i = 0; i < e->cur.n; i++) {
        size_t bs = e->cps.off[start], be = e->cps.off[e->cur.v[i]];
        if (len >= WC_MIN_TEXT) bpe_word_cached(e, (const uint8_t *)text + bs, be - bs);
        else bpe_word(e, (const uint8_t *)text + bs, be - bs);
        start = e->cur.v[i];
    }
}

/* SentencePiece merges over e->buf[start..end). */
static void spm_segment(struct enc *e, size_t start, size_t end) {
    const struct tokenizer *t = e->t;
    size_t ns = make_symbols(e, start, end);
    e->n_heap = 0;
    for (size_t i = 1; i < ns; i++) spm_add(e, (int32_t)i - 1, (int32_t)i);
    merge_all(e, spm_add);
    emit_symbols(e, ns, t->byte_tok);
}

#define SPM_SPACE "\xE2\x96\x81" /* U+2581, SentencePiece's visible space */

/* SentencePiece over one raw fragment: optional " " prefix, spaces as U+2581, merges by score,
 * byte fallback for what is left that is not a token. When no token has U+2581 after another
 * character (t->spm_split_words), no merge can cross the start of a word, so each word is
 * merged on its own: same result, but a small heap instead of one the size of the text. */
static void spm_fragment(struct enc *e, const char *text, size_t len, bool prefix_space) {
    const struct tokenizer *t = e->t;
    VEC_RESERVE(e->buf, e->cap_buf, 3 * (len + 1) + 1, "token text");
    size_t n = 0;
    if (prefix_space) {
        memcpy(e->buf, SPM_SPACE, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e->buf + n, SPM_SPACE, 3);
            n += 3;
        } else {
            e->buf[n++] = text[i];
        }
    }
    if (!t->spm_split_words) {
        spm_segment(e, 0, n);
        return;
    }
    size_t start = 0;
    for (size_t k = 1; k + 3 <= n; k++) {
        /* a word starts at a U+2581 that follows something else */
        if (memcmp(e->buf + k, SPM_SPACE, 3) == 0 && !(k >= 3 && memcmp(e->buf + k - 3, SPM_SPACE, 3) == 0)) {
            spm_segment(e, start, k);
            start = k;
        }
    }
    spm_segment(e, start, n);
}

/* Fragments of the text after cutting out special tokens (a singly linked list in an array, as
 * llama.cpp's forward_list: a cut replaces one raw fragment by left, token, right). */
struct frag {
    size_t off, len;
    int32_t id;   /* TOK_NULL: raw text */
    int32_t next; /* index of the next fragment, -1 at the end */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static int32_t frag_insert_after(struct frags *f, int32_t at, struct frag x) {
    VEC_RESERVE(f->v, f->cap, f->n + 1, "text fragments");
    x.next = f->v[at].next;
    f->v[f->n] = x;
    f->v[at].next = (int32_t)f->n;
    return (int32_t)f->n++;
}

static inline uint32_t filter3(const uint8_t *s) {
    return (uint32_t)(((s[0] * 0x9E3779B1u) ^ (s[1] * 0x85EBCA77u) ^ (s[2] * 0xC2B2AE3Du)) >> 16);
}

#define BIT_SET(bm, i) ((bm)[(i) >> 6] |= 1ull << ((i)&63))
#define BIT_GET(bm, i) (((bm)[(i) >> 6] >> ((i)&63)) & 1)

static bool find_bytes(const char *hay, size_t hn, const char *needle, size_t nn, size_t *pos) {
    if (nn == 0 || nn > hn) return false;
    const char *p = hay, *end = hay + hn - nn + 1;
    while (p < end) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return false;
        if (memcmp(p, needle, nn) == 0) {
            *pos = (size_t)(p - hay);
            return true;
        }
        p++;
    }
    return false;
}

static void partition(const struct tokenizer *t, const char *text, size_t len, bool parse_special, struct frags *f) {
    f->n = 0;
    VEC_RESERVE(f->v, f->cap, 1, "text fragments");
    f->v[f->n++] = (struct frag){.off = 0, .len = len, .id = TOK_NULL, .next = -1};
    if (t->n_special == 0) return;

    /* Which first 1, 2 and 3 bytes occur in the text: lets most special tokens skip the search. */
    uint64_t *seen = xcalloc(3 * 1024, sizeof(uint64_t), "special token filter");
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < len; i++) {
        BIT_SET(seen, s[i]);
        if (i + 1 < len) BIT_SET(seen, 65536 + ((uint32_t)s[i] << 8 | s[i + 1]));
        if (i + 2 < len) BIT_SET(seen, 2 * 65536 + filter3(s + i));
    }

    for (size_t k = 0; k < t->n_special; k++) {
        const struct special_tok *sp = &t->sp[k];
        if ((sp->control && !parse_special) || !BIT_GET(seen, sp->filter)) continue;
        int32_t id = sp->id;
        const struct tok_token *tk = &t->tok[id];
        const char *st = t->text + tk->off;
        size_t sl = tk->len;
        for (int32_t i = 0; i >= 0; i = f->v[i].next) {
            if (f->v[i].id != TOK_NULL) continue;
            size_t base = f->v[i].off, blen = f->v[i].len, pos;
            int32_t cur = i;
            while (find_bytes(text + base, blen, st, sl, &pos)) {
                pos += base;
                size_t loff = base, llen = pos - base;
                if (tk->strip & STRIP_LEFT)
                    while (llen > 0 && c_isspace(s[loff + llen - 1])) llen--;
                size_t roff = pos + sl, rlen = base + blen - roff;
                if (tk->strip & STRIP_RIGHT)
                    while (rlen > 0 && c_isspace(s[roff])) roff++, rlen--;
                int32_t tnode;
                if (llen > 0) {
                    f->v[cur].off = loff;
                    f->v[cur].len = llen;
                    tnode = frag_insert_after(f, cur, (struct frag){.id = id});
                } else {
                    f->v[cur].id = id;
                    f->v[cur].off = f->v[cur].len = 0;
                    tnode = cur;
                }
                cur = tnode;
                if (rlen == 0) break;
                cur = frag_insert_after(f, tnode, (struct frag){.off = roff, .len = rlen, .id = TOK_NULL});
                base = roff;
                blen = rlen;
            }
            i = cur; /* everything up to cur is done for this special token */
        }
    }
    free(seen);
}

static void enc_free(struct enc *e) {
    free(e->buf);
    free(e->sym);
    free(e->heap);
    cpbuf_free(&e->cps);
    free(e->cur.v);
    free(e->tmp.v);
    free(e->wc);
    free(e->wc_keys);
    free(e->wc_ids);
}

/* Encode into e->out (caller frees e->out). */
static void encode(const struct tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                   struct enc *e) {
    NM_ASSERT(len <= TOK_MAX_TEXT); /* symbol offsets are 32-bit */
    memset(e, 0, sizeof *e);
    e->t = t;
    if (add_special && t->add_bos && t->bos != TOK_NULL) out_push(e, t->bos);
    if (len > 0) {
        struct frags f = {0};
        partition(t, text, len, parse_special, &f);
        bool prev_special = true; /* SentencePiece: space prefix for the first fragment */
        for (int32_t i = 0; i >= 0; i = f.v[i].next) {
            const struct frag *g = &f.v[i];
            if (g->id != TOK_NULL) {
                out_push(e, g->id);
                prev_special = true;
                continue;
            }
            if (t->model == TOK_MODEL_SPM) {
                spm_fragment(e, text + g->off, g->len, t->add_space_prefix && prev_special);
            } else {
                bpe_fragment(e, text + g->off, g->len);
            }
            prev_special = false;
        }
        free(f.v);
    }
    if (add_special && t->add_eos && t->eos != TOK_NULL) out_push(e, t->eos);
    int32_t *out = e->out;
    size_t n = e->n_out;
    e->out = NULL;
    enc_free(e);
    e->out = out;
    e->n_out = n;
}

enum nm_status tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *ids, size_t max, size_t *n_out) {
    struct enc e;
    encode(t, text, len, add_special, parse_special, &e);
    if (max > 0 && e.n_out > 0) memcpy(ids, e.out, NM_MIN(e.n_out, max) * sizeof *ids);
    *n_out = e.n_out;
    free(e.out);
    return e.n_out <= max ? NM_OK : NM_ERR_NOMEM;
}

int32_t *tok_encode_alloc(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, size_t *n_out) {
    struct enc e;
    encode(t, text, len, add_special, parse_special, &e);
    *n_out = e.n_out;
    if (!e.out) e.out = xcalloc(1, sizeof(int32_t), "token ids");
    return e.out;
}

/* ------------------------------------------------------------------------------------------ */
/* Pieces and decoding                                                                         */

int32_t tok_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
enum tok_model tok_model(const struct tokenizer *t) { return t->model; }
enum tok_pre tok_pre(const struct tokenizer *t) { return t->pre; }
int32_t tok_bos(const struct tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct tokenizer *t) { return t->eos; }
int32_t tok_eot(const struct tokenizer *t) { return t->eot; }
bool tok_add_bos(const struct tokenizer *t) { return t->add_bos; }
bool tok_add_eos(const struct tokenizer *t) { return t->add_eos; }
size_t tok_max_piece_len(const struct tokenizer *t) { return t->max_piece; }

bool tok_is_eog(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

enum tok_type tok_token_type(const struct tokenizer *t, int32_t id) {
    NM_ASSERT(id >= 0 && id < t->n_vocab);
    return (enum tok_type)t->tok[id].type;
}

const char *tok_token_text(const struct tokenizer *t, int32_t id, size_t *len) {
    NM_ASSERT(id >= 0 && id < t->n_vocab);
    *len = t->tok[id].len;
    return t->text + t->tok[id].off;
}

int32_t tok_find(const struct tokenizer *t, const char *s, size_t len) { return map_find(t, s, len); }

static const char *piece_of(const struct tokenizer *t, int32_t id, bool special, size_t *len) {
    NM_ASSERT(id >= 0 && id < t->n_vocab);
    if (t->hidden[id] && !special) {
        *len = 0;
        return "";
    }
    *len = t->piece_len[id];
    return t->piece + t->piece_off[id];
}

size_t tok_piece(const struct tokenizer *t, int32_t id, bool special, char *buf, size_t cap) {
    size_t len;
    const char *p = piece_of(t, id, special, &len);
    if (cap > 0 && len > 0) memcpy(buf, p, NM_MIN(len, cap)); /* buf may be NULL when cap is 0 */
    return len;
}

size_t tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char *buf,
                  size_t cap) {
    size_t total = 0;
    bool strip = (flags & TOK_DECODE_STRIP_PREFIX) && t->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *p = piece_of(t, ids[i], flags & TOK_DECODE_SPECIAL, &len);
        if (strip && !(i == 0 && ids[i] == t->bos)) {
            if (len > 0 && p[0] == ' ') p++, len--;
            strip = false;
        }
        if (total < cap && len > 0) memcpy(buf + total, p, NM_MIN(len, cap - total));
        total += len;
    }
    return total;
}

struct tok_stream {
    const struct tokenizer *t;
    unsigned flags;
    bool strip;     /* TOK_DECODE_STRIP_PREFIX still pending */
    bool first;     /* no token fed yet */
    uint8_t hold[4]; /* start of a character whose remaining bytes have not arrived */
    size_t n_hold;
    char *out;
    size_t cap;
};

struct tok_stream *tok_stream_init(const struct tokenizer *t, unsigned flags) {
    struct tok_stream *s = xcalloc(1, sizeof *s, "token stream");
    s->t = t;
    s->flags = flags;
    s->strip = (flags & TOK_DECODE_STRIP_PREFIX) && t->add_space_prefix;
    s->first = true;
    s->cap = 3 * (t->max_piece + sizeof s->hold) + 16; /* every byte might become U+FFFD */
    s->out = xcalloc(s->cap, 1, "token stream buffer");
    return s;
}

void tok_stream_free(struct tok_stream *s) {
    if (!s) return;
    free(s->out);
    free(s);
}

const char *tok_stream_feed(struct tok_stream *s, int32_t id, size_t *len) {
    size_t n;
    const char *p = piece_of(s->t, id, s->flags & TOK_DECODE_SPECIAL, &n);
    if (s->strip && !(s->first && id == s->t->bos)) {
        if (n > 0 && p[0] == ' ') p++, n--;
        s->strip = false;
    }
    s->first = false;
    size_t o = 0, i = 0;
    /* Join the held bytes with the new piece, then emit every complete character. */
    uint8_t tmp[sizeof s->hold + 4];
    while (s->n_hold > 0 && i < n) {
        /* complete (or refute) the held character byte by byte */
        memcpy(tmp, s->hold, s->n_hold);
        tmp[s->n_hold] = (uint8_t)p[i];
        size_t l;
        enum uni_seq st = uni_check_seq(tmp, s->n_hold + 1, &l);
        if (st == UNI_SEQ_INCOMPLETE) {
            s->hold[s->n_hold++] = (uint8_t)p[i++];
        } else if (st == UNI_SEQ_COMPLETE) {
            memcpy(s->out + o, tmp, l);
            o += l;
            i++;
            s->n_hold = 0;
        } else { /* held bytes are a maximal invalid subpart; the new byte starts afresh */
            memcpy(s->out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            s->n_hold = 0;
        }
    }
    while (i < n) {
        size_t l;
        enum uni_seq st = uni_check_seq((const uint8_t *)p + i, n - i, &l);
        if (st == UNI_SEQ_COMPLETE) {
            memcpy(s->out + o, p + i, l);
            o += l;
        } else if (st == UNI_SEQ_INVALID) {
            memcpy(s->out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        } else {
            memcpy(s->hold, p + i, l);
            s->n_hold = l;
        }
        i += l;
    }
    NM_ASSERT(o <= s->cap);
    *len = o;
    return s->out;
}

const char *tok_stream_flush(struct tok_stream *s, size_t *len) {
    size_t o = 0;
    if (s->n_hold > 0) {
        memcpy(s->out, "\xEF\xBF\xBD", 3);
        o = 3;
    }
    s->n_hold = 0;
    s->strip = (s->flags & TOK_DECODE_STRIP_PREFIX) && s->t->add_space_prefix;
    s->first = true;
    *len = o;
    return s->out;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                     */

void tok_free(struct tokenizer *t) {
    if (!t) return;
    free(t->tok);
    free(t->text);
    free(t->vmap);
    free(t->merges);
    free(t->mtext);
    free(t->mmap);
    free(t->piece);
    free(t->piece_off);
    free(t->piece_len);
    free(t->hidden);
    free(t->eog);
    free(t->special);
    free(t->sp);
    free(t);
}

static enum nm_status get_str_arr(const struct gguf_file *f, const char *key, bool required, const struct gguf_kv **kv,
                                  char *err, size_t errlen) {
    enum nm_status st = gguf_get_arr(f, key, kv, err, errlen);
    if (st == NM_ERR_NOT_FOUND) {
        *kv = NULL;
        return required ? nm_errf(err, errlen, NM_ERR_NOT_FOUND, "%s: missing key '%s'", f->path, key) : NM_OK;
    }
    if (st != NM_OK) return st;
    if ((*kv)->arr_type != GGUF_TYPE_STRING)
        return nm_errf(err, errlen, NM_ERR_FORMAT, "%s: '%s' is an array of %s, expected strings", f->path, key,
                       gguf_type_name((*kv)->arr_type));
    return NM_OK;
}

/* Optional token id key: absent keeps *id; out of range warns and keeps *id (as llama.cpp). */
static enum nm_status get_token_id(const struct gguf_file *f, const char *key, int32_t n_vocab, int32_t *id,
                                   char *err, size_t errlen) {
    int64_t v;
    enum nm_status st = gguf_get_int(f, key, &v, err, errlen);
    if (st == NM_ERR_NOT_FOUND) return NM_OK;
    if (st != NM_OK) return st;
    if (v < 0 || v >= n_vocab) {
        nm_log_warn("%s: %s = %lld is not a token id (vocabulary has %d tokens); using %d", f->path, key,
                    (long long)v, n_vocab, *id);
        return NM_OK;
    }
    *id = (int32_t)v;
    return NM_OK;
}

static enum nm_status get_flag(const struct gguf_file *f, const char *key, bool *out, char *err, size_t errlen) {
    bool v;
    enum nm_status st = gguf_get_bool(f, key, &v, err, errlen);
    if (st == NM_ERR_NOT_FOUND) return NM_OK;
    if (st != NM_OK) return st;
    *out = v;
    return NM_OK;
}

static int32_t find_cstr(const struct tokenizer *t, const char *s) { return map_find(t, s, strlen(s)); }

/* Find the first of `names` in the vocabulary; force it to CONTROL (llama.cpp does this for the
 * end-of-turn, end-of-message and fill-in-the-middle tokens it recognises by their text). */
static int32_t detect(struct tokenizer *t, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = find_cstr(t, names[i]);
        if (id >= 0) {
            t->tok[id].type = TOK_TYPE_CONTROL;
            return id;
        }
    }
    return TOK_NULL;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const struct tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tok[x].len != t->tok[y].len) return t->tok[x].len > t->tok[y].len ? -1 : 1;
    return (x > y) - (x < y);
}

/* Insertion-free sort with context (qsort_r is not in C11): a merge sort. */
static void sort_ids(int32_t *v, size_t n, int (*cmp)(const void *, const void *, void *), void *ctx) {
    if (n < 2) return;
    int32_t *tmp = xcalloc(n, sizeof *tmp, "sort buffer");
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = NM_MIN(lo + w, n), hi = NM_MIN(lo + 2 * w, n), i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = cmp(&v[j], &v[i], ctx) < 0 ? v[j++] : v[i++];
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
    }
    free(tmp);
}

/* Decoded bytes of every token (llama.cpp's token_to_piece with special = true). */
static void build_pieces(struct tokenizer *t) {
    size_t cap = 0, n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) cap += t->tok[i].len;
    t->piece = xcalloc(cap + 1, 1, "token pieces");
    t->piece_off = xcalloc((size_t)t->n_vocab, sizeof *t->piece_off, "token pieces");
    t->piece_len = xcalloc((size_t)t->n_vocab, sizeof *t->piece_len, "token pieces");
    t->hidden = xcalloc((size_t)t->n_vocab, 1, "token pieces");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const struct tok_token *k = &t->tok[i];
        const char *s = t->text + k->off;
        size_t len = k->len;
        size_t start = n;
        int type = k->type;
        t->hidden[i] = type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN || type == TOK_TYPE_UNUSED ||
                       type == TOK_TYPE_UNDEFINED;
        unsigned hi, lo;
        if (type == TOK_TYPE_BYTE && len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
            sscanf(s + 3, "%1x%1x", &hi, &lo) == 2) {
            t->piece[n++] = (char)(hi << 4 | lo);
        } else if (type != TOK_TYPE_NORMAL && type != TOK_TYPE_BYTE) {
            memcpy(t->piece + n, s, len); /* control, user-defined, ...: the text itself */
            n += len;
        } else if (t->model == TOK_MODEL_SPM) {
            for (size_t j = 0; j < len;) { /* U+2581 -> ' ' (never longer than the text) */
                if (j + 3 <= len && memcmp(s + j, "\xE2\x96\x81", 3) == 0) {
                    t->piece[n++] = ' ';
                    j += 3;
                } else {
                    t->piece[n++] = s[j++];
                }
            }
        } else {
            for (size_t j = 0; j < len;) { /* GPT-2 alphabet -> bytes; other characters as is */
                size_t l;
                uint32_t cp = uni_decode((const uint8_t *)s + j, len - j, &l);
                int b = cp < NM_ARRAY_LEN(t->cp_byte) ? t->cp_byte[cp] : -1;
                if (b >= 0) {
                    t->piece[n++] = (char)b;
                } else {
                    memcpy(t->piece + n, s + j, l);
                    n += l;
                }
                j += l;
            }
        }
        t->piece_off[i] = (uint32_t)start;
        t->piece_len[i] = (uint32_t)(n - start);
        if (n - start > t->max_piece) t->max_piece = n - start;
    }
}

enum nm_status tok_init(struct tokenizer **out, const struct gguf_file *f, char *err, size_t errlen) {
    enum nm_status st;
    struct gguf_str s;
    const struct gguf_kv *kv_tokens, *kv_scores = NULL, *kv_types = NULL, *kv_merges = NULL;
    double t0 = nm_time_s();
    *out = NULL;
    struct tokenizer *t = xcalloc(1, sizeof *t, "tokenizer");

    /* model and pre-tokenizer */
    st = gguf_get_str(f, "tokenizer.ggml.model", &s, err, errlen);
    if (st == NM_ERR_NOT_FOUND) {
        st = nm_errf(err, errlen, NM_ERR_NOT_FOUND, "%s: missing key 'tokenizer.ggml.model'", f->path);
        goto fail;
    }
    if (st != NM_OK) goto fail;
    if (gguf_str_eq(s, "llama")) {
        t->model = TOK_MODEL_SPM;
    } else if (gguf_str_eq(s, "gpt2")) {
        t->model = TOK_MODEL_BPE;
    } else {
        st = nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                     "%s: tokenizer.ggml.model = '%.*s' is not supported; numallm supports 'llama' "
                     "(SentencePiece) and 'gpt2' (byte-level BPE)",
                     f->path, (int)NM_MIN(s.len, 64), s.ptr);
        goto fail;
    }
    if (t->model == TOK_MODEL_SPM) {
        t->pre = TOK_PRE_NONE;
        t->add_space_prefix = true;
        t->add_bos = true;
        t->bos = 1, t->eos = 2, t->unk = 0;
    } else {
        t->bos = 11, t->eos = 11, t->unk = TOK_NULL; /* llama.cpp's BPE defaults */
        st = gguf_get_str(f, "tokenizer.ggml.pre", &s, err, errlen);
        if (st == NM_ERR_NOT_FOUND) {
            nm_log_warn("%s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer (as llama.cpp), "
                        "tokenization may not match the original model",
                        f->path);
            t->pre = TOK_PRE_DEFAULT;
        } else if (st != NM_OK) {
            goto fail;
        } else if (!tok_pre_from_name(s.ptr, s.len, &t->pre)) {
            char list[1024];
            size_t o = 0;
            for (size_t i = 0; i < NM_ARRAY_LEN(pre_names) && o < sizeof list; i++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", pre_names[i].name);
            st = nm_errf(err, errlen, NM_ERR_UNSUPPORTED,
                         "%s: tokenizer.ggml.pre = '%.*s' is not supported; supported: %s", f->path,
                         (int)NM_MIN(s.len, 64), s.ptr, list);
            goto fail;
        }
        t->ignore_merges = t->add_bos = t->pre == TOK_PRE_LLAMA3;
    }
    t->eot = t->eom = t->pad = t->sep = TOK_NULL;

    /* vocabulary */
    if ((st = get_str_arr(f, "tokenizer.ggml.tokens", true, &kv_tokens, err, errlen)) != NM_OK) goto fail;
    if (kv_tokens->n == 0 || kv_tokens->n > INT32_MAX / 2) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries, expected 1..%d",
                     f->path, (unsigned long long)kv_tokens->n, INT32_MAX / 2);
        goto fail;
    }
    t->n_vocab = (int32_t)kv_tokens->n;
    st = gguf_get_arr(f, "tokenizer.ggml.scores", &kv_scores, err, errlen);
    if (st == NM_ERR_NOT_FOUND) kv_scores = NULL;
    else if (st != NM_OK) goto fail;
    else if ((kv_scores->arr_type != GGUF_TYPE_FLOAT32 && kv_scores->arr_type != GGUF_TYPE_FLOAT64) ||
             kv_scores->n != kv_tokens->n) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT,
                     "%s: tokenizer.ggml.scores is %llu x %s, expected %d floats (one per token)", f->path,
                     (unsigned long long)kv_scores->n, gguf_type_name(kv_scores->arr_type), t->n_vocab);
        goto fail;
    }
    st = gguf_get_arr(f, "tokenizer.ggml.token_type", &kv_types, err, errlen);
    if (st == NM_ERR_NOT_FOUND) kv_types = NULL;
    else if (st != NM_OK) goto fail;
    else if (kv_types->arr_type == GGUF_TYPE_STRING || kv_types->arr_type == GGUF_TYPE_FLOAT32 ||
             kv_types->arr_type == GGUF_TYPE_FLOAT64 || kv_types->arr_type == GGUF_TYPE_BOOL ||
             kv_types->n != kv_tokens->n) {
        st = nm_errf(err, errlen, NM_ERR_FORMAT,
                     "%s: tokenizer.ggml.token_type is %llu x %s, expected %d integers (one per token)", f->path,
                     (unsigned long long)kv_types->n, gguf_type_name(kv_types->arr_type), t->n_vocab);
        goto fail;
    }

    size_t text_bytes = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) text_bytes += gguf_arr_str(kv_tokens, (uint64_t)i).len + 24;
    if (text_bytes > UINT32_MAX) { /* offsets are 32-bit */
        st = nm_errf(err, errlen, NM_ERR_FORMAT,
                     "%s: tokenizer.ggml.tokens holds %zu bytes of text, at most %u allowed", f->path, text_bytes,
                     UINT32_MAX);
        goto fail;
    }
    t->text = xcalloc(text_bytes + 1, 1, "vocabulary");
    t->tok = xcalloc((size_t)t->n_vocab, sizeof *t->tok, "vocabulary");
    size_t pos = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        struct gguf_str w = gguf_arr_str(kv_tokens, (uint64_t)i);
        struct tok_token *k = &t->tok[i];
        k->off = (uint32_t)pos;
        if (w.len == 0) { /* as llama.cpp: an empty string could never be matched anyway */
            pos += (size_t)snprintf(t->text + pos, 24, "[EMPTY_%d]", i);
        } else {
            memcpy(t->text + pos, w.ptr, w.len);
            pos += w.len;
        }
        k->len = (uint32_t)(pos - k->off);
        k->score = kv_scores ? (float)gguf_arr_float(kv_scores, (uint64_t)i) : 0.0f;
        int64_t ty = kv_types ? gguf_arr_int(kv_types, (uint64_t)i) : TOK_TYPE_NORMAL;
        k->type = (uint8_t)(ty >= TOK_TYPE_NORMAL && ty <= TOK_TYPE_BYTE ? ty : TOK_TYPE_UNDEFINED);
    }
    if (t->model == TOK_MODEL_SPM) { /* can a merge cross the start of a word? */
        t->spm_split_words = true;
        for (int32_t i = 0; i < t->n_vocab && t->spm_split_words; i++) {
            const char *w = t->text + t->tok[i].off;
            size_t l = t->tok[i].len, j = 0;
            while (j + 3 <= l && memcmp(w + j, SPM_SPACE, 3) == 0) j += 3;
            for (; j + 3 <= l; j++)
                if (memcmp(w + j, SPM_SPACE, 3) == 0) t->spm_split_words = false;
        }
    }
    t->vmask = pow2_at_least(2 * (size_t)t->n_vocab) - 1;
    t->vmap = xcalloc(t->vmask + 1, sizeof *t->vmap, "vocabulary index");
    for (size_t i = 0; i <= t->vmask; i++) t->vmap[i].val = -1;
    for (int32_t i = 0; i < t->n_vocab; i++) map_insert(t, i);

    /* merges */
    if (t->model == TOK_MODEL_BPE) {
        if ((st = get_str_arr(f, "tokenizer.ggml.merges", true, &kv_merges, err, errlen)) != NM_OK) goto fail;
        if (kv_merges->n > INT32_MAX / 2) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT, "%s: tokenizer.ggml.merges has %llu entries, at most %d allowed",
                         f->path, (unsigned long long)kv_merges->n, INT32_MAX / 2);
            goto fail;
        }
        t->n_merges = (uint32_t)kv_merges->n;
        size_t mbytes = 0;
        for (uint32_t i = 0; i < t->n_merges; i++) mbytes += gguf_arr_str(kv_merges, i).len;
        if (mbytes > UINT32_MAX) {
            st = nm_errf(err, errlen, NM_ERR_FORMAT,
                         "%s: tokenizer.ggml.merges holds %zu bytes of text, at most %u allowed", f->path, mbytes,
                         UINT32_MAX);
            goto fail;
        }
        t->mtext = xcalloc(mbytes + 1, 1, "merges");
        t->merges = xcalloc(t->n_merges, sizeof *t->merges, "merges");
        t->mmask = pow2_at_least(2 * (size_t)t->n_merges) - 1;
        t->mmap = xcalloc(t->mmask + 1, sizeof *t->mmap, "merge index");
        for (size_t i = 0; i <= t->mmask; i++) t->mmap[i].val = -1;
        size_t mp = 0;
        for (uint32_t i = 0; i < t->n_merges; i++) {
            struct gguf_str w = gguf_arr_str(kv_merges, i);
            memcpy(t->mtext + mp, w.ptr, w.len);
            /* "left right", split at the first space after the first byte (a part may be " ") */
            const char *sp = w.len > 1 ? memchr(w.ptr + 1, ' ', w.len - 1) : NULL;
            if (!sp) {
                t->merges[i] = (struct merge){0}; /* llama.cpp: an empty pair, never matched */
            } else {
                size_t l = (size_t)(sp - w.ptr);
                t->merges[i] = (struct merge){.loff = (uint32_t)mp, .llen = (uint32_t)l,
                                              .roff = (uint32_t)(mp + l + 1), .rlen = (uint32_t)(w.len - l - 1)};
                merge_insert(t, (int32_t)i);
            }
            mp += w.len;
        }
    }

    /* flags and special ids from metadata */
    if ((st = get_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err, errlen)) != NM_OK) goto fail;
    if (t->model == TOK_MODEL_BPE) t->add_space_prefix = false; /* only SentencePiece uses it */
    static const char *const id_keys[] = {"tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
                                          "tokenizer.ggml.eot_token_id",     "tokenizer.ggml.eom_token_id",
                                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                          "tokenizer.ggml.padding_token_id"};
    int32_t *id_dst[] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk, &t->sep, &t->pad};
    for (size_t i = 0; i < NM_ARRAY_LEN(id_keys); i++) {
        if (*id_dst[i] >= t->n_vocab) *id_dst[i] = TOK_NULL; /* a default that does not exist */
        if ((st = get_token_id(f, id_keys[i], t->n_vocab, id_dst[i], err, errlen)) != NM_OK) goto fail;
    }
    if ((st = get_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err, errlen)) != NM_OK) goto fail;
    if ((st = get_flag(f, "tokenizer.ggml.add_eos_token", &t->add_eos, err, errlen)) != NM_OK) goto fail;

    /* byte tables */
    for (int i = 0; i < (int)NM_ARRAY_LEN(t->cp_byte); i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = uni_byte_to_cp((uint8_t)b);
        char u[4];
        t->byte_utf8_len[b] = (uint8_t)uni_encode(cp, u); /* cp < U+0144: 1 or 2 bytes */
        memcpy(t->byte_utf8[b], u, t->byte_utf8_len[b]);
        t->cp_byte[cp] = (int16_t)b;
        char one = (char)b, hex[7];
        t->single_byte_tok[b] = map_find(t, &one, 1);
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_tok[b] = find_cstr(t, hex);
        if (t->byte_tok[b] < 0) t->byte_tok[b] = t->single_byte_tok[b];
        if (t->byte_tok[b] < 0) t->byte_tok[b] = t->unk;
    }

    /* end of turn / message, fill-in-the-middle, end of generation (llama.cpp's text lists) */
    static const char *const eot_names[] = {"<|eot_id|>",  "<|im_end|>", "<|end|>",         "<end_of_turn>",
                                            "<|endoftext|>", "<|end_of_text|>", "<EOT>",    "_<EOT>",
                                            ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),
                                            "<end_of_utterance>"};
    static const char *const eom_names[] = {"<|eom_id|>"};
    static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
    static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
    static const char *const fim_sep_names[] = {"<|file_sep|>"};
    static const char *const eog_names[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<|return|>",      "<|call|>",
                                            "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                                            "<|end_of_text|>", "<end_of_utterance>"};
    if (t->eot == TOK_NULL) t->eot = detect(t, eot_names, NM_ARRAY_LEN(eot_names));
    if (t->eom == TOK_NULL) t->eom = detect(t, eom_names, NM_ARRAY_LEN(eom_names));
    t->eog = xcalloc((size_t)t->n_vocab, 1, "end-of-generation set");
    /* fill-in-the-middle pad/repo/file-separator tokens also end generation (llama.cpp) */
    int32_t fim_pad = TOK_NULL, fim_rep = TOK_NULL, fim_sep = TOK_NULL;
    if ((st = get_token_id(f, "tokenizer.ggml.fim_pad_token_id", t->n_vocab, &fim_pad, err, errlen)) != NM_OK ||
        (st = get_token_id(f, "tokenizer.ggml.fim_rep_token_id", t->n_vocab, &fim_rep, err, errlen)) != NM_OK ||
        (st = get_token_id(f, "tokenizer.ggml.fim_sep_token_id", t->n_vocab, &fim_sep, err, errlen)) != NM_OK)
        goto fail;
    if (fim_pad == TOK_NULL) fim_pad = detect(t, fim_pad_names, NM_ARRAY_LEN(fim_pad_names));
    if (fim_rep == TOK_NULL) fim_rep = detect(t, fim_rep_names, NM_ARRAY_LEN(fim_rep_names));
    if (fim_sep == TOK_NULL) fim_sep = detect(t, fim_sep_names, NM_ARRAY_LEN(fim_sep_names));
    int32_t ends[] = {fim_pad, fim_rep, fim_sep, t->eos, t->eot, t->eom};
    for (size_t i = 0; i < NM_ARRAY_LEN(ends); i++)
        if (ends[i] != TOK_NULL) t->eog[ends[i]] = 1;
    for (size_t i = 0; i < NM_ARRAY_LEN(eog_names); i++) {
        int32_t id = find_cstr(t, eog_names[i]);
        if (id >= 0) {
            t->eog[id] = 1;
            t->tok[id].type = TOK_TYPE_CONTROL;
        }
    }

    /* special tokens matched in the text, longest first */
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->tok[i].type;
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) t->n_special++;
    }
    t->special = xcalloc(t->n_special, sizeof *t->special, "special tokens");
    t->n_special = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->tok[i].type;
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN)
            t->special[t->n_special++] = i;
    }
    sort_ids(t->special, t->n_special, cmp_special, t);

    /* Phi-3: special tokens eat the whitespace on their right (llama.cpp, by general.name) */
    if (gguf_get_str(f, "general.name", &s, NULL, 0) == NM_OK) {
        char name[256];
        size_t n = NM_MIN(s.len, sizeof name - 1);
        for (size_t i = 0; i < n; i++)
            name[i] = (s.ptr[i] >= 'A' && s.ptr[i] <= 'Z') ? (char)(s.ptr[i] + 32) : s.ptr[i];
        name[n] = 0;
        if (strstr(name, "phi-3") || strstr(name, "phi3")) {
            for (size_t i = 0; i < t->n_special; i++) t->tok[t->special[i]].strip |= STRIP_RIGHT;
            static const char *const on[] = {"</s>"}, *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
            int32_t id = find_cstr(t, on[0]);
            if (id >= 0) t->tok[id].strip |= STRIP_RIGHT;
            for (size_t i = 0; i < NM_ARRAY_LEN(off); i++)
                if ((id = find_cstr(t, off[i])) >= 0) t->tok[id].strip &= (uint8_t)~STRIP_RIGHT;
        }
    }

    t->sp = xcalloc(t->n_special, sizeof *t->sp, "special tokens");
    for (size_t i = 0; i < t->n_special; i++) {
        const struct tok_token *k = &t->tok[t->special[i]];
        const uint8_t *w = (const uint8_t *)t->text + k->off;
        t->sp[i] = (struct special_tok){
            .id = t->special[i],
            .filter = k->len == 1 ? w[0] : k->len == 2 ? 65536 + ((uint32_t)w[0] << 8 | w[1]) : 2 * 65536 + filter3(w),
            .control = k->type == TOK_TYPE_CONTROL || k->type == TOK_TYPE_UNKNOWN};
    }

    build_pieces(t);

    nm_log_info("tokenizer: %s, pre-tokenizer %s, %d tokens%s, bos %d eos %d eot %d, add_bos %d add_eos %d, "
                "%zu special, loaded in %.0f ms",
                t->model == TOK_MODEL_SPM ? "SentencePiece" : "byte-level BPE", tok_pre_name(t->pre), t->n_vocab,
                t->model == TOK_MODEL_BPE ? "" : " (scores)", t->bos, t->eos, t->eot, t->add_bos, t->add_eos,
                t->n_special, (nm_time_s() - t0) * 1e3);
    *out = t;
    return NM_OK;

fail:
    tok_free(t);
    return st;
}
