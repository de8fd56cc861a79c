"""Float64 reference forward pass for numallm, from a GGUF file (independent of the C engine).

Architectures: llama, qwen2, qwen3 (dense) and qwen3moe (router + experts; written from
FORMATS.md, not yet exercised against the engine). Everything is computed in float64 over all
positions at once with a causal mask; nothing here mirrors the engine's data layouts or
shortcuts. The math (shared/FORMATS.md, "Per-architecture metadata keys", "Tensor names and
shapes", "RoPE variant"):

    x = token_embd[token]
    per layer i:
        h = rmsnorm(x) * attn_norm                        rmsnorm(x) = x / sqrt(mean(x^2) + eps)
        q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv) biases required for qwen2
        qwen3*: q, k = per-head rmsnorm(q) * attn_q_norm, rmsnorm(k) * attn_k_norm
        q, k = rope(q), rope(k)                            NORM pairs for llama, NEOX for qwen*
        o = softmax_causal(q k^T / sqrt(head_dim)) v       GQA: q head h reads kv head h // g
        x = x + o Wo^T (+bo)
        h = rmsnorm(x) * ffn_norm
        x = x + W_down (silu(W_gate h) * (W_up h))         qwen3moe: top-k softmax-gated experts
    logits = (rmsnorm(x) * output_norm) W_out^T (+b_out)   W_out = token_embd when output is absent

A GGUF weight of ne = {in, out} is used as W [out, in], y = x W^T for row vectors x.

RoPE: theta_i = pos * freq_scale * base^(-2i/n_rot) / rope_freqs[i], i < n_rot/2; a pair (a, b)
becomes (a cos - b sin, a sin + b cos); dimensions >= n_rot pass through.

Public API:
    load_model(path) -> Model            config_from_gguf(gguf) -> ModelConfig
    forward(model, tokens, numerics=None, on_layer=None) -> logits float64 [n_tokens, n_vocab]
`numerics` lets a test emulate lower-precision arithmetic (see fixtures/engine_numerics.py); the
default is exact float64. `on_layer(name, x)` receives 'embd', 'blk.N' (residual stream after
layer N) and 'result_norm'.
"""

import numpy as np

from gguf_ref import GGUFFile, GGUFValueType, ggml_type_name

ROPE_TYPE_NORM = 0  # pairs (x[2i], x[2i+1]); llama
ROPE_TYPE_NEOX = 2  # pairs (x[i], x[i + n_rot/2]); qwen2, qwen3, qwen3moe

ARCH_ROPE_TYPE = {
    "llama": ROPE_TYPE_NORM,
    "qwen2": ROPE_TYPE_NEOX,
    "qwen3": ROPE_TYPE_NEOX,
    "qwen3moe": ROPE_TYPE_NEOX,
}

EXPERT_GATING_SOFTMAX = 1  # llama.cpp LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX


class ModelError(Exception):
    """The model file does not describe a model the reference can run; the message says why."""


# --- configuration -------------------------------------------------------------------------------

class ModelConfig:
    """Hyperparameters read from GGUF metadata (every size comes from the file)."""

    def __repr__(self):
        return "ModelConfig(%s)" % ", ".join("%s=%r" % kv for kv in vars(self).items())


_INT_TYPES = {GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16, GGUFValueType.INT16,
              GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.UINT64, GGUFValueType.INT64}
_FLOAT_TYPES = {GGUFValueType.FLOAT32, GGUFValueType.FLOAT64}
_KIND_TYPES = {"int": _INT_TYPES, "float": _FLOAT_TYPES | _INT_TYPES, "str": {GGUFValueType.STRING}}


class MetaReader:
    """Typed access to GGUF metadata; records which optional keys fell back to a default."""

    def __init__(self, g):
        self.g = g
        self.defaults_used = []  # "key=default" for every absent optional key given a default

    def get(self, key, kind, default=None, required=False, allow_array=False):
        """Value of key, of kind 'int', 'float' or 'str'.

        Missing: ModelError when required, else default. A per-layer array is allowed only with
        allow_array (returned as a list). A value of the wrong type is a ModelError.
        """
        g = self.g
        if key not in g.kv:
            if required:
                raise ModelError("missing required metadata key '%s'" % key)
            if default is not None:
                self.defaults_used.append("%s=%r" % (key, default))
            return default
        vtype, etype = g.kv_type[key]
        if vtype == GGUFValueType.ARRAY:
            if not allow_array:
                raise ModelError("metadata key '%s' is an array; a scalar is expected" % key)
            vtype = etype
        if vtype not in _KIND_TYPES[kind]:
            raise ModelError("metadata key '%s' has value type %d, expected %s" % (key, vtype, kind))
        return g.kv[key]


def _per_layer(val, n_layer, key):
    """A scalar or per-layer array as a list of n_layer values."""
    if isinstance(val, list):
        if len(val) != n_layer:
            raise ModelError("'%s' has %d entries, block_count is %d" % (key, len(val), n_layer))
        return list(val)
    return [val] * n_layer


def _uniform(val, key):
    """A value that may be stored per layer but must be the same for all layers here."""
    if isinstance(val, list):
        if len(set(val)) != 1:
            raise ModelError("'%s' varies per layer (%s); the reference supports uniform values"
                             % (key, val))
        return val[0]
    return val


def config_from_gguf(g):
    """ModelConfig from a parsed GGUFFile; ModelError names any missing or invalid key.
    c.defaults_used lists the optional keys that were absent, with the default taken."""
    meta = MetaReader(g)
    c = ModelConfig()
    arch = meta.get("general.architecture", "str", required=True)
    if arch not in ARCH_ROPE_TYPE:
        raise ModelError("architecture '%s' is not supported (supported: %s)"
                         % (arch, ", ".join(ARCH_ROPE_TYPE)))
    c.arch = arch
    p = arch + "."
    c.n_embd = meta.get(p + "embedding_length", "int", required=True)
    c.n_layer = meta.get(p + "block_count", "int", required=True)
    key = p + "attention.head_count"
    c.n_head = _uniform(meta.get(key, "int", required=True, allow_array=True), key)
    key = p + "attention.head_count_kv"
    c.n_head_kv = _uniform(meta.get(key, "int", default=c.n_head, allow_array=True), key)
    if c.n_head <= 0 or c.n_head_kv <= 0 or c.n_head % c.n_head_kv:
        raise ModelError("head_count %d is not a positive multiple of head_count_kv %d"
                         % (c.n_head, c.n_head_kv))
    c.head_dim = meta.get(p + "attention.key_length", "int", default=c.n_embd // c.n_head)
    c.head_dim_v = meta.get(p + "attention.value_length", "int", default=c.n_embd // c.n_head)
    c.rms_eps = float(meta.get(p + "attention.layer_norm_rms_epsilon", "float", required=True))
    _ffn_config(meta, c, p)
    _rope_config(meta, c, p)

    emb = g.tensor("token_embd.weight")
    if len(emb.ne) != 2 or emb.ne[0] != c.n_embd:
        raise ModelError("token_embd.weight has ne = %s, expected {n_embd=%d, n_vocab}"
                         % (list(emb.ne), c.n_embd))
    c.n_vocab = emb.ne[1]
    n_vocab_meta = meta.get(p + "vocab_size", "int")
    if n_vocab_meta is not None and n_vocab_meta != c.n_vocab:
        raise ModelError("%svocab_size = %d but token_embd.weight has %d rows"
                         % (p, n_vocab_meta, c.n_vocab))
    c.defaults_used = meta.defaults_used
    return c


def _ffn_config(meta, c, p):
    """FFN fields of c: n_ff (per layer; 0 for MoE), n_expert, n_expert_used, n_ff_exp."""
    c.n_expert, c.n_expert_used, c.n_ff_exp = 0, 0, 0
    if c.arch != "qwen3moe":
        key = p + "feed_forward_length"
        c.n_ff = _per_layer(meta.get(key, "int", required=True, allow_array=True), c.n_layer, key)
        return
    c.n_ff = [0] * c.n_layer
    c.n_expert = meta.get(p + "expert_count", "int", required=True)
    c.n_expert_used = meta.get(p + "expert_used_count", "int", required=True)
    if c.n_expert <= 0 or not 0 < c.n_expert_used <= c.n_expert:
        raise ModelError("qwen3moe needs 0 < expert_used_count (%d) <= expert_count (%d)"
                         % (c.n_expert_used, c.n_expert))
    c.n_ff_exp = meta.get(p + "expert_feed_forward_length", "int", required=True)
    gating = meta.get(p + "expert_gating_func", "int", default=EXPERT_GATING_SOFTMAX)
    if gating != EXPERT_GATING_SOFTMAX:
        raise ModelError("expert_gating_func %d is not supported (softmax = 1 is)" % gating)


def _rope_config(meta, c, p):
    """RoPE fields of c: rope_type, n_rot, rope_freq_base, rope_freq_scale, has_rope_freqs."""
    c.rope_type = ARCH_ROPE_TYPE[c.arch]
    c.n_rot = meta.get(p + "rope.dimension_count", "int", default=c.head_dim)
    if c.n_rot % 2 or not 0 < c.n_rot <= c.head_dim:
        raise ModelError("rope.dimension_count = %d must be even and in (0, head_dim = %d]"
                         % (c.n_rot, c.head_dim))
    if c.arch == "llama" and c.n_rot != c.head_dim:
        raise ModelError("llama needs rope.dimension_count (%d) == head_dim (%d)"
                         % (c.n_rot, c.head_dim))
    c.rope_freq_base = float(meta.get(p + "rope.freq_base", "float", default=10000.0))
    c.rope_scaling_type = meta.get(p + "rope.scaling.type", "str", default="linear")
    if c.rope_scaling_type not in ("none", "linear"):
        raise ModelError("rope.scaling.type '%s' is not supported (none, linear are)"
                         % c.rope_scaling_type)
    factor = meta.get(p + "rope.scaling.factor", "float") or 0.0
    if factor == 0.0:
        factor = meta.get(p + "rope.scale_linear", "float") or 0.0
    # As llama.cpp: no factor (or 0) means 1; scaling type 'none' never scales.
    c.rope_freq_scale = 1.0 if factor == 0.0 else 1.0 / float(factor)
    if c.rope_scaling_type == "none":
        c.rope_freq_scale = 1.0
    c.has_rope_freqs = "rope_freqs.weight" in meta.g.tensors


# --- weights -------------------------------------------------------------------------------------

class Weight:
    """A dequantized tensor: data float64 (numpy shape reversed(ne)) and its GGUF ggml type."""

    def __init__(self, data, ggml_type):
        self.data = data
        self.ggml_type = ggml_type


class Model:
    """A GGUF file plus its ModelConfig. Weights are dequantized on demand (not cached), so a
    forward pass holds about one layer's weights at a time."""

    def __init__(self, gguf, config):
        self.gguf = gguf
        self.config = config
        self.used = set()
        self.route_choices = {}  # MoE: (layer, token) -> the experts chosen
        self.route_hint = {}     # MoE: (layer, token) -> the side of a near-tie to take
        self.tie_breaks = []     # MoE: (layer, token, margin) where the hint decided

    def has(self, name):
        return name in self.gguf.tensors

    def weight(self, name, ne):
        """Tensor name dequantized, after checking that its ne equals the expected ne."""
        t = self.gguf.tensor(name)
        if tuple(t.ne) != tuple(ne):
            raise ModelError("tensor '%s' has ne = %s, expected %s from the metadata"
                             % (name, list(t.ne), list(ne)))
        self.used.add(name)
        return Weight(self.gguf.dequantize(name), t.ggml_type)

    def optional(self, name, ne):
        """weight(name, ne), or None when the file has no such tensor."""
        return self.weight(name, ne) if self.has(name) else None

    def unused_tensors(self):
        return [n for n in self.gguf.tensors if n not in self.used]


def load_model(path):
    """Parse path and its config. Raises GGUFError / ModelError with a readable message."""
    g = GGUFFile(path)
    return Model(g, config_from_gguf(g))


# --- operations ----------------------------------------------------------------------------------

class ExactNumerics:
    """Identity hooks: the reference proper computes everything in float64."""

    def linear_input(self, x, ggml_type):
        """The activations a matmul with a weight of ggml_type actually multiplies."""
        return x

    def linear_weight(self, w, ggml_type):
        """The weight values a matmul actually uses (after any repacking)."""
        return w

    def kv_store(self, x):
        """K or V as read back from the KV cache."""
        return x

    def op_output(self, x):
        """The result of any operation as stored between operations."""
        return x


def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def linear(x, w, b, numerics):
    """x W^T (+ b): x [..., in], w.data [out, in]."""
    y = numerics.linear_input(x, w.ggml_type) @ numerics.linear_weight(w.data, w.ggml_type).T
    if b is not None:
        y = y + b.data
    return numerics.op_output(y)


def rope_angles(positions, n_rot, freq_base, freq_scale, rope_freqs=None):
    """theta [n_pos, n_rot/2]: pos * freq_scale * base^(-2i/n_rot) / rope_freqs[i]."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = freq_base ** (-2.0 * i / n_rot)
    if rope_freqs is not None:
        inv_freq = inv_freq / rope_freqs
    return np.asarray(positions, dtype=np.float64)[:, None] * freq_scale * inv_freq[None, :]


def apply_rope(x, theta, n_rot, rope_type):
    """Rotate x [n_pos, n_heads, head_dim] by theta [n_pos, n_rot/2]; dims >= n_rot unchanged.

    NORM rotates pairs (x[2i], x[2i+1]); NEOX rotates pairs (x[i], x[i + n_rot/2]).
    """
    half = n_rot // 2
    if rope_type == ROPE_TYPE_NORM:
        ia = np.arange(half) * 2
        ib = ia + 1
    elif rope_type == ROPE_TYPE_NEOX:
        ia = np.arange(half)
        ib = ia + half
    else:
        raise ModelError("unknown rope type %d" % rope_type)
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    a, b = x[..., ia], x[..., ib]
    y = x.copy()
    y[..., ia] = a * cos - b * sin
    y[..., ib] = a * sin + b * cos
    return y


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def causal_attention(q, k, v, scale):
    """Grouped-query causal attention.

    q [T, n_head, hd], k [T, n_head_kv, hd], v [T, n_head_kv, hd_v] -> [T, n_head * hd_v].
    Query head h attends with kv head h // (n_head / n_head_kv); position t sees positions <= t.
    """
    T, n_head, _ = q.shape
    group = n_head // k.shape[1]
    kh = np.repeat(k, group, axis=1)  # [T, n_head, hd]
    vh = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, kh) * scale
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores[:, mask] = -np.inf
    p = softmax(scores, axis=-1)
    return np.einsum("hts,shd->thd", p, vh).reshape(T, -1)


# --- layers --------------------------------------------------------------------------------------

def attention_block(m, il, x, theta, numerics):
    """The attention half of layer il: returns o Wo^T (+bo), to be added to the residual x."""
    c = m.config
    pre = "blk.%d." % il
    nq, nk, nv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim, c.n_head_kv * c.head_dim_v
    need_bias = c.arch == "qwen2"
    bias = m.weight if need_bias else m.optional

    h = numerics.op_output(rms_norm(x, m.weight(pre + "attn_norm.weight", (c.n_embd,)).data,
                                    c.rms_eps))
    q = linear(h, m.weight(pre + "attn_q.weight", (c.n_embd, nq)), bias(pre + "attn_q.bias", (nq,)),
               numerics)
    k = linear(h, m.weight(pre + "attn_k.weight", (c.n_embd, nk)), bias(pre + "attn_k.bias", (nk,)),
               numerics)
    v = linear(h, m.weight(pre + "attn_v.weight", (c.n_embd, nv)), bias(pre + "attn_v.bias", (nv,)),
               numerics)
    T = x.shape[0]
    q = q.reshape(T, c.n_head, c.head_dim)
    k = k.reshape(T, c.n_head_kv, c.head_dim)
    v = v.reshape(T, c.n_head_kv, c.head_dim_v)
    if c.arch in ("qwen3", "qwen3moe"):
        q = rms_norm(q, m.weight(pre + "attn_q_norm.weight", (c.head_dim,)).data, c.rms_eps)
        k = rms_norm(k, m.weight(pre + "attn_k_norm.weight", (c.head_dim,)).data, c.rms_eps)
    q = numerics.op_output(apply_rope(q, theta, c.n_rot, c.rope_type))
    k = numerics.kv_store(apply_rope(k, theta, c.n_rot, c.rope_type))
    v = numerics.kv_store(v)
    o = numerics.op_output(causal_attention(q, k, v, 1.0 / np.sqrt(c.head_dim)))
    wo = m.weight(pre + "attn_output.weight", (c.n_head * c.head_dim_v, c.n_embd))
    return linear(o, wo, m.optional(pre + "attn_output.bias", (c.n_embd,)), numerics)


def ffn_dense(m, il, h, numerics):
    """SwiGLU FFN: W_down (silu(W_gate h) * (W_up h))."""
    c = m.config
    pre = "blk.%d." % il
    n_ff = c.n_ff[il]
    g = linear(h, m.weight(pre + "ffn_gate.weight", (c.n_embd, n_ff)), None, numerics)
    u = linear(h, m.weight(pre + "ffn_up.weight", (c.n_embd, n_ff)), None, numerics)
    a = numerics.op_output(silu(g) * u)
    return linear(a, m.weight(pre + "ffn_down.weight", (n_ff, c.n_embd)), None, numerics)


TIE_MARGIN = 0.02  # see ffn_moe


def ffn_moe(m, il, h, numerics):
    """qwen3moe FFN: softmax router, top-k experts, selected weights renormalized to sum 1,
    output = sum_e w_e W_down_e (silu(W_gate_e h) * (W_up_e h))."""
    c = m.config
    pre = "blk.%d." % il
    router = m.weight(pre + "ffn_gate_inp.weight", (c.n_embd, c.n_expert))
    logits = linear(h, router, None, numerics)                         # [T, n_expert]
    probs = softmax(logits, axis=-1)
    gate = m.weight(pre + "ffn_gate_exps.weight", (c.n_embd, c.n_ff_exp, c.n_expert))
    up = m.weight(pre + "ffn_up_exps.weight", (c.n_embd, c.n_ff_exp, c.n_expert))
    down = m.weight(pre + "ffn_down_exps.weight", (c.n_ff_exp, c.n_embd, c.n_expert))
    out = np.zeros_like(h)
    k = c.n_expert_used
    for t in range(h.shape[0]):
        order = np.argsort(-probs[t], kind="stable")
        sel = order[:k]
        # A near-tie between the last chosen and the first unchosen expert (their router logits
        # closer than TIE_MARGIN of the logits' spread) is decided either way within precision;
        # an engine whose activations are quantized decides it by its own rounding. With a hint
        # (route_hint: the choice a pass with the engine's numerics made) the reference takes
        # that side of the tie, and records it, so the comparison is not of two different experts.
        hint = m.route_hint.get((il, t))
        if hint is not None and k < c.n_expert and set(hint) != set(sel.tolist()):
            s = logits[t][order]
            margin = (s[k - 1] - s[k]) / max(s[0] - s[-1], 1e-30)
            if margin < TIE_MARGIN:
                sel = np.array(sorted(hint, key=lambda e: -probs[t, e]))
                m.tie_breaks.append((il, t, float(margin)))
        m.route_choices[(il, t)] = tuple(int(e) for e in sel)
        w = probs[t, sel] / np.sum(probs[t, sel])
        for e, we in zip(sel, w):
            ge = linear(h[t], Weight(gate.data[e], gate.ggml_type), None, numerics)
            ue = linear(h[t], Weight(up.data[e], up.ggml_type), None, numerics)
            a = numerics.op_output(silu(ge) * ue)
            out[t] += we * linear(a, Weight(down.data[e], down.ggml_type), None, numerics)
    return out


def ffn_block(m, il, x, numerics):
    """The FFN half of layer il: returns the FFN output, to be added to the residual x."""
    c = m.config
    h = numerics.op_output(rms_norm(x, m.weight("blk.%d.ffn_norm.weight" % il, (c.n_embd,)).data,
                                    c.rms_eps))
    if c.arch == "qwen3moe":
        return ffn_moe(m, il, h, numerics)
    return ffn_dense(m, il, h, numerics)


def rope_theta(m, positions):
    """RoPE angles for the model's config (rope_freqs.weight applied when present)."""
    c = m.config
    freqs = m.weight("rope_freqs.weight", (c.n_rot // 2,)).data if c.has_rope_freqs else None
    return rope_angles(positions, c.n_rot, c.rope_freq_base, c.rope_freq_scale, freqs)


def forward(m, tokens, numerics=None, on_layer=None):
    """Logits float64 [len(tokens), n_vocab] for tokens at positions 0..len-1."""
    c = m.config
    numerics = numerics or ExactNumerics()
    on_layer = on_layer or (lambda name, x: None)
    tokens = [int(t) for t in tokens]
    for t in tokens:
        if not 0 <= t < c.n_vocab:
            raise ModelError("token %d out of range [0, n_vocab = %d)" % (t, c.n_vocab))
    emb = m.gguf.tensor("token_embd.weight")
    m.used.add(emb.name)
    x = m.gguf.dequantize_rows(emb.name, tokens)
    on_layer("embd", x)
    theta = rope_theta(m, np.arange(len(tokens)))
    for il in range(c.n_layer):
        x = x + attention_block(m, il, x, theta, numerics)
        x = x + ffn_block(m, il, x, numerics)
        on_layer("blk.%d" % il, x)
    out = numerics.op_output(rms_norm(x, m.weight("output_norm.weight", (c.n_embd,)).data,
                                      c.rms_eps))
    on_layer("result_norm", out)
    if m.has("output.weight"):
        w_out = m.weight("output.weight", (c.n_embd, c.n_vocab))
    else:
        w_out = m.weight("token_embd.weight", (c.n_embd, c.n_vocab))  # tied embeddings
    return linear(out, w_out, m.optional("output.bias", (c.n_vocab,)), numerics)


def describe(m):
    """One line summarizing the model config and weight types."""
    c = m.config
    types = sorted({ggml_type_name(t.ggml_type) for t in m.gguf.tensors.values()})
    ffn = ("n_ff=%s" % (c.n_ff[0] if len(set(c.n_ff)) == 1 else c.n_ff) if not c.n_expert else
           "experts=%d used=%d n_ff_exp=%d" % (c.n_expert, c.n_expert_used, c.n_ff_exp))
    return ("arch=%s n_vocab=%d n_embd=%d n_layer=%d n_head=%d n_head_kv=%d head_dim=%d/%d "
            "%s n_rot=%d rope=%s base=%g freq_scale=%g rope_freqs=%s eps=%g types=%s"
            % (c.arch, c.n_vocab, c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim,
               c.head_dim_v, ffn, c.n_rot,
               "norm" if c.rope_type == ROPE_TYPE_NORM else "neox", c.rope_freq_base,
               c.rope_freq_scale, c.has_rope_freqs, c.rms_eps, ",".join(types)))
