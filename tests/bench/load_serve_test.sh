#!/usr/bin/env bash
# load_serve_test.sh NUMALLM SRC_DIR WORKDIR: tests/bench/load_serve.py briefly against numallm
# serve on a tiny qwen2 model (levels 1 and 4 clients, 3 s each), then checks its figures are
# sane: no errors, every level completed requests, the output tokens counted are requests x the
# output length, TTFT and TPOT present and positive, the JSON agrees with the markdown table, and
# the server's step counters (/metrics) give each level its steps, rows and times.
# The figures themselves are not asserted (timings are not tests). Skipped (77) without the
# shared tokenizer data or a numallm built with serve.
set -u
NUMALLM=$(realpath "$1") SRC=$(realpath "$2") WORK=$3
PY=${NM_PYTHON:-/usr/bin/python3}
VOCAB=$SRC/../shared/data/tokenizer/ggml-vocab-gpt-2.gguf
repro="bash $0 $NUMALLM $SRC $WORK"
fail() { echo "load_serve_test: FAIL: $1"; echo "--- server log:"; tail -20 "$WORK/server.log" 2>/dev/null; echo "repro: $repro"; exit 1; }
[ -f "$VOCAB" ] || { echo "SKIP: $VOCAB not found (the shared tokenizer data)"; exit 77; }
"$NUMALLM" serve --help >/dev/null 2>&1 || { echo "SKIP: numallm was built without serve (libmicrohttpd, jansson)"; exit 77; }
mkdir -p "$WORK" && cd "$WORK" || fail "cannot use $WORK"
"$NUMALLM" mkmodel --preset tiny-qwen2 --type q8_0 -o m.gguf --vocab-from "$VOCAB" --seed 4 2>/dev/null || fail mkmodel
rm -f load.json
# Each level's clients stop sending after 3 s; the requests then in flight finish (bounded by
# --timeout), and the whole run by timeout(1), with margins for a loaded 2-core machine.
timeout 400 "$PY" "$SRC/tests/bench/load_serve.py" --numallm "$NUMALLM" --model m.gguf --threads 1 \
  --server-log server.log --concurrency 1,4 --duration 3 --prompt-tokens 32 --output-tokens 16 --timeout 120 \
  --json load.json | tee table.md
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || fail "load_serve.py exited with status $rc"
"$PY" - <<'PY' || fail "the figures are not sane (above)"
import json
d = json.load(open("load.json"))
rows = d["rows"]
assert [r["concurrency"] for r in rows] == [1, 4], rows
lines = [l for l in open("table.md") if l.startswith("| ") and l[2].isdigit()]
table = [l for l in lines if l.count("|") == 10]  # the levels; then the server's steps (8 |)
split = [l for l in lines if l.count("|") == 8]
assert len(table) == len(rows) and len(split) == len(rows), lines
for r, line in zip(rows, table):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    assert r["errors"] == 0, r
    assert r["requests"] >= r["concurrency"], r  # every client finished at least one request
    assert r["output_tokens"] == r["requests"] * 16, r
    assert abs(r["output_tokens_per_s"] * r["wall_s"] - r["output_tokens"]) < 1e-6 * r["output_tokens"] + 1e-9, r
    for k in ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99"):
        assert r[k] is not None and r[k] > 0, (k, r)
    assert r["ttft_ms_p50"] <= r["ttft_ms_p99"] and r["tpot_ms_p50"] <= r["tpot_ms_p99"], r
    assert r["ttft_ms_p99"] < r["wall_s"] * 1e3 + 120e3, r
    assert cells[:3] == [str(r["concurrency"]), str(r["requests"]), "0"], (cells, r)
    assert abs(float(cells[4]) - r["output_tokens_per_s"]) <= 0.05 + 1e-3 * r["output_tokens_per_s"], (cells, r)
    s = r["steps"]  # the server's step counters around the level
    assert s and s["steps"] > 0 and s["rows_per_step"] >= 1 and s["forward_ms"] > 0 and s["sample_ms"] >= 0, r
    assert s["deliver_ms"] > 0, r  # (every step of these levels delivers a token)
    # The server adds a step to its counters after delivering its tokens, so the last step of the
    # level before may fall into this level's counters: the steps' time fits the wall time but one.
    step_ms = s["forward_ms"] + s["sample_ms"] + s["deliver_ms"]
    assert step_ms * (s["steps"] - 1) <= r["wall_s"] * 1e3 + 1e-6, r
    print("level %d: %d requests, %d output tokens = %d x 16, 0 errors" % (r["concurrency"], r["requests"],
                                                                         r["output_tokens"], r["requests"]))
PY
grep -q "serve: stopped" server.log || fail "the server did not stop cleanly after the run"
echo "load_serve_test: PASS"
