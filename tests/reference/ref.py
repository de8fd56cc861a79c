#!/usr/bin/python3
"""ref.py: logits (and per-layer activations) of a GGUF model from the float64 reference.

Usage:
    ref.py MODEL.gguf --tokens 1,2,3 [--out LOGITS.bin] [--dump-layers DIR]

Writes numallm's dump formats (dump_formats.py): one kind-0 logits record per prompt position,
and, with --dump-layers, DIR/embd.bin, DIR/blk.N.bin (residual stream after layer N) and
DIR/result_norm.bin. Without --out it prints the arg-max token of every position.
MoE models: at a near-tie of the router (two experts' logits within 2% of the spread) the
reference takes the side an engine with int8 activations takes (model_ref.ffn_moe); each such
decision is logged.
Exit status: 0 on success, 1 when the model or the tokens are rejected (message on stderr).
Run with Debian's /usr/bin/python3 (numpy).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from dump_formats import KIND_PROMPT, LogitsDump, write_layer, write_logits  # noqa: E402
from gguf_ref import GGUFError  # noqa: E402
from fixtures.engine_numerics import EngineNumerics  # noqa: E402
from model_ref import ModelError, describe, forward, load_model  # noqa: E402


def log(msg):
    print("ref: " + msg, file=sys.stderr)


def parse_tokens(s):
    """'1,2,3' -> [1, 2, 3]; argparse error on anything else."""
    try:
        toks = [int(t) for t in s.split(",") if t.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError("--tokens wants comma-separated integers, got %r" % s)
    if not toks:
        raise argparse.ArgumentTypeError("--tokens is empty")
    return toks


def read_routes(path):
    """{(layer, position): (experts...)} from a routes.txt of numallm's --dump-layers."""
    routes = {}
    with open(path) as f:
        for line in f:
            v = [int(x) for x in line.split()]
            if len(v) < 3:
                raise SystemExit("%s: bad line %r (want: layer pos experts...)" % (path, line))
            routes[(v[0], v[1])] = tuple(v[2:])
    return routes


def run(args):
    t0 = time.time()
    model = load_model(args.model)
    log(describe(model))
    if model.config.defaults_used:
        log("defaults for absent keys: %s" % ", ".join(model.config.defaults_used))
    layer_sink = None
    if args.dump_layers:
        os.makedirs(args.dump_layers, exist_ok=True)
        layer_sink = lambda name, x: write_layer(os.path.join(args.dump_layers, name + ".bin"), x)
    if model.config.n_expert and args.engine_routes:
        # MoE: the engine's own router choices (numallm run --dump-layers DIR: DIR/routes.txt);
        # the reference takes them at near-ties only (model_ref.ffn_moe, TIE_MARGIN): a choice
        # that differs elsewhere is a real difference and shows in the comparison.
        model.route_hint = read_routes(args.engine_routes)
    elif model.config.n_expert:
        # MoE: a first pass with the engine's numerics (int8 activations per 32 values, f32
        # results, f16 KV cache) says which side of a near-tie such an engine takes; the float64
        # pass below takes that side at near-ties only (model_ref.ffn_moe, TIE_MARGIN).
        forward(model, args.tokens, numerics=EngineNumerics(q8_block=32, float_act="f32", kv="f16"))
        model.route_hint, model.route_choices = dict(model.route_choices), {}
    logits = forward(model, args.tokens, on_layer=layer_sink)
    for il, t, margin in model.tie_breaks:
        log("blk.%d token %d: router near-tie (margin %.1e of the logits' spread): took the engine's "
            "side" % (il, t, margin))
    unused = model.unused_tensors()
    if unused:
        log("warning: tensors not used by the reference: %s" % ", ".join(unused))
    n = len(args.tokens)
    if args.out:
        write_logits(args.out, LogitsDump(model.config.n_vocab, [KIND_PROMPT] * n, range(n),
                                          args.tokens, logits))
    else:
        print("argmax per position: %s" % ",".join(str(int(i)) for i in np.argmax(logits, 1)))
    log("%d tokens, n_vocab %d, %.2f s%s%s" % (
        n, model.config.n_vocab, time.time() - t0,
        ", logits -> %s" % args.out if args.out else "",
        ", layers -> %s" % args.dump_layers if args.dump_layers else ""))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="GGUF model file")
    ap.add_argument("--tokens", required=True, type=parse_tokens, help="comma-separated token ids")
    ap.add_argument("--out", help="write the logits file here (NMLG format)")
    ap.add_argument("--dump-layers", metavar="DIR", help="write per-layer activations (NMLY) here")
    ap.add_argument("--engine-routes", metavar="FILE",
                    help="MoE: the engine's router choices (routes.txt of numallm's --dump-layers), taken at near-ties")
    args = ap.parse_args(argv)
    try:
        return run(args)
    except (GGUFError, ModelError, OSError) as e:
        print("ref: error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
