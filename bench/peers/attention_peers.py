"""The PyTorch peers of bench-attention-gpu, timed on the GPU at its named shapes (paper: B8 T8192
H16 D128; swax-small: B16 T4096 H12 D64; bf16), forward alone and forward + backward, median ms
by triton.testing.do_bench, one JSON line per peer case (kernel_peers.py) appended to --results:

- swa-w128, swa-w512, swa-w2048 and full-causal: PyTorch FlexAttention (torch.compile, a
  sliding-window block mask: a query sees `w` keys, itself included, as swax's window) and fla's
  `parallel_attn` (its `window_size`, the same convention; None for full causal); for
  full-causal also PyTorch SDPA with its cuDNN and its flash backend.
- rattention-w512: FlexAttention at w=512 plus fla's `chunk_linear_attn` (normalize=False, q and
  k of 2D features, v of D: the shape of RAttention's linear branch, its feature map not
  included), the two summed; each part's figures are fields of the line.

A peer that refuses a shape or fails is a line with the reason, and the run goes on.

    python3 bench/peers/attention_peers.py [--shapes paper,swax-small] [--windows 128,512,2048,full]
        [--mixers swa,rattention] [--results bench/results/attention-peer.jsonl]

Needs a CUDA GPU, triton and fla (fla-core 0.6.0; README: carrying wheels to the GPU machine).
"""
import kernel_peers as kp  # first: it sets the environment torch reads when it loads

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

RA_WINDOW = 512
FLEX = "FlexAttention (torch.compile, block mask)"
SDPA = {"SDPA cuDNN": SDPBackend.CUDNN_ATTENTION, "SDPA flash": SDPBackend.FLASH_ATTENTION}


def timed(attend, inputs):
    """The forward and the forward + backward of `attend` on `inputs`, from a random output
    gradient."""
    do = torch.randn_like(attend(*inputs))

    def both():
        torch.autograd.grad(attend(*inputs), inputs, do)

    return (lambda: attend(*inputs)), both


def heads_first(s):
    """q, k, v as FlexAttention and SDPA take them: [B, H, T, D]."""
    return tuple(kp.randn(s["B"], s["H"], s["T"], s["D"]) for _ in range(3))


def flex(s, w, compiled):
    def band(b, h, qi, ki):
        return (qi >= ki) & (qi - ki < w)

    mask = create_block_mask(band, None, None, s["T"], s["T"], device="cuda")
    return timed(lambda q, k, v: compiled(q, k, v, block_mask=mask), heads_first(s))


def sdpa(s, backend):
    def attend(q, k, v):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return timed(attend, heads_first(s))


def fla_parallel(s, w):
    from fla.ops.attn import parallel_attn

    window = None if w >= s["T"] else w
    qkv = tuple(kp.randn(s["B"], s["T"], s["H"], s["D"]) for _ in range(3))
    return timed(lambda q, k, v: parallel_attn(q, k, v, window_size=window), qkv)


def fla_linear(s):
    from fla.ops.linear_attn import chunk_linear_attn

    B, T, H, D = s["B"], s["T"], s["H"], s["D"]
    qkv = (kp.randn(B, T, H, 2 * D), kp.randn(B, T, H, 2 * D), kp.randn(B, T, H, D))
    return timed(lambda q, k, v: chunk_linear_attn(q, k, v, normalize=False)[0], qkv)


def main():
    p = kp.parser(__doc__.split("\n\n")[0], "bench/results/attention-peer.jsonl")
    p.add_argument("--windows", default="128,512,2048,full",
                   help="SWA's windows: numbers, and full for full causal attention")
    p.add_argument("--mixers", default="swa,rattention", help="swa, rattention")
    a = p.parse_args()
    mixers = a.mixers.split(",")
    rec = kp.Recorder(a.results, "attention-peer")
    # Static shapes: each shape compiles its own kernels, as a model of that shape would. Each
    # window's mask and the forward alone recompile: with dynamo's default limit of 8 the second
    # shape fell back to eager FlexAttention, many times slower.
    torch._dynamo.config.recompile_limit = 64
    for _, s in kp.shapes(a.shapes):
        torch._dynamo.reset()
        compiled = torch.compile(flex_attention, dynamic=False)
        shape = kp.label(s, s["D"], s["D"])
        flex_lines = {}
        if "swa" in mixers:
            for w in a.windows.split(","):
                w = s["T"] if w == "full" else int(w)
                case = "full-causal" if w >= s["T"] else f"swa-w{w}"
                flex_lines[w] = rec.time(case, shape, FLEX, lambda: flex(s, w, compiled))
                rec.time(case, shape, "fla parallel_attn", lambda: fla_parallel(s, w))
                if w >= s["T"]:
                    for name, backend in SDPA.items():
                        rec.time(case, shape, name, lambda: sdpa(s, backend))
        if "rattention" in mixers:
            case, w = f"rattention-w{RA_WINDOW}", RA_WINDOW
            if w not in flex_lines:
                flex_lines[w] = rec.time(f"swa-w{w}", shape, FLEX, lambda: flex(s, w, compiled))
            linear = rec.time(f"rattention-linear-w{w}", shape, "fla chunk_linear_attn",
                              lambda: fla_linear(s))
            parts = {"flex": flex_lines[w], "linear": linear}
            name = f"FlexAttention w={w} + fla chunk_linear_attn"
            refused = [f"{k}: {v['refused']}" for k, v in parts.items() if "refused" in v]
            if refused:
                rec.write(case, shape, name, refused="; ".join(refused))
            else:
                fields = {f"{k}_{m}": v[m] for k, v in parts.items() for m in ("fwd_ms", "peer_ms")}
                rec.write(case, shape, name, fwd_ms=sum(v["fwd_ms"] for v in parts.values()),
                          peer_ms=sum(v["peer_ms"] for v in parts.values()), **fields)
    rec.done()


if __name__ == "__main__":
    main()
