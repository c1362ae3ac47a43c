"""The modeling file's decoding against its one pass (hybrid/python/modeling_swax.py,
docs/export.md): for each pattern, random weights in f64, the logits of a sequence read in one
pass against those of the same sequence read through a SwaxCache (13 tokens, then 7, then one at
a time: the prompt's parallel forms, then the single-token recurrences). Torch alone, on the CPU,
in seconds; exits non-zero where the worst element differs by more than 1e-10 of the largest.

    python3 bench/peers/twin_decode_check.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hybrid", "python"))
from modeling_swax import SwaxCache, SwaxTwin  # noqa: E402

TOL = 1e-10


def main():
    torch.manual_seed(0)
    failed = []
    for pattern in ["S", "F", "M", "G", "R", "MRGSF"]:
        m = dict(pattern=pattern, n_layers=max(len(pattern), 2), d_model=32, n_heads=2,
                 n_kv_heads=1, d_ff=48, vocab_size=40, rope_theta=10000.0, norm_eps=1e-6)
        model = SwaxTwin(m).double()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if "norm" in name else 0.0))
            ids = torch.randint(0, m["vocab_size"], (2, 50))
            window = 8
            whole = model(ids, window)
            cache = SwaxCache(m["n_layers"])
            parts = [model(ids[:, :13], window, cache), model(ids[:, 13:20], window, cache)]
            parts += [model(ids[:, t:t + 1], window, cache) for t in range(20, ids.shape[1])]
            err = ((whole - torch.cat(parts, dim=1)).abs().max() / whole.abs().max()).item()
        ok = err <= TOL
        print(f"{pattern}: worst {err:.1e} ({'pass' if ok else 'FAIL'})")
        if not ok:
            failed.append(pattern)
    if failed:
        sys.exit(f"decoding differs from one pass: {' '.join(failed)}")


if __name__ == "__main__":
    main()
