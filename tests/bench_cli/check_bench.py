#!/usr/bin/env python3
"""Checks numallm bench's outputs (behaviour, never timings).

  check_bench.py json FILE [--md FILE_WITH_MD_TABLE] --rows N --reps R [--ranks 1,2]
  check_bench.py jsonl|csv|sql FILE --rows N
  check_bench.py md FILE --rows N          (stdout of -o md: machine facts, table, legend, build)
  check_bench.py svg FILE --tests pp16,tg8
  check_bench.py selftest                  (the md-vs-json check must catch a wrong figure)

The md-vs-json check maps every markdown column to its JSON field(s) and compares each cell
with the value formatted the way the table formats it; a column with no mapping fails, so the
JSON must carry every column of the table.
"""
import argparse
import copy
import csv
import json
import math
import re
import sqlite3
import sys
import xml.etree.ElementTree as ET

# llama-bench's fields in its order (FORMATS.md), then numallm's.
LLAMA_FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
    "devices", "tensor_split", "tensor_buft_overrides", "use_mmap", "embeddings", "no_op_offload", "no_host",
    "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts",
    "stddev_ts",
]
NUMALLM_FIELDS = ["n_ranks", "isa", "numa_nodes", "token_bytes", "avg_gbs", "stddev_gbs", "bw_gbs", "scaling_eff"]
FIELDS = LLAMA_FIELDS + NUMALLM_FIELDS
INT_FIELDS = {"build_number", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "poll",
              "n_gpu_layers", "n_cpu_moe", "main_gpu", "flash_attn", "no_op_offload", "fit_target", "fit_min_ctx",
              "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "n_ranks", "token_bytes"}
BOOL_FIELDS = {"cpu_strict", "no_kv_offload", "use_mmap", "embeddings", "no_host"}
FLOAT_FIELDS = {"avg_ts", "stddev_ts", "avg_gbs", "stddev_gbs"}
NULLABLE_FLOATS = {"bw_gbs", "scaling_eff"}


class Fail(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Fail(msg)


def test_name(r):
    p, g, d = r["n_prompt"], r["n_gen"], r["n_depth"]
    name = f"pp{p}" if g == 0 else f"tg{g}" if p == 0 else f"pp{p}+tg{g}"
    return name + (f" @ d{d}" if d > 0 else "")


def fmt_size(b):
    return f"{b / 1024 / 1024:.2f} MiB" if b < 1024 ** 3 else f"{b / 1024 ** 3:.2f} GiB"


def fmt_params(n):
    return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"


def opt2(v):
    return "-" if v is None else f"{v:.2f}"


# Each markdown column: how the cell is made from a JSON row.
MD_FROM_JSON = {
    "model": lambda r: r["model_type"],
    "size": lambda r: fmt_size(r["model_size"]),
    "params": lambda r: fmt_params(r["model_n_params"]),
    "backend": lambda r: r["backends"],
    "ngl": lambda r: str(r["n_gpu_layers"]),
    "threads": lambda r: str(r["n_threads"]),
    "ranks": lambda r: str(r["n_ranks"]),
    "n_batch": lambda r: str(r["n_batch"]),
    "n_ubatch": lambda r: str(r["n_ubatch"]),
    "type_k": lambda r: r["type_k"],
    "type_v": lambda r: r["type_v"],
    "test": test_name,
    "t/s": lambda r: f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}",
    "GB/s": lambda r: f"{r['avg_gbs']:.2f}",
    "bw GB/s": lambda r: opt2(r["bw_gbs"]),
    "eff": lambda r: opt2(r["scaling_eff"]),
}


def md_tables(text):
    """The markdown table in text: (header cells, [row cells]) from every line starting with '|'
    (on stderr, with -oe md, the ranks' messages and progress lines may come between rows).
    Returns a list: empty when there is no table."""
    t = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
         if line.startswith("|")]
    if not t:
        return []
    need(len(t) >= 2 and all(re.fullmatch(r"-+:?", c) for c in t[1]), f"malformed markdown table: {t[:2]}")
    need(len({len(r) for r in t}) == 1, "markdown rows with different column counts")
    need(not any(all(re.fullmatch(r"-+:?", c) for c in r) for r in t[2:]), "two markdown tables")
    return [(t[0], t[2:])]


def check_row_types(r, i):
    keys = list(r.keys())
    need(keys[:len(FIELDS)] == FIELDS, f"row {i}: fields differ from llama-bench's + numallm's order: {keys}")
    need(keys[len(FIELDS):] in ([], ["samples_ns", "samples_ts"]), f"row {i}: unexpected extra fields {keys[len(FIELDS):]}")
    for k in FIELDS:
        v = r[k]
        if k in INT_FIELDS:
            need(isinstance(v, int) and not isinstance(v, bool), f"row {i}: {k} = {v!r} is not an integer")
        elif k in BOOL_FIELDS:
            need(isinstance(v, bool), f"row {i}: {k} = {v!r} is not a boolean")
        elif k in FLOAT_FIELDS:
            need(isinstance(v, (int, float)) and math.isfinite(v), f"row {i}: {k} = {v!r} is not a number")
        elif k in NULLABLE_FLOATS:
            need(v is None or isinstance(v, (int, float)), f"row {i}: {k} = {v!r} is not a number or null")
        else:
            need(isinstance(v, str), f"row {i}: {k} = {v!r} is not a string")
    need(r["avg_ts"] > 0, f"row {i}: avg_ts {r['avg_ts']}")
    need(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["test_time"]), f"row {i}: test_time {r['test_time']}")


def check_md_vs_json(md_text, rows):
    tables = md_tables(md_text)
    need(len(tables) == 1, f"expected one markdown table, found {len(tables)}")
    header, body = tables[0]
    for c in header:
        need(c in MD_FROM_JSON, f"markdown column '{c}' has no JSON field")
    need(len(body) == len(rows), f"markdown has {len(body)} rows, JSON {len(rows)}")
    for i, (cells, r) in enumerate(zip(body, rows)):
        for c, cell in zip(header, cells):
            want = MD_FROM_JSON[c](r)
            need(cell == want, f"row {i}, column '{c}': markdown '{cell}', JSON gives '{want}'")


def check_json(rows, args):
    need(isinstance(rows, list), "JSON output is not an array")
    need(len(rows) == args.rows, f"{len(rows)} JSON rows, expected {args.rows}")
    for i, r in enumerate(rows):
        check_row_types(r, i)
        need(len(r["samples_ns"]) == args.reps and len(r["samples_ts"]) == args.reps,
             f"row {i}: {len(r['samples_ns'])} samples, expected {args.reps}")
        tokens = r["n_prompt"] + r["n_gen"]
        ts = [1e9 * tokens / ns for ns in r["samples_ns"]]
        need(abs(sum(ts) / len(ts) - r["avg_ts"]) <= 1e-3 * r["avg_ts"], f"row {i}: avg_ts is not the mean of samples")
        for a, b in zip(ts, r["samples_ts"]):
            need(abs(a - b) <= 1e-4 * a, f"row {i}: samples_ts {b} != 1e9 * tokens / ns = {a}")
        need(r["n_gpu_layers"] == 0, f"row {i}: n_gpu_layers {r['n_gpu_layers']} ran without a GPU rank")
        if r["n_ranks"] == 1:
            need(r["scaling_eff"] == 1.0, f"row {i}: 1-rank scaling_eff {r['scaling_eff']}")
        need(r["split_mode"] == ("none" if r["n_ranks"] == 1 else "tensor"), f"row {i}: split_mode")
    if args.ranks:
        want = sorted(int(x) for x in args.ranks.split(","))
        need(sorted({r["n_ranks"] for r in rows}) == want, f"ranks {sorted({r['n_ranks'] for r in rows})}, want {want}")
        for r in rows:
            if r["n_ranks"] > 1:
                base = [b for b in rows if b["n_ranks"] == 1 and test_name(b) == test_name(r)
                        and b["n_threads"] == r["n_threads"]]
                need(len(base) == 1, f"no 1-rank row for {test_name(r)}")
                eff = r["avg_ts"] / (r["n_ranks"] * base[0]["avg_ts"])
                need(r["scaling_eff"] is not None and abs(r["scaling_eff"] - eff) <= 1e-4 * eff,
                     f"{test_name(r)} on {r['n_ranks']} ranks: scaling_eff {r['scaling_eff']}, expected {eff}")
    if args.md:
        with open(args.md, encoding="utf-8") as f:
            check_md_vs_json(f.read(), rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["json", "jsonl", "csv", "sql", "md", "svg", "selftest"])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--md")
    ap.add_argument("--ranks")
    ap.add_argument("--tests", default="")
    args = ap.parse_args()
    text = open(args.file, encoding="utf-8").read() if args.file else ""
    try:
        if args.kind == "json":
            check_json(json.loads(text), args)
        elif args.kind == "jsonl":
            lines = [ln for ln in text.splitlines() if ln.strip()]
            need(len(lines) == args.rows, f"{len(lines)} JSONL lines, expected {args.rows}")
            for i, ln in enumerate(lines):
                check_row_types(json.loads(ln), i)
        elif args.kind == "csv":
            rd = list(csv.reader(text.splitlines()))
            need(rd and rd[0] == FIELDS, f"CSV header differs: {rd[0] if rd else None}")
            need(len(rd) - 1 == args.rows, f"{len(rd) - 1} CSV rows, expected {args.rows}")
            need(all(len(r) == len(FIELDS) for r in rd[1:]), "CSV rows of another width")
            need(all(float(r[FIELDS.index("avg_ts")]) > 0 for r in rd[1:]), "CSV avg_ts")
        elif args.kind == "sql":
            db = sqlite3.connect(":memory:")
            db.executescript(text)
            cols = [c[1] for c in db.execute("PRAGMA table_info(llama_bench)")]
            need(cols == FIELDS, f"SQL columns differ: {cols}")
            n = db.execute("SELECT COUNT(*) FROM llama_bench WHERE avg_ts > 0").fetchone()[0]
            need(n == args.rows, f"{n} SQL rows, expected {args.rows}")
        elif args.kind == "md":
            for pat in [r"^- CPU: .+; kernels: \w+", r"^  - node \d+: \d+ cores .* read [0-9.]+ GB/s",
                        r"^- GPUs: ", r"^- MPI: ", r"^eff: scaling efficiency", r"^build: \S+ \(\d+\)$"]:
                need(re.search(pat, text, re.M), f"markdown output lacks /{pat}/")
            tables = md_tables(text)
            need(len(tables) == 1 and len(tables[0][1]) == args.rows,
                 f"expected one table of {args.rows} rows, found {[len(t[1]) for t in tables]}")
            need(tables[0][0][:4] == ["model", "size", "params", "backend"] and tables[0][0][-6:] ==
                 ["ranks", "test", "t/s", "GB/s", "bw GB/s", "eff"], f"markdown columns {tables[0][0]}")
        elif args.kind == "svg":
            root = ET.fromstring(text)
            need(root.tag.endswith("svg"), "not an SVG document")
            body = ET.tostring(root, encoding="unicode")
            need("polyline" in body or "circle" in body, "the plot has no data")
            for t in filter(None, args.tests.split(",")):
                need(f"{t}: tokens per second" in body and f"{t}: scaling efficiency" in body, f"no panels for {t}")
        elif args.kind == "selftest":
            row = {k: 0 for k in FIELDS}
            row.update(model_type="m", model_size=1 << 20, model_n_params=10 ** 6, backends="CPU", n_threads=2,
                       n_ranks=2, n_prompt=16, n_gen=0, n_depth=0, avg_ts=10.0, stddev_ts=1.0, avg_gbs=2.0,
                       bw_gbs=None, scaling_eff=0.5)
            md = ("| model | size | params | backend | threads | ranks | test | t/s | GB/s | bw GB/s | eff |\n"
                  "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
                  "| m | 1.00 MiB | 1.00 M | CPU | 2 | 2 | pp16 | 10.00 ± 1.00 | 2.00 | - | 0.50 |\n")
            check_md_vs_json(md, [row])  # must pass
            for k, v in [("avg_ts", 10.01), ("scaling_eff", None), ("n_ranks", 1), ("bw_gbs", 3.0)]:
                bad = copy.deepcopy(row)
                bad[k] = v
                try:
                    check_md_vs_json(md, [bad])
                except Fail:
                    continue
                raise Fail(f"selftest: a wrong {k} was not caught")
            try:
                check_md_vs_json(md.replace("| eff |", "| xyz |"), [row])
            except Fail:
                pass
            else:
                raise Fail("selftest: a column without a JSON field was not caught")
    except (Fail, ValueError, KeyError, json.JSONDecodeError, sqlite3.Error, ET.ParseError) as e:
        print(f"check_bench {args.kind} {args.file or ''}: FAIL: {type(e).__name__}: {e}")
        return 1
    print(f"check_bench {args.kind} {args.file or ''}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
