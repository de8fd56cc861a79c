#!/bin/bash
# Bad model files through the command users type: `numallm run -m bad.gguf --tokens 1 -n 1` must
# exit 1 (not 0, not a signal) and print "error:" and the expected reason on stderr.
#
#   tests/gguf/cli_corrupt.sh NUMALLM TEST_GGUF_CORRUPT [SRC_DIR]
#
# The files: every named case of test_gguf_corrupt (written with --write-dir; its cases.tsv gives
# the expected status and words), plus a few made here with the shell alone (empty file, wrong
# magic, v1 and big-endian headers, truncations of a `numallm mkmodel` file, a directory, a
# missing file) and the real vocabulary-only files of ../shared/data/tokenizer. The valid
# controls must run and exit 0.
set -u
NUMALLM=${1:?usage: cli_corrupt.sh NUMALLM TEST_GGUF_CORRUPT [SRC_DIR]}
GEN=${2:?usage: cli_corrupt.sh NUMALLM TEST_GGUF_CORRUPT [SRC_DIR]}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$NUMALLM" ] || { echo "SKIP: $NUMALLM is not built"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nm_gguf_cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
n=0

# check NAME FILE WANT_RC WORDS: run the model and check exit status and stderr. WORDS is a fixed
# string whose '*' stands for anything (as in test_gguf_corrupt), or an extended regex after "re:".
check() {
    local name=$1 file=$2 want=$3 words=$4 rc
    n=$((n + 1))
    "$NUMALLM" run -m "$file" --tokens 1 -n 1 -t 1 >"$TMP/out" 2>"$TMP/err"
    rc=$?
    local why=""
    if [ $rc -gt 128 ]; then
        why="killed by signal $((rc - 128))"
    elif grep -qE "Sanitizer|runtime error:" "$TMP/err"; then
        why="sanitizer report (exit $rc)" # ASan and UBSan exit with 1 too
    elif [ $rc -ne "$want" ]; then
        why="exit $rc, want $want"
    elif [ "$want" -ne 0 ] && ! grep -q "error:" "$TMP/err"; then
        why="no 'error:' on stderr"
    elif [ "$want" -ne 0 ] && [ "${words#re:}" != "$words" ] && ! grep -qE -- "${words#re:}" "$TMP/err"; then
        why="stderr does not match /${words#re:}/"
    elif [ "$want" -ne 0 ] && [ "${words#re:}" = "$words" ]; then
        local part parts
        IFS='*' read -ra parts <<<"$words"
        for part in "${parts[@]}"; do
            if [ -n "$part" ] && ! grep -qF -- "$part" "$TMP/err"; then why="stderr lacks '$part'"; break; fi
        done
    fi
    if [ -n "$why" ]; then
        fails=$((fails + 1))
        echo "FAIL $name: $why"
        tail -5 "$TMP/err" | sed 's/^/  stderr: /'
        echo "  repro: $GEN --write-dir /tmp/cases && $NUMALLM run -m /tmp/cases/$name.gguf --tokens 1 -n 1"
    fi
}

# 1. Every case of the C test.
mkdir -p "$TMP/cases"
"$GEN" --write-dir "$TMP/cases" >/dev/null || { echo "FAIL: $GEN --write-dir failed"; exit 1; }
while IFS=$'\t' read -r name status words; do
    if [ "$status" = NM_OK ]; then
        check "$name" "$TMP/cases/$name.gguf" 0 ""
    else
        check "$name" "$TMP/cases/$name.gguf" 1 "$words"
    fi
    rm -f "$TMP/cases/$name.gguf"
done <"$TMP/cases/cases.tsv"

# 2. Files made with the shell alone.
: >"$TMP/empty.gguf"
check shell_empty "$TMP/empty.gguf" 1 "truncated file: magic needs 4 bytes"
printf 'GGML\003\000\000\000' >"$TMP/magic.gguf"; head -c 64 /dev/zero >>"$TMP/magic.gguf"
check shell_wrong_magic "$TMP/magic.gguf" 1 "not a GGUF file"
printf 'GGUF\001\000\000\000' >"$TMP/v1.gguf"; head -c 64 /dev/zero >>"$TMP/v1.gguf"
check shell_version_1 "$TMP/v1.gguf" 1 "version 1 is not supported"
printf 'GGUF\000\000\000\003' >"$TMP/be.gguf"; head -c 64 /dev/zero >>"$TMP/be.gguf"
check shell_big_endian "$TMP/be.gguf" 1 "big-endian"
printf 'GGUF\003\000\000\000\377\377\377\377\377\377\377\177\000\000\000\000\000\000\000\000' >"$TMP/count.gguf"
check shell_tensor_count_huge "$TMP/count.gguf" 1 "tensor count"
check shell_directory "$TMP" 1 "not a regular file"
check shell_missing_file "$TMP/does-not-exist.gguf" 1 "cannot open"
if "$NUMALLM" mkmodel --preset tiny-llama --type q4_0 -o "$TMP/good.gguf" >/dev/null 2>&1; then
    size=$(stat -c %s "$TMP/good.gguf")
    for cut in 3 24 100 1000 5000 $((size / 2)) $((size - 1)); do
        head -c "$cut" "$TMP/good.gguf" >"$TMP/cut.gguf"
        check "shell_truncated_at_$cut" "$TMP/cut.gguf" 1 "re:truncated|bytes left|can hold"
    done
else
    echo "FAIL: numallm mkmodel --preset tiny-llama failed"
    fails=$((fails + 1))
fi

# 3. Real vocabulary-only files.
VOCAB_DIR=${NM_TOKENIZER_DATA:-$SRC/../shared/data/tokenizer}
for f in "$VOCAB_DIR"/*.gguf; do
    [ -f "$f" ] || continue
    check "vocab_$(basename "$f" .gguf)" "$f" 1 "no tensors"
done

echo "gguf_cli_corrupt: $n files through numallm run: $fails failures"
[ $fails -eq 0 ]
