#!/usr/bin/env bash
# ppl_test.sh NUMALLM SRC_DIR WORKDIR: numallm perplexity against llama.cpp's method computed
# from the float64 reference (ppl_check.py), on a tiny llama model carrying Llama 2's real
# vocabulary (from the shared tokenizer data), scoring a slice of this repository's README.
set -u
NUMALLM=$1 SRC=$2 WORK=$3
VOCAB=$SRC/../shared/data/tokenizer/ggml-vocab-llama-spm.gguf
PY=${NM_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: $PY cannot import numpy, which the reference needs (install python3-numpy, or set NM_PYTHON)"
    exit 77
fi
if [ ! -f "$VOCAB" ]; then echo "SKIP: $VOCAB not found (the shared tokenizer data)"; exit 77; fi
mkdir -p "$WORK"
"$NUMALLM" mkmodel --preset tiny-llama --type f32 -o "$WORK/m.gguf" --vocab-from "$VOCAB" --seed 5 2>/dev/null \
  || { echo "FAIL: mkmodel"; exit 1; }
head -c 2500 "$SRC/README.md" >"$WORK/text.txt"
exec "$PY" "$SRC/tests/model/ppl_check.py" "$NUMALLM" "$WORK/m.gguf" "$WORK/text.txt" 32 2e-3
