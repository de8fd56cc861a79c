#!/usr/bin/env bash
# invariance.sh NUMALLM PRESET TYPE WORKDIR MPIRUN...
# Greedy tokens of 1, 2, 3 and 4 ranks must be identical for 32 steps, and the logits of every
# prompt position and generated step within tolerance of the single-rank run. Ranks differ from
# one rank only in the order partial sums are added (the allreduce), so the tolerance is tight.
set -u
NUMALLM=$1 PRESET=$2 TYPE=$3 WORK=$4
shift 4
MPIRUN=("$@")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${NM_PYTHON:-/usr/bin/python3}
TOKENS=1,17,42,99,7,200,13,255,64,128,17,77
repro="bash $HERE/invariance.sh $NUMALLM $PRESET $TYPE $WORK ${MPIRUN[*]}"
fail() { echo "tp_invariance: FAIL $PRESET $TYPE: $1"; echo "repro: $repro"; exit 1; }

mkdir -p "$WORK" || fail "cannot create $WORK"
"$NUMALLM" mkmodel --preset "$PRESET" --type "$TYPE" -o "$WORK/m.gguf" --seed 3 2>/dev/null || fail "mkmodel failed"
run() { # ranks outfile
  local np=$1
  if [ "$np" = 1 ]; then
    "$NUMALLM" run -m "$WORK/m.gguf" --tokens $TOKENS -n 32 --temp 0 --ignore-eos -t 1 \
      --dump-logits "$WORK/logits_np1.bin" >"$WORK/out_np1.txt" 2>"$WORK/err_np1.txt"
  else
    "${MPIRUN[@]}" -np "$np" "$NUMALLM" run -m "$WORK/m.gguf" --tokens $TOKENS -n 32 --temp 0 --ignore-eos -t 1 \
      --dump-logits "$WORK/logits_np$np.bin" >"$WORK/out_np$np.txt" 2>"$WORK/err_np$np.txt"
  fi
}
run 1 || { cat "$WORK/err_np1.txt"; fail "single-rank run failed"; }
echo "np1: $(cat "$WORK/out_np1.txt")"
for np in 2 3 4; do
  run $np || { tail -20 "$WORK/err_np$np.txt"; fail "$np-rank run failed"; }
  grep -q "shard $((np - 1))/$np" "$WORK/err_np$np.txt" || fail "$np-rank run did not report $np shards"
  echo "np$np: $(cat "$WORK/out_np$np.txt")"
  cmp -s "$WORK/out_np1.txt" "$WORK/out_np$np.txt" || fail "greedy tokens of $np ranks differ from 1 rank"
  "$PY" "$HERE/../reference/compare_logits.py" "$WORK/logits_np$np.bin" "$WORK/logits_np1.bin" 1e-4 ||
    fail "logits of $np ranks differ from 1 rank beyond 1e-4"
done
echo "tp_invariance: PASS $PRESET $TYPE (1, 2, 3, 4 ranks)"
