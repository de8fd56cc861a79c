#!/usr/bin/env bash
# health_test.sh NUMALLM SRC_DIR WORKDIR: GET /health while the model loads and once it is ready.
# numallm serve listens before it loads the model; on a model big enough that loading takes a
# while (qwen2.5-0.5b's shapes in q4_0, 0.26 GiB, made by mkmodel: 0.5 to 4 s to load here), a
# poller asking from the moment the server starts must see 503 with OpenAI's error body (and 503
# for the API's routes too), then 200 {"status": "ok"}, and never 503 again after a 200. Skipped
# (77) without a numallm built with serve or 1 GiB free in WORKDIR.
set -u
NUMALLM=$(realpath "$1") SRC=$(realpath "$2") WORK=$3
PY=${NM_PYTHON:-/usr/bin/python3}
RANKS=1
repro="bash $0 $NUMALLM $SRC $WORK"
fail() { echo "health_test: FAIL: $1"; echo "--- server log:"; tail -20 "$WORK/server.log" 2>/dev/null; echo "repro: $repro"; exit 1; }
"$NUMALLM" serve --help >/dev/null 2>&1 || { echo "SKIP: numallm was built without serve (libmicrohttpd, jansson)"; exit 77; }
mkdir -p "$WORK" && cd "$WORK" || fail "cannot use $WORK"
free_kib=$(df -Pk . | awk 'NR == 2 {print $4}')
[ "$free_kib" -gt 1048576 ] || { echo "SKIP: less than 1 GiB free in $WORK for a 0.26 GiB model"; exit 77; }
source "$SRC/tests/serve/lib.sh"
trap serve_cleanup EXIT
"$NUMALLM" mkmodel --preset qwen2.5-0.5b --type q4_0 -o big.gguf --seed 1 >mkmodel.log 2>&1 || fail "mkmodel: $(tail -3 mkmodel.log)"
serve_launch big.gguf server.log -np 2 -c 512
# The poller: from now until the first 200 (at most 300 s), GET /health as fast as it answers,
# and a completion and /v1/models while it answers 503; then /health 20 times more.
"$PY" - "$PORT" "$PID" <<'PY' || fail "/health while loading (above)"
import http.client, json, os, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
def get(method, path, body=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=body)
    r = c.getresponse()
    out = r.status, r.getheader("Content-Type"), r.read()
    c.close()
    return out
t0 = time.monotonic()
seen_503 = 0
while True:
    assert time.monotonic() - t0 < 300, "no 200 within 300 s (%d answers of 503)" % seen_503
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("the server exited while loading")
    try:
        status, ctype, body = get("GET", "/health")
    except OSError:  # not listening yet
        time.sleep(0.002)
        continue
    if status == 200:
        break
    assert status == 503, (status, body)
    d = json.loads(body)
    assert ctype == "application/json" and d["error"]["type"] == "unavailable_error" and \
        d["error"]["message"] == "Loading model", (ctype, body)
    if seen_503 == 0:  # the API answers 503 too while loading
        s2, _, b2 = get("POST", "/v1/completions", json.dumps({"prompt": [1, 2, 3], "max_tokens": 1}))
        s3, _, b3 = get("GET", "/v1/models")
        assert s2 in (503, 200) and s3 in (503, 200), (s2, b2, s3, b3)
        if s2 == 503:
            assert json.loads(b2)["error"]["type"] == "unavailable_error", b2
    seen_503 += 1
ready = time.monotonic() - t0
assert seen_503 > 0, "the first answer of /health was already 200: the loading was not seen (a faster machine?)"
assert json.loads(body) == {"status": "ok"}, body
for _ in range(20):
    status, _, body = get("GET", "/health")
    assert status == 200, ("503 again after 200", status, body)
# A 0.5B model on the plain-C kernels under a sanitizer and a loaded machine: minutes, not seconds.
status, _, body = get("POST", "/v1/completions", json.dumps({"prompt": [1, 2, 3], "max_tokens": 2}), timeout=600)
assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2, (status, body)
print("/health: %d answers of 503 (JSON error, Loading model) over %.2f s, then 200 {\"status\": \"ok\"}" % (seen_503, ready))
PY
serve_stop || fail "the server did not exit within 60 s of SIGTERM"
rm -f big.gguf
echo "health_test: PASS"
