"""The PyTorch peers of bench-recurrent-gpu, timed on the GPU at its named shapes (paper: B8 T8192
H16, the mLSTM at Dk = Dv = 128, the gated delta rule at D 128; swax-small: B16 T4096 H12, the
mLSTM at Dk 32 and Dv 64, the gated delta rule at D 64; bf16), forward alone and forward +
backward, median ms by triton.testing.do_bench, one JSON line per peer case (kernel_peers.py)
appended to --results:

- mlstm: mlstm_kernels `chunkwise--triton_limit_chunk` at chunk 64 (swax's chunk) and
  `chunkwise--triton_xl_chunk` at chunk 128 (its default, what the training peer runs).
- gated-delta: fla `chunk_gated_delta_rule` with the q/k L2 norm in the kernel.

A kernel that refuses a shape (or fails) is a line with the reason, and the run goes on.

    python3 bench/peers/recurrent_peers.py [--shapes paper,swax-small] [--mixers mlstm,gated-delta]
        [--results bench/results/recurrent-peer.jsonl]

Needs a CUDA GPU, triton, mlstm_kernels and fla (README: carrying wheels to the GPU machine).
It sets FLA_FLASH_QLA=0, as the earlier peer runs were made.
"""
import os

import kernel_peers as kp  # first: it sets the environment torch reads when it loads

# Read by fla when it loads (in the peers below).
os.environ.setdefault("FLA_FLASH_QLA", "0")

import torch

MLSTM = {
    "triton_limit_chunk": 64,
    "triton_xl_chunk": 128,
}


def mlstm_peer(s, kernel, chunk):
    from mlstm_kernels.torch import get_mlstm_kernel

    run = get_mlstm_kernel(f"chunkwise--{kernel}")
    B, T, H, dk, dv = s["B"], s["T"], s["H"], s["MLSTM_DK"], s["D"]
    q, k, v = kp.randn(B, H, T, dk), kp.randn(B, H, T, dk), kp.randn(B, H, T, dv)
    i, f = kp.randn(B, H, T), kp.randn(B, H, T)
    dh = kp.randn(B, H, T, dv, grad=False)

    def forward():
        return run(q, k, v, i, f, chunk_size=chunk, autocast_kernel_dtype=torch.bfloat16)

    return forward, lambda: forward().backward(dh)


def gated_delta_peer(s):
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    # Timing only: with Triton 3.6 on Hopper fla refuses the gated backward (its issue #640, a
    # numerics bug fixed in Triton 3.7.1); the guard is lifted to time it, not to trust its values.
    chunk_o.TRITON_ABOVE_3_7_1 = True
    B, T, H, D = s["B"], s["T"], s["H"], s["D"]
    q, k, v = kp.randn(B, T, H, D), kp.randn(B, T, H, D), kp.randn(B, T, H, D)
    beta = torch.rand(B, T, H, device="cuda", dtype=torch.bfloat16).requires_grad_()
    g = (-torch.rand(B, T, H, device="cuda", dtype=torch.float32) * 0.1).requires_grad_()
    do = kp.randn(B, T, H, D, grad=False)

    def forward():
        return chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)[0]

    return forward, lambda: forward().backward(do)


def cases(a):
    """(case, shape label, peer name, key, shape) for every peer case the arguments ask for."""
    mixers = a.mixers.split(",")
    for name, s in kp.shapes(a.shapes):
        if "mlstm" in mixers:
            for kernel, chunk in MLSTM.items():
                yield ("mlstm", kp.label(s, s["MLSTM_DK"], s["D"]),
                       f"mlstm_kernels chunkwise--{kernel} (chunk {chunk})", kernel, name, s)
        if "gated-delta" in mixers:
            yield ("gated-delta", kp.label(s, s["D"], s["D"]),
                   "fla chunk_gated_delta_rule (qk L2 norm in kernel)", "fla", name, s)


def main():
    p = kp.parser(__doc__.split("\n\n")[0], "bench/results/recurrent-peer.jsonl")
    p.add_argument("--mixers", default="mlstm,gated-delta", help="mlstm, gated-delta")
    p.add_argument("--only", help="one peer (triton_limit_chunk, triton_xl_chunk, fla), in this "
                   "process; without it each peer runs in a process of its own")
    a = p.parse_args()
    rec = kp.Recorder(a.results, "recurrent-peer")
    for case, shape, peer, key, name, s in cases(a):
        if a.only is None:
            # Triton's compiler can abort the process (an LLVM assertion was seen with
            # xl_chunk at the paper shape): a peer that dies is a refusal, the others still run.
            rec.isolated(case, shape, peer, [__file__, "--shapes", name, "--mixers", case,
                                             "--only", key])
        elif key == a.only:
            make = (lambda: gated_delta_peer(s)) if key == "fla" else (
                lambda: mlstm_peer(s, key, MLSTM[key]))
            rec.time(case, shape, peer, make)
    rec.done()


if __name__ == "__main__":
    main()
