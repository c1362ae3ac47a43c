"""Times the recurrent-mixer peers on the GPU, forward + backward, bf16, at the benchmark shape
of bench-recurrent-gpu (B=8, T=8192, H=16, D=128), median ms by triton.testing.do_bench:
mlstm_kernels `chunkwise--triton_limit_chunk` (chunk 64) and fla `chunk_gated_delta_rule` with the
q/k L2 norm in the kernel. Printed as a table; run beside .gpu/bin/bench-recurrent-gpu.

    FLA_FLASH_QLA=0 python3 bench/peers/recurrent_peers.py [T]
"""
import os
import sys

os.environ.setdefault("FLA_FLASH_QLA", "0")
import torch
import triton

B, H, D = 8, 16, 128
T = int(sys.argv[1]) if len(sys.argv) > 1 else 8192


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def mlstm_peer():
    from mlstm_kernels.torch import get_mlstm_kernel

    kernel = get_mlstm_kernel("chunkwise--triton_limit_chunk")
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16).requires_grad_()
    q, k, v = mk(B, H, T, D), mk(B, H, T, D), mk(B, H, T, D)
    i, f = mk(B, H, T), mk(B, H, T)
    dh = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

    def step():
        h = kernel(q, k, v, i, f, chunk_size=64)
        h.backward(dh)

    return bench(step)


def gated_delta_peer():
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    # Timing only: with Triton 3.6 on Hopper fla refuses the gated backward (its issue #640, a
    # numerics bug fixed in Triton 3.7.1); the guard is lifted to time it, not to trust its values.
    chunk_o.TRITON_ABOVE_3_7_1 = True
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16).requires_grad_()
    q, k, v = mk(B, T, H, D), mk(B, T, H, D), mk(B, T, H, D)
    beta = torch.rand(B, T, H, device="cuda", dtype=torch.bfloat16).requires_grad_()
    g = (-torch.rand(B, T, H, device="cuda", dtype=torch.float32) * 0.1).requires_grad_()
    do = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)

    def step():
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        o.backward(do)

    return bench(step)


rows = []
for name, fn in [
    ("mlstm_kernels chunkwise--triton_limit_chunk (chunk 64)", mlstm_peer),
    ("fla chunk_gated_delta_rule (qk L2 norm in kernel)", gated_delta_peer),
]:
    try:
        rows.append((name, f"{fn():.3f}"))
    except Exception as e:  # a peer that fails to run is reported, not fatal
        rows.append((name, f"failed: {type(e).__name__}: {str(e)[:120]}"))
print(f"peers, B={B} T={T} H={H} D={D} bf16, forward + backward, median ms")
print("| peer | fwd+bwd ms |")
print("|---|---|")
for name, ms in rows:
    print(f"| {name} | {ms} |")
