#!/usr/bin/env bash
# pipeline.sh NUMALLM PRESET TYPE WORKDIR
# The CPU + GPU split against the CPU alone, for every -ngl from 1 to n_layer and 99 (whole
# model and head), each with one rank driving the GPU in-process and with 2 CPU ranks + the GPU rank
# under mpirun: 24 greedy steps must choose the CPU-only run's tokens, and the logits of every
# prompt position and step stay within the type's tolerance of it (compare_logits.py: a choice
# may differ only at a near-tie of the CPU run, within that tolerance; F32 must match every
# step). The same run without --dump-logits, where the GPU returns only its top candidate,
# must print the same tokens. Every run reports 0 weight bytes moved after load, and the CPU
# ranks keep packed layouts for every matmul weight they hold (AMX tiles where the CPU has
# AMX; the types of the block decoder interface, kernels/blocks/block.h, have no packed layout:
# their GGUF rows, through the AVX-512 kernels on the blocks). With LONG=1: a prompt of 2100
# random ids (chunked by -b 512 on both sides) at -ngl 1 and 2 instead. Exit 77 (skipped) without a CUDA device.
set -u
NUMALLM=$1 PRESET=$2 TYPE=$3 WORK=$4
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${NM_PYTHON:-/usr/bin/python3}
case $TYPE in f32) TOL=5e-3 ;; f16 | bf16) TOL=3e-2 ;; *) TOL=8e-2 ;; esac # tests/reference/compare.py's
TOKENS=1,17,42,99,7,200,13,255,64,128,17,77
N_GEN=24
if [ "${LONG:-0}" = 1 ]; then # 2100 ids below 256 (every tiny vocabulary is larger), fixed
  TOKENS=$(awk 'BEGIN { s = 7; for (i = 0; i < 2100; i++) { s = (s * 1103515245 + 12345) % 2147483648;
                 printf "%s%d", i ? "," : "", 3 + s % 250 } }')
  N_GEN=8
fi
repro="bash $HERE/pipeline.sh $NUMALLM $PRESET $TYPE $WORK"
fail() { echo "gpu_pipeline: FAIL $PRESET $TYPE: $1"; echo "repro: $repro"; exit 1; }

mkdir -p "$WORK" || fail "cannot create $WORK"
"$NUMALLM" mkmodel --preset "$PRESET" --type "$TYPE" -o "$WORK/m.gguf" --seed 5 2>/dev/null || fail "mkmodel failed"
run() { # name extra-args...
  local name=$1
  shift
  "$NUMALLM" run -m "$WORK/m.gguf" --tokens $TOKENS -n $N_GEN --temp 0 --ignore-eos -t 2 -c 4096 \
    --dump-logits "$WORK/logits_$name.bin" "$@" >"$WORK/out_$name.txt" 2>"$WORK/err_$name.txt"
}
# The GPU first: without a device the test is skipped before the CPU-only run is spent.
if ! run probe -ngl 1 --strict; then
  if grep -q "needs a GPU" "$WORK/err_probe.txt"; then
    echo "skipped: $(grep -o 'no CUDA device.*' "$WORK/err_probe.txt" | head -1)"
    exit 77
  fi
  tail -5 "$WORK/err_probe.txt"
  fail "-ngl 1 failed"
fi
run cpu || { tail -5 "$WORK/err_cpu.txt"; fail "CPU-only run failed"; }
n_layer=$(grep -o "n_layer [0-9]*" "$WORK/err_cpu.txt" | head -1 | cut -d' ' -f2)
[ -n "$n_layer" ] || fail "no n_layer in the CPU run's log"
echo "cpu: $(cut -c1-200 "$WORK/out_cpu.txt")"
amx=$(grep -c -m1 amx_int8 /proc/cpuinfo)
ngls="$(seq 1 "$n_layer") 99"
[ "${LONG:-0}" = 1 ] && ngls="1 2"
for ngl in $ngls; do
  for ranks in 1 2; do
    name=ngl${ngl}_r$ranks
    run "$name" -ngl "$ngl" --ranks "$ranks" --strict || { tail -20 "$WORK/err_$name.txt"; fail "$name failed"; }
    echo "$name: $(cut -c1-200 "$WORK/out_$name.txt")"
    [ "$TYPE" != f32 ] || cmp -s "$WORK/out_cpu.txt" "$WORK/out_$name.txt" ||
      fail "$name: greedy tokens differ from the CPU-only run"
    "$PY" "$HERE/../reference/compare_logits.py" "$WORK/logits_$name.bin" "$WORK/logits_cpu.bin" $TOL ||
      fail "$name: the split departs from the CPU-only run beyond the $TYPE tolerance"
    "$NUMALLM" run -m "$WORK/m.gguf" --tokens $TOKENS -n $N_GEN --temp 0 --ignore-eos -t 2 -c 4096 -ngl "$ngl" \
      --ranks "$ranks" \
      >"$WORK/out_${name}_topk.txt" 2>"$WORK/err_${name}_topk.txt" || fail "$name without --dump-logits failed"
    cmp -s "$WORK/out_$name.txt" "$WORK/out_${name}_topk.txt" ||
      fail "$name: tokens sampled from the GPU's top candidate differ from those sampled from its logits"
    grep -q "weight bytes moved after load: 0$" "$WORK/err_$name.txt" || fail "$name: no 'weight bytes moved after load: 0'"
    if [ $ngl -lt $n_layer ]; then # the CPU ranks hold layers: every matmul class packed
      for cls in attn_q attn_k attn_v attn_output ffn_up ffn_down; do
        line=$(grep -m1 "layouts: blk.\*.$cls" "$WORK/err_$name.txt")
        [ -n "$line" ] || fail "$name: no layout line for blk.*.$cls in the start-up table"
        [ "$TYPE" = f32 ] && continue
        if echo "$line" | grep -q -- "-> rows .*on the GGUF blocks"; then continue; fi # a block decoder type
        echo "$line" | grep -q -- "-> \(q_tile16\|f_pair16\)" || fail "$name: blk.*.$cls is not packed: $line"
        [ "$amx" = 0 ] || echo "$line" | grep -q "AMX" || fail "$name: blk.*.$cls does not use AMX: $line"
      done
    fi
  done
done
echo "gpu_pipeline: PASS $PRESET $TYPE (-ngl $ngls; 1 rank and 2 ranks + the GPU rank)"
