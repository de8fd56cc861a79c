#!/usr/bin/env python3
"""vs_llamacpp.py DATA_DIR: the reference implementation against llama.cpp's exact logits.

../shared/data/quant (README there) holds files made by llama.cpp's llama-quantize, each with
NAME.p20s8.exact.lgt: the logits of a float64 forward pass on the dequantized weights, made by
llama.cpp's side. Our reference (model_ref.py) computes the same thing independently: on every
file whose tensor types it decodes, its logits for the same 28 tokens must equal those to float32
rounding (max |ours - exact| / max |exact| <= 1e-5 on every row). This pins the reference's block
decoders, shapes and RoPE to llama.cpp's; the engine's tests then compare against the reference.
Files with a type the reference does not decode are listed as skipped, by type; at least one file
must be checked. Exit 0 pass, 1 fail, 77 no numpy or no data.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "model"))

try:
    import numpy as np  # noqa: F401
except ImportError:
    print("skipped: numpy is not installed for %s (apt install python3-numpy)" % sys.executable)
    sys.exit(77)

import gguf_ref  # noqa: E402
import quant_hub  # noqa: E402
from model_ref import forward, load_model  # noqa: E402

TOL = 1e-5


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    data = sys.argv[1]
    names = sorted(f[:-5] for f in os.listdir(data) if f.endswith(".gguf")) if os.path.isdir(data) else []
    if not names:
        print("skipped: no GGUF files in %s" % data)
        return 77
    checked, failed, skipped = 0, 0, {}
    for name in names:
        path = os.path.join(data, name + ".gguf")
        types = {t.ggml_type for t in gguf_ref.GGUFFile(path).tensors.values()}
        missing = sorted(gguf_ref.ggml_type_name(t) for t in types if t not in gguf_ref.DEQUANTIZERS)
        if missing:
            skipped[name] = missing
            continue
        tokens = quant_hub.tokens_of(os.path.join(data, name + ".p20s8.txt"))
        _, exact = quant_hub.read_lgt(os.path.join(data, name + ".p20s8.exact.lgt"))
        logits = forward(load_model(path), tokens)
        worst = 0.0
        for i, (pos, tok, row) in enumerate(exact):
            if (pos, tok) != (i, tokens[i]):
                print("FAIL %s: exact row %d is pos %d token %d, want %d %d" % (name, i, pos, tok, i, tokens[i]))
                failed += 1
                break
            ref = np.asarray(row, dtype=np.float64)
            rel = float(np.max(np.abs(logits[i] - ref)) / np.max(np.abs(ref)))
            worst = max(worst, rel)
        ok = worst <= TOL
        failed += not ok
        checked += 1
        print("%s %s: worst max_rel %.2e over %d rows (<= %g)" % ("ok  " if ok else "FAIL", name, worst, len(exact), TOL))
    for name, missing in skipped.items():
        print("skip %s: the reference does not decode %s" % (name, ", ".join(missing)))
    print("vs_llamacpp: %d files checked, %d failed, %d skipped" % (checked, failed, len(skipped)))
    if checked == 0:
        print("FAIL: no file could be checked")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
