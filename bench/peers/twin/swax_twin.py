"""swax's model in plain PyTorch: the twin that checks swax's engine computes and trains as
PyTorch does (bench/peers/twin_parity.py, docs/parity.md).

It is the model of hybrid/src/model.rs, nn/src/block.rs and nn/src/layers/: a token embedding;
pre-norm blocks `x + mixer(rms_norm(x))`, `x + swiglu(rms_norm(x))`, the mixer of each block a
letter of `model.pattern` repeated to the depth; a final RMSNorm; an untied head; the mean
next-token cross-entropy over the targets that are not ignored. The mixers:

- S sliding-window attention, F full causal attention: q, k, v from one projection,
  grouped-query heads, rotate-half RoPE on q and k, a query at t sees the keys
  `t - W < s <= t` (F: every earlier key), scores scaled by 1/sqrt(D).
- M the mLSTM (xLSTM-7B's equations): q, k (head dim D/2) and v (D) through a causal depthwise
  convolution of 4 taps and SiLU, input and forget gate preactivations soft-capped at 15, the
  stabilized parallel form, a per-head LayerNorm with a [H, D] weight, a sigmoid output gate.
- G the gated delta rule (Gated DeltaNet): q, k, v through the same convolution, q and k
  L2-normalized, beta = sigmoid, log-decay `-exp(a_log) softplus(x W + dt_bias)`, the recurrence
  step by step, an RMSNorm gated by SiLU.
- R RAttention: sliding-window attention plus a linear attention over the keys older than the
  window, features `[softmax(x), softmax(-x)]` of the un-roped q and k, each branch
  RMS-normalized, summed.

Every parameter is named and shaped as swax names it in its checkpoints: a linear layer's
weight is `[in, out]` (`y = x W`, the transpose of nn.Linear's), so swax's model.safetensors
loads without a renaming table, and `load_swax` refuses a missing, unexpected or misshapen
tensor. The weights come from swax; the twin draws none of its own. Needs only torch.
"""
import json
import math
import struct
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# The loader's ignored target (u32::MAX in swax's token rows).
IGNORE = 2**32 - 1
# Taps of the recurrent layers' short convolution (nn/src/layers/short_conv.rs).
CONV_TAPS = 4
# xLSTM-7B's soft cap of the mLSTM's gate preactivations and its denominator's eps.
GATE_CAP = 15.0
MLSTM_EPS = 1e-6
# The gated delta rule's L2 normalization of q and k: x / sqrt(|x|^2 + 1e-6).
L2_EPS = 1e-6

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16}


def load_safetensors(path):
    """The tensors of a safetensors file (on the CPU) and its metadata. U32 tensors (token ids)
    come back as int64. A small reader of the format (an 8-byte header length, a JSON header of
    dtypes, shapes and offsets, the raw bytes), so that no package beyond torch is needed."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        start, end = (8 + n + o for o in info["data_offsets"])
        raw = bytearray(data[start:end])
        if info["dtype"] == "U32":
            t = torch.frombuffer(raw, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF
        elif info["dtype"] in _DTYPES:
            t = torch.frombuffer(raw, dtype=_DTYPES[info["dtype"]]) if raw else torch.empty(0)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        out[name] = t.reshape(info["shape"])
    return out, meta


def read_config(path):
    """A swax run's config.toml as a dict of its tables (model, data, train, optim)."""
    with open(path, "rb") as f:
        return tomllib.load(f)


class Linear(nn.Module):
    """No bias unless asked; the weight `[in, out]`, as swax stores it."""

    def __init__(self, d_in, d_out, bias=False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_in, d_out))
        self.bias = nn.Parameter(torch.empty(d_out)) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


class RmsNorm(nn.Module):
    """`x / sqrt(mean(x^2) + eps) * weight` over the last axis."""

    def __init__(self, shape, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight


class HeadNorm(nn.Module):
    """xLSTM's multi-head norm: a LayerNorm over D within each head of x [.., H, D] (no affine
    of its own), then a weight [H, D]."""

    def __init__(self, heads, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, d))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), eps=self.eps) * self.weight


class Embedding(nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d))

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class ShortConv(nn.Module):
    """`silu(conv(x))`: causal depthwise, `y_t = sum_j w[:, j] x_{t-K+1+j}` over x [B, T, C]."""

    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, CONV_TAPS))

    def forward(self, x):
        t = x.shape[1]
        padded = F.pad(x, (0, 0, CONV_TAPS - 1, 0))
        y = sum(padded[:, j:j + t] * self.weight[:, j] for j in range(CONV_TAPS))
        return F.silu(y)


def split_heads(x, parts):
    """x [B, T, sum(heads * d)] cut into [B, T, heads, d] per (heads, d) of `parts`."""
    b, t, _ = x.shape
    cut = x.split([h * d for h, d in parts], dim=-1)
    return [c.reshape(b, t, h, d) for c, (h, d) in zip(cut, parts)]


def rope(x, theta):
    """Rotate-half RoPE on x [B, T, H, D]: element i turns with i + D/2 by the angle
    t * theta^(-2i/D), the angles and their sines taken in f64 (as swax's kernel does)."""
    t, d = x.shape[1], x.shape[3]
    half = d // 2
    freqs = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * freqs
    cos = angles.cos().to(x.dtype).to(x.device)[None, :, None, :]
    sin = angles.sin().to(x.dtype).to(x.device)[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def band(t, window, device):
    """[T, T] True where query t sees key s: `t - window < s <= t`."""
    pos = torch.arange(t, device=device)
    gap = pos[:, None] - pos[None, :]
    return (gap >= 0) & (gap < window)


def repeat_kv(x, h):
    """[B, T, Hkv, D] to [B, T, H, D]: q head j reads kv head j // (H / Hkv)."""
    return x.repeat_interleave(h // x.shape[2], dim=2)


def swa(q, k, v, window):
    """Softmax attention of q [B, T, H, D] over the keys `t - window < s <= t`."""
    h, d = q.shape[2], q.shape[3]
    q, k, v = (y.transpose(1, 2) for y in (q, repeat_kv(k, h), repeat_kv(v, h)))
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    scores = scores.masked_fill(~band(q.shape[2], window, q.device), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


class Attention(nn.Module):
    """S and F: sliding-window (or, with the window at T, full) causal attention."""

    def __init__(self, m):
        super().__init__()
        self.h, self.hkv = m["n_heads"], m["n_kv_heads"]
        self.d = m["d_model"] // self.h
        self.theta = m["rope_theta"]
        self.qkv = Linear(m["d_model"], (self.h + 2 * self.hkv) * self.d)
        self.out = Linear(self.h * self.d, m["d_model"])

    def forward(self, x, window):
        b, t, _ = x.shape
        q, k, v = split_heads(self.qkv(x), [(self.h, self.d), (self.hkv, self.d), (self.hkv, self.d)])
        o = swa(rope(q, self.theta), rope(k, self.theta), v, window)
        return self.out(o.reshape(b, t, self.h * self.d))


def mlstm(q, k, v, i, f):
    """The mLSTM from a zero state, in its stabilized parallel form (nn/src/mixers/mlstm):
    log weights `i_s + F_t - F_s` for s <= t (F the running sum of log-sigmoid forget gates) and
    `F_t` for the zero initial state, each row stabilized by its max m_t;
    `h_t = sum_s w_ts (q_t . k_s) v_s / (max(|sum_s w_ts q_t . k_s|, exp(-m_t)) + eps)`,
    q scaled by 1/sqrt(Dk). q, k [B, T, H, Dk], v [B, T, H, Dv], i, f [B, T, H]."""
    t, dk = q.shape[1], q.shape[3]
    q, k, v = (y.transpose(1, 2) for y in (q * (1.0 / math.sqrt(dk)), k, v))
    fcum = F.logsigmoid(f).transpose(1, 2).cumsum(-1)  # [B, H, T]
    ig = i.transpose(1, 2)
    logw = fcum[..., :, None] - fcum[..., None, :] + ig[..., None, :]
    logw = logw.masked_fill(~band(t, t, q.device), float("-inf"))
    logs = torch.cat((fcum[..., None], logw), dim=-1)  # the initial state's column first
    m = logs.max(-1, keepdim=True).values
    w = torch.exp(logs - m)[..., 1:]
    p = w * (q @ k.transpose(-1, -2))
    den = torch.maximum(p.sum(-1, keepdim=True).abs(), torch.exp(-m)) + MLSTM_EPS
    return ((p @ v) / den).transpose(1, 2)


class Mlstm(nn.Module):
    """M: xLSTM-7B's mLSTM layer with the short convolution on q, k, v."""

    def __init__(self, m):
        super().__init__()
        c, h = m["d_model"], m["n_heads"]
        self.h, self.dv = h, c // h
        self.dk = self.dv // 2
        width = h * (2 * self.dk + self.dv)
        self.qkv = Linear(c, width)
        self.conv = ShortConv(width)
        self.gates = Linear(c, 2 * h, bias=True)
        self.ogate = Linear(c, h * self.dv)
        self.norm = HeadNorm(h, self.dv, m["norm_eps"])
        self.out = Linear(h * self.dv, c)

    def forward(self, x, window):
        b, t, _ = x.shape
        h, dk, dv = self.h, self.dk, self.dv
        q, k, v = split_heads(self.conv(self.qkv(x)), [(h, dk), (h, dk), (h, dv)])
        gates = GATE_CAP * torch.tanh(self.gates(x) / GATE_CAP)
        i, f = gates.split([h, h], dim=-1)
        hs = self.norm(mlstm(q, k, v, i, f))
        gated = hs * torch.sigmoid(self.ogate(x).reshape(b, t, h, dv))
        return self.out(gated.reshape(b, t, h * dv))


def softplus(x):
    """`log(1 + exp(x))` as swax computes it: `max(x, 0) + log1p(exp(-|x|))`."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def l2_normalize(x):
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2_EPS)


def gated_delta(q, k, v, beta, g):
    """The gated delta rule from a zero state, step by step (nn/src/mixers/gated_delta):
    `S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T`, `o_t = S_t^T q_t`, q
    and k L2-normalized, q scaled by 1/sqrt(Dk); S `[Dk, Dv]` per head."""
    b, t, h, dk = q.shape
    q = l2_normalize(q) * (1.0 / math.sqrt(dk))
    k = l2_normalize(k)
    decay = torch.exp(g)
    s = q.new_zeros(b, h, dk, v.shape[3])
    outs = []
    for step in range(t):
        k_t, v_t = k[:, step], v[:, step]  # [B, H, D]
        s = decay[:, step, :, None, None] * s
        delta = beta[:, step, :, None] * (v_t - (k_t[:, :, None, :] @ s)[:, :, 0])
        s = s + k_t[..., :, None] * delta[..., None, :]
        outs.append((q[:, step, :, None, :] @ s)[:, :, 0])
    return torch.stack(outs, dim=1)


class GatedDelta(nn.Module):
    """G: Gated DeltaNet's layer."""

    def __init__(self, m):
        super().__init__()
        c, h = m["d_model"], m["n_heads"]
        self.h, self.d = h, c // h
        self.qkv = Linear(c, 3 * h * self.d)
        self.conv = ShortConv(3 * h * self.d)
        self.beta = Linear(c, h)
        self.decay = Linear(c, h)
        self.a_log = nn.Parameter(torch.empty(h))
        self.dt_bias = nn.Parameter(torch.empty(h))
        self.gate = Linear(c, h * self.d)
        self.norm = RmsNorm(self.d, m["norm_eps"])
        self.out = Linear(h * self.d, c)

    def forward(self, x, window):
        b, t, _ = x.shape
        h, d = self.h, self.d
        q, k, v = split_heads(self.conv(self.qkv(x)), [(h, d)] * 3)
        beta = torch.sigmoid(self.beta(x))
        g = -torch.exp(self.a_log) * softplus(self.decay(x) + self.dt_bias)
        o = gated_delta(q, k, v, beta, g)
        y = self.norm(o) * F.silu(self.gate(x).reshape(b, t, h, d))
        return self.out(y.reshape(b, t, h * d))


def feature(x):
    """RAttention's feature map `[softmax(x), softmax(-x)]` over the head dim."""
    return torch.cat((x.softmax(-1), (-x).softmax(-1)), dim=-1)


def residual_linear(q, k, v, window):
    """The linear branch: each query against the keys older than its window,
    `o_t = sum_{s <= t - window} (phi(q_t) . phi(k_s)) v_s`."""
    h, t = q.shape[2], q.shape[1]
    fq, fk, v = (y.transpose(1, 2) for y in (feature(q), repeat_kv(feature(k), h), repeat_kv(v, h)))
    pos = torch.arange(t, device=q.device)
    older = (pos[:, None] - pos[None, :]) >= window
    scores = (fq @ fk.transpose(-1, -2)).masked_fill(~older, 0.0)
    return (scores @ v).transpose(1, 2)


class RAttention(nn.Module):
    """R: sliding-window attention (RoPE) plus the residual linear attention (no RoPE)."""

    def __init__(self, m):
        super().__init__()
        self.h, self.hkv = m["n_heads"], m["n_kv_heads"]
        self.d = m["d_model"] // self.h
        self.theta = m["rope_theta"]
        self.qkv = Linear(m["d_model"], (self.h + 2 * self.hkv) * self.d)
        self.norm_swa = RmsNorm(self.d, m["norm_eps"])
        self.norm_rla = RmsNorm(self.d, m["norm_eps"])
        self.out = Linear(self.h * self.d, m["d_model"])

    def forward(self, x, window):
        b, t, _ = x.shape
        q, k, v = split_heads(self.qkv(x), [(self.h, self.d), (self.hkv, self.d), (self.hkv, self.d)])
        o_swa = swa(rope(q, self.theta), rope(k, self.theta), v, window)
        o = self.norm_swa(o_swa) + self.norm_rla(residual_linear(q, k, v, window))
        return self.out(o.reshape(b, t, self.h * self.d))


class SwiGlu(nn.Module):
    """`down(silu(gate) * up)`, gate and up the two halves (gate first) of one projection."""

    def __init__(self, c, hidden):
        super().__init__()
        self.gate_up = Linear(c, 2 * hidden)
        self.down = Linear(hidden, c)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


MIXERS = {"S": Attention, "F": Attention, "M": Mlstm, "G": GatedDelta, "R": RAttention}


class Block(nn.Module):
    def __init__(self, kind, m):
        super().__init__()
        if kind not in MIXERS:
            raise ValueError(f"unknown mixer {kind!r}: expected one of {', '.join(MIXERS)}")
        self.kind = kind
        self.mixer_norm = RmsNorm(m["d_model"], m["norm_eps"])
        self.mixer = MIXERS[kind](m)
        self.mlp_norm = RmsNorm(m["d_model"], m["norm_eps"])
        self.mlp = SwiGlu(m["d_model"], m["d_ff"])

    def forward(self, x, window):
        t = x.shape[1]
        # F sees the whole sequence; S and R at most all of it.
        x = x + self.mixer(self.mixer_norm(x), t if self.kind == "F" else min(window, t))
        return x + self.mlp(self.mlp_norm(x))


class SwaxTwin(nn.Module):
    """The whole model of a swax `[model]` config table. With `recompute`, each block runs
    again in the backward instead of keeping its activations (swax's `model.recompute =
    "all"`): the same gradients in the memory of one block's, which the T x T forms need at
    long T."""

    def __init__(self, m, recompute=False):
        super().__init__()
        self.recompute = recompute
        kinds = (m["pattern"] * m["n_layers"])[:m["n_layers"]]
        self.embed = Embedding(m["vocab_size"], m["d_model"])
        self.blocks = nn.ModuleList(Block(kind, m) for kind in kinds)
        self.norm = RmsNorm(m["d_model"], m["norm_eps"])
        self.head = Linear(m["d_model"], m["vocab_size"])

    def forward(self, ids, window):
        """Logits [B, T, V] of token ids [B, T], the attention layers at `window`."""
        x = self.embed(ids)
        for block in self.blocks:
            if self.recompute and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, window, use_reentrant=False)
            else:
                x = block(x, window)
        return self.head(self.norm(x))

    def loss(self, ids, targets, window):
        """The mean cross-entropy over the targets that are not IGNORE (0 when all are)."""
        logits = self(ids, window).flatten(0, 1)
        targets = targets.flatten()
        kept = targets != IGNORE
        summed = F.cross_entropy(logits[kept], targets[kept], reduction="sum")
        return summed / kept.sum().clamp(min=1)

    def load_swax(self, path):
        """Loads swax's model.safetensors; any missing, unexpected or misshapen tensor is an
        error naming it."""
        tensors, _ = load_safetensors(path)
        params = dict(self.named_parameters())
        wrong = [f"missing: {n}" for n in params if n not in tensors]
        wrong += [f"unexpected: {n}" for n in tensors if n not in params]
        wrong += [f"{n}: file {list(tensors[n].shape)}, model {list(p.shape)}"
                  for n, p in params.items() if n in tensors and tensors[n].shape != p.shape]
        if wrong:
            raise ValueError(f"{path} does not fit the model:\n  " + "\n  ".join(wrong))
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(tensors[n])
