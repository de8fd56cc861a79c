#!/bin/sh
# Runs a job in which one rank fails (test_coll_fail) and checks that it ends with a non-zero
# status, within MAX_SECONDS, and with a message matching PATTERN (the rank must be named).
# Usage: run_fail.sh MAX_SECONDS PATTERN command [args...]
max=$1
pattern=$2
shift 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s.%N)
timeout -k 5 60 "$@" >"$log" 2>&1
rc=$?
end=$(date +%s.%N)
elapsed=$(awk "BEGIN { printf \"%.2f\", $end - $start }")
cat "$log"
echo "---- $*: status $rc after $elapsed s"
cmd="$*"
fail() {
    echo "FAIL: $1"
    echo "reproduce: $cmd"
    exit 1
}
[ "$rc" -ne 0 ] || fail "the job exited 0 although a rank failed"
# timeout(1) says 124, or 137 when it had to SIGKILL; mpirun also says 137 when a rank was
# SIGKILLed, so the elapsed time decides.
[ "$rc" -ne 124 ] && awk "BEGIN { exit !($elapsed < 59) }" || fail "the job hung (stopped by timeout after 60 s)"
awk "BEGIN { exit !($elapsed <= $max) }" || fail "the job took $elapsed s, more than $max s"
grep -Eq "$pattern" "$log" || fail "no message matching '$pattern'"
echo "PASS: ended in $elapsed s (limit $max s) with status $rc, message: $(grep -Em1 "$pattern" "$log")"
