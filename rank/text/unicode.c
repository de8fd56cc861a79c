/* Unicode look-ups for the tokenizers (see unicode.h). The tables come from the build-time
 * generator rank/text/gen_unicode_tables.py (generated/unicode_tables.h). */
#include "unicode.h"

#include "unicode_tables.h"

static inline uint8_t table_value(uint32_t cp) {
    if (cp >= 0x110000) cp = 0xFFFD; /* UNI_INVALID and out-of-range: like U+FFFD */
    return uni_stage2[uni_stage1[cp >> 8]][cp & 0xFF];
}

unsigned uni_flags(uint32_t cp) {
    uint8_t v = table_value(cp);
    unsigned f = uni_gc_class[v & UNI_GC_MASK];
    if (v & UNI_GC_WHITE_SPACE) f |= UNI_WS;
    return f;
}

int uni_gc(uint32_t cp) { return table_value(cp) & UNI_GC_MASK; }

const char *uni_gc_name(int gc) { return gc >= 0 && gc < UNI_GC_COUNT ? uni_gc_names[gc] : "?"; }

const char *uni_version(void) { return UNI_TABLES_VERSION; }

uint32_t uni_fold_ascii(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + ('a' - 'A');
    if (cp >= 'a' && cp <= 'z') return cp;
    if (cp < 0x80) return 0;
    for (size_t i = 0; i < sizeof uni_fold_table / sizeof uni_fold_table[0]; i++)
        if (uni_fold_table[i][0] == cp) return uni_fold_table[i][1];
    return 0;
}

/* Valid range of the second byte of a sequence led by b0 (Unicode Table 3-7). */
static bool second_byte_range(uint8_t b0, uint8_t *lo, uint8_t *hi, size_t *need) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        *need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        *need = 3;
        if (b0 == 0xE0) *lo = 0xA0;
        if (b0 == 0xED) *hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        *need = 4;
        if (b0 == 0xF0) *lo = 0x90;
        if (b0 == 0xF4) *hi = 0x8F;
    } else {
        return false;
    }
    return true;
}

enum uni_seq uni_check_seq(const uint8_t *s, size_t n, size_t *len) {
    uint8_t b0 = s[0], lo, hi;
    size_t need;
    if (b0 < 0x80) {
        *len = 1;
        return UNI_SEQ_COMPLETE;
    }
    if (!second_byte_range(b0, &lo, &hi, &need)) {
        *len = 1;
        return UNI_SEQ_INVALID;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return UNI_SEQ_INCOMPLETE;
        }
        uint8_t a = i == 1 ? lo : 0x80, b = i == 1 ? hi : 0xBF;
        if (s[i] < a || s[i] > b) {
            *len = i;
            return UNI_SEQ_INVALID;
        }
    }
    *len = need;
    return UNI_SEQ_COMPLETE;
}

uint32_t uni_decode(const uint8_t *s, size_t n, size_t *len) {
    size_t l;
    if (uni_check_seq(s, n, &l) != UNI_SEQ_COMPLETE) {
        *len = 1;
        return UNI_INVALID;
    }
    *len = l;
    switch (l) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

size_t uni_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode(): the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
 * themselves; the other 68 bytes map, in increasing order, to U+0100, U+0101, ... */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t uni_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++)
        if (!byte_is_printable(i)) n++;
    return 0x100 + n;
}

int uni_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (unsigned i = 0; i < 256; i++) {
        if (byte_is_printable(i)) continue;
        if (n == 0) return (int)i;
        n--;
    }
    return -1;
}

static bool in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

bool uni_in_set(enum uni_set set, uint32_t cp) {
    switch (set) {
    case UNI_SET_DEEPSEEK_LLM_LETTERS:
        return in_ranges(cp, uni_deepseek_llm_letters,
                         sizeof uni_deepseek_llm_letters / sizeof uni_deepseek_llm_letters[0]);
    case UNI_SET_DEEPSEEK_LLM_PUNCT:
        return in_ranges(cp, uni_deepseek_llm_punct,
                         sizeof uni_deepseek_llm_punct / sizeof uni_deepseek_llm_punct[0]);
    case UNI_SET_DEEPSEEK_CJK:
        return in_ranges(cp, uni_deepseek_cjk, sizeof uni_deepseek_cjk / sizeof uni_deepseek_cjk[0]);
    }
    return false;
}
