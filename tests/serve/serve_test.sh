#!/usr/bin/env bash
# serve_test.sh NUMALLM SRC_DIR WORKDIR RANKS [MPIRUN...]: numallm serve end to end over curl, on a
# tiny qwen2 model with GPT-2's vocabulary, 1 rank in-process or RANKS under mpirun. Checks the
# endpoints and their shapes (completions and chat, streaming and not, usage with the cached
# prompt tokens, stop strings held back across token borders, token-id prompts, /tokenize,
# /detokenize, /v1/models, /metrics, /health), the errors (400, 401, 404, 413, 503 with Retry-After
# when the queue is full; OpenAI fields numallm does not implement refused; a body without the API
# key not stored), an idle connection closed by --timeout, greedy results of 16 concurrent requests equal to each alone (batch
# invariance), a client that goes away freeing its slot, and a clean exit on SIGTERM. Every
# request and wait is bounded.
set -u
NUMALLM=$1 SRC=$2 WORK=$3 RANKS=$4
shift 4
MPIRUN=("$@")
PY=${NM_PYTHON:-/usr/bin/python3}
VOCAB=$SRC/../shared/data/tokenizer/ggml-vocab-gpt-2.gguf
if [ ! -f "$VOCAB" ]; then echo "SKIP: $VOCAB not found (the shared tokenizer data)"; exit 77; fi
command -v curl >/dev/null || { echo "SKIP: curl not found (launcher/setup.sh installs it)"; exit 77; }
"$NUMALLM" serve --help >/dev/null 2>&1 || { echo "SKIP: numallm was built without serve (libmicrohttpd, jansson)"; exit 77; }
repro="bash $0 $NUMALLM $SRC $WORK $RANKS ${MPIRUN[*]}"
source "$SRC/tests/serve/lib.sh" # serve_check_client_gone
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT
fail() { echo "serve_test: FAIL ($RANKS rank(s)): $1"; echo "--- server log:"; tail -20 "$WORK/server.log" 2>/dev/null; echo "repro: $repro"; exit 1; }
mkdir -p "$WORK" && cd "$WORK" || fail "cannot use $WORK"
"$NUMALLM" mkmodel --preset tiny-qwen2 --type q8_0 -o m.gguf --vocab-from "$VOCAB" --seed 4 2>/dev/null || fail mkmodel

# start_server LOG ARGS...: sets PID and URL; waits (at most 120 s) for /health to answer 200.
start_server() {
  local log=$1; shift
  local port; port=$(free_port)
  URL=http://127.0.0.1:$port
  if [ "$RANKS" = 1 ]; then
    "$NUMALLM" serve -m m.gguf --port "$port" -t 1 "$@" >"$log" 2>&1 &
  else
    "${MPIRUN[@]}" -np "$RANKS" "$NUMALLM" serve -m m.gguf --port "$port" -t 1 "$@" >"$log" 2>&1 &
  fi
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 240); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")" = 200 ] && return 0
    kill -0 "$PID" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
# post PATH BODY [curl args]: the body of the answer; the status goes to $WORK/status.
post() {
  local path=$1 body=$2; shift 2
  curl -s --max-time 120 -o "$WORK/resp" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$@" \
    "$URL$path" >"$WORK/status"
  cat "$WORK/resp"
}
status() { cat "$WORK/status"; }
# jget EXPR: a Python expression over the JSON document d read from standard input.
jget() { "$PY" -c "import json, sys; d = json.load(sys.stdin); print($1)"; }
expect_status() { [ "$(status)" = "$1" ] || fail "$2: HTTP $(status), expected $1: $(cat "$WORK/resp")"; }

start_server server.log -np 4 -c 2048 --chat-template chatml || fail "the server did not become healthy"
[ "$RANKS" = 1 ] || grep -q "shard 1/$RANKS" server.log || fail "the server did not run $RANKS ranks"

# ---- shapes ----
r=$(curl -s --max-time 30 "$URL/v1/models")
[ "$(echo "$r" | jget 'd["object"], d["data"][0]["id"]')" = "list m.gguf" ] || fail "/v1/models: $r"

C='{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}'
r=$(post /v1/completions "$C"); expect_status 200 "completion"
[ "$(echo "$r" | jget 'd["object"], d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"]')" = \
  "text_completion length 12" ] || fail "completion shape: $r"
TEXT=$(echo "$r" | jget 'json.dumps(d["choices"][0]["text"])')
r2=$(post /v1/completions "$C")
[ "$(echo "$r2" | jget 'json.dumps(d["choices"][0]["text"])')" = "$TEXT" ] || fail "greedy completion not repeatable"
# prefix reuse in usage: the first request found nothing cached, its repeat all but the last two tokens
[ "$(echo "$r" | jget 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0 ] || fail "first request's usage: $r"
[ "$(echo "$r2" | jget 'd["usage"]["prompt_tokens_details"]["cached_tokens"] == d["usage"]["prompt_tokens"] - 2')" = True ] ||
  fail "the repeated prompt's usage does not count its cached tokens: $r2"

IDS=$(post /tokenize '{"content": "The capital of France is"}' | jget 'd["tokens"]')
expect_status 200 tokenize
r=$(post /v1/completions "{\"prompt\": $IDS, \"max_tokens\": 12, \"temperature\": 0}")
[ "$(echo "$r" | jget 'json.dumps(d["choices"][0]["text"])')" = "$TEXT" ] || fail "token-id prompt differs from text: $r"
[ "$(post /detokenize "{\"tokens\": $IDS}" | jget 'd["content"]')" = "The capital of France is" ] || fail detokenize
# A token that holds part of a character (GPT-2's 47249: the first two bytes of a three-byte one):
# the text keeps what is whole and shows U+FFFD for the rest; /tokenize's pieces give such a
# token as its bytes.
[ "$(post /detokenize '{"tokens": [31373, 47249]}' | jget 'ascii(d["content"])')" = "'hello\\ufffd'" ] ||
  fail "detokenize of a partial character: $(cat resp)"
[ "$(post /tokenize '{"content": "a\ud83d\ude00", "with_pieces": true}' | jget 'd["tokens"][-1]["piece"]')" = "[128]" ] ||
  fail "tokenize pieces of a split character: $(cat resp)"

CH='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_tokens": 10, "temperature": 0'
r=$(post /v1/chat/completions "$CH}"); expect_status 200 chat
[ "$(echo "$r" | jget 'd["object"], d["choices"][0]["message"]["role"], d["usage"]["completion_tokens"]')" = \
  "chat.completion assistant 10" ] || fail "chat shape: $r"
CHAT=$(echo "$r" | jget 'json.dumps(d["choices"][0]["message"]["content"])')

# Streaming: SSE chunks, the role first, the same text as without streaming, usage, [DONE] last.
curl -sN --max-time 120 -d "$CH, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
  "$URL/v1/chat/completions" >stream.txt || fail "chat stream"
"$PY" - "$CHAT" <<'EOF' || fail "chat stream: $(head -c 600 stream.txt)"
import json, sys
events = [l[6:] for l in open("stream.txt").read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
assert json.dumps(text) == sys.argv[1], (text, sys.argv[1])
assert chunks[-2]["choices"][0]["finish_reason"] == "length", chunks[-2]
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10, chunks[-1]
EOF

# Stop strings: a piece of the greedy text that spans a token border ends the text before it,
# streaming or not, even though it arrives over several tokens.
STOP=$(echo "{\"t\": $TEXT}" | jget 'd["t"][len(d["t"]) // 3: len(d["t"]) // 3 + 5]')
WANT=$(echo "{\"t\": $TEXT}" | jget "json.dumps(d['t'][:d['t'].find($(printf %s "$STOP" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'))])")
SB="{\"prompt\": \"The capital of France is\", \"max_tokens\": 12, \"temperature\": 0, \"stop\": [\"zzz\", $(printf %s "$STOP" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')]"
r=$(post /v1/completions "$SB}")
[ "$(echo "$r" | jget 'json.dumps(d["choices"][0]["text"]), d["choices"][0]["finish_reason"]')" = "$WANT stop" ] ||
  fail "stop string '$STOP': $r (want $WANT)"
curl -sN --max-time 120 -d "$SB, \"stream\": true}" "$URL/v1/completions" >stop_stream.txt || fail "stop stream"
"$PY" - "$WANT" <<'EOF' || fail "stop string, streaming: $(head -c 600 stop_stream.txt)"
import json, sys
events = [l[6:] for l in open("stop_stream.txt").read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]"
chunks = [json.loads(e) for e in events[:-1]]
assert json.dumps("".join(c["choices"][0]["text"] for c in chunks)) == sys.argv[1]
assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
EOF

# ---- errors ----
post /v1/completions '{"prompt": "x", "n": 2}' >/dev/null; expect_status 400 "n = 2"
[ "$(jget 'd["error"]["type"], d["error"]["code"]' <resp)" = "invalid_request_error 400" ] || fail "error shape: $(cat resp)"
post /v1/completions '{"prompt": ' >/dev/null; expect_status 400 "bad JSON"
post /v1/completions '{"prompt": "x", "temperature": "hot"}' >/dev/null; expect_status 400 "bad temperature"
post /v1/chat/completions '{"messages": []}' >/dev/null; expect_status 400 "no messages"
# OpenAI fields that numallm does not implement are refused, naming the field, not ignored
for f in '"response_format": {"type": "json_object"}' '"logprobs": true' '"tools": [{"type": "function"}]' \
  '"logit_bias": {"50": 5}'; do
  post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], $f}" >/dev/null
  expect_status 400 "unsupported field $f"
  name=${f%%\":*}; name=${name#\"}
  grep -q "'$name" resp || fail "the refusal does not name $name: $(cat resp)"
done
post /v1/completions '{"prompt": "x", "echo": true}' >/dev/null; expect_status 400 "echo"
post /v1/chat/completions '{"messages": [{"role": "tool", "content": "4"}]}' >/dev/null; expect_status 400 "role tool"
post /v1/chat/completions '{"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
  "max_tokens": 2, "response_format": {"type": "text"}, "logprobs": false}' >/dev/null
expect_status 200 "a developer message, and fields that ask for nothing"
LONG="[$(printf '50,%.0s' $(seq 1 600))50]"
post /v1/completions "{\"prompt\": $LONG}" >/dev/null; expect_status 400 "prompt longer than a slot"
grep -q "slot holds 512 positions" resp || fail "the too-long error does not name the slot size: $(cat resp)"
curl -s -o resp -w '%{http_code}' --max-time 30 "$URL/v1/nothing" >status; expect_status 404 "unknown route"
post /v1/models '{}' >/dev/null; expect_status 405 "POST /v1/models"
curl -s -o resp -w '%{http_code}' --max-time 30 "$URL/v1/completions" >status; expect_status 405 "GET /v1/completions"
curl -s -o /dev/null -w '%{http_code}' --max-time 30 -I "$URL/v1/models" >status; expect_status 200 "HEAD /v1/models"
post /tokenize '{"content": ' >/dev/null; expect_status 400 "/tokenize, bad JSON"
grep -q "not JSON" resp || fail "/tokenize's error does not say the body is not JSON: $(cat resp)"

# ---- batch invariance: 16 greedy requests at once give each what it gives alone ----
for i in $(seq 1 16); do
  printf '{"prompt": "Request %d asks about %s", "max_tokens": %d, "temperature": 0}' "$i" \
    "$(printf 'x%.0s' $(seq 1 $((i * 3))))" $((6 + i % 5)) >"req$i.json"
  curl -s --max-time 120 -d @"req$i.json" "$URL/v1/completions" | jget 'json.dumps(d["choices"][0]["text"])' >"alone$i.txt"
done
for i in $(seq 1 16); do
  (sleep "0.0$((i % 4))"; curl -s --max-time 120 -o "together$i.raw" -d @"req$i.json" "$URL/v1/completions"
   echo "curl exit status $?" >"together$i.rc"
   jget 'json.dumps(d["choices"][0]["text"])' <"together$i.raw" >"together$i.txt") &
done
wait_jobs() { for j in $(jobs -p); do [ "$j" = "$PID" ] || wait "$j"; done; }
wait_jobs
for i in $(seq 1 16); do
  [ -s "alone$i.txt" ] && cmp -s "alone$i.txt" "together$i.txt" ||
    fail "request $i: alone $(cat "alone$i.txt"), among 16 concurrent $(cat "together$i.txt") ($(cat "together$i.rc"): $(cat "together$i.raw"))"
done
curl -s --max-time 30 "$URL/metrics" >metrics.txt
grep -q '^numallm_requests_total ' metrics.txt || fail "/metrics: $(head -5 metrics.txt)"
"$PY" -c "
import sys
m = dict(l.split() for l in open('metrics.txt') if l.startswith('numallm_'))
assert float(m['numallm_batch_rows_total']) > float(m['numallm_steps_total']), m  # rows were batched
assert float(m['numallm_prompt_tokens_cached_total']) > 0, m  # repeated prompts reused their prefix
" || fail "no step batched several rows, or no prefix was reused: $(grep -E 'steps|rows|cached' metrics.txt)"

# ---- a client that goes away frees its slot ----
serve_check_client_gone || fail "the slot of a client gone was not freed: $(grep -E 'cancelled|processing' metrics.txt)"

# ---- SIGTERM: a clean exit ----
kill -TERM "$PID"
for _ in $(seq 1 60); do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
kill -0 "$PID" 2>/dev/null && fail "the server did not exit within 30 s of SIGTERM"
wait "$PID"; rc=$?
# mpirun reports the signal it forwarded in its own status; each rank says it stopped cleanly.
[ $rc = 0 ] || [ "$RANKS" != 1 ] || fail "the server exited with status $rc after SIGTERM"
for r in $(seq 0 $((RANKS - 1))); do
  grep -q "r$r.*serve: stopped" server.log || fail "rank $r did not stop cleanly (status $rc)"
done

# ---- API key and a full queue: one slot, one waiting request at most ----
start_server server2.log -np 1 -c 8192 --max-queue 1 --api-key sesame --timeout 3 || fail "second server did not start"
post /v1/models '' -X GET >/dev/null; expect_status 401 "no API key"
[ "$(jget 'd["error"]["type"]' <resp)" = authentication_error ] || fail "401 shape: $(cat resp)"
post /v1/models '' -X GET -H 'Authorization: Bearer wrong' >/dev/null; expect_status 401 "wrong API key"
# a body without the key is refused before it is stored: 401, not 413, for one over 16 MiB
head -c $((17 << 20)) /dev/zero >big.bin
curl -s -o resp -w '%{http_code}' --max-time 60 -H 'Authorization: Bearer wrong' --data-binary @big.bin \
  "$URL/v1/completions" >status; expect_status 401 "a large body without the key"
curl -s -o resp -w '%{http_code}' --max-time 60 -H 'Authorization: Bearer sesame' --data-binary @big.bin \
  "$URL/v1/completions" >status; expect_status 413 "a body over 16 MiB"
# --timeout: a connection that sends nothing is closed (after 3 s; a loaded machine may take longer)
"$PY" - "${URL##*:}" <<'EOF' || fail "an idle connection was not closed"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(60)
t = time.monotonic()
assert s.recv(64) == b"", "the server sent bytes to an idle connection"
assert time.monotonic() - t >= 2.5, "closed before the timeout"
EOF
AUTH=(-H 'Authorization: Bearer sesame')
post /v1/completions '{"prompt": "x", "max_tokens": 2}' "${AUTH[@]}" >/dev/null; expect_status 200 "with the API key"
BIG='{"prompt": "Go on", "max_tokens": 100000, "ignore_eos": true}'
curl -s --max-time 8 "${AUTH[@]}" -d "$BIG" "$URL/v1/completions" >/dev/null &  # takes the slot
sleep 1
curl -s --max-time 7 "${AUTH[@]}" -d "$BIG" "$URL/v1/completions" >/dev/null &  # waits in the queue
sleep 1
curl -s -D headers.txt -o resp -w '%{http_code}' --max-time 30 "${AUTH[@]}" -d "$BIG" "$URL/v1/completions" >status
expect_status 503 "a full queue"
grep -qi '^Retry-After:' headers.txt || fail "503 without Retry-After: $(cat headers.txt)"
wait_jobs
# metric NAME: the server's /metrics value of numallm_NAME
metric() { curl -s --max-time 10 "${AUTH[@]}" "$URL/metrics" | sed -n "s/^numallm_$1 //p"; }
# wait_idle: until no request holds or waits for the slot (at most 60 s)
wait_idle() {
  for _ in $(seq 1 120); do
    [ "$(metric requests_processing) $(metric requests_deferred)" = "0 0" ] && return
    sleep 0.5
  done
}
# a request that waits for the slot longer than --timeout still gets its whole answer (once the
# server has let the requests above go: their clients left)
wait_idle
curl -s --max-time 6 "${AUTH[@]}" -d "$BIG" "$URL/v1/completions" >/dev/null &  # takes the slot for 6 s
sleep 1
r=$(post /v1/completions '{"prompt": "x", "max_tokens": 2}' "${AUTH[@]}"); expect_status 200 "a wait past --timeout"
[ "$(echo "$r" | jget 'd["usage"]["completion_tokens"]')" = 2 ] || fail "a wait past --timeout: $r"
wait_jobs
# a client of a request without streaming that leaves (after 2 s; the slot's 8192 positions take
# longer however fast the machine) frees the slot: the request ends cancelled, not at its length
c0=$(metric requests_cancelled_total)
curl -s --max-time 2 "${AUTH[@]}" -d "$BIG" "$URL/v1/completions" >/dev/null
wait_idle
c1=$(metric requests_cancelled_total)
[ "$c1" = $((c0 + 1)) ] || fail "a client without streaming that left: cancelled $c0 -> $c1, expected +1"
kill -TERM "$PID"
for _ in $(seq 1 60); do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
kill -0 "$PID" 2>/dev/null && fail "the second server did not exit within 30 s of SIGTERM"
echo "serve_test: PASS ($RANKS rank(s))"
