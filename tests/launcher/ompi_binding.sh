#!/usr/bin/env bash
# Does Open MPI bind the ranks where the plan says, on machines we do not have? mpirun reads each
# configs/ topology instead of this machine's (--mca hwloc_base_topo_file) and is given the
# mapping and binding options numallm prints for it. Binding to CPUs this machine lacks fails,
# and Open MPI's message names the CPU set it tried: those sets must be exactly the plan's CPU
# lists of ranks 1..N-1 (rank 0's set includes CPU 0, exists here, and binds without a message).
# Needs Open MPI 4.x (exit 77, skipped, otherwise). Usage: ompi_binding.sh LAUNCH_CMD
set -u
cmd=$(realpath "$1")
cd "$(dirname "$0")/../.."
command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
mpirun --version 2>&1 | grep -q "Open MPI) 4\." || { echo "skip: not Open MPI 4.x: $(mpirun --version 2>&1 | head -1)"; exit 77; }
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
fail=0
check() { # xml ranks [wrong-options: the checker's self-test, which must see a mismatch]
  local out line opts planned got
  out=$("$cmd" topo --topology "$1" --ranks "$2") || { echo "FAIL: topo $1 --ranks $2"; fail=1; return; }
  line=$(echo "$out" | sed -n '/^command:/{n;p}')
  planned=$(echo "$out" | awk '/^  rank  node/{f=1;next} f && /^  [0-9]/{print $5; next} {f=0}' | tail -n +2 | sort)
  opts=$(echo "$line" | sed -e 's/^ *[^ ]*mpirun //' -e 's/--allow-run-as-root //' -e "s| $cmd .*||")
  [ -n "${3:-}" ] && opts=$3
  # shellcheck disable=SC2086
  got=$(timeout 60 mpirun "${root[@]}" --oversubscribe --mca orte_base_help_aggregate 0 \
          --mca hwloc_base_topo_file "$1" $opts true 2>&1 | grep -o 'bitmap "[^"]*"' | sed 's/bitmap "\(.*\)"/\1/' | sort)
  if [ -n "${3:-}" ]; then
    if [ "$planned" = "$got" ]; then echo "FAIL: self-test: wrong options $3 were not caught"; fail=1
    else echo "ok: self-test: wrong options $3 caught"; fi
  elif [ "$planned" = "$got" ] && [ -n "$got" ]; then
    echo "ok: $1 --ranks $2: $opts"
  else
    echo "FAIL: $1 --ranks $2: mpirun $opts"
    echo "  planned (ranks 1..): $(echo $planned)"
    echo "  Open MPI bound:      $(echo $got)"
    echo "  rerun: $0 $1"
    fail=1
  fi
}
check configs/spr-2s.xml auto
check configs/spr-2s-snc4.xml auto
check configs/spr-2s-snc4.xml 2
check configs/spr-2s-snc4.xml 16
check configs/xeon-4s.xml auto
check configs/epyc-2s-nps4.xml auto
check configs/epyc-2s-nps4.xml 24
check configs/spr-2s-2gpu.xml auto
check configs/spr-2s-snc4.xml 16 "-np 16 --map-by ppr:2:numa:pe=6 --bind-to core"
# HBM next to each socket's DRAM: numallm names packages, since ppr:1:numa would count HBM nodes.
if command -v lstopo >/dev/null; then
  hbm=$(mktemp --suffix=.xml)
  lstopo --input "pack:2 [numa(memory=64GiB)] [numa(memory=16GiB)] core:4 pu:2" --of xml - > "$hbm" 2>/dev/null
  check "$hbm" auto
  check "$hbm" auto "-np 2 --map-by ppr:1:numa --bind-to numa"
  rm -f "$hbm"
fi
exit $fail
