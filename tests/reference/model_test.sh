#!/usr/bin/env bash
# model_test.sh: one whole-model test of the engine against the independent float64 reference.
#
#   model_test.sh NUMALLM_BIN PRESET TYPE WORKDIR
#
# 1. NUMALLM_BIN mkmodel --preset PRESET --type TYPE -o WORKDIR/m.gguf --seed 1
# 2. NUMALLM_BIN run on a fixed prompt of token ids, dumping logits (WORKDIR/e.bin) and every
#    layer's output (WORKDIR/el/)
# 3. ref.py on the same file and tokens (WORKDIR/r.bin, WORKDIR/rl/)
# 4. compare.py with TYPE's tolerance; on failure it names the first diverging layer.
# PRESET: tiny-llama, tiny-llama31, tiny-qwen2, tiny-qwen3, tiny-qwen3moe.
# TYPE: any type mkmodel writes (f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k and the block types).
# WORKDIR must be private to this test (ctest may run tests in parallel); it is created.
# Python: $NM_PYTHON if set, else /usr/bin/python3 (Debian's, which has numpy).
# Exit 0 on pass, 1 on failure (with a one-line repro command), 2 on bad usage.
set -u

if [ $# -ne 4 ]; then
    echo "usage: $0 NUMALLM_BIN PRESET TYPE WORKDIR" >&2
    exit 2
fi
NUMALLM=$1
PRESET=$2
TYPE=$3
WORKDIR=$4
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${NM_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: $PY cannot import numpy, which the reference needs (install python3-numpy, or set NM_PYTHON)"
    exit 77
fi
# Fixed prompt: 12 ids below 256 (every tiny preset's vocabulary is larger), with a repeat.
TOKENS=1,17,42,99,7,200,13,255,64,128,17,77

repro="$(printf '%q ' bash "$HERE/model_test.sh" "$NUMALLM" "$PRESET" "$TYPE" "$WORKDIR")"
repro=${repro% }

fail() {
    echo "model_test: FAIL preset=$PRESET type=$TYPE: $1"
    echo "model_test: repro: $repro"
    exit 1
}

step() {
    echo "+ $*"
    "$@" || fail "command failed (exit $?): $*"
}

mkdir -p "$WORKDIR" || fail "cannot create $WORKDIR"
rm -rf "$WORKDIR/el" "$WORKDIR/rl" "$WORKDIR/e.bin" "$WORKDIR/r.bin" "$WORKDIR/m.gguf"

step "$NUMALLM" mkmodel --preset "$PRESET" --type "$TYPE" -o "$WORKDIR/m.gguf" --seed 1
step "$NUMALLM" run -m "$WORKDIR/m.gguf" --tokens "$TOKENS" -n 0 \
    --dump-logits "$WORKDIR/e.bin" --dump-layers "$WORKDIR/el" -t 2 2> >(tee "$WORKDIR/run.log" >&2)
if [ "${NM_ONEDNN:-}" = force ] && ! grep -q "oneDNN .*: every F32 matmul" "$WORKDIR/run.log"; then
    echo "skipped: NM_ONEDNN=force, but the engine did not use oneDNN: $(grep -o 'oneDNN not used.*' "$WORKDIR/run.log")"
    exit 77
fi
# MoE: the reference takes the engine's router choices at near-ties (and only there).
routes=()
[ -f "$WORKDIR/el/routes.txt" ] && routes=(--engine-routes "$WORKDIR/el/routes.txt")
step "$PY" "$HERE/ref.py" "$WORKDIR/m.gguf" --tokens "$TOKENS" \
    --out "$WORKDIR/r.bin" --dump-layers "$WORKDIR/rl" "${routes[@]}"
echo "+ $PY $HERE/compare.py --engine $WORKDIR/e.bin --ref $WORKDIR/r.bin --type $TYPE ..."
"$PY" "$HERE/compare.py" --engine "$WORKDIR/e.bin" --ref "$WORKDIR/r.bin" --type "$TYPE" \
    --engine-layers "$WORKDIR/el" --ref-layers "$WORKDIR/rl" \
    || fail "engine logits differ from the reference beyond the $TYPE tolerance (see above)"
echo "model_test: PASS preset=$PRESET type=$TYPE"
