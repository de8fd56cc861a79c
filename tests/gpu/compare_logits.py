#!/usr/bin/env python3
"""compare_logits.py ENGINE.bin REF.bin TOL: max over rows of the relative L2 error of ENGINE's
logits against REF's (numallm's NMLG dumps, rank/dump.h) must be <= TOL, and the records'
(kind, pos, token) must agree. Plain Python (no numpy): the GPU host has none. The reference
comparison with its per-type tolerances is tests/reference/compare.py; the tolerance is passed
in from there."""
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


def main():
    eng_path, ref_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    nv_e, eng = read(eng_path)
    nv_r, ref = read(ref_path)
    if nv_e != nv_r or len(eng) != len(ref):
        print("compare_logits: FAIL: shapes differ (%d x %d vs %d x %d)" % (len(eng), nv_e, len(ref), nv_r))
        return 1
    worst, worst_row = 0.0, -1
    for i, ((ke, e), (kr, r)) in enumerate(zip(eng, ref)):
        if ke != kr:
            print("compare_logits: FAIL: row %d is %s in the engine, %s in the reference" % (i, ke, kr))
            return 1
        num = sum((a - b) * (a - b) for a, b in zip(e, r))
        den = sum(b * b for b in r)
        rel = math.sqrt(num / den) if den > 0 else math.sqrt(num)
        if not math.isfinite(rel) or rel > worst:
            worst, worst_row = rel, i
    ok = math.isfinite(worst) and worst <= tol
    print("compare_logits: %s max_rel=%.3e (row %d) tol=%.1e rows=%d" % ("PASS" if ok else "FAIL", worst, worst_row,
                                                                          tol, len(ref)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
