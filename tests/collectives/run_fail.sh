#!/bin/sh
# Runs a job in which one rank fails (test_coll_fail) and checks what matters: the job ends with
# a non-zero status, with a message matching PATTERN (the rank must be named), and does not hang.
# "Ends" is a wall-clock bound of DETECT_SECONDS (the detection timeout the job runs with) plus a
# slack of NM_FAIL_SLACK_S (default 40 s) for mpirun's start and end and the ranks' first 200
# allreduces: on a loaded 2-core machine with 4 busy-polling ranks (sanitizer builds too) these
# took over 5 s, so the bound is not a timing assertion, only "stopped by its own detection". A
# job that hangs is stopped after 100 s (test_coll_fail's survivors give up by themselves at 60 s,
# saying that the failure went unnoticed).
# Usage: run_fail.sh DETECT_SECONDS PATTERN command [args...]
detect=$1
pattern=$2
shift 2
max=$(awk "BEGIN { print $detect + ${NM_FAIL_SLACK_S:-40} }")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s.%N)
timeout -k 5 100 "$@" >"$log" 2>&1
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
[ "$rc" -ne 124 ] && awk "BEGIN { exit !($elapsed < 99) }" || fail "the job hung (stopped by timeout after 100 s)"
grep -Eq "$pattern" "$log" || fail "no message matching '$pattern'"
awk "BEGIN { exit !($elapsed <= $max) }" ||
    fail "the job took $elapsed s, more than $max s (detection timeout $detect s + ${NM_FAIL_SLACK_S:-40} s of slack)"
echo "PASS: ended in $elapsed s (limit $max s: detection $detect s + slack) with status $rc, message: $(grep -Em1 "$pattern" "$log")"
