/* Unicode support for the tokenizers: strict UTF-8 decoding and encoding, general categories
 * and White_Space (tables generated at build time from Python's unicodedata by
 * rank/text/gen_unicode_tables.py, never written by hand), the case folding the (?i:'s|'t|...)
 * contractions need, GPT-2's byte-level byte <-> code point map, and the literal character
 * classes of the deepseek pre-tokenizers. */
#ifndef NM_UNICODE_H
#define NM_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Classes of a code point (uni_flags): the major class of its general category, plus UNI_WS for
 * White_Space. Exactly one of L..C is set. */
enum uni_class {
    UNI_L = 1 << 0,  /* letter: Lu Ll Lt Lm Lo (regex \p{L}) */
    UNI_M = 1 << 1,  /* mark: Mn Mc Me */
    UNI_N = 1 << 2,  /* number: Nd Nl No (regex \p{N}) */
    UNI_P = 1 << 3,  /* punctuation: Pc Pd Ps Pe Pi Pf Po (regex \p{P}) */
    UNI_S = 1 << 4,  /* symbol: Sm Sc Sk So */
    UNI_Z = 1 << 5,  /* separator: Zs Zl Zp */
    UNI_C = 1 << 6,  /* other: Cc Cf Cs Co Cn (unassigned) */
    UNI_WS = 1 << 7, /* White_Space (regex \s) */
};

/* Returned by uni_decode for a byte that does not start a valid UTF-8 sequence. */
#define UNI_INVALID 0xFFFFFFFFu

/* Decode one code point from s[0..n), n >= 1. Strict: overlong forms, surrogates and values
 * above U+10FFFF are invalid. Returns the code point and sets *len to the bytes it used
 * (1..4); an invalid or truncated sequence gives UNI_INVALID with *len = 1. */
uint32_t uni_decode(const uint8_t *s, size_t n, size_t *len);

/* Encode cp (<= U+10FFFF) into out; returns the byte count (1..4). */
size_t uni_encode(uint32_t cp, char out[4]);

/* Class bits of cp (enum uni_class). UNI_INVALID is classed like U+FFFD (a symbol). */
unsigned uni_flags(uint32_t cp);

/* General category index of cp (UNI_GC_* of the generated table; 0 = Cn) and its name. */
int uni_gc(uint32_t cp);
const char *uni_gc_name(int gc);

/* The Unicode version of the generated tables, e.g. "14.0.0". */
const char *uni_version(void);

/* Simple case folding restricted to ASCII letters: the lower-case ASCII letter that cp folds to
 * ('S' -> 's', U+017F LONG S -> 's', U+212A KELVIN SIGN -> 'k'), or 0 when cp does not fold to
 * an ASCII letter. */
uint32_t uni_fold_ascii(uint32_t cp);

/* Sequence check for streaming output: looks at s[0..n), n >= 1, starting at a sequence start.
 *   UNI_SEQ_COMPLETE:   a valid sequence of *len bytes;
 *   UNI_SEQ_INCOMPLETE: all n bytes are a valid prefix of a longer sequence (wait for more);
 *   UNI_SEQ_INVALID:    the first *len bytes are a maximal invalid subpart (replace them with
 *                       one U+FFFD, as Python's errors="replace" does). */
enum uni_seq { UNI_SEQ_COMPLETE, UNI_SEQ_INCOMPLETE, UNI_SEQ_INVALID };
enum uni_seq uni_check_seq(const uint8_t *s, size_t n, size_t *len);

/* GPT-2 byte-level alphabet: the code point that stands for byte b, and the reverse (-1 when cp
 * stands for no byte). */
uint32_t uni_byte_to_cp(uint8_t b);
int uni_cp_to_byte(uint32_t cp);

/* Literal character classes of pre-tokenizers, expanded by the generator from the published
 * regex classes. */
enum uni_set {
    UNI_SET_DEEPSEEK_LLM_LETTERS, /* deepseek-llm "[A-Za-zµÀ-Ö...]" */
    UNI_SET_DEEPSEEK_LLM_PUNCT,   /* deepseek-llm "[!-/:-~！-／...]" */
    UNI_SET_DEEPSEEK_CJK,         /* deepseek "[一-龥ࠀ-一가-퟿]" */
};
bool uni_in_set(enum uni_set set, uint32_t cp);

#endif
