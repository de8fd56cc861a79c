#!/usr/bin/python3
"""Self-tests of the reference implementation (run: /usr/bin/python3 tests/reference/test_ref.py).

What is checked:
  - the GGUF parser reads back what the fixture writer wrote (every KV type, arrays, strings,
    alignment, v2 and v3) and rejects broken files with a message naming the problem;
  - each dequantizer on hand-built blocks with values computed by hand from FORMATS.md, and on
    random blocks against a scalar loop oracle (fixtures/scalar_oracles.py);
  - RoPE NORM vs NEOX on a known vector; rope scaling keys;
  - the forward pass of 1-layer models of every architecture against a per-token scalar oracle;
  - the dump formats, ref.py and compare.py end to end, including compare.py failing on
    corrupted logits and naming the first diverging layer (checker self-test);
  - compare.py's tolerances: above the engine's emulated numerics, below real bugs.
Options: -k SUBSTRING runs only tests whose name contains it; -v prints details.
Exit status 0 when every test passes, 1 otherwise (each failure prints a repro command).
"""

import io
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np
except ImportError:
    print("SKIP: %s cannot import numpy (install python3-numpy, or point NM_PYTHON at an "
          "interpreter that has it); the reference self-test did not run" % sys.executable)
    sys.exit(77)

import compare  # noqa: E402
import gguf_ref  # noqa: E402
import model_ref  # noqa: E402
from dump_formats import (KIND_PROMPT, LogitsDump, read_layer, read_logits,  # noqa: E402
                          write_layer, write_logits)
from fixtures.engine_numerics import EngineNumerics  # noqa: E402
from fixtures.gguf_writer import GGUFWriter  # noqa: E402
from fixtures.model_builder import TinyModelSpec, build_model, random_tensor_bytes  # noqa: E402
from fixtures.scalar_oracles import (scalar_q4_0, scalar_q4_1, scalar_q4_k,  # noqa: E402
                                     scalar_q5_k, scalar_q6_k, scalar_q8_0, slow_forward,
                                     scalar_q5_0, scalar_q5_1, scalar_q2_k, scalar_q3_k,
                                     scalar_iq4_nl, scalar_iq4_xs)
from gguf_ref import GGMLType as G, GGUFError, GGUFFile, GGUFValueType as VT  # noqa: E402

PY = sys.executable
TMP = None      # per-run temporary directory
VERBOSE = False


def note(msg):
    if VERBOSE:
        print("    " + msg)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def check_close(a, b, rtol, atol, what):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    check(a.shape == b.shape, "%s: shape %s != %s" % (what, a.shape, b.shape))
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError("%s: %d mismatches, first at %s: got %r, expected %r"
                             % (what, bad.sum(), i, a[i], b[i]))


def expect_error(exc_type, substring, fn, *args):
    try:
        fn(*args)
    except exc_type as e:
        check(substring in str(e), "error %r does not mention %r" % (str(e), substring))
        note("rejected as expected: %s" % e)
        return
    raise AssertionError("expected %s mentioning %r, nothing raised" % (exc_type.__name__, substring))


def tmp(name):
    return os.path.join(TMP, name)


def f16(v):
    return np.float16(v).tobytes()


# --- GGUF parser -------------------------------------------------------------------------------

ALL_KV = [
    ("t.u8", VT.UINT8, 200, None),
    ("t.i8", VT.INT8, -5, None),
    ("t.u16", VT.UINT16, 65000, None),
    ("t.i16", VT.INT16, -30000, None),
    ("t.u32", VT.UINT32, 4000000000, None),
    ("t.i32", VT.INT32, -2000000000, None),
    ("t.f32", VT.FLOAT32, 1.5, None),
    ("t.bool_t", VT.BOOL, True, None),
    ("t.bool_f", VT.BOOL, False, None),
    ("t.str", VT.STRING, "h\u00e9llo \u2713 world", None),
    ("t.str_empty", VT.STRING, "", None),
    ("t.u64", VT.UINT64, 2 ** 40 + 3, None),
    ("t.i64", VT.INT64, -(2 ** 40) - 7, None),
    ("t.f64", VT.FLOAT64, math.pi, None),
    ("t.arr_u8", VT.ARRAY, [0, 1, 255], VT.UINT8),
    ("t.arr_i8", VT.ARRAY, [-128, 0, 127], VT.INT8),
    ("t.arr_u16", VT.ARRAY, [1, 65535], VT.UINT16),
    ("t.arr_i16", VT.ARRAY, [-32768, 32767], VT.INT16),
    ("t.arr_u32", VT.ARRAY, [7, 4294967295], VT.UINT32),
    ("t.arr_i32", VT.ARRAY, [1, -1, 6], VT.INT32),
    ("t.arr_f32", VT.ARRAY, [0.25, -2.0, 1e10], VT.FLOAT32),
    ("t.arr_bool", VT.ARRAY, [True, False, True], VT.BOOL),
    ("t.arr_str", VT.ARRAY, ["a", "", "\u0120t", "x y"], VT.STRING),
    ("t.arr_u64", VT.ARRAY, [2 ** 63], VT.UINT64),
    ("t.arr_i64", VT.ARRAY, [-(2 ** 62), 5], VT.INT64),
    ("t.arr_f64", VT.ARRAY, [1e-300, -0.5], VT.FLOAT64),
    ("t.arr_empty", VT.ARRAY, [], VT.INT32),
]


def _parser_file(version, alignment):
    w = GGUFWriter(version=version, alignment=alignment)
    for key, vtype, value, etype in ALL_KV:
        w.add(key, vtype, value, etype)
    rng = np.random.default_rng(1)
    tensors = {
        "odd.f32": (np.float32, (3, 5), G.F32, rng.standard_normal(15).astype("<f4").tobytes()),
        "one.f16": (None, (7,), G.F16, rng.standard_normal(7).astype("<f2").tobytes()),
        "q.q8_0": (None, (64, 3), G.Q8_0, random_tensor_bytes(G.Q8_0, 192, rng, 1.0)),
        "k.q4_k": (None, (256, 2), G.Q4_K, random_tensor_bytes(G.Q4_K, 512, rng, 1.0)),
        "e.q6_k": (None, (256, 1, 2), G.Q6_K, random_tensor_bytes(G.Q6_K, 512, rng, 1.0)),
    }
    for name, (_, ne, t, raw) in tensors.items():
        w.add_tensor(name, ne, t, raw)
    data, data_offset, offsets = w.to_bytes()
    path = tmp("parser_v%d_a%d.gguf" % (version, alignment))
    with open(path, "wb") as f:
        f.write(data)
    return path, tensors, data_offset, offsets


def test_parser_roundtrip():
    for version, alignment in ((3, 32), (2, 32), (3, 64), (2, 8), (3, 256)):
        path, tensors, data_offset, offsets = _parser_file(version, alignment)
        g = GGUFFile(path)
        check(g.version == version, "version %d != %d" % (g.version, version))
        check(g.alignment == alignment, "alignment %d != %d" % (g.alignment, alignment))
        check(g.data_offset == data_offset, "data_offset %d != %d" % (g.data_offset, data_offset))
        check(g.data_offset % alignment == 0, "data offset not aligned")
        n_kv = len(ALL_KV) + (alignment != 32)
        check(len(g.kv) == n_kv, "n_kv %d != %d" % (len(g.kv), n_kv))
        for key, vtype, value, etype in ALL_KV:
            check(key in g.kv, "missing key %s" % key)
            got = g.kv[key]
            check(g.kv_type[key] == (vtype, etype), "%s: type %s != %s"
                  % (key, g.kv_type[key], (vtype, etype)))
            if vtype == VT.FLOAT32:
                check(got == float(np.float32(value)), "%s: %r != %r" % (key, got, value))
            elif etype == VT.FLOAT32:
                check(got == [float(np.float32(v)) for v in value], "%s: %r" % (key, got))
            else:
                check(got == value and type(got) == type(value) if not isinstance(value, list)
                      else got == value, "%s: %r != %r" % (key, got, value))
        if alignment != 32:
            check(g.kv["general.alignment"] == alignment, "general.alignment")
        check(list(g.tensors) == list(tensors), "tensor order %s" % list(g.tensors))
        for (name, (_, ne, t, raw)), off in zip(tensors.items(), offsets):
            ti = g.tensors[name]
            check(ti.ne == ne and ti.ggml_type == t and ti.offset == off,
                  "%s: info %r, expected ne=%s type=%d offset=%d" % (name, ti, ne, t, off))
            check(ti.offset % alignment == 0, "%s offset not aligned" % name)
            check(bytes(g.tensor_bytes(name)) == raw, "%s: bytes differ" % name)
        check(g.dequantize("odd.f32").shape == (5, 3), "F32 [ne1, ne0] shape")
        check_close(g.dequantize("odd.f32").reshape(-1),
                    np.frombuffer(tensors["odd.f32"][3], "<f4"), 0, 0, "odd.f32 values")
        check(g.dequantize("e.q6_k").shape == (2, 1, 256), "3-D shape")
        rows = g.dequantize_rows("q.q8_0", [2, 0])
        check_close(rows, g.dequantize("q.q8_0")[[2, 0]], 0, 0, "dequantize_rows")
        note("v%d alignment %d: %d kv, %d tensors, data at %d"
             % (version, alignment, len(g.kv), len(g.tensors), g.data_offset))


def test_parser_vocab_only():
    w = GGUFWriter()
    w.add("tokenizer.ggml.tokens", VT.ARRAY, ["<s>", "</s>"], VT.STRING)
    data, off, _ = w.to_bytes()
    path = tmp("vocab.gguf")
    with open(path, "wb") as f:
        f.write(data)
    g = GGUFFile(path)
    check(len(g.tensors) == 0 and g.kv["tokenizer.ggml.tokens"] == ["<s>", "</s>"], "vocab-only")


def _write(name, data):
    path = tmp(name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_parser_rejects_broken_files():
    good, _, _, _ = _parser_file(3, 32)
    data = open(good, "rb").read()
    expect_error(GGUFError, "bad magic", GGUFFile, _write("b1.gguf", b"GGUX" + data[4:]))
    expect_error(GGUFError, "version 1", GGUFFile,
                 _write("b2.gguf", data[:4] + struct.pack("<I", 1) + data[8:]))
    expect_error(GGUFError, "big-endian", GGUFFile,
                 _write("b3.gguf", data[:4] + struct.pack(">I", 3) + data[8:]))
    expect_error(GGUFError, "empty file", GGUFFile, _write("b4.gguf", b""))
    for cut in (3, 10, 30, 200, len(data) // 2, len(data) - 1):
        expect_error(GGUFError, "truncated", GGUFFile, _write("cut%d.gguf" % cut, data[:cut]))

    w = GGUFWriter(alignment=64, alignment_key=False)
    w.add("general.alignment", VT.UINT64, 64)
    expect_error(GGUFError, "must be uint32", GGUFFile, w.write(tmp("b5.gguf")))
    w = GGUFWriter(alignment=48)
    expect_error(GGUFError, "not a power of 2", GGUFFile, w.write(tmp("b6.gguf")))
    w = GGUFWriter()
    w.add("x", VT.ARRAY, [], VT.ARRAY)
    expect_error(GGUFError, "arrays of arrays", GGUFFile, w.write(tmp("b7.gguf")))
    w = GGUFWriter()
    w.add("x", VT.UINT8, 1)
    w.add("x", VT.UINT8, 2)
    expect_error(GGUFError, "duplicate key", GGUFFile, w.write(tmp("b8.gguf")))
    expect_error(GGUFError, "unknown value type 13", GGUFFile, _raw_kv_file(b"x", 13))
    # tensor info problems: hand-assembled so the writer's own checks do not interfere
    expect_error(GGUFError, "n_dims = 5", GGUFFile,
                 _tensor_info_file("t", [1] * 5, G.F32, 0, b"\0" * 4))
    expect_error(GGUFError, "not a multiple of the alignment", GGUFFile,
                 _tensor_info_file("t", [4], G.F32, 4, b"\0" * 64))
    expect_error(GGUFError, "block size", GGUFFile,
                 _tensor_info_file("t", [48], G.Q8_0, 0, b"\0" * 64))
    expect_error(GGUFError, "ends past the data section", GGUFFile,
                 _tensor_info_file("t", [32, 4], G.F32, 0, b"\0" * 100))
    g = GGUFFile(good)
    expect_error(GGUFError, "not found", g.tensor, "nope")


def _raw_kv_file(key, vtype):
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    data += struct.pack("<i", vtype) + b"\0" * 8
    return _write("rawkv.gguf", data)


def _tensor_info_file(name, ne, gtype, offset, blob):
    nb = name.encode()
    data = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    data += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
    data += b"".join(struct.pack("<q", x) for x in ne) + struct.pack("<iQ", gtype, offset)
    data += b"\0" * (gguf_ref.align_up(len(data), 32) - len(data)) + blob
    return _write("tinfo.gguf", data)


# --- dequantizers --------------------------------------------------------------------------------

def deq(t, raw):
    blck, tsize = gguf_ref.GGML_BLOCK[t]
    return gguf_ref.dequantize(t, bytes(raw), len(raw) // tsize * blck)


def test_dequant_float_types():
    f32 = struct.pack("<3f", 1.0, -2.5, 3.0e38)
    check_close(deq(G.F32, f32), [1.0, -2.5, float(np.float32(3.0e38))], 0, 0, "F32")
    f16 = struct.pack("<4H", 0x3C00, 0xC000, 0x7BFF, 0x0001)  # 1, -2, 65504, 2^-24
    check_close(deq(G.F16, f16), [1.0, -2.0, 65504.0, 2.0 ** -24], 0, 0, "F16")
    bf16 = struct.pack("<4H", 0x3F80, 0x4049, 0xC2F7, 0x0000)  # 1, 3.140625, -123.5, 0
    check_close(deq(G.BF16, bf16), [1.0, 3.140625, -123.5, 0.0], 0, 0, "BF16")


def test_dequant_q4_0_hand():
    qs = bytearray([0x88] * 16)
    qs[0] = 0x2F   # y[0] = (15 - 8) * 0.5 = 3.5, y[16] = (2 - 8) * 0.5 = -3.0
    qs[15] = 0x80  # y[15] = (0 - 8) * 0.5 = -4.0, y[31] = (8 - 8) * 0.5 = 0
    y = deq(G.Q4_0, f16(0.5) + qs)
    check_close(y[[0, 16, 15, 31, 1, 17]], [3.5, -3.0, -4.0, 0.0, 0.0, 0.0], 0, 0, "Q4_0 hand")
    y = deq(G.Q4_0, f16(0.5) + qs + f16(-2.0) + bytes([0x10] * 16))  # 2nd block: -16, -14
    check_close(y[32:], [16.0] * 16 + [14.0] * 16, 0, 0, "Q4_0 block 2")


def test_dequant_q4_1_hand():
    qs = bytearray(16)
    qs[3] = 0xA1  # y[3] = 1 * 0.25 - 1 = -0.75, y[19] = 10 * 0.25 - 1 = 1.5
    y = deq(G.Q4_1, f16(0.25) + f16(-1.0) + qs)
    check_close(y[[3, 19, 0, 31]], [-0.75, 1.5, -1.0, -1.0], 0, 0, "Q4_1 hand")


def test_dequant_q8_0_hand():
    qs = bytearray(32)
    qs[0], qs[31], qs[5] = 0x80, 0x7F, 0xFF  # -128, 127, -1
    y = deq(G.Q8_0, f16(0.125) + qs)
    check_close(y[[0, 31, 5, 1]], [-16.0, 15.875, -0.125, 0.0], 0, 0, "Q8_0 hand")


def _kq_scales():
    """12 scale bytes with hand-derived (sc, m) per sub-block (get_scale_min_k4):
    j=0: sc = 0xC3 & 63 = 3,  m = 0x45 & 63 = 5
    j=1: sc = 0x81 & 63 = 1,  m = 0xC2 & 63 = 2
    j=4: sc = (0x72 & 0xF) | ((0xC3 >> 6) << 4) = 2 | 48 = 50,  m = (0x72 >> 4) | ((0x45 >> 6) << 4) = 7 | 16 = 23
    j=5: sc = (0x5B & 0xF) | ((0x81 >> 6) << 4) = 11 | 32 = 43, m = (0x5B >> 4) | ((0xC2 >> 6) << 4) = 5 | 48 = 53
    j=7: sc = (0x06 & 0xF) | 0 = 6, m = 0;  j = 2, 3, 6: sc = m = 0."""
    s = bytearray(12)
    s[0], s[4], s[8] = 0xC3, 0x45, 0x72
    s[1], s[5], s[9] = 0x81, 0xC2, 0x5B
    s[11] = 0x06
    return bytes(s)


def test_dequant_q4_k_hand():
    qs = bytearray(128)
    qs[0] = 0x49        # chunk 0: y[0] low nibble 9 (sub-block 0), y[32] high nibble 4 (sub-block 1)
    qs[64 + 7] = 0xAF   # chunk 2: y[135] low 15 (sub-block 4), y[167] high 10 (sub-block 5)
    y = deq(G.Q4_K, f16(1.0) + f16(0.5) + _kq_scales() + qs)
    expect = {
        0: 1.0 * 3 * 9 - 0.5 * 5,        # 24.5
        1: -0.5 * 5,                     # q = 0: -dmin * m0
        32: 1.0 * 1 * 4 - 0.5 * 2,       # 3.0
        135: 1.0 * 50 * 15 - 0.5 * 23,   # 738.5   (j = 4: scale high bits from s[0])
        129: -0.5 * 23,                  # -11.5
        167: 1.0 * 43 * 10 - 0.5 * 53,   # 403.5   (j = 5: high bits from s[1] and s[5])
        160: -0.5 * 53,
        64: 0.0, 231: 0.0, 255: 0.0,
    }
    idx = sorted(expect)
    check_close(y[idx], [expect[i] for i in idx], 0, 0, "Q4_K hand")


def test_dequant_q5_k_hand():
    qs = bytearray(128)
    qs[0] = 0x49
    qs[64 + 7] = 0xAF
    qh = bytearray(32)
    qh[0] = 0x21   # bit 0: +16 on y[0] (sub-block 0); bit 5: +16 on y[160] (sub-block 5, l = 0)
    qh[7] = 0x80   # bit 7: +16 on y[231] (sub-block 7, l = 7)
    qh[9] = 0x02   # bit 1: +16 on y[41] (sub-block 1, l = 9)
    y = deq(G.Q5_K, f16(1.0) + f16(0.5) + _kq_scales() + qh + qs)
    expect = {
        0: 1.0 * 3 * (9 + 16) - 0.5 * 5,   # 72.5
        32: 1.0 * 1 * 4 - 0.5 * 2,         # 3.0 (bit 1 of qh[0] is clear)
        41: 1.0 * 1 * 16 - 0.5 * 2,        # 15.0
        135: 1.0 * 50 * 15 - 0.5 * 23,     # 738.5
        160: 1.0 * 43 * 16 - 0.5 * 53,     # 661.5
        167: 1.0 * 43 * 10 - 0.5 * 53,     # 403.5
        231: 1.0 * 6 * 16,                 # 96.0
        230: 0.0,
    }
    idx = sorted(expect)
    check_close(y[idx], [expect[i] for i in idx], 0, 0, "Q5_K hand")


def test_dequant_q6_k_hand():
    ql = bytearray(128)
    qh = bytearray(64)
    sc = [0] * 16
    sc[0], sc[2], sc[4], sc[9], sc[15] = 2, -3, 1, 4, -1
    ql[0] = 0x5A       # low 10 -> y[0], high 5 -> y[64]
    qh[0] = 0x09       # bits 0-1 = 1 (y[0]), bits 2-3 = 2 (y[32]), bits 4-7 = 0
    ql[32] = 0x03      # low 3 -> y[32], high 0 -> y[96]
    ql[64 + 17] = 0x0F  # second half, l = 17: y[145]
    qh[32 + 17] = 0x03  #   with high bits 3
    ql[64 + 32 + 17] = 0x70  # high nibble 7 -> y[128 + 96 + 17] = y[241]
    raw = ql + qh + struct.pack("<16b", *sc) + f16(0.5)   # d is the last field
    check(len(raw) == 210, "Q6_K block size")
    y = deq(G.Q6_K, raw)
    expect = {
        0: 0.5 * 2 * ((10 | 1 << 4) - 32),      # -6.0
        32: 0.5 * -3 * ((3 | 2 << 4) - 32),     # -4.5
        64: 0.5 * 1 * (5 - 32),                 # -13.5
        96: 0.0,                                # sc[6] = 0
        1: 0.5 * 2 * -32,                       # -32.0: all-zero bits give q = -32
        33: 0.5 * -3 * -32,                     # 48.0
        16: 0.0,                                # sc[1] = 0
        145: 0.5 * 4 * ((15 | 3 << 4) - 32),    # 62.0: sc[8 + 17 // 16] = sc[9]
        241: 0.5 * -1 * ((7 | 0) - 32),         # 12.5: sc[8 + 1 + 6] = sc[15]
        177: 0.0,                               # sc[11] = 0
    }
    idx = sorted(expect)
    check_close(y[idx], [expect[i] for i in idx], 0, 0, "Q6_K hand")


def test_dequant_vs_scalar_oracle():
    rng = np.random.default_rng(7)
    oracles = {G.Q4_0: scalar_q4_0, G.Q4_1: scalar_q4_1, G.Q8_0: scalar_q8_0,
               G.Q4_K: scalar_q4_k, G.Q5_K: scalar_q5_k, G.Q6_K: scalar_q6_k,
               G.Q5_0: scalar_q5_0, G.Q5_1: scalar_q5_1, G.Q2_K: scalar_q2_k, G.Q3_K: scalar_q3_k,
               G.IQ4_NL: scalar_iq4_nl, G.IQ4_XS: scalar_iq4_xs}
    for t, oracle in oracles.items():
        blck = gguf_ref.GGML_BLOCK[t][0]
        for trial in range(3):
            n = blck * (1 + trial * 3)
            raw = random_tensor_bytes(t, n, rng, std=10.0 ** trial)
            check_close(deq(t, raw), oracle(raw), 1e-12, 1e-300,
                        "%s vs scalar oracle (trial %d)" % (gguf_ref.ggml_type_name(t), trial))
        note("%s: 3 random tensors match the scalar loop" % gguf_ref.ggml_type_name(t))
    expect_error(GGUFError, "not supported", gguf_ref.dequantize, G.Q8_1, b"\0" * 36, 32)
    expect_error(GGUFError, "not a multiple", gguf_ref.dequantize, G.Q8_0, b"\0" * 34, 31)


# --- RoPE ----------------------------------------------------------------------------------------

def test_rope_norm_vs_neox():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(1, 1, 6)
    theta = model_ref.rope_angles([1], 4, 10000.0, 1.0)   # [1, 10000^(-1/2)] = [1, 0.01]
    check_close(theta, [[1.0, 0.01]], 1e-15, 0, "theta")
    c1, s1 = 0.5403023058681398, 0.8414709848078965       # cos 1, sin 1
    c2, s2 = math.cos(0.01), math.sin(0.01)
    norm = model_ref.apply_rope(x, theta, 4, model_ref.ROPE_TYPE_NORM).reshape(-1)
    # NORM: pairs (x0, x1) by 1 rad, (x2, x3) by 0.01 rad; x4, x5 pass through (n_rot = 4)
    check_close(norm, [1 * c1 - 2 * s1, 1 * s1 + 2 * c1, 3 * c2 - 4 * s2, 3 * s2 + 4 * c2, 5, 6],
                1e-15, 1e-15, "NORM")
    check_close(norm[:2], [-1.1426396637476532, 1.9220755965441761], 1e-14, 0, "NORM literal")
    neox = model_ref.apply_rope(x, theta, 4, model_ref.ROPE_TYPE_NEOX).reshape(-1)
    # NEOX: pairs (x0, x2) by 1 rad, (x1, x3) by 0.01 rad
    check_close(neox, [1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 1 * s1 + 3 * c1, 2 * s2 + 4 * c2, 5, 6],
                1e-15, 1e-15, "NEOX")
    for rt in (model_ref.ROPE_TYPE_NORM, model_ref.ROPE_TYPE_NEOX):
        y0 = model_ref.apply_rope(x, model_ref.rope_angles([0], 4, 10000.0, 1.0), 4, rt)
        check_close(y0, x, 0, 0, "position 0 is the identity")
    # freq_scale and rope_freqs: theta_i = pos * scale * base^(-2i/n_rot) / freqs[i]
    th = model_ref.rope_angles([0, 3], 4, 500.0, 0.25, np.array([1.0, 4.0]))
    check_close(th, [[0, 0], [3 * 0.25, 3 * 0.25 * 500.0 ** -0.5 / 4]], 1e-15, 0, "scaled theta")


def test_rope_config_keys():
    cases = [  # (extra KV, expected freq_scale)
        ([], 1.0),
        ([("llama.rope.scaling.type", VT.STRING, "linear"),
          ("llama.rope.scaling.factor", VT.FLOAT32, 4.0)], 0.25),
        ([("llama.rope.scale_linear", VT.FLOAT32, 2.0)], 0.5),
        ([("llama.rope.scaling.type", VT.STRING, "none"),
          ("llama.rope.scaling.factor", VT.FLOAT32, 4.0)], 1.0),
    ]
    for extra, want in cases:
        g = GGUFFile(_config_file(extra))
        c = model_ref.config_from_gguf(g)
        check(c.rope_freq_scale == want, "%s: freq_scale %r != %r" % (extra, c.rope_freq_scale, want))
        check(c.rope_freq_base == 10000.0 and c.n_rot == 16 and c.head_dim == 16,
              "defaults: base %r n_rot %r head_dim %r" % (c.rope_freq_base, c.n_rot, c.head_dim))
        check(c.n_head_kv == 4, "head_count_kv defaults to head_count")
    g = GGUFFile(_config_file([("llama.rope.scaling.type", VT.STRING, "yarn")]))
    expect_error(model_ref.ModelError, "yarn", model_ref.config_from_gguf, g)


def _config_file(extra):
    w = GGUFWriter()
    for k, t, v in [("general.architecture", VT.STRING, "llama"),
                    ("llama.embedding_length", VT.UINT32, 64),
                    ("llama.block_count", VT.UINT32, 1),
                    ("llama.feed_forward_length", VT.UINT32, 96),
                    ("llama.attention.head_count", VT.UINT32, 4),
                    ("llama.attention.layer_norm_rms_epsilon", VT.FLOAT32, 1e-5)] + extra:
        w.add(k, t, v)
    w.add_f32("token_embd.weight", np.zeros((10, 64)))
    return w.write(tmp("config.gguf"))


# --- forward -------------------------------------------------------------------------------------

FORWARD_CASES = [
    # llama: GQA 4/2, attn_output bias, Llama-3.1 rope_freqs, linear rope scaling
    dict(arch="llama", attn_output_bias=True, rope_freqs=True, rope_scale_factor=2.0),
    # llama with Q8_0 weights (quantized embedding lookup and matmuls), tied output
    dict(arch="llama", wtype=G.Q8_0, tied=True, n_head_kv=4, seed=2),
    # qwen2: q/k/v biases, output bias, NEOX, MHA-less GQA 4/1
    dict(arch="qwen2", n_head_kv=1, output_bias=True, rope_base=1e6),
    # qwen3: per-head q/k norm, head_dim 32 != n_embd / n_head, tied embeddings, 2 layers
    dict(arch="qwen3", head_dim=32, tied=True, n_layer=2),
    # qwen3 with partial rotary (n_rot < head_dim) in F16
    dict(arch="qwen3", wtype=G.F16, n_rot=8),
    # qwen3moe: 4 experts, top-2, renormalized
    dict(arch="qwen3moe", n_expert=4, n_expert_used=2, n_ff_exp=32),
]


def test_forward_vs_scalar_oracle():
    tokens = [3, 17, 0, 63, 17, 42]
    for i, kw in enumerate(FORWARD_CASES):
        spec = TinyModelSpec(**kw)
        path = build_model(tmp("fwd%d.gguf" % i), spec)
        m = model_ref.load_model(path)
        got = model_ref.forward(m, tokens)
        want = np.array(slow_forward(GGUFFile(path), spec, tokens))
        check_close(got, want, 1e-9, 1e-9, "forward %s" % kw)
        check(not m.unused_tensors(), "unused tensors %s" % m.unused_tensors())
        note("%s: max |diff| %.2e over %d logits" % (kw, np.abs(got - want).max(), want.size))


def test_forward_rejects_bad_models():
    cases = [
        (dict(omit=("llama.embedding_length",)), "llama.embedding_length"),
        (dict(omit=("llama.attention.layer_norm_rms_epsilon",)), "layer_norm_rms_epsilon"),
        (dict(arch="qwen2", omit=("blk.0.attn_k.bias",)), "blk.0.attn_k.bias"),
        (dict(arch="qwen3", omit=("blk.0.attn_q_norm.weight",)), "attn_q_norm"),
        (dict(omit=("blk.0.ffn_down.weight",)), "blk.0.ffn_down.weight"),
    ]
    for kw, needle in cases:
        path = build_model(tmp("bad.gguf"), TinyModelSpec(**kw))

        def run():
            model_ref.forward(model_ref.load_model(path), [1, 2])
        expect_error((model_ref.ModelError, GGUFError), needle, run)
    # metadata that disagrees with a tensor shape
    path = build_model(tmp("bad.gguf"), TinyModelSpec(n_ff=96))
    g = GGUFFile(path)
    g.kv["llama.feed_forward_length"] = 128
    m = model_ref.Model(g, model_ref.config_from_gguf(g))
    expect_error(model_ref.ModelError, "expected [64, 128]", model_ref.forward, m, [1])
    m = model_ref.load_model(path)
    expect_error(model_ref.ModelError, "out of range", model_ref.forward, m, [64])
    w = GGUFWriter()
    w.add("general.architecture", VT.STRING, "gpt2")
    expect_error(model_ref.ModelError, "'gpt2' is not supported", model_ref.load_model,
                 w.write(tmp("gpt2.gguf")))


def test_layer_callback_consistent():
    path = build_model(tmp("cb.gguf"), TinyModelSpec(arch="qwen3", n_layer=3))
    m = model_ref.load_model(path)
    seen = {}
    logits = model_ref.forward(m, [1, 2, 3], on_layer=lambda n, x: seen.__setitem__(n, x.copy()))
    check(list(seen) == ["embd", "blk.0", "blk.1", "blk.2", "result_norm"], "names %s" % list(seen))
    check_close(seen["embd"], GGUFFile(path).dequantize("token_embd.weight")[[1, 2, 3]], 0, 0,
                "embd is the embedding rows")
    w_out = GGUFFile(path).dequantize("output.weight")
    check_close(seen["result_norm"] @ w_out.T, logits, 1e-12, 1e-12, "logits = result_norm W^T")


# --- dump formats, ref.py, compare.py ------------------------------------------------------------

def run_cli(args):
    p = subprocess.run([PY] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def test_dump_formats_roundtrip():
    rng = np.random.default_rng(3)
    d = LogitsDump(11, [0, 0, 1], [0, 1, 2], [5, 6, 7], rng.standard_normal((3, 11)))
    write_logits(tmp("l.bin"), d)
    raw = open(tmp("l.bin"), "rb").read()
    check(raw[:16] == b"NMLG" + struct.pack("<III", 1, 11, 3), "logits header bytes")
    check(len(raw) == 16 + 3 * (12 + 44), "logits record size")
    check(struct.unpack_from("<iii", raw, 16 + 56) == (0, 1, 6), "second record header")
    r = read_logits(tmp("l.bin"))
    check(list(r.kinds) == [0, 0, 1] and list(r.positions) == [0, 1, 2] and
          list(r.tokens) == [5, 6, 7], "records")
    check_close(r.logits, d.logits, 0, 0, "logits values")
    x = rng.standard_normal((4, 6))
    write_layer(tmp("y.bin"), x)
    raw = open(tmp("y.bin"), "rb").read()
    check(raw[:16] == b"NMLY" + struct.pack("<III", 1, 4, 6) and len(raw) == 16 + 96,
          "layer header bytes")
    check_close(read_layer(tmp("y.bin")), x.astype(np.float32), 0, 0, "layer values")


def _ref_run(name, spec, tokens):
    path = build_model(tmp(name + ".gguf"), spec)
    out, layers = tmp(name + ".bin"), tmp(name + "_layers")
    rc, text = run_cli([os.path.join(HERE, "ref.py"), path, "--tokens",
                        ",".join(map(str, tokens)), "--out", out, "--dump-layers", layers])
    check(rc == 0, "ref.py failed (%d):\n%s" % (rc, text))
    return path, out, layers


def _compare(engine, ref, typ, layers=None, extra=(), in_process=True):
    """compare.py's (exit status, output); in-process (fast) or as a subprocess (the CLI)."""
    args = ["--engine", engine, "--ref", ref, "--type", typ]
    if layers:
        args += ["--engine-layers", layers[0], "--ref-layers", layers[1]]
    args += list(extra)
    if not in_process:
        return run_cli([os.path.join(HERE, "compare.py")] + args)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = compare.main(args)
    return rc, out.getvalue()


def test_ref_cli_and_compare_pass():
    tokens = [1, 17, 42, 9, 33, 2]
    spec = TinyModelSpec(arch="qwen2", n_layer=2)
    path, out, layers = _ref_run("cli", spec, tokens)
    d = read_logits(out)
    check(d.n_vocab == 64 and d.n_rows == len(tokens), "n_vocab %d n_rows %d" % (d.n_vocab, d.n_rows))
    check(list(d.kinds) == [KIND_PROMPT] * 6 and list(d.positions) == list(range(6)) and
          list(d.tokens) == tokens, "records")
    logits = model_ref.forward(model_ref.load_model(path), tokens)
    check_close(d.logits, logits.astype(np.float32), 0, 0, "ref.py logits = forward()")
    names = sorted(os.listdir(layers))
    check(names == ["blk.0.bin", "blk.1.bin", "embd.bin", "result_norm.bin"], "layer files %s" % names)
    check(read_layer(os.path.join(layers, "blk.1.bin")).shape == (6, 64), "layer shape")
    rc, text = _compare(out, out, "f32", in_process=False)
    check(rc == 0 and text.strip().splitlines()[-1].startswith("compare: PASS type=f32 max_rel=0"),
          "identical files must pass:\n" + text)
    # perturbation well inside the tolerance passes
    rng = np.random.default_rng(0)
    noisy = LogitsDump(d.n_vocab, d.kinds, d.positions, d.tokens,
                       d.logits * (1 + 1e-3 * rng.standard_normal(d.logits.shape)))
    write_logits(tmp("noisy.bin"), noisy)
    rc, text = _compare(tmp("noisy.bin"), out, "f32")
    check(rc == 0, "1e-3 noise must pass at f32:\n" + text)
    rc, text = run_cli([os.path.join(HERE, "ref.py"), path, "--tokens", "1,64"])
    check(rc == 1 and "out of range" in text, "bad token must fail cleanly:\n" + text)


def test_compare_fails_on_corruption():
    """Checker self-test: every kind of corrupted engine output must fail."""
    tokens = [5, 6, 7, 8, 9]
    _, out, ref_layers = _ref_run("cmp", TinyModelSpec(arch="llama", n_layer=3), tokens)
    d = read_logits(out)

    def variant(name, kinds=None, pos=None, toks=None, logits=None, n_vocab=None):
        lg = d.logits if logits is None else logits
        v = LogitsDump(n_vocab or d.n_vocab, d.kinds if kinds is None else kinds,
                       d.positions if pos is None else pos, d.tokens if toks is None else toks, lg)
        write_logits(tmp(name), v)
        return tmp(name)

    one_row = d.logits.copy()
    one_row[3] = one_row[3][::-1]                 # one row scrambled
    spike = d.logits.copy()
    spike[0, 7] += 5 * np.abs(spike[0]).max()     # one logit off
    nan = d.logits.copy()
    nan[4, 0] = np.nan
    small = d.logits.copy()
    small[2] *= 1.2                               # 20% off in one row
    cases = {
        "scrambled row": variant("c1.bin", logits=one_row),
        "spiked logit": variant("c2.bin", logits=spike),
        "nan": variant("c3.bin", logits=nan),
        "20% row": variant("c4.bin", logits=small),
        "token differs": variant("c5.bin", toks=[5, 6, 7, 8, 10]),
        "pos differs": variant("c6.bin", pos=[0, 1, 2, 3, 5]),
        "kind differs": variant("c7.bin", kinds=[0, 0, 0, 0, 1]),
        "fewer rows": _write_logits_rows(d, 4),
        "n_vocab differs": variant("c9.bin", logits=d.logits[:, :32], n_vocab=32),
    }
    raw = open(out, "rb").read()
    cases["truncated"] = _write("c10.bin", raw[:-10])
    cases["bad magic"] = _write("c11.bin", b"XXXX" + raw[4:])
    cases["missing file"] = tmp("does_not_exist.bin")
    rc, text = _compare(cases["scrambled row"], out, "q4_k", in_process=False)
    check(rc == 1 and text.strip().splitlines()[-1].startswith("compare: FAIL type=q4_k"),
          "the compare.py command must exit 1 on a corrupted file:\n" + text)
    for what, path in cases.items():
        for typ in ("f32", "q4_0"):
            rc, text = _compare(path, out, typ)
            last = text.strip().splitlines()[-1]
            check(rc == 1 and last.startswith("compare: FAIL type=%s" % typ),
                  "%s (%s) must fail with exit 1, got %d:\n%s" % (what, typ, rc, text))
        note("%s: %s" % (what, last))

    # first diverging layer: blk.0 slightly off but within tolerance, blk.1 onwards 4x the
    # f32 tolerance off (2%), and the logits
    eng_layers = tmp("cmp_engine_layers")
    shutil.rmtree(eng_layers, ignore_errors=True)
    shutil.copytree(ref_layers, eng_layers)
    for name, factor in (("blk.0", 1.002), ("blk.1", 1.02), ("blk.2", 1.5), ("result_norm", 1.5)):
        p = os.path.join(eng_layers, name + ".bin")
        write_layer(p, read_layer(p) * factor)
    rc, text = _compare(cases["20% row"], out, "f32", layers=(eng_layers, ref_layers))
    check(rc == 1 and "first layer output beyond tolerance: blk.1" in text,
          "must name blk.1 as first divergence:\n" + text)
    # all layers fine: the divergence is in the output head
    rc, text = _compare(cases["20% row"], out, "f32", layers=(ref_layers, ref_layers))
    check(rc == 1 and "output head" in text, "must blame the output head:\n" + text)
    os.remove(os.path.join(eng_layers, "blk.0.bin"))
    rc, text = _compare(cases["20% row"], out, "f32", layers=(eng_layers, ref_layers))
    check(rc == 1 and "first layer output beyond tolerance: blk.0" in text,
          "a missing layer file is a divergence:\n" + text)


def _write_logits_rows(d, n):
    v = LogitsDump(d.n_vocab, d.kinds[:n], d.positions[:n], d.tokens[:n], d.logits[:n])
    write_logits(tmp("c8.bin"), v)
    return tmp("c8.bin")


def test_tolerance_margins():
    """The tolerances cover the engine's emulated numerics with >= 2x margin on models like the
    tiny presets, and a RoPE-pairing bug exceeds them >= 2x."""
    types = {"f32": G.F32, "f16": G.F16, "bf16": G.BF16, "q8_0": G.Q8_0, "q4_0": G.Q4_0,
             "q4_1": G.Q4_1, "q4_k": G.Q4_K, "q5_k": G.Q5_K, "q6_k": G.Q6_K}
    tokens = [1, 17, 42, 99, 7, 200, 13, 255, 64, 128, 3, 77]
    engine = EngineNumerics(q8_block=32, float_act="bf16", f16_weights_to_bf16=True)
    for name, t in types.items():
        tol = compare.TOLERANCES[name]
        for arch in ("llama", "qwen3"):
            spec = TinyModelSpec(arch=arch, wtype=t, n_vocab=256, n_embd=256, n_layer=2,
                                 n_head=4, n_head_kv=2, n_ff=512, seed=5)
            m = model_ref.load_model(build_model(tmp("tol.gguf"), spec))
            exact = model_ref.forward(m, tokens)
            emu = model_ref.forward(m, tokens, numerics=engine)
            err = compare.row_errors(emu, exact)[0].max()
            orig = model_ref.apply_rope
            model_ref.apply_rope = lambda x, th, n, rt: orig(x, th, n, 2 - rt)
            try:
                bug = compare.row_errors(model_ref.forward(m, tokens), exact)[0].max()
            finally:
                model_ref.apply_rope = orig
            note("%-5s %-6s tol %.0e  emulated engine %.2e  rope bug %.2e" % (name, arch, tol, err, bug))
            check(err <= tol / 2, "%s %s: emulated engine error %.3e exceeds tol/2 = %.3e"
                  % (name, arch, err, tol / 2))
            check(bug >= 2 * tol, "%s %s: rope bug error %.3e below 2 tol = %.3e"
                  % (name, arch, bug, 2 * tol))


# --- runner --------------------------------------------------------------------------------------

def main(argv):
    global TMP, VERBOSE
    args = list(argv[1:])
    only = None
    if "-v" in args:
        VERBOSE = True
        args.remove("-v")
    if "-k" in args:
        only = args[args.index("-k") + 1]
    tests = [(n, f) for n, f in list(globals().items())   # definition order
             if n.startswith("test_") and callable(f) and (only is None or only in n)]
    failed = []
    TMP = tempfile.mkdtemp(prefix="nm_ref_selftest_")
    t_all = time.time()
    try:
        for name, fn in tests:
            t0 = time.time()
            log = io.StringIO()
            try:
                with redirect_stdout(log) if not VERBOSE else _null():
                    fn()
                print("PASS %-36s %.2fs" % (name, time.time() - t0))
            except Exception:
                failed.append(name)
                print("FAIL %s\n%s%s" % (name, log.getvalue(), traceback.format_exc()))
                print("  repro: %s %s -k %s -v" % (PY, os.path.abspath(__file__), name))
    finally:
        if not failed:
            shutil.rmtree(TMP, ignore_errors=True)
        else:
            print("files kept in %s" % TMP)
    print("reference self-test: %d passed, %d failed (%.1fs)"
          % (len(tests) - len(failed), len(failed), time.time() - t_all))
    return 1 if failed or not tests else 0


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
