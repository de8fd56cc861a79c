#!/usr/bin/env bash
# Reproduces the numallm bench figures of tests/bench/RESULTS.md on this machine.
# Usage: tests/bench_cli/results.sh NUMALLM OUTDIR [numallm bench flags...]
#   e.g. tests/bench_cli/results.sh build/numallm /tmp/bench-h100 --ranks 1,2,4,8 -t 2 -ngl 0,99
# Writes OUTDIR/bench.md (the markdown report, -o md), OUTDIR/bench.jsonl (the same rows, from
# -oe jsonl), OUTDIR/bench.svg (the plot), OUTDIR/bench.log (stderr: progress, the ranks'
# messages), OUTDIR/command.txt and OUTDIR/uptime.txt (the load before and after), then checks
# that the JSONL rows parse and match the table's row count.
set -u
NUMALLM=$(realpath "$1")
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${NM_PYTHON:-/usr/bin/python3}
mkdir -p "$OUT" || exit 1
echo "numallm bench $* -o md -oe jsonl --svg $OUT/bench.svg" >"$OUT/command.txt"
uptime >"$OUT/uptime.txt"
"$NUMALLM" bench "$@" -o md -oe jsonl --svg "$OUT/bench.svg" >"$OUT/bench.md" 2>"$OUT/bench.log"
rc=$?
uptime >>"$OUT/uptime.txt"
grep '^{"build_commit"' "$OUT/bench.log" >"$OUT/bench.jsonl"
rows=$(grep -c '^| ' "$OUT/bench.md")
rows=$((rows > 1 ? rows - 2 : 0)) # the header and separator rows
"$PY" "$HERE/check_bench.py" jsonl "$OUT/bench.jsonl" --rows "$rows" || rc=1
cat "$OUT/bench.md"
echo "results.sh: exit status $rc; files in $OUT"
exit $rc
