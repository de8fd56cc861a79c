"""GGUF reader and dequantizer for numallm's independent reference implementation.

This module is deliberately independent of the C engine and of gguf-py: it parses GGUF v2/v3
files itself (shared/FORMATS.md, "GGUF v3 file layout") and dequantizes every weight type the
engine supports, straight from the block formulas in FORMATS.md ("Quantized block layouts").

Layout recap (all little-endian):
    "GGUF" | uint32 version (2 or 3) | uint64 n_tensors | uint64 n_kv
    n_kv x   { string key | int32 value_type | value }
    n_tensors x { string name | uint32 n_dims | int64 ne[n_dims] | int32 ggml_type | uint64 offset }
    zero padding to general.alignment (default 32) | data blob (tensor offsets are relative to it)
    string = uint64 length + bytes (no NUL); array = int32 elem_type + uint64 n + elements.

Public API:
    GGUFFile(path)                  parse a file (raises GGUFError with a precise message)
      .version, .kv (dict key -> value; arrays are Python lists), .kv_type (key -> (type, elem))
      .alignment, .data_offset, .tensors (dict name -> TensorInfo, in file order)
      .tensor_bytes(name)           the tensor's raw bytes as a read-only uint8 view of the mmap
      .dequantize(name)             float64 array of shape reversed(ne), e.g. [ne1, ne0]
      .dequantize_rows(name, rows)  float64 [len(rows), ne0] for a 2-D tensor (embedding lookup)
    dequantize(ggml_type, raw, n)   float64 [n] from raw block bytes of one type

Every dequantizer works on whole rows of blocks with vectorized numpy and returns float64. The
fp16 fields are converted exactly (fp16 -> float64 is exact); products are then formed in
float64, so the reference is at least as precise as ggml's float32 dequantizers.
"""

import os
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGUF_MAX_DIMS = 4


class GGUFError(Exception):
    """A malformed or unsupported GGUF file; the message names the field, value and offset."""


# --- GGUF metadata value types (gguf_type) -------------------------------------------------------

class GGUFValueType:
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# Fixed-size value types: numpy little-endian dtype of one element.
GGUF_SCALAR_DTYPE = {
    GGUFValueType.UINT8: np.dtype("<u1"),
    GGUFValueType.INT8: np.dtype("<i1"),
    GGUFValueType.UINT16: np.dtype("<u2"),
    GGUFValueType.INT16: np.dtype("<i2"),
    GGUFValueType.UINT32: np.dtype("<u4"),
    GGUFValueType.INT32: np.dtype("<i4"),
    GGUFValueType.FLOAT32: np.dtype("<f4"),
    GGUFValueType.BOOL: np.dtype("<u1"),  # 1 byte; any non-zero byte reads as True
    GGUFValueType.UINT64: np.dtype("<u8"),
    GGUFValueType.INT64: np.dtype("<i8"),
    GGUFValueType.FLOAT64: np.dtype("<f8"),
}


# --- ggml tensor types ---------------------------------------------------------------------------

class GGMLType:
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30


GGML_TYPE_NAME = {v: k for k, v in vars(GGMLType).items() if not k.startswith("_")}

# (elements per block, bytes per block) for every type whose size is known here. A tensor of a
# type not listed can be parsed (its info is kept) but not located or dequantized.
GGML_BLOCK = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 18),
    GGMLType.Q4_1: (32, 20),
    GGMLType.Q5_0: (32, 22),
    GGMLType.Q5_1: (32, 24),
    GGMLType.Q8_0: (32, 34),
    GGMLType.Q8_1: (32, 36),
    GGMLType.Q2_K: (256, 84),
    GGMLType.Q3_K: (256, 110),
    GGMLType.Q4_K: (256, 144),
    GGMLType.Q5_K: (256, 176),
    GGMLType.Q6_K: (256, 210),
    GGMLType.Q8_K: (256, 292),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.BF16: (1, 2),
    GGMLType.IQ4_NL: (32, 18),
    GGMLType.IQ4_XS: (256, 136),
    GGMLType.IQ2_XXS: (256, 66),
    GGMLType.IQ2_XS: (256, 74),
    GGMLType.IQ2_S: (256, 82),
    GGMLType.IQ3_XXS: (256, 98),
    GGMLType.IQ3_S: (256, 110),
    GGMLType.IQ1_S: (256, 50),
    GGMLType.IQ1_M: (256, 56),
}


def ggml_type_name(t):
    """Human-readable name of a ggml type id ('Q4_K'), or 'type<id>' when unknown."""
    return GGML_TYPE_NAME.get(t, "type%d" % t)


def align_up(x, a):
    """Smallest multiple of a that is >= x."""
    return (x + a - 1) // a * a


# --- dequantizers --------------------------------------------------------------------------------
# Each takes the raw bytes of n_blocks whole blocks as a uint8 array of shape [n_blocks, bytes]
# and returns float64 [n_blocks, elements_per_block].

def _f16_field(blocks, off):
    """The fp16 field at byte offset off of every block, as float64 [n_blocks]."""
    return blocks[:, off:off + 2].copy().view("<f2")[:, 0].astype(np.float64)


def dequant_q4_0(b):
    """Q4_0: d; qs[16]. y[j] = ((qs[j] & 0xF) - 8) d, y[j+16] = ((qs[j] >> 4) - 8) d."""
    d = _f16_field(b, 0)
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float64) - 8.0
    return q * d[:, None]


def dequant_q4_1(b):
    """Q4_1: d, m; qs[16]. y = q d + m with Q4_0's nibble order (no -8)."""
    d = _f16_field(b, 0)
    m = _f16_field(b, 2)
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float64)
    return q * d[:, None] + m[:, None]


def dequant_q8_0(b):
    """Q8_0: d; int8 qs[32]. y = qs d."""
    d = _f16_field(b, 0)
    qs = b[:, 2:34].view(np.int8).astype(np.float64)
    return qs * d[:, None]


def _qh_bits(b, off, n):
    """The n bits of the little-endian u32 field at byte offset off, int64 [n_blocks, n]."""
    qh = b[:, off:off + 4].copy().view("<u4")[:, 0].astype(np.int64)
    return (qh[:, None] >> np.arange(n)[None, :]) & 1


def dequant_q5_0(b):
    """Q5_0: d; qh (u32); qs[16]. q = nibble | bit j of qh << 4 (Q4_0's nibble order: value j < 16
    from the low nibble of qs[j] with bit j, value j + 16 from its high nibble with bit j + 16);
    y = (q - 16) d."""
    d = _f16_field(b, 0)
    qs = b[:, 6:22].astype(np.int64)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1) | (_qh_bits(b, 2, 32) << 4)
    return (q.astype(np.float64) - 16.0) * d[:, None]


def dequant_q5_1(b):
    """Q5_1: d, m; qh (u32); qs[16]. q as Q5_0; y = q d + m."""
    d = _f16_field(b, 0)
    m = _f16_field(b, 2)
    qs = b[:, 8:24].astype(np.int64)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1) | (_qh_bits(b, 4, 32) << 4)
    return q.astype(np.float64) * d[:, None] + m[:, None]


# The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml-common.h kvalues_iq4nl: format data).
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)


def dequant_iq4_nl(b):
    """IQ4_NL: d; qs[16]. y = d * level[nibble], Q4_0's nibble order."""
    d = _f16_field(b, 0)
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1)
    return IQ4_LEVELS[q] * d[:, None]


def dequant_iq4_xs(b):
    """IQ4_XS: d; scales_h (u16); scales_l[4]; qs[128]. Sub-block i (32 values) has the 6-bit scale
    ls = (4 bits of scales_l[i/2] at 4*(i%2)) | (2 bits of scales_h at 2i) << 4, and its 16 bytes of
    qs in IQ4_NL's nibble order; y = d (ls - 32) level[nibble]."""
    d = _f16_field(b, 0)
    sh = b[:, 2:4].copy().view("<u2")[:, 0].astype(np.int64)
    sl = b[:, 4:8].astype(np.int64)
    i = np.arange(8)
    ls = ((sl[:, i // 2] >> (4 * (i % 2))) & 0xF) | (((sh[:, None] >> (2 * i)) & 3) << 4)
    qs = b[:, 8:136].reshape(-1, 8, 16)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=2)               # [n, 8, 32]
    y = IQ4_LEVELS[q] * (d[:, None] * (ls - 32))[:, :, None]
    return y.reshape(-1, 256)


def dequant_q2_k(b):
    """Q2_K: scales[16]; qs[64]; d; dmin (d and dmin last). Group g (16 values) has scale nibble
    scales[g] & 0xF and min nibble scales[g] >> 4: y = d sc q - dmin m. In each half h (128 values,
    qs[32h .. 32h + 31]) the 2-bit field at shift 2s of byte l is value 128h + 32s + l."""
    sc = b[:, 0:16].astype(np.int64)
    qs = b[:, 16:80].astype(np.int64).reshape(-1, 2, 1, 32)
    d = _f16_field(b, 80)
    dmin = _f16_field(b, 82)
    q = (qs >> (2 * np.arange(4))[None, None, :, None]) & 3          # [n, half, shift, 32]
    q = q.reshape(-1, 16, 16)                                        # groups of 16 in order
    y = d[:, None, None] * (sc & 0xF)[:, :, None] * q - dmin[:, None, None] * (sc >> 4)[:, :, None]
    return y.reshape(-1, 256)


def dequant_q3_k(b):
    """Q3_K: hmask[32]; qs[64]; scales[12]; d. 16 signed 6-bit scales: scale j's low 4 bits are
    nibble (j // 8) of byte j % 8 of scales[0:8], its high 2 bits the 2-bit field at 2 (j // 4) of
    byte scales[8 + j % 4]; minus 32. Value v = 128h + 32s + l (half h, shift s, byte l of the
    half's 32 qs bytes; group (v // 16)): q = 2-bit field at 2s of qs[32h + l], minus 4 unless bit
    (4h + s) of hmask[v % 32] is set; y = d scale q."""
    hm = b[:, 0:32].astype(np.int64)
    qs = b[:, 32:96].astype(np.int64).reshape(-1, 2, 1, 32)
    s = b[:, 96:108].astype(np.int64)
    d = _f16_field(b, 108)
    j = np.arange(16)
    scale = ((s[:, j % 8] >> (4 * (j // 8))) & 0xF) | (((s[:, 8 + j % 4] >> (2 * (j // 4))) & 3) << 4)
    scale = scale - 32
    shift = np.arange(4)[None, None, :, None]
    q = (qs >> (2 * shift)) & 3                                      # [n, half, shift, 32]
    bit = 4 * np.arange(2)[None, :, None, None] + shift               # hmask bit per (half, shift)
    high = (hm[:, None, None, :] >> bit) & 1
    q = q - 4 * (1 - high)
    y = d[:, None, None] * scale[:, :, None] * q.reshape(-1, 16, 16)
    return y.reshape(-1, 256)


# --- the grid ("codebook") types -----------------------------------------------------------------
# Their codebooks are format data: read from kernels/blocks/iq_grids.h (generated from ggml's
# ggml-common.h, with provenance and SHA-256s that tests/kernels/test_blocks_iq.c checks); the
# decoding below is written from the block layouts (kernels/blocks/FORMATS.md), independently of
# the C decoders. vs_llamacpp.py checks it against llama.cpp's exact logits.

_GRIDS = None


def iq_grids():
    """{name: int64 [entries, values]} of every codebook in iq_grids.h (IQ1: int8 values -1/0/1)."""
    global _GRIDS
    if _GRIDS is None:
        import re
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "blocks", "iq_grids.h")
        with open(path) as f:
            text = f.read()
        _GRIDS = {}
        for ctype, name, n, body in re.findall(r"BLK_TABLE (uint64_t|uint32_t) iq_grid_(\w+)\[(\d+)\] = \{([^}]*)\}", text):
            vals = [int(v, 16) for v in re.findall(r"0x([0-9a-fA-F]+)", body)]
            width = 8 if ctype == "uint64_t" else 4
            if len(vals) != int(n):
                raise GGUFError("iq_grids.h: %s has %d entries, declared %s" % (name, len(vals), n))
            g = np.array([[(v >> (8 * j)) & 0xFF for j in range(width)] for v in vals], dtype=np.int64)
            if name == "iq1s":
                g = np.where(g >= 128, g - 256, g)  # int8 bytes
            _GRIDS[name] = g
    return _GRIDS


def _signs8(byte_vals):
    """[..., 8] of +1/-1 from the low 8 bits (bit j set: value j negative)."""
    b = np.asarray(byte_vals, dtype=np.int64)[..., None]
    return 1.0 - 2.0 * ((b >> np.arange(8)) & 1)


def _signs7(v7):
    """The 8 signs of a 7-bit sign field: bit 7 is the parity of the 7 stored bits (an even
    number of minus signs in every group of 8)."""
    v7 = np.asarray(v7, dtype=np.int64)
    par = np.zeros_like(v7)
    for j in range(7):
        par ^= (v7 >> j) & 1
    return _signs8(v7 | (par << 7))


def _u16s(b, off, n):
    return b[:, off:off + 2 * n].copy().view("<u2").astype(np.int64)


def dequant_iq2_xxs(b):
    """IQ2_XXS: d; qs as 8 pairs of u32 (a, s) per sub-block: bytes of a index the 256-entry grid for
    the 4 groups of 8; s holds 4 sign fields of 7 bits (bits 7l) and the scale in bits 28-31:
    y = d (0.5 + scale) / 4 * grid * sign."""
    g = iq_grids()["iq2xxs"]
    d = _f16_field(b, 0)
    w = b[:, 2:66].copy().view("<u4").astype(np.int64).reshape(-1, 8, 2)
    a, s = w[:, :, 0], w[:, :, 1]
    db = d[:, None] * (0.5 + (s >> 28)) * 0.25                           # [n, 8]
    l = np.arange(4)
    idx = (a[:, :, None] >> (8 * l)) & 0xFF                               # [n, 8, 4]
    sg = _signs7((s[:, :, None] >> (7 * l)) & 127)                        # [n, 8, 4, 8]
    y = db[:, :, None, None] * g[idx] * sg
    return y.reshape(-1, 256)


def dequant_iq2_xs(b):
    """IQ2_XS: d; qs[32] u16 (9-bit grid index, 7-bit sign field); scales[8] (a nibble per 16
    values): y = d (0.5 + nibble) / 4 * grid * sign."""
    g = iq_grids()["iq2xs"]
    d = _f16_field(b, 0)
    q = _u16s(b, 2, 32).reshape(-1, 8, 4)
    sc = b[:, 66:74].astype(np.int64)
    nib = np.stack([sc & 0xF, sc >> 4], axis=2)                           # [n, 8, 2]
    db = d[:, None, None] * (0.5 + nib) * 0.25
    y = db[:, :, [0, 0, 1, 1], None] * g[q & 511] * _signs7(q >> 9)
    return y.reshape(-1, 256)


def dequant_iq2_s(b):
    """IQ2_S: d; qs[32] (low 8 bits of the 10-bit grid indices); signs[32] (a byte per group of 8);
    qh[8] (2 high index bits per group, bits 2l of qh[sub-block]); scales[8] as IQ2_XS."""
    g = iq_grids()["iq2s"]
    d = _f16_field(b, 0)
    lo = b[:, 2:34].astype(np.int64).reshape(-1, 8, 4)
    sgn = b[:, 34:66].reshape(-1, 8, 4)
    qh = b[:, 66:74].astype(np.int64)
    sc = b[:, 74:82].astype(np.int64)
    l = np.arange(4)
    idx = lo | (((qh[:, :, None] >> (2 * l)) & 3) << 8)
    nib = np.stack([sc & 0xF, sc >> 4], axis=2)
    db = d[:, None, None] * (0.5 + nib) * 0.25
    y = db[:, :, [0, 0, 1, 1], None] * g[idx] * _signs8(sgn)
    return y.reshape(-1, 256)


def dequant_iq3_xxs(b):
    """IQ3_XXS: d; 64 grid-index bytes (8 per sub-block, groups of 4 values); 8 u32 of 4 sign fields
    of 7 bits (for 8 values each) and the scale in bits 28-31: y = d (0.5 + scale) / 2 * grid * sign."""
    g = iq_grids()["iq3xxs"]
    d = _f16_field(b, 0)
    idx = b[:, 2:66].astype(np.int64).reshape(-1, 8, 8)
    s = b[:, 66:98].copy().view("<u4").astype(np.int64)                   # [n, 8]
    db = d[:, None] * (0.5 + (s >> 28)) * 0.5
    vals = g[idx].reshape(-1, 8, 4, 8)                                    # 4 groups of 8 values
    sg = _signs7((s[:, :, None] >> (7 * np.arange(4))) & 127)
    y = db[:, :, None, None] * vals * sg
    return y.reshape(-1, 256)


def dequant_iq3_s(b):
    """IQ3_S: d; qs[64] (low 8 bits of the 9-bit indices, groups of 4); qh[8] (bit k of qh[sub-block]
    is the high index bit of its group k); signs[32] (a byte per 8 values); scales[4] (a nibble per
    sub-block): y = d (1 + 2 nibble) * grid * sign."""
    g = iq_grids()["iq3s"]
    d = _f16_field(b, 0)
    lo = b[:, 2:66].astype(np.int64).reshape(-1, 8, 8)
    qh = b[:, 66:74].astype(np.int64)
    sgn = b[:, 74:106].reshape(-1, 8, 4)
    sc = b[:, 106:110].astype(np.int64)
    nib = np.stack([sc & 0xF, sc >> 4], axis=2).reshape(-1, 8)
    idx = lo | (((qh[:, :, None] >> np.arange(8)) & 1) << 8)
    vals = g[idx].reshape(-1, 8, 4, 8)
    db = d[:, None] * (1 + 2 * nib)
    y = db[:, :, None, None] * vals * _signs8(sgn)
    return y.reshape(-1, 256)


def dequant_iq1_s(b):
    """IQ1_S: d; qs[32] (low 8 bits of 11-bit indices into the 2048-entry grid of -1/0/1); qh[8] u16
    per sub-block: 3 high index bits per group (bits 3l), the scale in bits 12-14, the delta's sign
    in bit 15: y = d (2 scale + 1) (grid + delta), delta = -1/8 when bit 15 is set, else +1/8."""
    g = iq_grids()["iq1s"]
    d = _f16_field(b, 0)
    lo = b[:, 2:34].astype(np.int64).reshape(-1, 8, 4)
    qh = _u16s(b, 34, 8)
    idx = lo | (((qh[:, :, None] >> (3 * np.arange(4))) & 7) << 8)
    dl = d[:, None] * (2 * ((qh >> 12) & 7) + 1)
    delta = np.where(qh & 0x8000, -0.125, 0.125)
    y = dl[:, :, None, None] * (g[idx] + delta[:, :, None, None])
    return y.reshape(-1, 256)


def dequant_iq1_m(b):
    """IQ1_M: qs[32]; qh[16] (per group of 8 values a nibble: 3 high index bits and the delta's sign
    in bit 3); scales as 4 u16: 3-bit scales per 16 values (bits 6 (j%2) and 6 (j%2) + 3 of u16
    j/2 for sub-block j), and d's 16 fp16 bits from their top nibbles (u16 k gives bits 4k..4k+3):
    y = d (2 scale + 1) (grid + delta)."""
    g = iq_grids()["iq1s"]
    lo = b[:, 0:32].astype(np.int64).reshape(-1, 8, 4)
    qh = b[:, 32:48].astype(np.int64).reshape(-1, 8, 2)
    sc = _u16s(b, 48, 4)
    dbits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0xF0) | ((sc[:, 2] >> 4) & 0xF00) | (sc[:, 3] & 0xF000)
    d = dbits.astype("<u2").view("<f2").astype(np.float64)
    nib = np.stack([qh & 0xF, qh >> 4], axis=3).reshape(-1, 8, 4)          # group l: nibble l
    idx = lo | ((nib & 7) << 8)
    delta = np.where(nib & 8, -0.125, 0.125)
    j = np.arange(8)
    s = sc[:, j // 2] >> (6 * (j % 2))                                     # [n, 8]
    dl = d[:, None, None] * (2 * np.stack([s & 7, (s >> 3) & 7], axis=2) + 1)   # [n, 8, 2]
    y = dl[:, :, [0, 0, 1, 1], None] * (g[idx] + delta[:, :, :, None])
    return y.reshape(-1, 256)


def k_scales_mins(s):
    """Unpack the 12-byte K-quant scale field (get_scale_min_k4) into 8 (scale, min) pairs.

    s: uint8 [n_blocks, 12]. For j < 4: sc = s[j] & 63, m = s[j+4] & 63; for j >= 4:
    sc = (s[j+4] & 0xF) | ((s[j-4] >> 6) << 4), m = (s[j+4] >> 4) | ((s[j] >> 6) << 4).
    Returns (sc, m) as float64 [n_blocks, 8].
    """
    s = s.astype(np.int64)
    sc = np.empty((s.shape[0], 8), dtype=np.int64)
    mn = np.empty((s.shape[0], 8), dtype=np.int64)
    sc[:, 0:4] = s[:, 0:4] & 63
    mn[:, 0:4] = s[:, 4:8] & 63
    sc[:, 4:8] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float64), mn.astype(np.float64)


def _k_nibbles(qs):
    """The 256 4-bit quants of a Q4_K/Q5_K block in output order, int64 [n_blocks, 8, 32].

    qs: uint8 [n_blocks, 128], four 32-byte chunks. Chunk c gives sub-block 2c from its low
    nibbles and sub-block 2c+1 from its high nibbles.
    """
    chunks = qs.reshape(-1, 4, 32).astype(np.int64)
    return np.stack([chunks & 0xF, chunks >> 4], axis=2).reshape(-1, 8, 32)


def dequant_q4_k(b):
    """Q4_K: d, dmin; scales[12]; qs[128]. Sub-block s: y = d sc_s q - dmin m_s."""
    d = _f16_field(b, 0)
    dmin = _f16_field(b, 2)
    sc, mn = k_scales_mins(b[:, 4:16])
    q = _k_nibbles(b[:, 16:144]).astype(np.float64)
    y = (d[:, None, None] * sc[:, :, None]) * q - (dmin[:, None, None] * mn[:, :, None])
    return y.reshape(-1, 256)


def dequant_q5_k(b):
    """Q5_K: d, dmin; scales[12]; qh[32]; qs[128]. As Q4_K, with q += 16 when the 5th bit is set.

    The 5th bit of value l of sub-block s is bit s of qh[l] (mask u1 = 1, u2 = 2 for chunk 0,
    both shifted left by 2 per 64-value chunk: sub-block 2c uses bit 2c, 2c+1 uses bit 2c+1).
    """
    d = _f16_field(b, 0)
    dmin = _f16_field(b, 2)
    sc, mn = k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int64)                      # [n, 32]
    bits = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1  # [n, 8 sub-blocks, 32]
    q = (_k_nibbles(b[:, 48:176]) + 16 * bits).astype(np.float64)
    y = (d[:, None, None] * sc[:, :, None]) * q - (dmin[:, None, None] * mn[:, :, None])
    return y.reshape(-1, 256)


def dequant_q6_k(b):
    """Q6_K: ql[128]; qh[64]; int8 scales[16]; d (d last). y = d sc[i // 16] (q - 32).

    Per 128-value half n (ql += 64, qh += 32 per half), for l < 32:
      q1 = (ql[l] & 0xF)    | ((qh[l] & 3) << 4)         -> y[l]
      q2 = (ql[l+32] & 0xF) | (((qh[l] >> 2) & 3) << 4)  -> y[l+32]
      q3 = (ql[l] >> 4)     | (((qh[l] >> 4) & 3) << 4)  -> y[l+64]
      q4 = (ql[l+32] >> 4)  | (((qh[l] >> 6) & 3) << 4)  -> y[l+96]
    with scales sc[8n + l/16 + {0, 2, 4, 6}], which is sc[(position in block) // 16].
    """
    ql = b[:, 0:128].astype(np.int64).reshape(-1, 2, 2, 32)   # [n, half, lo/hi 32, l]
    qh = b[:, 128:192].astype(np.int64).reshape(-1, 2, 32)    # [n, half, l]
    sc = b[:, 192:208].view(np.int8).astype(np.float64)       # [n, 16]
    d = _f16_field(b, 208)
    a, c = ql[:, :, 0, :], ql[:, :, 1, :]
    q1 = (a & 0xF) | ((qh & 3) << 4)
    q2 = (c & 0xF) | (((qh >> 2) & 3) << 4)
    q3 = (a >> 4) | (((qh >> 4) & 3) << 4)
    q4 = (c >> 4) | (((qh >> 6) & 3) << 4)
    q = np.stack([q1, q2, q3, q4], axis=2).reshape(-1, 256).astype(np.float64) - 32.0
    return d[:, None] * np.repeat(sc, 16, axis=1) * q


def _dequant_float(b, dtype):
    return b.reshape(-1).view(dtype).astype(np.float64).reshape(-1, 1)


def dequant_bf16(b):
    """BF16: the upper 16 bits of an IEEE float32."""
    u = b.reshape(-1).view("<u2").astype(np.uint32) << 16
    return u.view(np.float32).astype(np.float64).reshape(-1, 1)


DEQUANTIZERS = {
    GGMLType.F32: lambda b: _dequant_float(b, "<f4"),
    GGMLType.F16: lambda b: _dequant_float(b, "<f2"),
    GGMLType.BF16: dequant_bf16,
    GGMLType.Q4_0: dequant_q4_0,
    GGMLType.Q4_1: dequant_q4_1,
    GGMLType.Q8_0: dequant_q8_0,
    GGMLType.Q4_K: dequant_q4_k,
    GGMLType.Q5_K: dequant_q5_k,
    GGMLType.Q6_K: dequant_q6_k,
    GGMLType.Q5_0: dequant_q5_0,
    GGMLType.Q5_1: dequant_q5_1,
    GGMLType.Q2_K: dequant_q2_k,
    GGMLType.Q3_K: dequant_q3_k,
    GGMLType.IQ4_NL: dequant_iq4_nl,
    GGMLType.IQ4_XS: dequant_iq4_xs,
    GGMLType.IQ2_XXS: dequant_iq2_xxs,
    GGMLType.IQ2_XS: dequant_iq2_xs,
    GGMLType.IQ2_S: dequant_iq2_s,
    GGMLType.IQ3_XXS: dequant_iq3_xxs,
    GGMLType.IQ3_S: dequant_iq3_s,
    GGMLType.IQ1_S: dequant_iq1_s,
    GGMLType.IQ1_M: dequant_iq1_m,
}


def dequantize(ggml_type, raw, n):
    """Dequantize n values of ggml_type from raw bytes (anything np.frombuffer accepts).

    n must be a multiple of the type's block size and raw exactly n/block*type_size bytes.
    Returns float64 [n].
    """
    if ggml_type not in DEQUANTIZERS:
        raise GGUFError("dequantize: type %s is not supported by the reference (supported: %s)"
                        % (ggml_type_name(ggml_type),
                           ", ".join(ggml_type_name(t) for t in DEQUANTIZERS)))
    blck, tsize = GGML_BLOCK[ggml_type]
    if n % blck:
        raise GGUFError("dequantize: %d values is not a multiple of %s's block of %d"
                        % (n, ggml_type_name(ggml_type), blck))
    b = np.frombuffer(raw, dtype=np.uint8)
    if b.size != n // blck * tsize:
        raise GGUFError("dequantize: %s needs %d bytes for %d values, got %d"
                        % (ggml_type_name(ggml_type), n // blck * tsize, n, b.size))
    return DEQUANTIZERS[ggml_type](b.reshape(-1, tsize)).reshape(n)


# --- the file ------------------------------------------------------------------------------------

class TensorInfo:
    """One tensor info record: name, ne (ne[0] = row length first), ggml type, data offset."""

    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = tuple(ne)
        self.ggml_type = ggml_type
        self.offset = offset  # relative to the start of the data section
        self.n_elements = int(np.prod(self.ne, dtype=np.int64)) if self.ne else 1
        blk = GGML_BLOCK.get(ggml_type)
        self.nbytes = None if blk is None else self.n_elements // blk[0] * blk[1]

    @property
    def shape(self):
        """numpy shape (slowest dimension first): reversed(ne)."""
        return tuple(reversed(self.ne))

    def __repr__(self):
        return "TensorInfo(%s, ne=%s, %s, offset=%d)" % (
            self.name, list(self.ne), ggml_type_name(self.ggml_type), self.offset)


class _Cursor:
    """Bounds-checked little-endian reads over the mapped file."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("truncated file: reading %s needs %d bytes at offset %d, file has %d"
                            % (what, n, self.pos, len(self.buf)))
        start = self.pos
        self.pos += n
        return self.buf[start:self.pos]

    def scalar(self, dtype, what):
        dtype = np.dtype(dtype)
        return self.take(dtype.itemsize, what).view(dtype)[0].item()

    def string(self, what):
        n = self.scalar("<u8", what + " length")
        raw = bytes(self.take(n, what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="surrogateescape")


class GGUFFile:
    """A parsed GGUF file whose data section stays memory-mapped (read-only)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
        if size == 0:
            raise GGUFError("%s: empty file" % path)
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        cur = _Cursor(self.buf)
        self._parse_header(cur)
        self._parse_kv(cur)
        self._parse_alignment()
        self._parse_tensor_infos(cur)
        self.data_offset = align_up(cur.pos, self.alignment)
        self._check_tensor_extents()

    # header: magic, version, counts
    def _parse_header(self, cur):
        magic = bytes(cur.take(4, "magic"))
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: bad magic %r, expected %r" % (self.path, magic, GGUF_MAGIC))
        self.version = cur.scalar("<u4", "version")
        if self.version not in (2, 3):
            if self.version & 0xFFFFFF == 0 and self.version >> 24 in (2, 3):
                raise GGUFError("%s: big-endian GGUF files are not supported" % self.path)
            raise GGUFError("%s: GGUF version %d is not supported (2 and 3 are)"
                            % (self.path, self.version))
        self.n_tensors = cur.scalar("<u8", "n_tensors")
        self.n_kv = cur.scalar("<u8", "n_kv")

    def _read_value(self, cur, vtype, what):
        if vtype == GGUFValueType.STRING:
            return cur.string(what)
        if vtype in GGUF_SCALAR_DTYPE:
            v = cur.scalar(GGUF_SCALAR_DTYPE[vtype], what)
            return bool(v) if vtype == GGUFValueType.BOOL else v
        raise GGUFError("%s: unknown value type %d at offset %d" % (what, vtype, cur.pos - 4))

    def _read_array(self, cur, what):
        etype = cur.scalar("<i4", what + " element type")
        n = cur.scalar("<u8", what + " element count")
        if etype == GGUFValueType.ARRAY:
            raise GGUFError("%s: arrays of arrays are not allowed" % what)
        if etype == GGUFValueType.STRING:
            return etype, [cur.string("%s[%d]" % (what, i)) for i in range(n)]
        if etype not in GGUF_SCALAR_DTYPE:
            raise GGUFError("%s: unknown array element type %d" % (what, etype))
        dt = GGUF_SCALAR_DTYPE[etype]
        if n > (len(cur.buf) - cur.pos) // dt.itemsize:
            raise GGUFError("truncated file: %s claims %d elements at offset %d" % (what, n, cur.pos))
        vals = cur.take(n * dt.itemsize, what).view(dt).tolist()
        if etype == GGUFValueType.BOOL:
            vals = [bool(v) for v in vals]
        return etype, vals

    def _parse_kv(self, cur):
        self.kv = {}
        self.kv_type = {}  # key -> (value type, array element type or None)
        for i in range(self.n_kv):
            key = cur.string("key of kv pair %d" % i)
            vtype = cur.scalar("<i4", "type of key '%s'" % key)
            if key in self.kv:
                raise GGUFError("%s: duplicate key '%s'" % (self.path, key))
            if vtype == GGUFValueType.ARRAY:
                etype, val = self._read_array(cur, "key '%s'" % key)
                self.kv_type[key] = (vtype, etype)
            else:
                val = self._read_value(cur, vtype, "key '%s'" % key)
                self.kv_type[key] = (vtype, None)
            self.kv[key] = val

    def _parse_alignment(self):
        self.alignment = GGUF_DEFAULT_ALIGNMENT
        if "general.alignment" in self.kv:
            vtype, _ = self.kv_type["general.alignment"]
            a = self.kv["general.alignment"]
            if vtype != GGUFValueType.UINT32:
                raise GGUFError("%s: general.alignment must be uint32, got value type %d"
                                % (self.path, vtype))
            if a == 0 or a & (a - 1):
                raise GGUFError("%s: general.alignment = %d is not a power of 2" % (self.path, a))
            self.alignment = a

    def _parse_tensor_infos(self, cur):
        self.tensors = {}
        for i in range(self.n_tensors):
            name = cur.string("name of tensor %d" % i)
            n_dims = cur.scalar("<u4", "n_dims of tensor '%s'" % name)
            if n_dims > GGUF_MAX_DIMS:
                raise GGUFError("tensor '%s': n_dims = %d exceeds %d" % (name, n_dims, GGUF_MAX_DIMS))
            ne = [cur.scalar("<i8", "ne[%d] of tensor '%s'" % (d, name)) for d in range(n_dims)]
            if any(x < 0 for x in ne):
                raise GGUFError("tensor '%s': negative dimension in ne = %s" % (name, ne))
            gtype = cur.scalar("<i4", "type of tensor '%s'" % name)
            offset = cur.scalar("<u8", "offset of tensor '%s'" % name)
            if name in self.tensors:
                raise GGUFError("%s: duplicate tensor name '%s'" % (self.path, name))
            if gtype in GGML_BLOCK and ne and ne[0] % GGML_BLOCK[gtype][0]:
                raise GGUFError("tensor '%s': ne[0] = %d is not a multiple of %s's block size %d"
                                % (name, ne[0], ggml_type_name(gtype), GGML_BLOCK[gtype][0]))
            if offset % self.alignment:
                raise GGUFError("tensor '%s': offset %d is not a multiple of the alignment %d"
                                % (name, offset, self.alignment))
            self.tensors[name] = TensorInfo(name, ne, gtype, offset)

    def _check_tensor_extents(self):
        data_size = len(self.buf) - self.data_offset
        for t in self.tensors.values():
            if t.nbytes is not None and t.offset + t.nbytes > data_size:
                raise GGUFError("truncated file: tensor '%s' (%s, %d bytes at data offset %d) "
                                "ends past the data section of %d bytes"
                                % (t.name, ggml_type_name(t.ggml_type), t.nbytes, t.offset,
                                   max(data_size, 0)))

    # tensor access
    def tensor(self, name):
        """TensorInfo for name; GGUFError naming the tensor when absent."""
        if name not in self.tensors:
            raise GGUFError("%s: tensor '%s' not found" % (self.path, name))
        return self.tensors[name]

    def tensor_bytes(self, name):
        """The raw bytes of tensor name (read-only uint8 view of the map)."""
        t = self.tensor(name)
        if t.nbytes is None:
            raise GGUFError("tensor '%s': size of type %s unknown to the reference"
                            % (name, ggml_type_name(t.ggml_type)))
        start = self.data_offset + t.offset
        return self.buf[start:start + t.nbytes]

    def dequantize(self, name):
        """Tensor name as float64 of shape reversed(ne) (a 2-D weight is [ne1, ne0])."""
        t = self.tensor(name)
        return dequantize(t.ggml_type, self.tensor_bytes(name), t.n_elements).reshape(t.shape)

    def dequantize_rows(self, name, rows):
        """Rows (indices along ne1) of the 2-D tensor name as float64 [len(rows), ne0]."""
        t = self.tensor(name)
        if len(t.ne) != 2:
            raise GGUFError("tensor '%s': dequantize_rows needs a 2-D tensor, ne = %s"
                            % (name, list(t.ne)))
        ne0, ne1 = t.ne
        row_bytes = t.nbytes // ne1 if ne1 else 0
        raw = self.tensor_bytes(name)
        out = np.empty((len(rows), ne0), dtype=np.float64)
        for i, r in enumerate(rows):
            if not 0 <= r < ne1:
                raise GGUFError("tensor '%s': row %d out of range [0, %d)" % (name, r, ne1))
            out[i] = dequantize(t.ggml_type, raw[r * row_bytes:(r + 1) * row_bytes], ne0)
        return out


def main(argv):
    """Print a GGUF file's metadata and tensor table (debug aid): gguf_ref.py FILE."""
    if len(argv) != 2:
        print("usage: gguf_ref.py FILE.gguf", file=sys.stderr)
        return 2
    g = GGUFFile(argv[1])
    print("version %d, %d kv, %d tensors, alignment %d, data offset %d"
          % (g.version, len(g.kv), len(g.tensors), g.alignment, g.data_offset))
    for k, v in g.kv.items():
        if isinstance(v, list) and len(v) > 8:
            v = "[%s, ... (%d)]" % (", ".join(repr(x) for x in v[:8]), len(v))
        print("  %-50s %r" % (k, v))
    for t in g.tensors.values():
        print("  %-40s %-6s ne=%s offset=%d" % (t.name, ggml_type_name(t.ggml_type),
                                                list(t.ne), t.offset))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
