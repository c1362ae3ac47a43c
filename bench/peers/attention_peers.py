"""Times the attention peers on the GPU at the shape of bench-attention-gpu (B=8, T=8192, H=16,
D=128, bf16), forward alone and forward + backward, median ms by triton.testing.do_bench:
PyTorch FlexAttention (compiled, sliding-window block mask) at windows 128, 512, 2048 and full
causal, and PyTorch SDPA for full causal with each of its backends (flash, cuDNN, memory-efficient)
and with PyTorch's own choice. Same row format as bench/src/bin/bench-attention-gpu.rs, so the
two tables sit side by side.

    python3 bench/peers/attention_peers.py [T] [all|sdpa]
"""
import sys

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

B, H, D = 8, 16, 128
T = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
ONLY_SDPA = len(sys.argv) > 2 and sys.argv[2] == "sdpa"
SDPA = {
    "SDPA flash": [SDPBackend.FLASH_ATTENTION],
    "SDPA cuDNN": [SDPBackend.CUDNN_ATTENTION],
    "SDPA efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "SDPA default": None,
}


def avg_keys(w):
    # sum over t of min(t + 1, w), over T
    full = min(w, T)
    return (full * (full + 1) / 2 + (T - full) * full) / T


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def row(name, attend):
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)

    def both():
        torch.autograd.grad(attend(q, k, v), (q, k, v), do)

    with torch.no_grad():
        fwd = median_ms(lambda: attend(q, k, v))
    fb = median_ms(both)
    return fwd, fb


def main():
    flex = torch.compile(flex_attention)
    print(f"peers, B={B} T={T} H={H} D={D} bf16, torch {torch.__version__}")
    print("| peer | window | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |")
    print("|---|---|---|---|---|---|")
    flex_cases = [] if ONLY_SDPA else [("FlexAttention", w) for w in (128, 512, 2048, T)]
    for name, w in flex_cases + [(name, T) for name in SDPA]:
        if name in SDPA:
            def attend(q, k, v, backends=SDPA[name]):
                sdpa = torch.nn.functional.scaled_dot_product_attention
                if backends is None:
                    return sdpa(q, k, v, is_causal=True)
                with sdpa_kernel(backends):
                    return sdpa(q, k, v, is_causal=True)
        else:
            def band(b, h, qi, ki, w=w):
                return (qi >= ki) & (qi - ki < w)

            mask = create_block_mask(band, None, None, T, T)

            def attend(q, k, v, mask=mask):
                return flex(q, k, v, block_mask=mask)

        try:
            fwd, fb = row(name, attend)
        except RuntimeError as e:  # a backend this build or GPU does not have
            print(f"| {name} | unavailable: {str(e).splitlines()[0]} | | | | |", flush=True)
            continue
        flop = 4.0 * B * H * T * D * avg_keys(w)
        label = f"full ({w})" if w >= T else str(w)
        print(f"| {name} | {label} | {fwd:.3f} | {flop / fwd / 1e9:.0f} | {fb:.3f} | {3.5 * flop / fb / 1e9:.0f} |", flush=True)


if __name__ == "__main__":
    main()
