#!/usr/bin/env python3
"""Check `numallm perplexity` against llama.cpp's method computed independently: the token ids
come from `numallm tokenize`, the logits from the float64 reference (tests/reference), and the
chunking, BOS replacement, scored half and uncertainty formula are written here from llama.cpp's
perplexity tool. The engine's PPL must agree within a relative tolerance.

usage: ppl_check.py NUMALLM MODEL TEXT CTX [TOL]
"""
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import numpy as np  # noqa: E402
import model_ref  # noqa: E402
import gguf_ref  # noqa: E402


def main():
    numallm, model, text, ctx = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tol = float(sys.argv[5]) if len(sys.argv) > 5 else 2e-3
    out = subprocess.run([numallm, "tokenize", "-m", model, "-f", text, "--ids-only"], check=True,
                         capture_output=True, text=True).stdout
    tokens = json.loads(out.strip())
    g = gguf_ref.GGUFFile(model)
    add_bos = bool(g.kv.get("tokenizer.ggml.add_bos_token", False))
    bos = g.kv.get("tokenizer.ggml.bos_token_id")
    m = model_ref.load_model(model)
    n_chunks = len(tokens) // ctx
    first = ctx // 2
    nll = []
    for c in range(n_chunks):
        chunk = list(tokens[c * ctx:(c + 1) * ctx])
        if add_bos and bos is not None:
            chunk[0] = int(bos)
        logits = model_ref.forward(m, chunk)
        for j in range(first, ctx - 1):
            row = logits[j]
            mx = row.max()
            lse = mx + math.log(np.exp(row - mx).sum())
            nll.append(lse - row[tokens[c * ctx + j + 1]])
    nll = np.array(nll)
    ppl = math.exp(nll.mean())
    unc = ppl * math.sqrt(max((nll ** 2).mean() - nll.mean() ** 2, 0) / (len(nll) - 1))
    run = subprocess.run([numallm, "perplexity", "-m", model, "-f", text, "-c", str(ctx), "-t", "2"],
                         capture_output=True, text=True)
    mt = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", run.stdout)
    if run.returncode != 0 or not mt:
        print("ppl_check: FAIL: numallm perplexity failed:\n" + run.stdout + run.stderr)
        return 1
    got, got_unc = float(mt.group(1)), float(mt.group(2))
    rel = abs(got - ppl) / ppl
    ok = rel <= tol and abs(got_unc - unc) <= tol * unc + 1e-9
    print("ppl_check: %s: engine PPL %.4f +/- %.5f, reference %.4f +/- %.5f (%d chunks of %d, %d scored), "
          "rel diff %.2e (tol %.0e)" % ("PASS" if ok else "FAIL", got, got_unc, ppl, unc, n_chunks, ctx, len(nll),
                                        rel, tol))
    if not ok:
        print("repro: %s %s" % (sys.executable, " ".join(sys.argv)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
