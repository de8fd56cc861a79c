#!/usr/bin/env bash
# bench_cli.sh formats|errors|mpi NUMALLM WORKDIR [MPIRUN...]
#   formats  a tiny model through numallm bench in every output format: json (with -oe md: the
#            JSON must carry every markdown column with the same figures), jsonl, csv, sql, md
#            (machine facts, table, legend, build line, which numallm --version repeats) and the
#            SVG plot; -ngl 99 skipped with a message; tiny arrays for the bandwidth measurement.
#            Timings are never checked.
#   errors   bad flags and impossible requests get a clear message and exit status 1.
#   mpi      1 and 2 ranks through the launcher's mpirun line (MPIRUN... is tests.cmake's NM_MPIRUN,
#            used through NUMALLM_MPIRUN) with scaling efficiency; bench collectives on 2 ranks.
set -u
MODE=$1 NUMALLM=$2 WORK=$3
shift 3
MPIRUN=("$@")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${NM_PYTHON:-/usr/bin/python3}
CHECK="$PY $HERE/check_bench.py"
repro="bash $HERE/bench_cli.sh $MODE $NUMALLM $WORK ${MPIRUN[*]}"
fail() { echo "bench_cli $MODE: FAIL: $1"; echo "repro: $repro"; exit 1; }
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK

rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot create $WORK"
cd "$WORK" || fail "cannot enter $WORK"
"$NUMALLM" mkmodel --preset tiny-llama --type q4_0 -o m.gguf --seed 1 >/dev/null 2>&1 || fail "mkmodel failed"
BENCH=("$NUMALLM" bench -m m.gguf --bw-size 16 -t 1)

case $MODE in
formats)
  $CHECK selftest || fail "the checker's self-test"
  # 2 depths x (pp16, tg8, pp8+tg4) = 6 rows per -ngl; -ngl 99 is skipped, with a message, where
  # no CUDA device can be used, and runs (6 more rows) where one can.
  "${BENCH[@]}" -r 2 -p 16 -n 8 -pg 8,4 -d 0,8 -ngl 0,99 -o json -oe md --svg plot.svg >out.json 2>err.txt ||
    { cat err.txt; fail "bench -o json -oe md exited $?"; }
  if grep -q "^numallm bench: -ngl 99: skipped: no CUDA device" err.txt; then
    grep -q "^-ngl 99: skipped: no CUDA device" err.txt || fail "the markdown notes lack -ngl 99"
    rows=6
  else
    grep -q '"n_gpu_layers": 99' out.json || fail "-ngl 99 neither ran nor was skipped with a message"
    rows=12
  fi
  $CHECK json out.json --rows $rows --reps 2 --md err.txt || { cat err.txt; fail "json / md"; }
  grep -q "^# NUMA nodes with cores: " err.txt || fail "machine facts not on stderr with -o json"
  $CHECK svg plot.svg --tests "pp16,tg8,pp8+tg4,pp16 @ d8" || fail "svg"
  for fmt in jsonl csv sql; do
    "${BENCH[@]}" -r 2 -p 16 -n 8 -o $fmt >out.$fmt 2>err.$fmt || { cat err.$fmt; fail "bench -o $fmt"; }
    $CHECK $fmt out.$fmt --rows 2 || fail "$fmt"
  done
  "${BENCH[@]}" -r 3 -p 16,32 -n 0 >out.md 2>err.md || { cat err.md; fail "bench -o md"; }
  $CHECK md out.md --rows 2 || { cat out.md; fail "md"; }
  grep -q "^numallm bench: row 2/2: ranks 1, 1 thread per rank, pp32: " err.md || { cat err.md; fail "no progress"; }
  # numallm --version names the build of bench's build line ("unknown" and 0 outside a checkout)
  "$NUMALLM" --version >ver.txt 2>&1 || { cat ver.txt; fail "numallm --version exited $?"; }
  built=$(sed -n 's/^build: \(\S*\) (\([0-9]*\))$/\2 (\1)/p' out.md)
  grep -qx "version: $built" ver.txt || { cat ver.txt; fail "--version does not match the build line '$built'"; }
  grep -q "^built with " ver.txt || { cat ver.txt; fail "--version names no compiler"; }
  ;;
errors)
  expect() { # name pattern command...
    local name=$1 pat=$2
    shift 2
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc != 1 ] || ! grep -qE -- "$pat" <<<"$out"; then
      echo "$out" | tail -5
      fail "$name: exit $rc (expected 1), stderr lacks /$pat/"
    fi
    echo "ok: $name"
  }
  expect "bad -p" "invalid value 'x' for -p: expected a comma list of integers" "${BENCH[@]}" -p x
  expect "bad range" "invalid value '8-2' for -n" "${BENCH[@]}" -n 8-2
  expect "bad -o" "invalid value 'xml' for -o: expected md, csv, json, jsonl, sql or none" "${BENCH[@]}" -o xml
  expect "bad -pg" "invalid value '8' for -pg: expected PP,TG" "${BENCH[@]}" -pg 8
  expect "unknown flag" "unknown option '-fa' for bench" "${BENCH[@]}" -fa 1
  expect "no tests" "no tests: -p, -n and -pg are all 0" "${BENCH[@]}" -p 0 -n 0 --bw-size 0
  expect "missing model" "nope.gguf: No such file or directory" "$NUMALLM" bench -m nope.gguf
  # A rank count the machine cannot take: its rows are skipped with the plan's reason.
  expect "ranks that do not fit" "ranks 3, 1 thread per rank: skipped: --ranks 3 does not fit" \
    "${BENCH[@]}" -r 1 -p 8 -n 0 --bw-size 0 --ranks 3
  expect "under mpirun" "numallm bench starts its own jobs" env OMPI_COMM_WORLD_SIZE=2 "${BENCH[@]}"
  expect "collectives bad op" "invalid value 'x' for --op" "$NUMALLM" bench collectives --op x
  ;;
mpi)
  [ ${#MPIRUN[@]} -gt 0 ] || { echo "skipped: no mpirun"; exit 77; }
  [ "$(nproc)" -ge 2 ] || { echo "skipped: one CPU: no two-rank job here"; exit 77; }
  # The launcher's mpirun line, run through tests.cmake's NM_MPIRUN (--oversubscribe, root).
  { echo '#!/bin/sh'; printf 'exec'; printf ' %q' "${MPIRUN[@]}"; echo ' "$@"'; } >mpirun.sh
  chmod +x mpirun.sh
  export NUMALLM_MPIRUN=$PWD/mpirun.sh
  "${BENCH[@]}" -r 2 -p 16 -n 8 --ranks 1,2 -o json -oe md >out.json 2>err.txt ||
    { cat err.txt; fail "bench --ranks 1,2 exited $?"; }
  $CHECK json out.json --rows 4 --reps 2 --ranks 1,2 --md err.txt || { cat err.txt; fail "json"; }
  "$NUMALLM" bench collectives --ranks 2 --op allreduce --max-size 4096 --iter-scale 0.02 >coll.txt 2>coll.err ||
    { cat coll.err; fail "bench collectives exited $?"; }
  grep -q "^# allreduce sum f32, 2 ranks" coll.txt || { cat coll.txt coll.err; fail "no allreduce table"; }
  grep -qE "^ +4096 \|" coll.txt || { cat coll.txt; fail "no 4096-byte row"; }
  ;;
*) fail "unknown mode" ;;
esac
echo "bench_cli $MODE: PASS"
