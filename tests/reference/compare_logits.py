#!/usr/bin/env python3
"""compare_logits.py RUN.bin BASE.bin TOL: one run of a greedy generation against another of the
same model and prompt (numallm's NMLG dumps, rank/engine/dump.h: the prompt's rows, then one row per
step): a CPU + GPU split against the CPU alone (tests/gpu/pipeline.sh), N ranks against one
(tests/tp/invariance.sh, which also requires the same tokens).

Both runs see the same inputs up to the first step where their greedy choices differ. Over those
rows the relative L2 error of the split's logits must be <= TOL (tests/reference/compare.py's
tolerance for the weight type). A different choice is accepted only at a near-tie of the CPU
run: the CPU's logit for its own choice exceeds its logit for the split's choice by less than
TOL x the row's RMS, the error the tolerance admits on one logit; the rows after it have other
inputs and are not compared. Any other difference fails. Plain Python (the GPU host has no numpy;
compare.py, against the reference, needs it).
"""
import array
import math
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n_vocab, n_rows = struct.unpack_from("<4sIII", data, 0)
    if magic != b"NMLG" or version != 1:
        raise SystemExit("%s: not an NMLG v1 logits dump" % path)
    rows, off = [], 16
    for _ in range(n_rows):
        kind, pos, token = struct.unpack_from("<iii", data, off)
        off += 12
        v = array.array("f")
        v.frombytes(data[off:off + 4 * n_vocab])
        off += 4 * n_vocab
        rows.append(((kind, pos, token), v))
    return n_vocab, rows


def argmax(v):
    best = 0
    for i in range(1, len(v)):
        if v[i] > v[best]:
            best = i
    return best


def main():
    split_path, cpu_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    nv_s, split = read(split_path)
    nv_c, cpu = read(cpu_path)
    if nv_s != nv_c or not split or not cpu:
        print("compare_logits: FAIL: vocabularies %d and %d, rows %d and %d" % (nv_s, nv_c, len(split), len(cpu)))
        return 1
    worst, worst_row, compared, note = 0.0, 0, 0, ""
    for i in range(min(len(split), len(cpu))):
        (ks, s), (kc, c) = split[i], cpu[i]
        if ks != kc:
            print("compare_logits: FAIL: row %d is (kind, pos, token) %s in the split run, %s on the CPU" % (i, ks, kc))
            return 1
        num = sum((a - b) * (a - b) for a, b in zip(s, c))
        den = sum(b * b for b in c)
        rel = math.sqrt(num / den) if den > 0 else math.sqrt(num)
        compared += 1
        if not math.isfinite(rel) or rel > worst:
            worst, worst_row = rel, i
        if i + 1 < min(len(split), len(cpu)) and split[i + 1][0][0] == 1:  # a greedy step follows
            ts, tc = split[i + 1][0][2], cpu[i + 1][0][2]
            if ts != tc:
                rms = math.sqrt(den / len(c))
                gap = c[tc] - c[ts]
                if gap >= tol * rms:
                    print("compare_logits: FAIL: step after row %d: the split run chose %d, the CPU %d, whose logit is "
                          "higher by %.4f (not a near-tie: %.4f admitted)" % (i, ts, tc, gap, tol * rms))
                    return 1
                note = " (the choices part at row %d, a near-tie: gap %.4f < %.4f)" % (i, gap, tol * rms)
                break
    ok = math.isfinite(worst) and worst <= tol
    print("compare_logits: %s max_rel=%.3e (row %d) tol=%.1e rows compared %d of %d%s" % (
        "PASS" if ok else "FAIL", worst, worst_row, tol, compared, len(cpu), note))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
