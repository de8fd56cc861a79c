#!/usr/bin/env bash
# soak_test.sh NUMALLM SRC_DIR WORKDIR [CLIENTS SECONDS]: tests/serve/soak.py for a short while
# (default 16 clients for 60 s) against numallm serve on a tiny qwen2 model: every response
# equal to its prompt's greedy answer alone, no error, RSS flat after the first 20 s (within
# 16 MiB), the threads back at the end. Skipped (77) without the shared tokenizer data or a
# numallm built with serve.
set -u
NUMALLM=$(realpath "$1") SRC=$(realpath "$2") WORK=$3 CLIENTS=${4:-16} DURATION=${5:-60}
PY=${NM_PYTHON:-/usr/bin/python3}
VOCAB=$SRC/../shared/data/tokenizer/ggml-vocab-gpt-2.gguf
repro="bash $0 $NUMALLM $SRC $WORK $CLIENTS $DURATION"
fail() { echo "soak_test: FAIL: $1"; echo "--- server log:"; tail -20 "$WORK/server.log" 2>/dev/null; echo "repro: $repro"; exit 1; }
[ -f "$VOCAB" ] || { echo "SKIP: $VOCAB not found (the shared tokenizer data)"; exit 77; }
"$NUMALLM" serve --help >/dev/null 2>&1 || { echo "SKIP: numallm was built without serve (libmicrohttpd, jansson)"; exit 77; }
mkdir -p "$WORK" && cd "$WORK" || fail "cannot use $WORK"
"$NUMALLM" mkmodel --preset tiny-qwen2 --type q8_0 -o m.gguf --vocab-from "$VOCAB" --seed 4 2>/dev/null || fail mkmodel
# Requests are bounded by --timeout; the whole run (the expected answers first, then the soak)
# by timeout(1), with margins for a loaded 2-core machine.
timeout $((DURATION + 600)) "$PY" "$SRC/tests/serve/soak.py" --numallm "$NUMALLM" --model m.gguf --threads 1 \
  --server-log server.log --clients "$CLIENTS" --duration "$DURATION" --prompts 64 --rss-warmup 20 \
  --rss-growth-mib 16 --timeout 120 --json soak.json
rc=$?
[ $rc = 0 ] || fail "soak.py exited with status $rc"
grep -q "serve: stopped" server.log || fail "the server did not stop cleanly"
echo "soak_test: PASS"
