"""numallm's logits and layer dump files: writers and readers shared by ref.py and compare.py.

Logits file (little-endian):
    char magic[4] = "NMLG"; uint32 version = 1; uint32 n_vocab; uint32 n_rows;
    n_rows x { int32 kind (0 = prompt position, 1 = generated step); int32 pos;
               int32 token (the input token at that position); float32 logits[n_vocab] }

Layer file (one per dumped activation: embd.bin, blk.N.bin, result_norm.bin):
    char magic[4] = "NMLY"; uint32 version = 1; uint32 n_tokens; uint32 n_embd;
    float32 x[n_tokens][n_embd]
"""

import os
import struct

import numpy as np

LOGITS_MAGIC = b"NMLG"
LAYERS_MAGIC = b"NMLY"
DUMP_VERSION = 1
KIND_PROMPT = 0
KIND_GENERATED = 1

_HEADER = struct.Struct("<4sIII")


class DumpFormatError(Exception):
    """A dump file that is malformed; the message names the file and the field."""


class LogitsDump:
    """Contents of a logits file: n_vocab, and per row kind, pos, token and logits float32."""

    def __init__(self, n_vocab, kinds, positions, tokens, logits):
        self.n_vocab = n_vocab
        self.kinds = np.asarray(kinds, dtype=np.int32)
        self.positions = np.asarray(positions, dtype=np.int32)
        self.tokens = np.asarray(tokens, dtype=np.int32)
        self.logits = np.asarray(logits, dtype=np.float32).reshape(-1, n_vocab)

    @property
    def n_rows(self):
        return self.logits.shape[0]


def _record_dtype(n_vocab):
    return np.dtype([("kind", "<i4"), ("pos", "<i4"), ("token", "<i4"),
                     ("logits", "<f4", (n_vocab,))])


def write_logits(path, dump):
    """Write a LogitsDump to path."""
    rec = np.zeros(dump.n_rows, dtype=_record_dtype(dump.n_vocab))
    rec["kind"] = dump.kinds
    rec["pos"] = dump.positions
    rec["token"] = dump.tokens
    rec["logits"] = dump.logits
    with open(path, "wb") as f:
        f.write(_HEADER.pack(LOGITS_MAGIC, DUMP_VERSION, dump.n_vocab, dump.n_rows))
        f.write(rec.tobytes())


def _read_header(path, data, magic):
    if len(data) < _HEADER.size:
        raise DumpFormatError("%s: %d bytes, shorter than the %d-byte header"
                              % (path, len(data), _HEADER.size))
    m, version, a, b = _HEADER.unpack_from(data)
    if m != magic:
        raise DumpFormatError("%s: magic %r, expected %r" % (path, m, magic))
    if version != DUMP_VERSION:
        raise DumpFormatError("%s: version %d, expected %d" % (path, version, DUMP_VERSION))
    return a, b


def read_logits(path):
    """LogitsDump from path; DumpFormatError on a bad magic, version or size."""
    with open(path, "rb") as f:
        data = f.read()
    n_vocab, n_rows = _read_header(path, data, LOGITS_MAGIC)
    dt = _record_dtype(n_vocab)
    want = _HEADER.size + n_rows * dt.itemsize
    if len(data) != want:
        raise DumpFormatError("%s: %d bytes, expected %d for n_vocab=%d n_rows=%d"
                              % (path, len(data), want, n_vocab, n_rows))
    rec = np.frombuffer(data, dtype=dt, offset=_HEADER.size, count=n_rows)
    return LogitsDump(n_vocab, rec["kind"], rec["pos"], rec["token"], rec["logits"])


def write_layer(path, x):
    """Write activations x [n_tokens, n_embd] (any float dtype) as a float32 layer file."""
    x = np.asarray(x, dtype=np.float32)
    with open(path, "wb") as f:
        f.write(_HEADER.pack(LAYERS_MAGIC, DUMP_VERSION, x.shape[0], x.shape[1]))
        f.write(np.ascontiguousarray(x).tobytes())


def read_layer(path):
    """float32 [n_tokens, n_embd] from a layer file; DumpFormatError when malformed."""
    with open(path, "rb") as f:
        data = f.read()
    n_tokens, n_embd = _read_header(path, data, LAYERS_MAGIC)
    want = _HEADER.size + n_tokens * n_embd * 4
    if len(data) != want:
        raise DumpFormatError("%s: %d bytes, expected %d for n_tokens=%d n_embd=%d"
                              % (path, len(data), want, n_tokens, n_embd))
    return np.frombuffer(data, dtype="<f4", offset=_HEADER.size).reshape(n_tokens, n_embd)


def layer_file_names(n_layer):
    """Layer dump names in forward order: embd, blk.0 .. blk.{n_layer-1}, result_norm."""
    return ["embd"] + ["blk.%d" % i for i in range(n_layer)] + ["result_norm"]


def layer_names_in_dir(directory):
    """The layer dump names present in directory, in forward order."""
    names = set(f[:-4] for f in os.listdir(directory) if f.endswith(".bin"))
    n_layer = 0
    while "blk.%d" % n_layer in names:
        n_layer += 1
    return [n for n in layer_file_names(n_layer) if n in names]
