# tests/serve/lib.sh: what the serve tests share, sourced by them (bash). The caller sets NUMALLM,
# RANKS (1: in-process; more: under MPIRUN, an array), PY, WORK and a fail function; these
# functions start and stop numallm serve on a free loopback port and wait with bounds.

# A free port: the kernel's choice for a socket bound to port 0.
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# serve_launch MODEL LOG ARGS...: start numallm serve on a free port in the background; sets PID,
# PORT and URL and adds PID to PIDS (killed by serve_cleanup). Does not wait.
PIDS=()
serve_launch() {
  local model=$1 log=$2; shift 2
  PORT=$(free_port)
  URL=http://127.0.0.1:$PORT
  if [ "$RANKS" = 1 ]; then
    "$NUMALLM" serve -m "$model" --port "$PORT" -t 1 "$@" >"$log" 2>&1 &
  else
    "${MPIRUN[@]}" -np "$RANKS" "$NUMALLM" serve -m "$model" --port "$PORT" -t 1 "$@" >"$log" 2>&1 &
  fi
  PID=$!
  PIDS+=("$PID")
}

# http_code URL: the status of GET URL (000 when nothing answers), within 5 s.
http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1"; }

# serve_wait_healthy [SECONDS]: wait (default 240 s: a loaded 2-core machine, mpirun's start) for
# GET /health to answer 200. 1 when the server exits first or the time is up.
serve_wait_healthy() {
  local deadline=$((SECONDS + ${1:-240}))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(http_code "$URL/health")" = 200 ] && return 0
    kill -0 "$PID" 2>/dev/null || return 1
    sleep 0.3
  done
  return 1
}

# serve_start MODEL LOG ARGS...: serve_launch, then serve_wait_healthy.
serve_start() { serve_launch "$@" && serve_wait_healthy; }

# serve_stop: SIGTERM, and wait (at most 60 s) for the exit. 1 when it did not exit.
serve_stop() {
  kill -TERM "$PID" 2>/dev/null
  for _ in $(seq 1 120); do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$PID" 2>/dev/null && return 1
  wait "$PID" 2>/dev/null
  return 0
}

serve_cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; }

# serve_check_client_gone: a streaming client that leaves after the first bytes (head exits,
# curl's next write ends it), long before its slot's positions are generated however fast the
# machine; its slot must be freed (a request cancelled, none processing) within 20 s. 1 when it
# is not; the last /metrics in $WORK/metrics.txt either way.
serve_check_client_gone() {
  curl -sN --max-time 60 -d '{"prompt": "Go on", "max_tokens": 100000, "ignore_eos": true, "stream": true}' \
    "$URL/v1/completions" | head -c 1 >/dev/null
  for _ in $(seq 1 40); do
    curl -s --max-time 10 "$URL/metrics" >"$WORK/metrics.txt"
    grep -q '^numallm_requests_cancelled_total [1-9]' "$WORK/metrics.txt" &&
      grep -q '^numallm_requests_processing 0$' "$WORK/metrics.txt" && return 0
    sleep 0.5
  done
  return 1
}
