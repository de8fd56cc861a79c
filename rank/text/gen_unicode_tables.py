#!/usr/bin/env python3
"""Generate rank/text/unicode.c's lookup tables from Python's unicodedata (run at build time).

Usage: gen_unicode_tables.py OUTPUT.h

Emits, as C arrays:
  * the general category of every code point U+0000..U+10FFFF plus a White_Space bit, in a
    two-stage table (stage 1: code point >> 8 -> block number; stage 2: 256 bytes per distinct
    block);
  * for each general category, its major class (L, M, N, P, S, Z, C);
  * the non-ASCII code points whose simple case folding is an ASCII letter (for the
    case-insensitive contractions "(?i:'s|'t|...)" of the Llama 3 / Qwen2 pre-tokenizers);
  * the character classes of the deepseek-llm pre-tokenizer, expanded from the literal regex
    classes published in llama.cpp's llama-vocab.cpp into code point ranges.

unicodedata has no White_Space property. PropList.txt defines White_Space as exactly the code
points of general category Zs, Zl and Zp plus U+0009..U+000D and U+0085 (true for every Unicode
version to date), so that is the rule used here; the tests compare it with the `regex` module's
\\s over all code points.
"""
import sys
import unicodedata

MAX_CP = 0x110000

# Order fixes the numeric values used in C (0 = unassigned so a zero-filled table means Cn).
CATEGORIES = [
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
    "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So",
    "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co",
]
CLASS_BITS = {"L": "UNI_L", "M": "UNI_M", "N": "UNI_N", "P": "UNI_P", "S": "UNI_S", "Z": "UNI_Z", "C": "UNI_C"}

# deepseek-llm pre-tokenizer classes from llama.cpp (llama-vocab.cpp,
# LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM); a "-" between two characters is a range. Written as
# escapes on purpose: several members (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) have
# canonical singleton decompositions, so an NFC-normalizing editor would silently turn them into
# other characters (and "K-..." into a range starting at ASCII 'K').
DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-"
    "\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1"
    "\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-"
    "\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15"
    "\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D"
    "\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB"
    "\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D"
    "\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183"
    "\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B"
    "\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-"
    "\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB"
    "\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943"
)
DEEPSEEK_LLM_PUNCT = "!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002"
DEEPSEEK_CJK = "\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF"


def is_white_space(cp: int) -> bool:
    if 0x09 <= cp <= 0x0D or cp == 0x85:
        return True
    return unicodedata.category(chr(cp)) in ("Zs", "Zl", "Zp")


def parse_class(s: str):
    """Expand a regex class body without escapes ("a-zA-Z...") into sorted merged ranges."""
    ranges = []
    i = 0
    while i < len(s):
        lo = ord(s[i])
        if i + 2 < len(s) and s[i + 1] == "-":
            hi = ord(s[i + 2])
            i += 3
        else:
            hi = lo
            i += 1
        if hi < lo:
            raise SystemExit(f"bad range {lo:#x}-{hi:#x}")
        ranges.append((lo, hi))
    ranges.sort()
    merged = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def emit_ranges(out, name, ranges):
    out.append(f"static const uint32_t {name}[][2] = {{")
    line = "   "
    for lo, hi in ranges:
        item = f" {{0x{lo:X}, 0x{hi:X}}},"
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_unicode_tables.py OUTPUT.h")
    cat_index = {c: i for i, c in enumerate(CATEGORIES)}

    values = bytearray(MAX_CP)
    for cp in range(MAX_CP):
        v = cat_index[unicodedata.category(chr(cp))]
        if is_white_space(cp):
            v |= 0x80
        values[cp] = v

    blocks = {}
    stage1 = []
    stage2 = []
    for b in range(MAX_CP // 256):
        blk = bytes(values[b * 256:(b + 1) * 256])
        if blk not in blocks:
            blocks[blk] = len(stage2)
            stage2.append(blk)
        stage1.append(blocks[blk])

    folds = []
    for cp in range(0x80, MAX_CP):
        f = chr(cp).casefold()
        if len(f) == 1 and f.isascii() and f.isalpha():
            folds.append((cp, ord(f)))

    out = []
    out.append("/* Generated by rank/text/gen_unicode_tables.py from Python's unicodedata "
               f"(Unicode {unicodedata.unidata_version}). Do not edit. */")
    out.append("#ifndef NM_UNICODE_TABLES_H")
    out.append("#define NM_UNICODE_TABLES_H")
    out.append("#include <stdint.h>")
    out.append(f'#define UNI_TABLES_VERSION "{unicodedata.unidata_version}"')
    out.append("#define UNI_GC_WHITE_SPACE 0x80 /* bit set in a table value: White_Space */")
    out.append("#define UNI_GC_MASK 0x1F")
    for i, c in enumerate(CATEGORIES):
        out.append(f"#define UNI_GC_{c} {i}")
    out.append(f"#define UNI_GC_COUNT {len(CATEGORIES)}")
    out.append("static const char *const uni_gc_names[UNI_GC_COUNT] = {")
    out.append("    " + ", ".join(f'"{c}"' for c in CATEGORIES) + ",")
    out.append("};")
    out.append("/* Major class of each general category (UNI_L ... UNI_C from unicode.h). */")
    out.append("static const uint8_t uni_gc_class[UNI_GC_COUNT] = {")
    out.append("    " + ", ".join(CLASS_BITS[c[0]] for c in CATEGORIES) + ",")
    out.append("};")
    out.append(f"static const uint16_t uni_stage1[{len(stage1)}] = {{")
    for i in range(0, len(stage1), 16):
        out.append("    " + ", ".join(str(x) for x in stage1[i:i + 16]) + ",")
    out.append("};")
    out.append(f"static const uint8_t uni_stage2[{len(stage2)}][256] = {{")
    for blk in stage2:
        out.append("    {")
        for i in range(0, 256, 32):
            out.append("        " + ", ".join(str(x) for x in blk[i:i + 32]) + ",")
        out.append("    },")
    out.append("};")
    out.append("/* Non-ASCII code points whose simple case folding is an ASCII letter: {cp, letter}. */")
    out.append(f"static const uint32_t uni_fold_table[{len(folds)}][2] = {{")
    out.append("    " + ", ".join(f"{{0x{a:X}, 0x{b:X}}}" for a, b in folds) + ",")
    out.append("};")
    emit_ranges(out, "uni_deepseek_llm_letters", parse_class(DEEPSEEK_LLM_LETTERS))
    emit_ranges(out, "uni_deepseek_llm_punct", parse_class(DEEPSEEK_LLM_PUNCT))
    emit_ranges(out, "uni_deepseek_cjk", parse_class(DEEPSEEK_CJK))
    out.append("#endif")

    with open(sys.argv[1], "w", encoding="ascii") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
