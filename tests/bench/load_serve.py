#!/usr/bin/env python3
"""load_serve.py: a load generator for numallm serve (or any OpenAI-compatible server).

N concurrent clients, each sending streamed /v1/completions requests one after another: a
prompt of exactly --prompt-tokens random token ids (distinct per request, so no prefix is
reused) and exactly --output-tokens generated tokens (max_tokens with ignore_eos), for --duration
seconds or --requests requests per client. Each level of --concurrency gives one row: requests/s,
output tokens/s, time to first token (TTFT) and time per output token after the first (TPOT),
p50 and p99, and errors. One warm-up request runs before the first level and is not counted.

The server is either --url (already running) or started here: --numallm BIN --model FILE with
-np the largest concurrency level (override with --server-args, e.g. "-np 16 -c 8192").

  tests/bench/load_serve.py --numallm build/numallm --model m.gguf --concurrency 1,2,4,8,16,32,64
  tests/bench/load_serve.py --url http://127.0.0.1:8080 --concurrency 4 --requests 10 --json out.json

Standard library only: http.client, threading. The functions start_server and
completion are used by tests/serve/soak.py.
"""
import argparse
import http.client
import json
import os
import platform
import random
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse


def free_port():
    """A port the kernel chose for a socket bound to port 0 on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """numallm serve started in the background on a free loopback port, its output in log."""

    def __init__(self, numallm, model, args, log, ranks=1, mpirun=None, threads=None):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        cmd = [numallm, "serve", "-m", model, "--port", str(self.port)] + list(args)
        if threads:
            cmd += ["-t", str(threads)]
        if ranks > 1:
            cmd = shlex.split(mpirun or "mpirun") + ["-np", str(ranks)] + cmd
        self.cmd = cmd
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def wait_healthy(self, timeout=300):
        """Wait for GET /health to answer 200; raises when the server exits or the time is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited with status %d (log: %s)" % (self.proc.returncode, self.log.name))
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server was not healthy within %d s (log: %s)" % (timeout, self.log.name))

    def stop(self, timeout=60):
        """SIGTERM, then SIGKILL after timeout seconds. The exit status (None when killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self.log.close()
        return self.proc.returncode


def completion(host, port, body, timeout=300, conn=None):
    """POST /v1/completions with body (a dict); streams when body["stream"]. Returns a dict:
    status (HTTP status, 0 when the connection failed), text, finish_reason, usage, t_first
    (seconds from sending to the first chunk, streaming), t_done (to the end), chunks, error (None
    when the exchange was well formed: 200, [DONE] last when streaming), and conn (the connection,
    kept alive for the next request, or None after an error)."""
    out = {"status": 0, "text": "", "finish_reason": None, "usage": None, "t_first": None, "t_done": None,
           "chunks": 0, "error": None, "conn": None}
    t0 = time.monotonic()
    try:
        c = conn or http.client.HTTPConnection(host, port, timeout=timeout)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out["status"] = r.status
        if r.status != 200:
            out["error"] = "HTTP %d: %s" % (r.status, r.read()[:300].decode("utf-8", "replace"))
            c.close()
            return out
        if not body.get("stream"):
            d = json.loads(r.read())
            out["t_done"] = time.monotonic() - t0
            out["text"] = d["choices"][0]["text"]
            out["finish_reason"] = d["choices"][0]["finish_reason"]
            out["usage"] = d["usage"]
            out["conn"] = c
            return out
        done = False
        text = []
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if done:
                out["error"] = "data after [DONE]"
                break
            if data == b"[DONE]":
                done = True
                continue
            now = time.monotonic() - t0
            d = json.loads(data)
            if d.get("usage"):
                out["usage"] = d["usage"]
            for ch in d.get("choices", []):
                if out["t_first"] is None:
                    out["t_first"] = now
                out["chunks"] += 1
                text.append(ch.get("text", ""))
                if ch.get("finish_reason"):
                    out["finish_reason"] = ch["finish_reason"]
                    out["t_done"] = now
        out["text"] = "".join(text)
        if not done and out["error"] is None:
            out["error"] = "the stream ended without [DONE] (%d chunks, text %r)" % (out["chunks"], out["text"][-80:])
        if out["error"] is None:
            out["conn"] = c
        else:
            c.close()
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    return out


def percentile(xs, p):
    """Nearest-rank percentile of xs (None when empty)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def run_level(host, port, conc, args, rng_seed):
    """conc clients until the deadline or their request count; returns the level's figures."""
    results, lock = [], threading.Lock()
    start = time.monotonic()
    deadline = start + args.duration if args.duration else None

    def client(i):
        rng = random.Random(rng_seed * 1000 + i)
        conn = None
        n = 0
        while True:
            if args.requests and n >= args.requests:
                break
            if deadline and time.monotonic() >= deadline:
                break
            prompt = [rng.randrange(args.token_lo, args.token_hi) for _ in range(args.prompt_tokens)]
            body = {"prompt": prompt, "max_tokens": args.output_tokens, "ignore_eos": True,
                    "temperature": args.temperature, "stream": True, "stream_options": {"include_usage": True}}
            if args.top_k is not None:
                body["top_k"] = args.top_k
            if args.temperature > 0:
                body["seed"] = rng.randrange(1 << 31)
            if args.model_name:
                body["model"] = args.model_name
            r = completion(host, port, body, timeout=args.timeout, conn=conn)
            conn = r.pop("conn")
            r["end"] = time.monotonic() - start
            n += 1
            with lock:
                results.append(r)
        if conn:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ok, errors = [], []
    for r in results:
        got = (r["usage"] or {}).get("completion_tokens")
        if r["error"] is None and got != args.output_tokens:
            r["error"] = "%s output tokens, expected %d" % (got, args.output_tokens)
        if r["error"] is None and r["t_first"] is None:
            r["error"] = "no chunk before the end"
        (errors if r["error"] else ok).append(r)
    ttft = [r["t_first"] * 1e3 for r in ok]
    tpot = [(r["t_done"] - r["t_first"]) * 1e3 / (args.output_tokens - 1) for r in ok if args.output_tokens > 1]
    out_tokens = sum(r["usage"]["completion_tokens"] for r in ok)
    return {"concurrency": conc, "requests": len(ok), "errors": len(errors), "wall_s": wall,
            "requests_per_s": len(ok) / wall, "output_tokens": out_tokens, "output_tokens_per_s": out_tokens / wall,
            "ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
            "tpot_ms_p50": percentile(tpot, 50), "tpot_ms_p99": percentile(tpot, 99),
            "prompt_tokens": args.prompt_tokens, "output_tokens_per_request": args.output_tokens,
            "error_samples": [r["error"] for r in errors[:5]]}


def server_counters(host, port):
    """numallm's /metrics counters as a dict (empty for a server without them)."""
    try:
        c = http.client.HTTPConnection(host, port, timeout=30)
        c.request("GET", "/metrics")
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace") if r.status == 200 else ""
        c.close()
    except (OSError, http.client.HTTPException):
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def step_split(before, after, wall):
    """Where a level's steps went, from numallm's counters around it (None without them)."""
    keys = ("numallm_steps_total", "numallm_batch_rows_total", "numallm_step_forward_seconds_total",
            "numallm_step_sample_seconds_total")
    if not all(k in before and k in after for k in keys):
        return None
    d = {k: after[k] - before[k] for k in keys}
    steps = d["numallm_steps_total"]
    if steps <= 0:
        return None
    fwd = d["numallm_step_forward_seconds_total"] * 1e3 / steps
    smp = d["numallm_step_sample_seconds_total"] * 1e3 / steps
    dk = "numallm_step_deliver_seconds_total"  # (servers before it counted delivery as sampling)
    dlv = (after[dk] - before[dk]) * 1e3 / steps if dk in before and dk in after else 0.0
    return {"steps": int(steps), "rows_per_step": d["numallm_batch_rows_total"] / steps, "forward_ms": fwd,
            "sample_ms": smp, "deliver_ms": dlv, "other_ms": wall * 1e3 / steps - fwd - smp - dlv}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def flag_value(argv, names):
    """The value after the last of names in argv, or None."""
    v = None
    for i, a in enumerate(argv[:-1]):
        if a in names:
            v = argv[i + 1]
    return v


def start_server(numallm, model, server_args, slots, slot_tokens, log, ranks=1, mpirun=None, threads=None):
    """numallm serve with server_args (a shell string), adding -np SLOTS and -c SLOTS x
    slot_tokens where they are not given (each slot holds one request); waits for /health."""
    sargs = shlex.split(server_args)
    n_slots = flag_value(sargs, ("-np", "--parallel"))
    if n_slots is None:
        n_slots = slots
        sargs += ["-np", str(n_slots)]
    if flag_value(sargs, ("-c", "--ctx-size")) is None:
        sargs += ["-c", str(int(n_slots) * slot_tokens)]
    server = Server(numallm, model, sargs, log, ranks, mpirun, threads)
    print("starting: %s" % " ".join(shlex.quote(a) for a in server.cmd), file=sys.stderr, flush=True)
    server.wait_healthy()
    return server


def fmt(x, nd=1):
    return "-" if x is None else "%.*f" % (nd, x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--numallm", help="start this numallm binary's serve (with --model)")
    ap.add_argument("--model", help="the GGUF file to serve (with --numallm)")
    ap.add_argument("--server-args", default="", help="more flags for numallm serve (default: -np MAX_CONCURRENCY)")
    ap.add_argument("--threads", "-t", type=int, help="numallm serve -t")
    ap.add_argument("--ranks", type=int, default=1, help="ranks under --mpirun (default 1: in-process)")
    ap.add_argument("--mpirun", default="mpirun", help="the mpirun command line for --ranks > 1")
    ap.add_argument("--server-log", default="load_serve_server.log")
    ap.add_argument("--model-name", help="the request's \"model\" (default: none, the one served)")
    ap.add_argument("--concurrency", default="1,4", help="comma list of client counts, one row each (default 1,4)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per level (default 10 unless --requests)")
    ap.add_argument("--requests", type=int, default=None, help="requests per client per level")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--token-lo", type=int, default=256, help="prompt token ids are drawn from [lo, hi)")
    ap.add_argument("--token-hi", type=int, default=20000)
    ap.add_argument("--timeout", type=float, default=600, help="seconds a request may take")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="the requests' temperature (default 0: greedy; above 0 each request gets its own seed)")
    ap.add_argument("--top-k", type=int, default=None, help="the requests' top_k (default: the server's)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    args = ap.parse_args()
    if args.duration is None and args.requests is None:
        args.duration = 10.0
    levels = [int(x) for x in args.concurrency.split(",") if x]
    if not levels or min(levels) < 1 or args.output_tokens < 1 or args.prompt_tokens < 1:
        ap.error("--concurrency, --prompt-tokens and --output-tokens must be positive")
    server = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port, target = u.hostname, u.port or 80, args.url
    elif args.numallm and args.model:
        server = start_server(args.numallm, args.model, args.server_args, max(levels),
                              args.prompt_tokens + args.output_tokens + 16, args.server_log, args.ranks, args.mpirun,
                              args.threads)
        host, port, target = "127.0.0.1", server.port, " ".join(shlex.quote(a) for a in server.cmd)
    else:
        ap.error("give --url, or --numallm and --model")
    rows = []
    try:
        warm = completion(host, port, {"prompt": list(range(args.token_lo, args.token_lo + args.prompt_tokens)),
                                       "max_tokens": 2, "ignore_eos": True, "temperature": 0, "stream": True,
                                       **({"model": args.model_name} if args.model_name else {})}, args.timeout)
        if warm["error"]:
            print("the warm-up request failed: %s" % warm["error"], file=sys.stderr)
            return 1
        print("CPU: %s, %d cores (os.cpu_count); server: %s" % (cpu_name(), os.cpu_count(), target))
        sampling = "greedy" if args.temperature <= 0 else "temperature %g%s" % (
            args.temperature, ", top_k %d" % args.top_k if args.top_k is not None else "")
        print("%d prompt tokens (random ids), %d output tokens (ignore_eos, %s) per request, %s per level\n" %
              (args.prompt_tokens, args.output_tokens, sampling,
               "%d requests per client" % args.requests if args.requests else "%g s" % args.duration))
        print("| clients | requests | errors | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        splits = []
        for i, conc in enumerate(levels):
            before = server_counters(host, port)
            row = run_level(host, port, conc, args, args.seed + i)
            row["steps"] = step_split(before, server_counters(host, port), row["wall_s"])
            rows.append(row)
            if row["steps"]:
                splits.append((conc, row["steps"]))
            print("| %d | %d | %d | %s | %s | %s | %s | %s | %s |" % (
                conc, row["requests"], row["errors"], fmt(row["requests_per_s"], 2), fmt(row["output_tokens_per_s"]),
                fmt(row["ttft_ms_p50"]), fmt(row["ttft_ms_p99"]), fmt(row["tpot_ms_p50"]), fmt(row["tpot_ms_p99"])),
                flush=True)
            for e in row["error_samples"]:
                print("  error: %s" % e, file=sys.stderr)
        if splits:
            print("\nThe server's steps (its /metrics counters around each level; other: the rest of the wall time,\n"
                  "planning and waiting for requests included):\n")
            print("| clients | steps | rows per step | forward ms per step | sampling ms | delivery ms | other ms |")
            print("|---:|---:|---:|---:|---:|---:|---:|")
            for conc, s in splits:
                print("| %d | %d | %.1f | %.2f | %.2f | %.2f | %.2f |" % (
                    conc, s["steps"], s["rows_per_step"], s["forward_ms"], s["sample_ms"], s["deliver_ms"],
                    s["other_ms"]))
    finally:
        if server:
            rc = server.stop()
            if rc not in (0, None) and args.ranks == 1:
                print("the server exited with status %s (log: %s)" % (rc, args.server_log), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_name(), "cores": os.cpu_count(), "server": target, "rows": rows}, f, indent=1)
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
