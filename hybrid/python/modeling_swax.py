"""swax's model in plain PyTorch: the one PyTorch model of the repository. It is the twin that
checks swax's engine computes and trains as PyTorch does (bench/peers/twin_parity.py,
docs/parity.md), and the modeling file of an exported run (`swax export RUN --hf OUT`, which
writes this very file, docs/export.md), where transformers loads it with
`AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)`.

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
  a chunk of 64 tokens at a time (the same sums as token by token, by a triangular solve), an
  RMSNorm gated by SiLU.
- R RAttention: sliding-window attention plus a linear attention over the keys older than the
  window, features `[softmax(x), softmax(-x)]` of the un-roped q and k, each branch
  RMS-normalized, summed.

Every parameter is named and shaped as swax names it in its checkpoints: a linear layer's
weight is `[in, out]` (`y = x W`, the transpose of nn.Linear's), so swax's model.safetensors
loads without a renaming table, and `load_swax` refuses a missing, unexpected or misshapen
tensor. In an export the whole model is `SwaxForCausalLM.model`, so each name gains the prefix
`model.`.

Decoding: each mixer also reads a sequence in steps, carrying its state in a `LayerState`
(`SwaxCache` holds one a layer): S and F the keys and values of the window (F all of them), R
those and its linear branch's state, M and G their recurrent state and the short convolution's
last inputs. A first read from an empty state runs the parallel forms above (and, for M, the
state they end in, in closed form); every later one runs the recurrence token by token, the
exact single-token update. swax's `generate` carries the same states.

Needs only torch; the transformers wrapper at the end is defined where transformers is
installed.
"""
import json
import math
import struct

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
# Tokens the twin's gated delta rule takes at a time (any length gives the same sums, up to
# rounding; 64 is swax's chunk).
GATED_DELTA_CHUNK = 64
# The fields of swax's `[model]` table (hybrid/src/config.rs) that the model reads.
MODEL_FIELDS = ("pattern", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size",
                "rope_theta", "norm_eps")

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
    import tomllib  # Python 3.11; only the twin's parity check reads swax's TOML

    with open(path, "rb") as f:
        return tomllib.load(f)


def wide(x):
    """x in float32 where it is bfloat16 or float16, else as it is: the norms, the short
    convolution, the gates and the mixers' cores compute in float32 and keep their recurrent
    states in it, as swax's kernels do (bf16 in and out, f32 inside), so an export in bfloat16
    rounds where swax rounds; in float32 and float64 nothing changes."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


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
        y = wide(x)
        y = y * torch.rsqrt(y.square().mean(-1, keepdim=True) + self.eps) * wide(self.weight)
        return y.to(x.dtype)


class HeadNorm(nn.Module):
    """xLSTM's multi-head norm: a LayerNorm over D within each head of x [.., H, D] (no affine
    of its own), then a weight [H, D]."""

    def __init__(self, heads, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, d))
        self.eps = eps

    def forward(self, x):
        y = F.layer_norm(wide(x), (x.shape[-1],), eps=self.eps) * wide(self.weight)
        return y.to(x.dtype)


class Embedding(nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d))

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class LayerState:
    """One layer's decoding state, filled by its mixer as it reads (None: nothing read yet).
    `seen` counts the tokens read; the mixer keeps what it needs of them:

    - `k`, `v`: attention's keys (roped) and values of the last W - 1 tokens (F: all),
      [B, n, Hkv, D]; R also `k_raw`, the keys before RoPE, for its linear branch.
    - `linear`: R's linear state `sum phi(k_s) v_s^T` over the keys older than the window,
      [B, Hkv, 2D, D].
    - `conv`: the short convolution's last CONV_TAPS - 1 inputs, [B, 3, C] (M and G).
    - `rec`: the recurrent state: M's `(C [B, H, Dk, Dv], n [B, H, Dk], m [B, H])`, G's
      `S [B, H, Dk, Dv]`."""

    def __init__(self):
        self.seen = 0
        self.k = self.v = self.k_raw = self.linear = self.conv = self.rec = None


class ShortConv(nn.Module):
    """`silu(conv(x))`: causal depthwise, `y_t = sum_j w[:, j] x_{t-K+1+j}` over x [B, T, C]."""

    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, CONV_TAPS))

    def forward(self, x, state=None):
        t = x.shape[1]
        if state is None or state.conv is None:
            padded = F.pad(x, (0, 0, CONV_TAPS - 1, 0))
        else:
            padded = torch.cat((state.conv, x), dim=1)
        if state is not None:
            state.conv = padded[:, -(CONV_TAPS - 1):]
        w = wide(self.weight)
        y = sum(wide(padded[:, j:j + t]) * w[:, j] for j in range(CONV_TAPS))
        return F.silu(y).to(x.dtype)


def split_heads(x, parts):
    """x [B, T, sum(heads * d)] cut into [B, T, heads, d] per (heads, d) of `parts`."""
    b, t, _ = x.shape
    cut = x.split([h * d for h, d in parts], dim=-1)
    return [c.reshape(b, t, h, d) for c, (h, d) in zip(cut, parts)]


def rope(x, theta, start=0):
    """Rotate-half RoPE on x [B, T, H, D] at positions start.. : element i turns with i + D/2 by
    the angle t * theta^(-2i/D), the angles and their sines taken in f64 (as swax's kernel
    does)."""
    t, d = x.shape[1], x.shape[3]
    half = d // 2
    freqs = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    angles = torch.arange(start, start + t, dtype=torch.float64)[:, None] * freqs
    y = wide(x)
    cos = angles.cos().to(y.dtype).to(x.device)[None, :, None, :]
    sin = angles.sin().to(y.dtype).to(x.device)[None, :, None, :]
    a, b = y[..., :half], y[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(x.dtype)


def gaps(tq, tk, device):
    """[Tq, Tk] query position minus key position, the queries being the last Tq of the Tk
    positions the keys stand at."""
    q = torch.arange(tk - tq, tk, device=device)
    return q[:, None] - torch.arange(tk, device=device)[None, :]


def repeat_kv(x, h):
    """[B, T, Hkv, D] to [B, T, H, D]: q head j reads kv head j // (H / Hkv)."""
    return x.repeat_interleave(h // x.shape[2], dim=2)


def swa(q, k, v, window):
    """Softmax attention of q [B, Tq, H, D] over the keys `t - window < s <= t`; k and v
    [B, Tk, Hkv, D] hold the last Tk positions, q the last Tq of them."""
    h, d, dtype = q.shape[2], q.shape[3], q.dtype
    gap = gaps(q.shape[1], k.shape[1], q.device)
    q, k, v = (wide(y).transpose(1, 2) for y in (q, repeat_kv(k, h), repeat_kv(v, h)))
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    scores = scores.masked_fill(~((gap >= 0) & (gap < window)), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).to(dtype)


def keep_window(state, window, **new):
    """Appends the tensors `new` (by name, [B, T, ...]) to the state's, keeping the last
    window - 1 tokens: all a later query needs. Returns the tokens dropped, by name."""
    dropped = {}
    for name, x in new.items():
        old = getattr(state, name)
        x = x if old is None else torch.cat((old, x), dim=1)
        cut = max(x.shape[1] - (window - 1), 0)
        dropped[name] = x[:, :cut]
        setattr(state, name, x[:, cut:])
    return dropped


class Attention(nn.Module):
    """S and F: sliding-window (or, with the window at T, full) causal attention."""

    def __init__(self, m):
        super().__init__()
        self.h, self.hkv = m["n_heads"], m["n_kv_heads"]
        self.d = m["d_model"] // self.h
        self.theta = m["rope_theta"]
        self.qkv = Linear(m["d_model"], (self.h + 2 * self.hkv) * self.d)
        self.out = Linear(self.h * self.d, m["d_model"])

    def forward(self, x, window, state=None):
        b, t, _ = x.shape
        q, k, v = split_heads(self.qkv(x), [(self.h, self.d), (self.hkv, self.d), (self.hkv, self.d)])
        start = 0 if state is None else state.seen
        q, k = rope(q, self.theta, start), rope(k, self.theta, start)
        if state is not None:
            if state.k is not None:
                k, v = torch.cat((state.k, k), dim=1), torch.cat((state.v, v), dim=1)
            keep_window(state, window, k=k[:, -t:], v=v[:, -t:])
        o = swa(q, k, v, window)
        return self.out(o.reshape(b, t, self.h * self.d))


def mlstm(q, k, v, i, f):
    """The mLSTM from a zero state, in its stabilized parallel form (nn/src/mixers/mlstm):
    log weights `i_s + F_t - F_s` for s <= t (F the running sum of log-sigmoid forget gates) and
    `F_t` for the zero initial state, each row stabilized by its max m_t;
    `h_t = sum_s w_ts (q_t . k_s) v_s / (max(|sum_s w_ts q_t . k_s|, exp(-m_t)) + eps)`,
    q scaled by 1/sqrt(Dk). q, k [B, T, H, Dk], v [B, T, H, Dv], i, f [B, T, H]."""
    t, dk, dtype = q.shape[1], q.shape[3], q.dtype
    q, k, v = (wide(y).transpose(1, 2) for y in (q, k, v))
    q, i, f = q * (1.0 / math.sqrt(dk)), wide(i), wide(f)
    fcum = F.logsigmoid(f).transpose(1, 2).cumsum(-1)  # [B, H, T]
    ig = i.transpose(1, 2)
    logw = fcum[..., :, None] - fcum[..., None, :] + ig[..., None, :]
    gap = gaps(t, t, q.device)
    logw = logw.masked_fill(gap < 0, float("-inf"))
    logs = torch.cat((fcum[..., None], logw), dim=-1)  # the initial state's column first
    m = logs.max(-1, keepdim=True).values
    w = torch.exp(logs - m)[..., 1:]
    p = w * (q @ k.transpose(-1, -2))
    den = torch.maximum(p.sum(-1, keepdim=True).abs(), torch.exp(-m)) + MLSTM_EPS
    return ((p @ v) / den).transpose(1, 2).to(dtype)


def mlstm_final_state(k, v, i, f):
    """The recurrent state `(C, n, m)` the mLSTM reaches from a zero state (m 0) after the tokens
    of k, v, i, f: the last row of the parallel form's weights, `C = sum_s w_s k_s v_s^T`,
    `n = sum_s w_s k_s`, `w_s = exp(i_s + F_T - F_s - m)`, `m = max(F_T, max_s(i_s + F_T - F_s))`:
    what `mlstm_step` would have carried there."""
    k, v, i, f = wide(k), wide(v), wide(i), wide(f)
    fcum = F.logsigmoid(f).transpose(1, 2).cumsum(-1)  # [B, H, T]
    logw = fcum[..., -1:] - fcum + i.transpose(1, 2)
    m = torch.maximum(fcum[..., -1], logw.max(-1).values)  # [B, H]
    wk = torch.exp(logw - m[..., None])[..., None] * k.transpose(1, 2)  # [B, H, T, Dk]
    return wk.transpose(-1, -2) @ v.transpose(1, 2), wk.sum(-2), m


def mlstm_step(q, k, v, i, f, rec):
    """One token of the mLSTM's recurrence (xLSTM-7B): `m' = max(log sigmoid(f) + m, i)`,
    `C' = exp(log sigmoid(f) + m - m') C + exp(i - m') k v^T`, n likewise with k,
    `h = C'^T q / (max(|n' . q|, exp(-m')) + eps)`, q scaled by 1/sqrt(Dk).
    q, k [B, H, Dk], v [B, H, Dv], i, f [B, H]."""
    c, n, m = rec
    dtype, (q, k, v, i, f) = q.dtype, (wide(y) for y in (q, k, v, i, f))
    logf = F.logsigmoid(f)
    m_new = torch.maximum(logf + m, i)
    keep, add = torch.exp(logf + m - m_new), torch.exp(i - m_new)
    c = keep[..., None, None] * c + add[..., None, None] * (k[..., :, None] * v[..., None, :])
    n = keep[..., None] * n + add[..., None] * k
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    num = (q[..., None, :] @ c)[..., 0, :]
    den = torch.maximum((n * q).sum(-1).abs(), torch.exp(-m_new)) + MLSTM_EPS
    return (num / den[..., None]).to(dtype), (c, n, m_new)


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

    def forward(self, x, window, state=None):
        b, t, _ = x.shape
        h, dk, dv = self.h, self.dk, self.dv
        q, k, v = split_heads(self.conv(self.qkv(x), state), [(h, dk), (h, dk), (h, dv)])
        gates = GATE_CAP * torch.tanh(wide(self.gates(x)) / GATE_CAP)
        i, f = gates.split([h, h], dim=-1)
        if state is None or state.rec is None:
            hs = mlstm(q, k, v, i, f)
            if state is not None:
                state.rec = mlstm_final_state(k, v, i, f)
        else:
            outs = []
            for s in range(t):
                o, state.rec = mlstm_step(q[:, s], k[:, s], v[:, s], i[:, s], f[:, s], state.rec)
                outs.append(o)
            hs = torch.stack(outs, dim=1)
        hs = self.norm(hs)
        gated = hs * torch.sigmoid(self.ogate(x).reshape(b, t, h, dv))
        return self.out(gated.reshape(b, t, h * dv))


def softplus(x):
    """`log(1 + exp(x))` as swax computes it: `max(x, 0) + log1p(exp(-|x|))`."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def l2_normalize(x):
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2_EPS)


def gated_delta(q, k, v, beta, g, s=None):
    """The gated delta rule (nn/src/mixers/gated_delta) from the state s (None: zero):
    `S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T`, `o_t = S_t^T q_t`, q and
    k L2-normalized, q scaled by 1/sqrt(Dk); S `[Dk, Dv]` per head. Returns the outputs and the
    last state. Token by token this is a loop of T steps; `gated_delta_chunk` computes the same
    a chunk of GATED_DELTA_CHUNK tokens at a time."""
    (b, t, h, dk), dtype = q.shape, q.dtype
    q, k, v = wide(q), wide(k), wide(v)
    q = l2_normalize(q) * (1.0 / math.sqrt(dk))
    k = l2_normalize(k)
    if s is None:
        s = q.new_zeros(b, h, dk, v.shape[3])
    # [B, H, T, ...]: the chunks cut along T.
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    beta, g = (wide(x).transpose(1, 2) for x in (beta, g))
    outs = []
    for c in range(0, t, GATED_DELTA_CHUNK):
        cut = slice(c, c + GATED_DELTA_CHUNK)
        o, s = gated_delta_chunk(q[:, :, cut], k[:, :, cut], v[:, :, cut], beta[:, :, cut],
                                 g[:, :, cut], s)
        outs.append(o)
    return torch.cat(outs, dim=2).transpose(1, 2).to(dtype), s


def gated_delta_chunk(q, k, v, beta, g, s):
    """C tokens of the gated delta rule from the state s `[B, H, Dk, Dv]`; q, k `[B, H, C, Dk]`
    (normalized and scaled), v `[B, H, C, Dv]`, beta and g `[B, H, C]`. With G_t the sum of g
    up to t within the chunk, the recurrence unrolls to `S_t = e^{G_t} S + sum_{j<=t} e^{G_t -
    G_j} k_j d_j^T`, where the delta `d_t = beta_t (v_t - S_{t-1 after decay}^T k_t)` solves the
    unit lower-triangular system `d_t + beta_t sum_{j<t} e^{G_t - G_j} (k_t . k_j) d_j =
    beta_t (v_t - e^{G_t} S^T k_t)`; then `o_t = e^{G_t} S^T q_t + sum_{j<=t} e^{G_t - G_j}
    (q_t . k_j) d_j`. Returns the outputs `[B, H, C, Dv]` and the state after the chunk."""
    c = q.shape[2]
    decay = torch.exp(g.cumsum(-1))  # e^{G_t}, [B, H, C]
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    # e^{G_t - G_j} for j <= t, 0 above the diagonal. G_t - G_j summed as g_{j+1} + ... + g_t,
    # not as the difference of two running sums: their gradients with respect to g would be
    # large terms that cancel, and f32 would lose the decay's gradients in them.
    between = g[..., None, :].expand(*g.shape, c).transpose(-1, -2)  # [.., i, j] = g_i
    between = between.masked_fill(~lower.tril(-1), 0.0).cumsum(-2)  # sum over j < i <= t
    ratio = torch.exp(between.masked_fill(~lower, -math.inf))
    strict = ratio.masked_fill(torch.eye(c, dtype=torch.bool, device=q.device), 0.0)
    a = beta[..., :, None] * strict * (k @ k.transpose(-1, -2))
    rhs = beta[..., None] * (v - decay[..., None] * (k @ s))
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    d = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
    o = decay[..., None] * (q @ s) + (ratio * (q @ k.transpose(-1, -2))) @ d
    last = ratio[..., -1, :]  # e^{G_C - G_j}
    s = decay[..., -1, None, None] * s + (k * last[..., None]).transpose(-1, -2) @ d
    return o, s


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

    def forward(self, x, window, state=None):
        b, t, _ = x.shape
        h, d = self.h, self.d
        q, k, v = split_heads(self.conv(self.qkv(x), state), [(h, d)] * 3)
        beta = torch.sigmoid(wide(self.beta(x)))
        g = -torch.exp(wide(self.a_log)) * softplus(wide(self.decay(x)) + wide(self.dt_bias))
        o, s = gated_delta(q, k, v, beta, g, None if state is None else state.rec)
        if state is not None:
            state.rec = s
        y = self.norm(o) * F.silu(self.gate(x).reshape(b, t, h, d))
        return self.out(y.reshape(b, t, h * d))


def feature(x):
    """RAttention's feature map `[softmax(x), softmax(-x)]` over the head dim."""
    return torch.cat((x.softmax(-1), (-x).softmax(-1)), dim=-1)


def residual_linear(q, k, v, window, linear=None):
    """The linear branch: each query against the keys older than its window,
    `o_t = sum_{s <= t - window} (phi(q_t) . phi(k_s)) v_s`. k and v [B, Tk, Hkv, D] hold the
    last Tk positions, q the last Tq of them; `linear` [B, Hkv, 2D, D] sums `phi(k_s) v_s^T`
    over the keys before those (None: there are none)."""
    h, dtype = q.shape[2], q.dtype
    q, k, v = wide(q), wide(k), wide(v)
    gap = gaps(q.shape[1], k.shape[1], q.device)
    fq, fk, v = (y.transpose(1, 2) for y in (feature(q), repeat_kv(feature(k), h), repeat_kv(v, h)))
    scores = (fq @ fk.transpose(-1, -2)).masked_fill(~(gap >= window), 0.0)
    o = scores @ v
    if linear is not None:
        o = o + fq @ linear.repeat_interleave(h // linear.shape[1], dim=1)
    return o.transpose(1, 2).to(dtype)


class RAttention(Attention):
    """R: sliding-window attention (RoPE) plus the residual linear attention (no RoPE): the
    attention layer's projections, a norm of each branch, and a forward of its own."""

    def __init__(self, m):
        super().__init__(m)
        self.norm_swa = RmsNorm(self.d, m["norm_eps"])
        self.norm_rla = RmsNorm(self.d, m["norm_eps"])

    def forward(self, x, window, state=None):
        b, t, _ = x.shape
        q, k, v = split_heads(self.qkv(x), [(self.h, self.d), (self.hkv, self.d), (self.hkv, self.d)])
        start = 0 if state is None else state.seen
        q_rope, k_rope = rope(q, self.theta, start), rope(k, self.theta, start)
        linear = None if state is None else state.linear
        if state is not None:
            new = {"k": k_rope, "k_raw": k, "v": v}
            if state.k is not None:
                k_rope = torch.cat((state.k, k_rope), dim=1)
                k, v = torch.cat((state.k_raw, k), dim=1), torch.cat((state.v, v), dim=1)
            # The keys that leave the window join the linear state, for the queries to come;
            # the queries of this read count them in the quadratic form below.
            gone = keep_window(state, window, **new)
            if gone["k_raw"].shape[1]:
                fk = feature(wide(gone["k_raw"])).transpose(1, 2)  # [B, Hkv, n, 2D]
                add = fk.transpose(-1, -2) @ wide(gone["v"]).transpose(1, 2)
                state.linear = add if linear is None else linear + add
        o_swa = swa(q_rope, k_rope, v, window)
        o = self.norm_swa(o_swa) + self.norm_rla(residual_linear(q, k, v, window, linear))
        return self.out(o.reshape(b, t, self.h * self.d))


class SwiGlu(nn.Module):
    """`down(silu(gate) * up)`, gate and up the two halves (gate first) of one projection."""

    def __init__(self, c, hidden):
        super().__init__()
        self.gate_up = Linear(c, 2 * hidden)
        self.down = Linear(hidden, c)

    def forward(self, x):
        gate, up = wide(self.gate_up(x)).chunk(2, dim=-1)
        return self.down((F.silu(gate) * up).to(x.dtype))


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

    def forward(self, x, window, state=None):
        t = x.shape[1]
        if state is None:
            # F sees the whole sequence; S and R at most all of it.
            window = t if self.kind == "F" else min(window, t)
            x = x + self.mixer(self.mixer_norm(x), window)
        else:
            # Reading in steps, F keeps every key: its window is unbounded.
            window = math.inf if self.kind == "F" else window
            x = x + self.mixer(self.mixer_norm(x), window, state)
            state.seen += t
        return x + self.mlp(self.mlp_norm(x))


class SwaxCache:
    """The decoding state of every layer (a `LayerState` each) and the tokens read so far."""

    def __init__(self, n_layers):
        self.layers = [LayerState() for _ in range(n_layers)]

    def get_seq_length(self, layer_idx=0):
        return self.layers[layer_idx].seen

    def reorder_cache(self, beam_idx):
        """Keeps the rows `beam_idx` of every state (beam search)."""
        for layer in self.layers:
            for name in ("k", "v", "k_raw", "linear", "conv"):
                if getattr(layer, name) is not None:
                    setattr(layer, name, getattr(layer, name).index_select(0, beam_idx))
            if layer.rec is not None:
                rec = layer.rec if isinstance(layer.rec, tuple) else (layer.rec,)
                rec = tuple(r.index_select(0, beam_idx) for r in rec)
                layer.rec = rec if isinstance(layer.rec, tuple) else rec[0]


class SwaxTwin(nn.Module):
    """The whole model of a swax `[model]` config table (a dict with MODEL_FIELDS). With
    `recompute`, each block runs again in the backward instead of keeping its activations
    (swax's `model.recompute = "all"`): the same gradients in the memory of one block's, which
    the T x T forms need at long T."""

    def __init__(self, m, recompute=False):
        super().__init__()
        self.recompute = recompute
        kinds = (m["pattern"] * m["n_layers"])[:m["n_layers"]]
        self.embed = Embedding(m["vocab_size"], m["d_model"])
        self.blocks = nn.ModuleList(Block(kind, m) for kind in kinds)
        self.norm = RmsNorm(m["d_model"], m["norm_eps"])
        self.head = Linear(m["d_model"], m["vocab_size"])

    def forward(self, ids, window, cache=None):
        """Logits [B, T, V] of token ids [B, T], the attention layers at `window`; with a
        `SwaxCache`, the ids continue the sequences it has read, and it reads them."""
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            if cache is not None:
                x = block(x, window, cache.layers[i])
            elif self.recompute and torch.is_grad_enabled():
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


# The transformers wrapper of an export. Guarded: the twin's parity check imports this file
# with torch alone (transformers skips what a try block imports when it checks a remote
# file's imports, but finds the relative import and copies configuration_swax.py).
try:
    from transformers import GenerationMixin, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutputWithPast

    from .configuration_swax import SwaxConfig
except ImportError:
    PreTrainedModel = None

if PreTrainedModel is not None:
    # The name transformers carries the cache under from one generation step to the next:
    # `past_key_values` up to version 4, `cache` since.
    _CACHE_NAME = "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) \
        else "past_key_values"

    class SwaxForCausalLM(PreTrainedModel, GenerationMixin):
        """A swax run for transformers: `model` is the model above (its parameters are the
        export's `model.NAME`), `config.window` the attention window of S and R. Generation
        carries a `SwaxCache` (so transformers makes no cache of its own: `_is_stateful`);
        rows of a batch must be of equal length (no padding)."""

        config_class = SwaxConfig
        base_model_prefix = "model"
        main_input_name = "input_ids"
        _is_stateful = True
        _supports_cache_class = False
        _no_split_modules = ["Block"]

        def __init__(self, config):
            super().__init__(config)
            self.model = SwaxTwin(config.swax_model())
            self.post_init()

        def _init_weights(self, module):
            # Every tensor comes from the export's model.safetensors; a model made from a
            # config alone gets small random weights and unit norms so that it runs.
            if isinstance(module, (Linear, Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (RmsNorm, HeadNorm)):
                nn.init.ones_(module.weight)
            elif isinstance(module, ShortConv):
                nn.init.normal_(module.weight, std=0.5)
            elif isinstance(module, GatedDelta):
                nn.init.zeros_(module.a_log)
                nn.init.zeros_(module.dt_bias)

        def get_input_embeddings(self):
            return self.model.embed

        def get_output_embeddings(self):
            # The head is `[d_model, vocab]` (x W), not an nn.Linear: nothing to tie.
            return None

        def forward(self, input_ids=None, past_key_values=None, use_cache=None, labels=None,
                    attention_mask=None, return_dict=None, cache=None, **kwargs):
            if attention_mask is not None and not bool(attention_mask.bool().all()):
                raise ValueError("swax's model reads no padding: give rows of equal length "
                                 "(an attention_mask of ones)")
            if use_cache is None:
                use_cache = self.config.use_cache
            given = cache if cache is not None else past_key_values
            state = None
            if use_cache:
                state = given if isinstance(given, SwaxCache) else SwaxCache(self.config.n_layers)
            logits = self.model(input_ids, self.config.window, state)
            loss = None
            if labels is not None:
                loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(),
                                       labels[:, 1:].flatten(), ignore_index=-100)
            return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_NAME: state})

        def prepare_inputs_for_generation(self, input_ids, past_key_values=None,
                                          attention_mask=None, use_cache=True, cache=None,
                                          **kwargs):
            # The cache has read the first `seen` tokens: only the rest is new.
            state = cache if cache is not None else past_key_values
            if isinstance(state, SwaxCache):
                input_ids = input_ids[:, state.get_seq_length():]
            return {"input_ids": input_ids, _CACHE_NAME: state, "use_cache": use_cache,
                    "attention_mask": attention_mask}

        def _reorder_cache(self, past_key_values, beam_idx):
            past_key_values.reorder_cache(beam_idx)
            return past_key_values
