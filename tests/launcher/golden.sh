#!/usr/bin/env bash
# The machine, plan and command line numallm makes for every topology in configs/, against the
# recorded expectations configs/NAME.expected. Output is normalized so that it does not depend
# on where the test runs: the executable's path becomes "numallm" and --allow-run-as-root (added
# only when running as root) is dropped.
# Usage: golden.sh LAUNCH_CMD [--update]     (from any directory)
set -u
cmd=$(realpath "$1")
update=${2:-}
cd "$(dirname "$0")/../.."
fail=0
for xml in configs/*.xml; do
  name=${xml%.xml}
  out=$("$cmd" topo --topology "$xml" 2>&1 | sed -e "s|$cmd|numallm|g" -e 's|--allow-run-as-root ||')
  # The same machine with one rank per package, and with two ranks per node, where it has them.
  for ranks in $(sed -n 's/^# also: --ranks //p' "$name.expected" 2>/dev/null); do
    out+=$'\n'"--- numallm topo --ranks $ranks"$'\n'
    out+=$("$cmd" topo --topology "$xml" --ranks "$ranks" 2>&1 | sed -e "s|$cmd|numallm|g" -e 's|--allow-run-as-root ||')
  done
  header=$(grep '^# ' "$name.expected" 2>/dev/null)
  expected=$(grep -v '^# ' "$name.expected" 2>/dev/null)
  if [ "$update" = --update ]; then
    { [ -n "$header" ] && echo "$header"; echo "$out"; } > "$name.expected"
    echo "golden: wrote $name.expected"
  elif [ "$out" != "$expected" ]; then
    echo "FAIL: $xml: output differs from $name.expected:"
    diff <(echo "$expected") <(echo "$out")
    echo "  rerun: $0 $1   (after checking the new output: $0 $1 --update)"
    fail=1
  else
    echo "ok: $xml"
  fi
done
exit $fail
