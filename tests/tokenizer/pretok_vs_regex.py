#!/usr/bin/python3
"""Check numallm's pre-tokenizers against an independent regex engine (Python's `regex` module).

1. The Unicode tables (\\p{L}, \\p{N}, \\p{P}, \\s and the (?i) folds to ASCII letters) of the C
   code are compared with `regex` over every code point. They may only differ where this
   Python's unicodedata (which generated the tables) has the code point unassigned: `regex` may
   ship a newer Unicode version.
2. Every pre-tokenizer splits the llama.cpp test strings (the .inp files) and random Unicode
   strings; the pieces must equal those of `regex` running
   - for llama-bpe, qwen2 and gpt-2: the patterns published in the models' tokenizer.json;
   - for the multi-pattern pre-tokenizers (deepseek-llm, deepseek-coder, falcon, starcoder,
     default): llama.cpp's pattern lists applied in sequence, each to the pieces of the previous,
     with llama.cpp's substitution of non-ASCII White_Space by U+000B and ECMAScript's "$".

usage: pretok_vs_regex.py TOOL [--inp-dir DIR] [--count N] [--seed S]
Exit status 0 on success, 1 on a mismatch, 77 when the `regex` module is missing.
"""
import argparse
import os
import random
import subprocess
import sys
import unicodedata

try:
    import regex
except ImportError:
    print("SKIP: Python module `regex` is missing (Debian: apt-get install python3-regex)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "rank", "text"))
import gen_unicode_tables as gen  # noqa: E402  (the literal deepseek classes)

# Published in the tokenizer.json of Llama 3 and Qwen2/2.5/3, and GPT-2's (HF ByteLevel).
PAT_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PAT_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PAT_GPT2_HF = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# llama.cpp's pattern lists (llama-vocab.cpp); "$" becomes \Z (ECMAScript: end of input only).
PAT_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
MULTI = {
    "deepseek-llm": ["[\r\n]", r"\s?[" + gen.DEEPSEEK_LLM_LETTERS + "]+", r"\s?[" + gen.DEEPSEEK_LLM_PUNCT + "]+",
                     r"\s+\Z", "[" + gen.DEEPSEEK_CJK + "]+", r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[" + gen.DEEPSEEK_CJK + "]+", r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", PAT_GPT2, "[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", PAT_GPT2],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", PAT_GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
}
SINGLE = {"llama-bpe": PAT_LLAMA3, "qwen2": PAT_QWEN2, "gpt-2": PAT_GPT2_HF}

WS = [0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) + \
     [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]


def check_tables(tool):
    out = subprocess.run([tool, "classes"], check=True, capture_output=True, text=True).stdout
    flags = bytearray(0x110000)
    ours_fold = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "fold":
            ours_fold[int(parts[1])] = int(parts[2])
        else:
            a, b, f = map(int, parts)
            flags[a:b + 1] = bytes([f]) * (b + 1 - a)
    everything = "".join(chr(c) for c in range(0x110000))
    bits = {"\\p{L}": 1, "\\p{N}": 4, "\\p{P}": 8, "\\s": 128}
    bad = set()
    n_newer = 0
    for prop, bit in bits.items():
        theirs = bytearray(0x110000)
        for m in regex.finditer(prop, everything):
            theirs[m.start()] = 1
        for c in range(0x110000):
            if bool(flags[c] & bit) != bool(theirs[c]):
                if unicodedata.category(chr(c)) == "Cn":
                    n_newer += 1
                    bad.add(c)
                else:
                    print(f"FAIL: U+{c:04X} ({unicodedata.category(chr(c))}): C says {prop} = "
                          f"{bool(flags[c] & bit)}, regex says {bool(theirs[c])}")
                    return None
    # (?i) folding for the letters of the contractions 's 't 're 've 'm 'll 'd: the C table must
    # list exactly what regex's (?i)x matches. (Other letters are not used; regex also folds
    # U+0130 to "i", which no simple case folding does.)
    theirs_fold = {}
    for x in "strvemld":
        for m in regex.finditer("(?i)" + x, everything):
            theirs_fold[m.start()] = ord(x)
    ours_fold = {c: x for c, x in ours_fold.items() if chr(x) in "strvemld"}
    if ours_fold != theirs_fold:
        diff = sorted(set(ours_fold.items()) ^ set(theirs_fold.items()))
        print(f"FAIL: case folding to ASCII letters differs: {diff[:10]}")
        return None
    print(f"tables: Unicode {unicodedata.unidata_version} (this Python) agrees with regex {regex.__version__} on "
          f"all assigned code points; {len(bad)} code points unassigned here but assigned in regex's Unicode "
          f"({n_newer} property differences) are left out of the random strings")
    return bad


def pieces_regex(s, name):
    """Character-offset ends of the pieces, llama.cpp style: matches and the gaps between them."""
    if name in SINGLE:
        stages, subst = [SINGLE[name]], False
    else:
        stages, subst = MULTI[name], True
    t = "".join("\x0b" if (ord(c) > 0x7F and ord(c) in WS) else c for c in s) if subst else s
    pieces = [(0, len(s))] if s else []
    for pat in stages:
        rx = regex.compile(pat)
        out = []
        for a, b in pieces:
            pos = a
            for m in rx.finditer(t, a, b):
                if m.start() > pos:
                    out.append((pos, m.start()))
                out.append((m.start(), m.end()))
                pos = m.end()
            if pos < b:
                out.append((pos, b))
        pieces = out
    # character ends -> UTF-8 byte ends
    ends = []
    for _, b in pieces:
        ends.append(len(s[:b].encode("utf-8")))
    return ends


def random_strings(rng, count, excluded):
    ascii_pool = [chr(c) for c in range(0x20, 0x7F)] + list("\t\n\r\x0b\x0c") + list("'sStTrReEvVmMlLdD ") * 3
    special = [chr(c) for c in WS] + ["\u017f", "\u212a", "\u0130", "\u0131", "\u00b5", "\u00df", "\u0345"]
    pools = [
        ascii_pool,
        list("0123456789") * 3 + ["\u0660", "\u06f5", "\u0966", "\uff13", "\u2163", "\u00b2", "\u00bd", "\u3007",
                                  "\U0001d7ce", "\u2460"],
        special,
        [chr(c) for c in range(0xA0, 0x250)],  # Latin-1, Latin Extended
        [chr(c) for c in range(0x370, 0x530)],  # Greek, Cyrillic
        [chr(c) for c in range(0x1F00, 0x2000)] + [chr(c) for c in range(0x2100, 0x2150)],  # deepseek edges
        [chr(c) for c in range(0x2010, 0x2070)] + [chr(c) for c in range(0x3000, 0x3040)] +
        [chr(c) for c in range(0xFF00, 0xFF70)],  # punctuation, CJK and fullwidth forms
        [chr(c) for c in range(0x4E00, 0x4E40)] + [chr(c) for c in range(0x9FA0, 0x9FB0)] +
        [chr(c) for c in range(0xAC00, 0xAC20)] + [chr(c) for c in range(0x7F0, 0x810)] +
        [chr(c) for c in range(0xD7F0, 0xD800)],
        [chr(c) for c in range(0x300, 0x370)] + [chr(c) for c in range(0x900, 0x980)] + ["\u200d", "\ufe0f", "\u200b"],
        ["\U0001f999", "\U0001f600", "\U0001f680", "\u2705", "\u00a9", "\u20ac", "\U0001f1fa", "\ue000"],
        ["\U00010400", "\U0001044f", "\U000118a0", "\U0001e900", "\U0001e943", "\U000104b0"],
        # contractions in every case, with the non-ASCII folds, and line ends after punctuation
        ["'s", "'S", "'\u017f", "'t", "'T", "'re", "'rE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'lL", "'Ll",
         "'d", "'D", "'x", "''", "!\r\n", ".\n\n", " \r\n ", "\n \n"],
    ]
    strings = []
    for _ in range(count):
        n = rng.randint(1, 40)
        chars = []
        while len(chars) < n:
            r = rng.random()
            if r < 0.1:  # any code point at all, assigned here and agreeing with regex
                c = rng.randrange(0x110000)
                if 0xD800 <= c <= 0xDFFF or c in excluded:
                    continue
                chars.append(chr(c))
            else:
                chars.append(rng.choice(rng.choice(pools)))
        strings.append("".join(chars))
    return strings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--inp-dir")
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    excluded = check_tables(args.tool)
    if excluded is None:
        print(f"reproduce: {sys.argv[0]} {args.tool}")
        return 1

    inputs = []
    if args.inp_dir and os.path.isdir(args.inp_dir):
        for fn in sorted(os.listdir(args.inp_dir)):
            if fn.endswith(".inp"):
                with open(os.path.join(args.inp_dir, fn), encoding="utf-8") as f:
                    inputs += [c for c in f.read().split("\n__ggml_vocab_test__\n") if c]
        inputs = sorted(set(inputs))
        print(f"{len(inputs)} distinct strings from the .inp files")
    else:
        print(f"no .inp directory ({args.inp_dir}); random strings only")
    rng = random.Random(args.seed)
    inputs += random_strings(rng, args.count, excluded)

    failures = 0
    for name in list(SINGLE) + list(MULTI):
        data = "".join(s.encode("utf-8").hex() + "\n" for s in inputs)
        res = subprocess.run([args.tool, "split", name], input=data, capture_output=True, text=True, check=True)
        lines = res.stdout.split("\n")
        bad = 0
        for i, s in enumerate(inputs):
            got = [int(x) for x in lines[i].split()] if lines[i] else []
            want = pieces_regex(s, name)
            if got != want:
                bad += 1
                if bad <= 3:
                    b = s.encode("utf-8")

                    def show(ends):
                        return [b[x:y].decode("utf-8", "replace") for x, y in zip([0] + ends, ends)]
                    print(f"FAIL: {name}: {s!r}\n  regex: {show(want)}\n  ours:  {show(got)}")
        print(f"{name}: {len(inputs) - bad}/{len(inputs)} strings split as regex does")
        failures += bad
    if failures:
        print(f"reproduce: {sys.argv[0]} {args.tool} --inp-dir {args.inp_dir} --count {args.count} --seed {args.seed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
