"""The training peer of bench-train: SWAX in PyTorch at swax-small's shape, built as swax's model
is (hybrid/src/model.rs, nn/src/block.rs, nn/src/layers/): a token embedding; 12 pre-norm blocks
`x + mixer(rmsnorm(x))`, `x + swiglu(rmsnorm(x))`, the mixers alternating sliding-window
attention and mLSTM ("SM"); a final RMSNorm and an untied head; the mean next-token
cross-entropy. d_model 768, 12 heads of 64, SwiGLU 2048, vocabulary 50304, T 4096, B 16.

- SWA layer: q, k, v from one projection (no biases anywhere), rotate-half RoPE (theta 1e4) on
  q and k, FlexAttention with a sliding-window block mask (a query sees `window` keys, itself
  included), the output projection.
- mLSTM layer: q, k (head dim 32) and v (64) from one projection through a causal depthwise
  convolution of 4 taps and SiLU; input and forget gate preactivations per head from x with
  biases (input 0, forget spread over 3..6), soft-capped at 15 (15 tanh(x / 15)); the chunkwise
  mLSTM of mlstm_kernels `chunkwise--triton_xl_chunk` (q scaled by 1/sqrt(32), eps 1e-6) in
  bf16; a per-head LayerNorm with a [H, 64] weight; a sigmoid output gate from x; the output
  projection.

Trained with bf16 autocast over f32 weights, torch.compile (the mLSTM kernel left out of the
graph), fused AdamW (0.9, 0.95, weight decay 0.1 on matrices but the convolution's) and the
gradient norm clipped at 1, as `swax train` does. A step is timed from its start to the loss
back on the host (swax's trainer reads its loss and gradient norm once a step too); tokens/s is
the median of the timed steps, the first --warmup (compilation) left out; memory is torch's
peak allocated (and reserved) per window.

    python3 bench/peers/train_peer.py --windows 128,2048 --results peer.jsonl

Prints one row per window and appends one JSON line per case to --results (case
`swax-small-w128`, as bench-train names it; `peer`, `tokens_per_s`, `peak_gib`, ...), which
`bench-train --peer` reads. Needs a CUDA GPU, triton and mlstm_kernels (README: carrying it).
"""
import os

# Inductor's parallel compile workers fork a pool the device machine does not need.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse
import datetime
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from importlib.metadata import version
from mlstm_kernels.torch.chunkwise.triton_xl_chunk import mlstm_chunkwise__xl_chunk
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from swax_commit import commit

# swax-small (configs/swax-small.toml).
D_MODEL, N_LAYERS, N_HEADS, D_FF, VOCAB = 768, 12, 12, 2048, 50304
PATTERN, ROPE_THETA, NORM_EPS, INIT_STD = "SM", 10000.0, 1e-6, 0.02
CONV_TAPS, GATE_CAP, MLSTM_EPS = 4, 15.0, 1e-6
# MFU's denominator, as bench-train's: the H200's dense bf16 peak (datasheet).
PEAK_FLOPS = 989e12


def linear(d_in, d_out, std=INIT_STD):
    layer = nn.Linear(d_in, d_out, bias=False)
    nn.init.normal_(layer.weight, std=std)
    return layer


def rope(x, cos, sin):
    """Rotate-half RoPE on x [B, T, H, D]: element i turns with i + D/2 (in f32, back to x's
    dtype)."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).type_as(x)


class SwiGlu(nn.Module):
    def __init__(self, out_std):
        super().__init__()
        self.gate_up = linear(D_MODEL, 2 * D_FF)
        self.down = linear(D_FF, D_MODEL, out_std)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Attention(nn.Module):
    def __init__(self, out_std):
        super().__init__()
        self.h, self.d = N_HEADS, D_MODEL // N_HEADS
        self.qkv = linear(D_MODEL, 3 * D_MODEL)
        self.out = linear(D_MODEL, D_MODEL, out_std)

    def forward(self, x, rot, block_mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).unbind(2)
        q, k = rope(q, *rot), rope(k, *rot)
        o = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask)
        return self.out(o.transpose(1, 2).reshape(b, t, D_MODEL))


@torch.compiler.disable
def mlstm_chunkwise(q, k, v, i, f, chunk):
    """The mlstm_kernels Triton kernel, outside the compiled graph; [B, H, T, D] operands, run
    in bf16 (its default is f32 under autocast)."""
    return mlstm_chunkwise__xl_chunk(q, k, v, i, f, eps=MLSTM_EPS, chunk_size=chunk,
                                     autocast_kernel_dtype=torch.bfloat16)


class Mlstm(nn.Module):
    def __init__(self, out_std, chunk):
        super().__init__()
        h = N_HEADS
        self.h, self.dv, self.chunk = h, D_MODEL // h, chunk
        self.dk = self.dv // 2
        width = h * (2 * self.dk + self.dv)
        self.qkv = linear(D_MODEL, width)
        # Conv1d's own init scale: std 1/sqrt(3K), the uniform bound 1/sqrt(K)'s.
        self.conv = nn.Parameter(torch.randn(width, CONV_TAPS) / math.sqrt(3 * CONV_TAPS))
        self.gates = linear(D_MODEL, 2 * h)
        forget = [3.0 + 3.0 * j / (max(h, 2) - 1) for j in range(h)]
        self.gate_bias = nn.Parameter(torch.tensor([0.0] * h + forget))
        self.ogate = linear(D_MODEL, D_MODEL)
        self.norm = nn.Parameter(torch.ones(h, self.dv))
        self.out = linear(D_MODEL, D_MODEL, out_std)

    def forward(self, x):
        b, t, _ = x.shape
        h, dk, dv = self.h, self.dk, self.dv
        pre = self.qkv(x).transpose(1, 2)
        qkv = F.silu(F.conv1d(pre, self.conv[:, None, :], padding=CONV_TAPS - 1, groups=pre.shape[1])[..., :t])
        q, k, v = qkv.split([h * dk, h * dk, h * dv], dim=1)
        heads = lambda y, d: y.reshape(b, h, d, t).transpose(2, 3)  # [B, H, T, d]
        gates = GATE_CAP * torch.tanh((self.gates(x) + self.gate_bias) / GATE_CAP)
        i, f = gates.transpose(1, 2).split([h, h], dim=1)  # [B, H, T] each
        hs = mlstm_chunkwise(heads(q, dk), heads(k, dk), heads(v, dv), i, f, self.chunk)
        hs = F.layer_norm(hs.transpose(1, 2), (dv,), eps=NORM_EPS) * self.norm  # [B, T, H, dv]
        gated = hs * torch.sigmoid(self.ogate(x).view(b, t, h, dv))
        return self.out(gated.reshape(b, t, h * dv))


class Block(nn.Module):
    def __init__(self, kind, out_std, chunk):
        super().__init__()
        self.kind = kind
        self.mixer_norm = nn.RMSNorm(D_MODEL, eps=NORM_EPS)
        self.mixer = Attention(out_std) if kind == "S" else Mlstm(out_std, chunk)
        self.mlp_norm = nn.RMSNorm(D_MODEL, eps=NORM_EPS)
        self.mlp = SwiGlu(out_std)

    def forward(self, x, rot, block_mask):
        normed = self.mixer_norm(x)
        mixed = self.mixer(normed, rot, block_mask) if self.kind == "S" else self.mixer(normed)
        x = x + mixed
        return x + self.mlp(self.mlp_norm(x))


class Swax(nn.Module):
    def __init__(self, seq_len, chunk):
        super().__init__()
        out_std = INIT_STD / math.sqrt(2 * N_LAYERS)
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        nn.init.normal_(self.embed.weight, std=INIT_STD)
        kinds = (PATTERN * N_LAYERS)[:N_LAYERS]
        self.blocks = nn.ModuleList(Block(k, out_std, chunk) for k in kinds)
        self.norm = nn.RMSNorm(D_MODEL, eps=NORM_EPS)
        self.head = linear(D_MODEL, VOCAB)
        d = D_MODEL // N_HEADS
        freqs = ROPE_THETA ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
        angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * freqs  # [T, D/2]
        self.register_buffer("cos", angles.cos()[None, :, None, :].float(), persistent=False)
        self.register_buffer("sin", angles.sin()[None, :, None, :].float(), persistent=False)

    def forward(self, ids, targets, block_mask):
        x = self.embed(ids)
        rot = (self.cos, self.sin)
        for block in self.blocks:
            x = block(x, rot, block_mask)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def sliding_window_mask(window, seq_len):
    def in_window(b, h, q, kv):
        return (kv <= q) & (q - kv < window)

    return create_block_mask(in_window, None, None, seq_len, seq_len, device="cuda")


def optimizer(model):
    # As swax's AdamW: matrices decayed, the rest (norm vectors, gate biases) and the
    # convolution's taps not.
    convs = {id(m.conv) for m in model.modules() if isinstance(m, Mlstm)}
    decay = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in convs]
    rest = [p for p in model.parameters() if p.dim() < 2 or id(p) in convs]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)


def case(forward, model, opt, window, a):
    ids = torch.randint(0, VOCAB, (a.batch, a.seq_len + 1), device="cuda")
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    mask = sliding_window_mask(window, a.seq_len)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(a.warmup + a.steps):
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(x, y, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", default="128,2048")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--chunk", type=int, default=128, help="the mLSTM kernel's chunk (its default)")
    p.add_argument("--eager", action="store_true", help="without torch.compile")
    p.add_argument("--results", default="bench/results/training-peer.jsonl")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Swax(a.seq_len, a.chunk).cuda()
    params = sum(q.numel() for q in model.parameters())
    opt = optimizer(model)
    forward = model if a.eager else torch.compile(model)
    peer = (f"pytorch {torch.__version__} {'eager' if a.eager else 'torch.compile'}, FlexAttention, "
            f"mlstm_kernels {version('mlstm_kernels')} chunkwise--triton_xl_chunk (chunk {a.chunk})")
    tokens = a.batch * a.seq_len
    print(f"{peer}; swax-small shape, {params} params, B={a.batch} T={a.seq_len}, bf16 autocast, "
          f"{a.warmup} warm-up + {a.steps} timed steps, median; MFU = 6 x params x tokens/s / "
          f"{PEAK_FLOPS / 1e12:.0f} TFLOP/s; on {torch.cuda.get_device_name()}")
    print("| case | window | tokens/s | MFU | peak GiB allocated | peak GiB reserved |")
    print("|---|---|---|---|---|---|")
    lines = []
    for window in (int(w) for w in a.windows.split(",")):
        name = f"swax-small-w{window}" + ("" if a.batch == 16 else f"-b{a.batch}")
        times = case(forward, model, opt, window, a)
        step_tps = [tokens / t for t in times]
        tps = statistics.median(step_tps)
        mfu = 6 * params * tps / PEAK_FLOPS
        peak = torch.cuda.max_memory_allocated() / 2**30
        reserved = torch.cuda.max_memory_reserved() / 2**30
        print(f"| {name} | {window} | {tps:.0f} | {100 * mfu:.1f}% | {peak:.2f} | {reserved:.2f} |")
        lines.append({
            "bench": "training-peer", "case": name, "peer": peer, "tokens_per_s": tps,
            "mfu": mfu, "peak_gib": peak, "peak_reserved_gib": reserved,
            "step_tokens_per_s": step_tps, "params": params, "batch": a.batch,
            "seq_len": a.seq_len, "window": window, "warmup_steps": a.warmup,
            "timed_steps": a.steps, "mfu_peak_flops": PEAK_FLOPS,
            "device": torch.cuda.get_device_name(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "commit": commit(),
        })
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    with open(a.results, "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"appended {len(lines)} lines to {a.results}")


if __name__ == "__main__":
    main()
