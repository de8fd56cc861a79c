#!/bin/bash
# hub_cases.sh LLAMA_SRC LLAMA_BUILD NUMALLM OUT_DIR PRESET MIX [MIX...]
#
# Cases like ../shared/data/quant's (its README), for architectures and shapes that data lacks:
# a master of numallm's PRESET (mkmodel, F32, random weights, its own vocabulary) quantized by
# llama.cpp's own llama-quantize into each MIX with an importance matrix from llama-imatrix, so
# the files carry llama.cpp's per-tensor type choices and fallbacks; for each, llama.cpp's logits
# (llama_logits.cpp, the shared files' prompt of 20 ids and 8 greedy steps) and the float64
# reference's (tests/reference/ref.py, the "exact" logits; in an MoE it takes numallm's side of
# a router near-tie, as the model_vs_ref tests do), then tests/model/quant_hub.py on it:
# numallm on 1 rank and, with NM_MPIRUN set (e.g. "mpirun --oversubscribe"), on 2, batched and
# token by token. LLAMA_SRC: a llama.cpp checkout (its include/ and ggml/include/); LLAMA_BUILD:
# its CMake build with llama-quantize and llama-imatrix built (bin/, and the shared libraries).
# Prints one line per case and exits 1 if any failed. Not run by CI (no llama.cpp there);
# RESULTS.md records its runs.
set -u
if [ $# -lt 6 ]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
SRC=$1 BLD=$2 NUMALLM=$3 OUT=$4 PRESET=$5
shift 5
HERE=$(cd "$(dirname "$0")" && pwd)
REF=$HERE/../../reference
PY=${NM_PYTHON:-/usr/bin/python3}
IDS=312,67,450,12,289,403,77,256,499,131,5,370,222,88,461,300,19,258,145,333
for tool in "$BLD/bin/llama-quantize" "$BLD/bin/llama-imatrix"; do
    [ -x "$tool" ] || { echo "hub_cases: $tool not found (build llama-quantize and llama-imatrix in $BLD)" >&2; exit 2; }
done
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
DUMP=$OUT/llama_logits
if [ ! -x "$DUMP" ] || [ "$HERE/llama_logits.cpp" -nt "$DUMP" ]; then
    g++ -O2 -std=c++17 "$HERE/llama_logits.cpp" -I"$SRC/include" -I"$SRC/ggml/include" -L"$BLD/bin" \
        -lllama -lggml -lggml-base -Wl,-rpath,"$BLD/bin" -o "$DUMP" || { echo "hub_cases: cannot build llama_logits" >&2; exit 2; }
fi
MASTER=$OUT/$PRESET-F32.gguf
"$NUMALLM" mkmodel --preset "$PRESET" --type f32 -o "$MASTER" > "$OUT/$PRESET.mkmodel.log" 2>&1 ||
    { echo "hub_cases: mkmodel --preset $PRESET failed (see $OUT/$PRESET.mkmodel.log)" >&2; exit 2; }
IMAT=$OUT/$PRESET.imatrix.gguf
"$BLD/bin/llama-imatrix" -m "$MASTER" -f "$HERE/../../../README.md" -o "$IMAT" -c 128 --chunks 8 -t 2 \
    > "$OUT/$PRESET.imatrix.log" 2>&1 || { echo "hub_cases: llama-imatrix failed (see $OUT/$PRESET.imatrix.log)" >&2; exit 2; }
failed=0
for mix in "$@"; do
    n=$PRESET-$mix
    if ! "$BLD/bin/llama-quantize" --imatrix "$IMAT" "$MASTER" "$OUT/$n.gguf" "$mix" 2 > "$OUT/$n.quantize.log" 2>&1; then
        echo "$n: llama-quantize failed (see $OUT/$n.quantize.log)"; failed=1; continue
    fi
    "$DUMP" "$OUT/$n.gguf" "$OUT/$n.p20s8.lgt" 8 "$IDS" > "$OUT/$n.p20s8.txt" 2> "$OUT/$n.llama.log" ||
        { echo "$n: llama.cpp's logits failed (see $OUT/$n.llama.log)"; failed=1; continue; }
    toks=$(sed -n 's/^# tokens: //p' "$OUT/$n.p20s8.txt" | tr ' ' ',')
    # MoE: the reference takes numallm's side of a router near-tie (ref.py --engine-routes, within
    # 2% of the router logits' spread; as the model_vs_ref tests do): numallm's choices from a run
    # with --dump-layers (every run of quant_hub.py routes the same, batch and rank invariance)
    routes=()
    rm -rf "$OUT/work/$n.layers"
    if "$NUMALLM" run -m "$OUT/$n.gguf" --tokens "$toks" -n 0 -ctk f32 -t 1 --dump-layers "$OUT/work/$n.layers" \
        > "$OUT/$n.layers.log" 2>&1 && [ -f "$OUT/work/$n.layers/routes.txt" ]; then
        routes=(--engine-routes "$OUT/work/$n.layers/routes.txt")
    fi
    "$PY" "$REF/ref.py" "$OUT/$n.gguf" --tokens "$toks" "${routes[@]}" --out "$OUT/$n.exact.nmlg" 2> "$OUT/$n.ref.log" ||
        { echo "$n: the reference failed (see $OUT/$n.ref.log)"; failed=1; continue; }
    "$PY" - "$REF" "$OUT/$n.exact.nmlg" "$OUT/$n.p20s8.exact.lgt" <<'PY' || { echo "$n: LGT1 conversion failed"; failed=1; continue; }
import struct, sys
sys.path.insert(0, sys.argv[1])
import compare_logits
n_vocab, rows = compare_logits.read(sys.argv[2])
with open(sys.argv[3], "wb") as f:
    f.write(b"LGT1" + struct.pack("<ii", n_vocab, len(rows)))
    for (_, pos, tok), v in rows:
        f.write(struct.pack("<ii", pos, tok) + struct.pack("<%df" % n_vocab, *v))
PY
    # shellcheck disable=SC2086
    if "$PY" "$HERE/../quant_hub.py" "$NUMALLM" "$OUT" "$n" "$OUT/work/$n" ${NM_MPIRUN:-} > "$OUT/$n.hub.txt" 2>&1; then
        echo "$n: PASS ($(grep -c 'vs llama.cpp' "$OUT/$n.hub.txt") runs)"
    else
        echo "$n: FAIL"; grep "^FAIL" "$OUT/$n.hub.txt" | head -4; failed=1
    fi
done
exit $failed
