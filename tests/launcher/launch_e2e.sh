#!/usr/bin/env bash
# launch_decide end to end, through the stand-in command launch_cmd (run = what cmd_run will do):
# in-process on this machine; refusing a --topology without --dry-run; --dry-run on a recorded
# topology; a node too small for the model refused before loading; the exec of mpirun (a fake
# one that prints its argv, then the real one: both ranks must report the binding the plan
# gives them); a hand-written mpirun line that does not bind, caught by the binding check and
# fatal with --strict; and a process that mpirun started, which runs in-process.
# Usage: launch_e2e.sh LAUNCH_CMD
set -u
cmd=$(realpath "$1")
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
# This machine as the launcher sees it: the two-rank launch below needs one NUMA node with at
# least two cores (where --ranks 2 means two ranks on one node).
summary=$("$cmd" topo | sed -n 's/^  [0-9]* packages*, \([0-9]*\) NUMA nodes*.*, \([0-9]*\) cores, .*/\1 \2/p')
read -r nodes cores <<<"$summary"

expect() { # name expected-rc pattern command...
  local name=$1 rc=$2 pat=$3; shift 3
  local out got
  out=$("$@" 2>&1); got=$?
  if [ "$got" != "$rc" ] || ! grep -qE -- "$pat" <<<"$out"; then
    echo "FAIL: $name: exit $got (expected $rc), output lacks /$pat/:"
    sed 's/^/    /' <<<"$out"
    echo "  rerun: $*"
    fail=1
  else
    echo "ok: $name"
  fi
}

expect "in-process here" 0 "in-process: rank 0 of 1, $cores threads" "$cmd" run -n 4
expect "in-process with -t" 0 "in-process: rank 0 of 1, 3 threads" "$cmd" run -t 3
expect "checks table" 0 "pass  binding +one rank, in-process" "$cmd" run
expect "--topology needs --dry-run" 1 "error: --topology describes another machine" \
  "$cmd" run --topology configs/spr-2s.xml
expect "--dry-run on a recorded machine" 0 \
  "^  mpirun (--allow-run-as-root )?-np 8 --map-by ppr:1:numa --bind-to numa $cmd run -n 5 -t 3$" \
  "$cmd" run --dry-run --topology configs/spr-2s-snc4.xml -n 5 -t 3
expect "--ranks that do not fit" 1 "error: --ranks 3 does not fit .* counts that work: 1 .*, 2 \(one per package\), 8" \
  "$cmd" run --dry-run --topology configs/spr-2s-snc4.xml --ranks 3
expect "bad --ranks value" 1 "invalid value 'many' for --ranks" "$cmd" run --ranks many

# A node too small for the model's shard: refused before loading, naming node and bytes.
"$cmd" mkmodel --preset tiny-llama --type q8_0 -o "$tmp/tiny.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
expect "node too small" 1 "error: rank 0 does not fit: its weights of .*tiny.gguf need .* but NUMA node 0 has 64.0 KiB" \
  "$cmd" run --dry-run --topology-synthetic "pack:2 [numa(memory=64KiB)] core:2 pu:1" -m "$tmp/tiny.gguf"
expect "bytes per rank" 0 "^  1     1          2       2  2-3 +[0-9.]+ [KM]iB +1.0 GiB  yes" \
  "$cmd" run --dry-run --topology-synthetic "pack:2 [numa(memory=1GiB)] core:2 pu:1" -m "$tmp/tiny.gguf"

if [ "${nodes:-0}" = 1 ] && [ "${cores:-0}" -ge 2 ]; then
  per=$((cores / 2))
  # The exec, through a fake mpirun that prints what it was given.
  printf '#!/bin/sh\necho "fake mpirun: $*"\n' > "$tmp/mpirun"
  chmod +x "$tmp/mpirun"
  expect "exec of mpirun" 0 "^fake mpirun: (--allow-run-as-root )?-np 2 --map-by ppr:2:numa:pe=$per --bind-to core $cmd run --ranks 2 -n 5 -t 9$" \
    env NUMALLM_MPIRUN="$tmp/mpirun" "$cmd" run --ranks 2 -n 5 -t 9
  expect "mpirun missing" 1 "cannot run /nonexistent/mpirun: No such file or directory \(install Open MPI" \
    env NUMALLM_MPIRUN=/nonexistent/mpirun "$cmd" run --ranks 2
  if command -v mpirun >/dev/null; then
    out=$("$cmd" run --ranks 2 -n 5 2>&1)
    if grep -q "in-process: rank 0 of 2 (under mpirun), $per threads" <<<"$out" &&
       grep -q "in-process: rank 1 of 2 (under mpirun), $per threads" <<<"$out" &&
       grep -qE "^\[r0\]   pass  binding +bound to CPUs [0-9,-]+, as planned" <<<"$out" &&
       grep -qE "^\[r1\]   pass  binding +bound to CPUs [0-9,-]+, as planned" <<<"$out"; then
      echo "ok: real mpirun, 2 ranks bound as planned"
    else
      echo "FAIL: real mpirun:"; sed 's/^/    /' <<<"$out"; echo "  rerun: $cmd run --ranks 2 -n 5"; fail=1
    fi
    # A hand-written line that does not bind: the check fails, and --strict ends the job.
    expect "unbound ranks warned" 0 "fail  binding +may run on CPUs [0-9,-]+, more than the plan's [0-9,-]+ for rank 1 of 2" \
      mpirun "${root[@]}" -np 2 --bind-to none "$cmd" run
    expect "unbound ranks with --strict" 1 "fatal: 1 start-up check failed and --strict is set" \
      mpirun "${root[@]}" -np 2 --bind-to none "$cmd" run --strict
  else
    echo "skip: no mpirun: the real launch is not tested"
  fi
else
  echo "skip: the two-rank launch needs one NUMA node with 2 cores or more (here: ${nodes:-?} nodes, ${cores:-?} cores)"
fi

# A process that mpirun started runs in-process, whatever --ranks says.
expect "a rank runs in-process" 0 "in-process: rank 3 of 4 \(under mpirun\), 5 threads" \
  env OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=3 "$cmd" run --ranks 4 -t 5
expect "a rank without a plan" 0 "warn  binding .*no rank plan for 4 ranks" \
  env OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=3 "$cmd" run -t 5
exit $fail
