#!/usr/bin/env python3
"""soak.py: numallm serve under a long concurrent load, every response checked.

Before the soak, a pool of --prompts distinct prompts (random token ids, 4 to 48 of them), each
with its own random max_tokens (1 to --max-tokens), gets its greedy answer (temperature 0) from
the server one request at a time: the expected answer. Then --clients clients send requests for
--duration seconds, each picking a pool entry at random, streamed or not at random: every
response must equal its prompt's expected answer exactly (text, finish_reason, token counts), so a
lost, truncated, duplicated or mixed-up response is caught; a few clients (--abandon) leave after
the first chunk. Meanwhile the server's resident memory (VmRSS in /proc/PID/status) and thread
count are sampled every second: after --rss-warmup seconds, RSS must stay within
--rss-growth-mib of its value then, and the thread count must come back down at the end. Exit
status 0 when every check held, 1 otherwise; the outcome is printed as a markdown table.

  tests/serve/soak.py --numallm build/numallm --model m.gguf --clients 64 --duration 600
  tests/serve/soak.py --url http://127.0.0.1:8080 --pid 1234 --clients 16 --duration 60

Standard library only; uses start_server and completion from tests/bench/load_serve.py.
"""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from load_serve import completion, start_server  # noqa: E402


def proc_status(pid):
    """(VmRSS in KiB, threads) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            d = dict(line.split(":", 1) for line in f if ":" in line)
        return int(d["VmRSS"].split()[0]), int(d["Threads"])
    except (OSError, KeyError, ValueError):
        return None


def metrics(host, port):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l.startswith("numallm_")}


def abandon(host, port, body, timeout):
    """Send a streamed request, read its first chunk, and leave (close the connection)."""
    try:
        c = http.client.HTTPConnection(host, port, timeout=timeout)
        c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        while r.status == 200:
            line = r.readline()
            if not line or line.startswith(b"data: "):
                break
        c.close()
        return None if r.status == 200 else "HTTP %d" % r.status
    except (OSError, http.client.HTTPException) as e:
        return "%s: %s" % (type(e).__name__, e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (with --pid for its memory)")
    ap.add_argument("--pid", type=int, help="the running server's process id (--url)")
    ap.add_argument("--numallm", help="start this numallm binary's serve (with --model)")
    ap.add_argument("--model", help="the GGUF file to serve (with --numallm)")
    ap.add_argument("--server-args", default="", help="more flags for numallm serve (default: -np CLIENTS)")
    ap.add_argument("--threads", "-t", type=int, help="numallm serve -t")
    ap.add_argument("--server-log", default="soak_server.log")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=60, help="seconds of load")
    ap.add_argument("--prompts", type=int, default=128, help="distinct prompts in the pool")
    ap.add_argument("--max-tokens", type=int, default=48, help="each prompt's max_tokens is drawn from 1..this")
    ap.add_argument("--abandon", type=float, default=0.02, help="fraction of requests whose client leaves early")
    ap.add_argument("--token-lo", type=int, default=256)
    ap.add_argument("--token-hi", type=int, default=20000)
    ap.add_argument("--rss-warmup", type=float, default=60, help="seconds after which RSS must stay flat")
    ap.add_argument("--rss-growth-mib", type=float, default=16, help="RSS growth allowed after the warm-up")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a request may take")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the outcome as JSON to this file")
    args = ap.parse_args()
    server = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port, pid = u.hostname, u.port or 80, args.pid
    elif args.numallm and args.model:
        server = start_server(args.numallm, args.model, args.server_args, args.clients, 48 + args.max_tokens + 16,
                              args.server_log, threads=args.threads)
        host, port, pid = "127.0.0.1", server.port, server.pid
    else:
        ap.error("give --url (and --pid), or --numallm and --model")
    failures = []
    try:
        failures = soak(host, port, pid, args)
    finally:
        if server:
            rc = server.stop()
            if rc != 0:
                failures.append("the server exited with status %s after SIGTERM (log: %s)" % (rc, args.server_log))
    for f in failures[:20]:
        print("FAIL: %s" % f)
    print("soak: %s" % ("PASS" if not failures else "FAIL (%d problems)" % len(failures)))
    return 1 if failures else 0


def soak(host, port, pid, args):
    rng = random.Random(args.seed)
    pool, seen = [], set()
    while len(pool) < args.prompts:
        p = tuple(rng.randrange(args.token_lo, args.token_hi) for _ in range(rng.randint(4, 48)))
        if p not in seen:
            seen.add(p)
            pool.append({"prompt": list(p), "max_tokens": rng.randint(1, args.max_tokens), "temperature": 0})
    t0 = time.monotonic()
    for e in pool:  # one at a time: each answer alone
        r = completion(host, port, e, args.timeout)
        if r["error"]:
            return ["the expected answer of a prompt alone: %s" % r["error"]]
        e["want"] = (r["text"], r["finish_reason"], r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
        if r["usage"]["prompt_tokens"] != len(e["prompt"]):
            return ["prompt_tokens %d for a prompt of %d ids" % (r["usage"]["prompt_tokens"], len(e["prompt"]))]
    print("expected answers of %d distinct prompts, one at a time, in %.1f s" % (len(pool), time.monotonic() - t0),
          flush=True)

    lock = threading.Lock()
    stats = {"responses": 0, "streamed": 0, "abandoned": 0, "errors": 0, "mismatches": 0, "tokens": 0}
    failures = []
    samples = []  # (seconds since the start, RSS KiB, threads)
    stop = threading.Event()
    start = time.monotonic()
    deadline = start + args.duration

    def sampler():
        while not stop.is_set():
            s = proc_status(pid) if pid else None
            if s:
                samples.append((time.monotonic() - start, s[0], s[1]))
            stop.wait(1.0)

    def client(i):
        crng = random.Random(args.seed * 7919 + i)
        conn = None
        while time.monotonic() < deadline:
            e = crng.choice(pool)
            body = {k: e[k] for k in ("prompt", "max_tokens", "temperature")}
            if crng.random() < args.abandon:
                err = abandon(host, port, body, args.timeout)
                with lock:
                    stats["abandoned"] += 1
                    if err:
                        stats["errors"] += 1
                        failures.append("an abandoned request: %s" % err)
                continue
            stream = crng.random() < 0.5
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            r = completion(host, port, body, args.timeout, conn=conn)
            conn = r.pop("conn")
            with lock:
                stats["responses"] += 1
                stats["streamed"] += stream
                if r["error"]:
                    stats["errors"] += 1
                    failures.append("client %d: %s" % (i, r["error"]))
                    continue
                got = (r["text"], r["finish_reason"], r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
                stats["tokens"] += got[3]
                if got != e["want"]:
                    stats["mismatches"] += 1
                    failures.append("client %d, %s, prompt %s...: got %r, alone %r" % (
                        i, "streamed" if stream else "whole", e["prompt"][:4], got, e["want"]))
        if conn:
            conn.close()

    st = threading.Thread(target=sampler)
    st.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    time.sleep(2)  # the connection threads of the last requests end
    stop.set()
    st.join()
    end = proc_status(pid) if pid else None
    if end:
        samples.append((time.monotonic() - start, end[0], end[1]))
    m = metrics(host, port)
    if m.get("numallm_requests_processing") != 0 or m.get("numallm_requests_deferred") != 0:
        failures.append("after the soak: %d requests hold a slot and %d wait (expected none)" % (
            m.get("numallm_requests_processing", -1), m.get("numallm_requests_deferred", -1)))
    if stats["responses"] == 0:
        failures.append("no response at all")

    out = dict(stats, clients=args.clients, duration_s=round(wall, 1), prompts=len(pool),
               requests_total_server=int(m.get("numallm_requests_total", 0)),
               cancelled_server=int(m.get("numallm_requests_cancelled_total", 0)))
    if samples:
        warm = [s for s in samples if s[0] >= args.rss_warmup] or samples[-1:]
        base = warm[0][1]
        peak_after = max(s[1] for s in warm)
        out.update(rss_start_mib=samples[0][1] / 1024, rss_warm_mib=base / 1024, rss_end_mib=samples[-1][1] / 1024,
                   rss_max_mib=max(s[1] for s in samples) / 1024, rss_growth_after_warmup_mib=(peak_after - base) / 1024,
                   threads_start=samples[0][2], threads_max=max(s[2] for s in samples), threads_end=samples[-1][2])
        if (peak_after - base) / 1024 > args.rss_growth_mib:
            failures.append("RSS grew by %.1f MiB after the first %g s (from %.1f to %.1f MiB; bound %g MiB)" % (
                (peak_after - base) / 1024, args.rss_warmup, base / 1024, peak_after / 1024, args.rss_growth_mib))
        if samples[-1][2] > samples[0][2] + 2:
            failures.append("threads: %d at the start, %d at the end" % (samples[0][2], samples[-1][2]))
    print()
    print("| clients | seconds | responses (streamed) | abandoned | errors | mismatches | tokens | RSS start / after %gs / end / max MiB | threads start / max / end |" % args.rss_warmup)
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print("| %d | %.0f | %d (%d) | %d | %d | %d | %d | %s | %s |" % (
        args.clients, wall, stats["responses"], stats["streamed"], stats["abandoned"], stats["errors"],
        stats["mismatches"], stats["tokens"],
        "%.1f / %.1f / %.1f / %.1f" % (out["rss_start_mib"], out["rss_warm_mib"], out["rss_end_mib"], out["rss_max_mib"])
        if samples else "-",
        "%d / %d / %d" % (out["threads_start"], out["threads_max"], out["threads_end"]) if samples else "-"))
    if args.json:
        out["failures"] = failures[:50]
        out["rss_samples"] = samples
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return failures


if __name__ == "__main__":
    sys.exit(main())
