#!/usr/bin/env bash
# serve_gpu.sh NUMALLM SRC_DIR WORKDIR: numallm serve with the whole model on the GPU stage
# (-ngl 99) and 3 slots, 1 rank in-process and 2 CPU ranks + the GPU rank under mpirun: 6
# greedy requests at once (more than the slots: some wait) give each the text it gives alone,
# with every row of a step, of several sequences, on the stage; the steps batched rows; a client
# that goes away frees its slot; SIGTERM ends the job cleanly. The model has f32 weights, so
# alone and together differ at most by f32 rounding (the prompt GEMM against the decode GEMV),
# which moves no greedy choice of this model. The model's tokenizer is mkmodel's own. Exit 77
# (skipped) without a CUDA device, curl, or serve.
set -u
NUMALLM=$1 SRC=$2 WORK=$3
PY=${NM_PYTHON:-/usr/bin/python3}
command -v curl >/dev/null || { echo "SKIP: curl not found (launcher/setup.sh installs it)"; exit 77; }
"$NUMALLM" serve --help >/dev/null 2>&1 || { echo "SKIP: numallm was built without serve (libmicrohttpd, jansson)"; exit 77; }
RANKS=1 # lib.sh starts the server in-process; --ranks below asks the launcher for its mpirun job
source "$SRC/tests/serve/lib.sh"
trap serve_cleanup EXIT
NR=1
fail() { echo "serve_gpu: FAIL ($NR CPU rank(s)): $1"; echo "--- server log:"; tail -20 "$WORK/server.log" 2>/dev/null
         echo "repro: bash $0 $NUMALLM $SRC $WORK"; exit 1; }
mkdir -p "$WORK" && cd "$WORK" || fail "cannot use $WORK"
"$NUMALLM" mkmodel --preset tiny-qwen2 --type f32 -o m.gguf --seed 4 2>/dev/null || fail mkmodel
jget() { "$PY" -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

for NR in 1 2; do
  if ! serve_start m.gguf server.log -ngl 99 --strict -np 3 -c 1536 --ranks "$NR"; then
    grep -qE "needs a GPU|no CUDA device" server.log && { echo "SKIP: $(grep -oE 'no CUDA device.*' server.log | head -1)"; exit 77; }
    fail "the server did not become healthy"
  fi
  grep -q "3 sequences of 512 tokens" server.log || fail "the GPU stage does not hold the 3 slots' sequences"

  for i in $(seq 1 6); do
    printf '{"prompt": "Request %d asks about %s", "max_tokens": %d, "temperature": 0, "ignore_eos": true}' "$i" \
      "$(printf 'y%.0s' $(seq 1 $((i * 4))))" $((8 + i % 3)) >"req$i.json"
    curl -s --max-time 120 -d @"req$i.json" "$URL/v1/completions" >"alone$i.raw"
    jget 'json.dumps(d["choices"][0]["text"]), d["usage"]["completion_tokens"]' <"alone$i.raw" >"alone$i.txt" ||
      fail "request $i alone: $(cat "alone$i.raw")"
    [ "$(awk '{print $NF}' "alone$i.txt")" = $((8 + i % 3)) ] || fail "request $i alone: $(cat "alone$i.raw")"
  done
  for i in $(seq 1 6); do
    (curl -s --max-time 120 -o "together$i.raw" -d @"req$i.json" "$URL/v1/completions"
     jget 'json.dumps(d["choices"][0]["text"]), d["usage"]["completion_tokens"]' <"together$i.raw" >"together$i.txt") &
  done
  for j in $(jobs -p); do [ "$j" = "$PID" ] || wait "$j"; done
  for i in $(seq 1 6); do
    cmp -s "alone$i.txt" "together$i.txt" ||
      fail "request $i: alone $(cat "alone$i.txt"), among 6 concurrent $(cat "together$i.txt") ($(cat "together$i.raw"))"
  done
  curl -s --max-time 30 "$URL/metrics" >metrics.txt
  "$PY" -c "
m = dict(l.split() for l in open('metrics.txt') if l.startswith('numallm_'))
assert float(m['numallm_batch_rows_total']) > float(m['numallm_steps_total']), m
" || fail "no step batched several rows: $(grep -E 'steps|rows' metrics.txt)"
  serve_check_client_gone || fail "the slot of a client gone was not freed: $(grep -E 'cancelled|processing' metrics.txt)"

  serve_stop || fail "the server did not exit within 60 s of SIGTERM"
  for r in $(seq 0 $((NR - 1))); do
    grep -q "r$r.*serve: stopped" server.log || fail "rank $r did not stop cleanly"
  done
  echo "serve_gpu: $NR CPU rank(s): 6 concurrent requests on 3 slots equal to each alone"
done
echo "serve_gpu: PASS"
