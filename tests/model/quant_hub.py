#!/usr/bin/env python3
"""quant_hub.py NUMALLM DATA_DIR NAME WORKDIR [MPIRUN ...]: one of llama.cpp's files in
../shared/data/quant (README there) against llama.cpp's logits and the exact float64 logits.

NAME is a file stem, e.g. q-llama-hub-IQ2_XS. The 28 token ids listed in NAME.p20s8.txt go through
numallm as one prompt batch (-b 512) and token by token (-b 1), F32 KV cache; with MPIRUN (the
command line before -np), also on 2 ranks under mpirun, both ways. With NM_QUANT_HUB_NGL=N in the
environment (a GPU host), the runs are on 1 rank with -ngl N instead (the last N layers and the
head on the CUDA device). Each run's 28 logits rows must
be, against both references (NAME.p20s8.lgt: llama.cpp; NAME.p20s8.exact.lgt: float64 on the
dequantized weights):
  max |ours - ref| / max |ref| <= 0.15  and  sum (ours - ref)^2 / sum ref^2 <= 1e-2,
and our argmax must be the reference's, unless the reference's logit for our choice is within
NEAR_TIE (5%) of max |ref| of its maximum (a near-tie), or, against llama.cpp, our argmax is
acceptable against the exact logits (their argmax, or a near-tie of it: where llama.cpp itself
departs from the exact choice). Two more rules, for rows
where the references are not both a fair measure:
  - where llama.cpp's logits are themselves beyond these bounds from the exact ones, the two took
    different sides of a near-tie of the model (in an MoE, another expert of the router's top-k):
    ours must then be within the bounds of one of them;
  - against llama.cpp, a row nearer the exact logits than llama.cpp's own row (both max_rel and
    nmse) passes: the difference is llama.cpp's rounding, not ours.
Each run's line counts the rows either rule took. On the shared files llama.cpp is never beyond
the bounds from the exact logits (README there); the rules matter for the MoE and 1-bit cases of
llamacpp/hub_cases.sh. A wrong decoder stays O(1) from the exact logits, which no rule excuses.
"""
import array
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import compare_logits  # noqa: E402  (its NMLG reader)

MAX_REL = 0.15
NMSE = 1e-2
NEAR_TIE = 0.05


def read_lgt(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"LGT1":
        raise SystemExit("%s: not an LGT1 file" % path)
    n_vocab, n_rows = struct.unpack_from("<ii", data, 4)
    rows, off = [], 12
    for _ in range(n_rows):
        pos, token = struct.unpack_from("<ii", data, off)
        off += 8
        v = array.array("f")
        v.frombytes(data[off:off + 4 * n_vocab])
        off += 4 * n_vocab
        rows.append((pos, token, v))
    return n_vocab, rows


def read_nmlg(path):
    """(n_vocab, [(pos, token, logits)]) of an NMLG dump (compare_logits.read's rows)."""
    n_vocab, rows = compare_logits.read(path)
    return n_vocab, [(pos, token, v) for (_, pos, token), v in rows]


def tokens_of(txt):
    with open(txt) as f:
        for line in f:
            if line.startswith("# tokens:"):
                return [int(t) for t in line.split(":", 1)[1].split()]
    raise SystemExit("%s: no '# tokens:' line" % txt)


def argmax(v):
    return max(range(len(v)), key=v.__getitem__)


def compare_row(ours, ref, exact=None):
    """(max_rel, nmse, argmax_ok) of one row; exact: the exact logits' row, where a choice that
    is a near-tie (or the argmax) is accepted too."""
    def near_tie(v, i):
        return v[i] >= max(v) - NEAR_TIE * max(abs(x) for x in v)

    amax_ref = max(abs(x) for x in ref)
    maxdiff = max(abs(a - b) for a, b in zip(ours, ref))
    num = sum((a - b) * (a - b) for a, b in zip(ours, ref))
    den = sum(b * b for b in ref)
    ours_arg = argmax(ours)
    argmax_ok = near_tie(ref, ours_arg) or (exact is not None and near_tie(exact, ours_arg))
    return maxdiff / amax_ref, num / den, argmax_ok


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    numallm, data, name, work = sys.argv[1:5]
    mpirun = sys.argv[5:]
    gguf = os.path.join(data, name + ".gguf")
    if not os.path.exists(gguf):
        print("skipped: %s not found (the project's shared data lies beside the repository)" % gguf)
        return 77
    os.makedirs(work, exist_ok=True)
    tokens = tokens_of(os.path.join(data, name + ".p20s8.txt"))
    refs = {"llama.cpp": read_lgt(os.path.join(data, name + ".p20s8.lgt")),
            "exact": read_lgt(os.path.join(data, name + ".p20s8.exact.lgt"))}
    ids = ",".join(str(t) for t in tokens)
    ngl = os.environ.get("NM_QUANT_HUB_NGL")
    runs = [("1 rank, -b 512", 1, 512), ("1 rank, -b 1", 1, 1)]
    if ngl:
        runs = [("-ngl %s, -b 512" % ngl, 1, 512), ("-ngl %s, -b 1" % ngl, 1, 1)]
    elif mpirun:
        runs += [("2 ranks, -b 512", 2, 512), ("2 ranks, -b 1", 2, 1)]
    llama_rows, exact_rows = refs["llama.cpp"][1], refs["exact"][1]
    # per row: the references' own distance, beyond the bounds where they took different sides
    # of a near-tie of the model (in an MoE, the router's top-k); the same for every run
    between = [compare_row(lr[2], er[2]) for lr, er in zip(llama_rows, exact_rows)]
    failed = False
    for label, np_, batch in runs:
        out = os.path.join(work, "logits_np%d_b%d.bin" % (np_, batch))
        cmd = [numallm, "run", "-m", gguf, "--tokens", ids, "-n", "0", "-ctk", "f32", "-b", str(batch), "-t", "1",
               "--dump-logits", out]
        if ngl:
            cmd += ["-ngl", ngl, "--strict"]
        if np_ > 1:
            cmd = mpirun + ["-np", str(np_)] + cmd
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        if p.returncode != 0:
            print("FAIL %s %s: numallm exited %d:\n%s" % (name, label, p.returncode, p.stderr[-3000:]))
            print("repro: %s" % " ".join(cmd))
            failed = True
            continue
        n_vocab, ours = read_nmlg(out)
        for ref_name, (ref_vocab, ref_rows) in refs.items():
            if ref_vocab != n_vocab or len(ref_rows) != len(ours):
                print("FAIL %s %s: %d rows of %d logits, %s has %d of %d" % (name, label, len(ours), n_vocab, ref_name,
                                                                          len(ref_rows), ref_vocab))
                failed = True
                continue
            other = exact_rows if ref_name == "llama.cpp" else llama_rows
            worst_rel = worst_nmse = 0.0
            ties = nearer = 0
            for (pos, tok, v), (rpos, rtok, rv), (_, _, ov), (b_rel, b_nmse, _), er in zip(
                    ours, ref_rows, other, between, exact_rows):
                if (pos, tok) != (rpos, rtok):
                    print("FAIL %s %s: row at pos %d token %d, %s has pos %d token %d" % (name, label, pos, tok,
                                                                                     ref_name, rpos, rtok))
                    failed = True
                    break
                rel, nmse, arg_ok = compare_row(v, rv, er[2] if ref_name == "llama.cpp" else None)
                ok = rel <= MAX_REL and nmse <= NMSE and arg_ok
                if ok:
                    worst_rel, worst_nmse = max(worst_rel, rel), max(worst_nmse, nmse)
                elif b_rel > MAX_REL or b_nmse > NMSE:  # the references disagree: ours must be one of them
                    o_rel, o_nmse, o_arg = compare_row(v, ov)
                    ok = o_rel <= MAX_REL and o_nmse <= NMSE and o_arg
                    ties += ok
                elif ref_name == "llama.cpp":  # ours nearer the exact logits than llama.cpp's own
                    e_rel, e_nmse, _ = compare_row(v, er[2])
                    ok = e_rel <= b_rel and e_nmse <= b_nmse and arg_ok
                    nearer += ok
                if not ok:
                    print("FAIL %s %s vs %s, pos %d: max_rel %.3g (<= %g), nmse %.3g (<= %g), argmax %s" %
                          (name, label, ref_name, pos, rel, MAX_REL, nmse, NMSE, "ok" if arg_ok else "not a near-tie"))
                    failed = True
            notes = []
            if ties:
                notes.append("%d rows where the references disagree, within one of them" % ties)
            if nearer:
                notes.append("%d rows nearer the exact logits than llama.cpp's" % nearer)
            print("%s %-16s vs %-9s worst max_rel %.4f nmse %.2e%s" % (name, label, ref_name, worst_rel, worst_nmse,
                                                                      "; " + "; ".join(notes) if notes else ""))
    if failed:
        print("repro: %s" % " ".join([sys.executable] + sys.argv))
        return 1
    print("quant_hub: PASS %s" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
