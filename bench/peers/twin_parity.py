"""Parity of swax with its PyTorch twin (hybrid/python/modeling_swax.py; docs/parity.md).

From a folder `twin-dump` wrote (the config, swax's initial weights, the trainer's batches and
windows, step 0's logits, loss and gradients), and optionally the run folder of `swax train
--config DUMP/config.toml` (its metrics.jsonl), it checks:

  (a) logits: the twin's logits of step 0's first micro-batch against swax's;
  (b) gradients: every parameter's gradient of that batch's loss against swax's;
  (c) training: the twin trained from the same weights on the same batches and windows, with
      AdamW as swax's (nn/src/optim: the warmup-cosine or WSD schedule, global-norm clipping,
      decay on matrices but the short convolutions' taps), its loss at every step beside swax's.

Errors are `max |twin - swax| / max |swax|` (worst element, relative to the largest) and
`|twin - swax| / |swax|` (norms). With `--exact` the twin also runs in float64, and (a) and (b)
pass where swax's logits (gradients) are within the tolerance of the float32 twin's or within
EXACT_FACTOR times the float32 twin's distance of the float64 ones, worst tensor against worst
tensor (at T 4096 and 12 layers f32's own rounding reaches the tolerance). Prints a table and
appends one JSON line per check to --results.

    python3 bench/peers/twin_parity.py DUMP --swax-run RUN --device cuda --case S-small
"""
import argparse
import datetime
import json
import math
import os
import time
import warnings

# torch warns at import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import sys

import torch

from swax_commit import commit

# The twin is the modeling file of swax's Hugging Face export: one PyTorch model in the
# repository, kept beside the Rust that embeds it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hybrid", "python"))
from modeling_swax import SwaxTwin, load_safetensors, read_config  # noqa: E402

# Verdicts: logits and gradients in f32 differ by rounding only (summation orders); training
# runs differ by rounding that compounds over the steps, so their losses agree on average.
LOGITS_TOL = 1e-5
GRADS_TOL = 1e-4
TRAIN_TOL = 0.01
# With --exact: how far from the float64 twin swax may be, in units of the float32 twin's own
# distance from it. Two f32 computations that order their sums differently each land somewhere
# within f32's rounding of the model; asking one to be the nearer would judge a coin toss. A
# wrong epsilon, scale or window moves the logits by 1e-3 or more, far outside this.
EXACT_FACTOR = 2.0
# Training's verdict reads the mean loss of the last steps, up to this many.
TRAIN_TAIL = 100


def errors(got, want):
    """(worst element relative to the largest, norm of the difference relative to the norm)."""
    got, want = got.double().cpu(), want.double().cpu()
    diff = got - want
    scale, norm = want.abs().max().item(), want.norm().item()
    worst = diff.abs().max().item()
    return worst / scale if scale else worst, diff.norm().item() / norm if norm else diff.norm().item()


def lr_at(step, o, total):
    """swax's learning rate of `step` (from 0): nn/src/optim/schedule.rs."""
    peak, warmup, floor = o["lr"], o["warmup_steps"], o["min_lr_ratio"]
    if step < warmup:
        return peak * (step + 1) / warmup
    if o["schedule"] == "wsd":
        decay_steps = round(total * o["decay_fraction"])
        start = max(total - decay_steps, warmup)
        if step < start:
            return peak
        x = min((step - start) / max(decay_steps, 1), 1.0)
        return peak * (1.0 - (1.0 - floor) * x)
    x = min((step - warmup) / max(total - warmup, 1), 1.0)
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * x)))


def decays(name, p):
    """swax's AdamW decays matrices (rank >= 2) but the short convolutions' taps."""
    return p.dim() >= 2 and not name.endswith(".conv.weight")


class AdamW:
    """swax's AdamW (tensor/src/cpu/optim.rs): the gradients scaled by
    `min(1, clip / (norm + 1e-6))` of their global norm, then
    `p = p (1 - lr wd) - lr (m / bc1) / (sqrt(v / bc2) + eps)` in f32."""

    def __init__(self, model, o):
        self.named = list(model.named_parameters())
        self.o = o
        self.m = [torch.zeros_like(p) for _, p in self.named]
        self.v = [torch.zeros_like(p) for _, p in self.named]
        self.step_count = 0

    @torch.no_grad()
    def step(self, lr):
        o = self.o
        grads = [p.grad for _, p in self.named]
        norm = math.sqrt(sum(g.double().square().sum().item() for g in grads))
        scale = 1.0
        if o["grad_clip"] > 0:
            scale = max(0.0, min(1.0, o["grad_clip"] / (norm + 1e-6)))
        self.step_count += 1
        bc1 = 1.0 - o["beta1"] ** self.step_count
        bc2 = 1.0 - o["beta2"] ** self.step_count
        for (name, p), g, m, v in zip(self.named, grads, self.m, self.v):
            g = g * scale
            m.mul_(o["beta1"]).add_(g, alpha=1.0 - o["beta1"])
            v.mul_(o["beta2"]).add_(g * g, alpha=1.0 - o["beta2"])
            wd = o["weight_decay"] if decays(name, p) else 0.0
            p.mul_(1.0 - lr * wd).sub_(lr * (m / bc1) / ((v / bc2).sqrt() + o["eps"]))
            p.grad = None
        return norm


def swax_losses(run):
    """swax's per-step training losses, windows, learning rates and gradient norms, by step."""
    steps = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "grad_norm" in r:
                steps[r["step"] - 1] = r
    return steps


def train(model, rows, cfg, device, n):
    """The twin's first `n` steps on swax's rows; returns per-step (loss, lr, window, norm)."""
    opt = AdamW(model, cfg["optim"])
    total = cfg["train"]["steps"]
    inputs, targets = rows["inputs"].to(device), rows["targets"].to(device)
    out = []
    for step in range(n):
        window = int(rows["windows"][step])
        accum = inputs.shape[1]
        losses = []
        for a in range(accum):
            loss = model.loss(inputs[step, a], targets[step, a], window)
            (loss / accum).backward()
            losses.append(loss.item())
        lr = lr_at(step, cfg["optim"], total)
        norm = opt.step(lr)
        out.append((sum(losses) / accum, lr, window, norm))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dump", help="the folder twin-dump wrote")
    p.add_argument("--swax-run", help="the run folder of swax train on DUMP/config.toml: (c)")
    p.add_argument("--case", help="the case's name in the results (default: the dump folder's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="the twin's dtype (float64: how far swax's f32 is from exact)")
    p.add_argument("--exact", action="store_true",
                   help="also run the twin in float64: (a) and (b) then pass where swax's "
                        "logits and gradients are within EXACT_FACTOR of the float32 twin's "
                        "distance from those")
    p.add_argument("--results", default="bench/results/twin-parity.jsonl")
    a = p.parse_args()
    # swax's f32 matmuls are plain f32 (no TF32): the twin's must be too.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, a.dtype)
    cfg = read_config(os.path.join(a.dump, "config.toml"))
    m = cfg["model"]
    step0, meta = load_safetensors(os.path.join(a.dump, "step0.safetensors"))
    rows, _ = load_safetensors(os.path.join(a.dump, "rows.safetensors"))
    case = a.case or os.path.basename(os.path.normpath(a.dump))
    b, t = rows["inputs"].shape[2], rows["inputs"].shape[3]

    def fresh(dtype=dtype):
        # Blocks recomputed in the backward: swax-small's T 4096 holds T x T matrices.
        model = SwaxTwin(m, recompute=True)
        model.load_swax(os.path.join(a.dump, "model.safetensors"))
        return model.to(device=a.device, dtype=dtype)

    base = {
        "bench": "twin-parity", "case": case, "pattern": m["pattern"], "n_layers": m["n_layers"],
        "d_model": m["d_model"], "T": t, "B": b, "swax_dtype": meta.get("dtype"),
        "swax_device": meta.get("device"), "twin_dtype": a.dtype, "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }
    lines = []
    print(f"{case}: {m['pattern']} x{m['n_layers']} layers, d_model {m['d_model']}, B {b}, T {t}, "
          f"window {meta.get('window')}; swax {meta.get('dtype')} on {meta.get('device')}, "
          f"twin {a.dtype} on {base['device_name']}")
    print("| check | worst element | norm | tolerance | verdict |")
    print("|---|---|---|---|---|")

    model = fresh()
    x, y = rows["inputs"][0, 0].to(a.device), rows["targets"][0, 0].to(a.device)
    window = int(rows["windows"][0])
    with torch.no_grad():
        logits = model(x, window)
    worst, norm = errors(logits, step0["logits"])
    loss = model.loss(x, y, window)
    loss_err = abs(loss.item() - step0["loss"].item()) / abs(step0["loss"].item())
    ok = worst <= LOGITS_TOL
    exact = {}
    if a.exact and a.dtype == "float32":
        # Deep and long, f32's own rounding reaches the tolerance: measure it. Both f32 forms
        # are held to the float64 twin, and swax passes within EXACT_FACTOR of the float32
        # twin's distance from it.
        with torch.no_grad():
            ref = fresh(torch.float64)(x, window)
        exact = {"swax": errors(step0["logits"], ref)[0], "twin_f32": errors(logits, ref)[0]}
        del ref
        ok = ok or exact["swax"] <= max(LOGITS_TOL, EXACT_FACTOR * exact["twin_f32"])
    print(f"| (a) logits, loss {loss.item():.6f} vs {step0['loss'].item():.6f} ({loss_err:.1e}) "
          f"| {worst:.2e} | {norm:.2e} | {LOGITS_TOL:.0e} | {'pass' if ok else 'FAIL'} |")
    if exact:
        print(f"| (a) against the float64 twin: swax {exact['swax']:.2e}, the float32 twin "
              f"{exact['twin_f32']:.2e} | | | | |")
    lines.append({**base, "check": "logits", "worst": worst, "norm": norm, "loss_twin": loss.item(),
                  "loss_swax": step0["loss"].item(), "loss_rel": loss_err, "tolerance": LOGITS_TOL,
                  **({"exact": exact} if exact else {}), "verdict": "pass" if ok else "fail"})
    del logits

    loss.backward()
    per = {}
    for name, q in model.named_parameters():
        per[name] = errors(q.grad, step0[f"grad.{name}"])
    missing = sorted(set(k[5:] for k in step0 if k.startswith("grad.")) - set(per))
    if missing:
        raise ValueError(f"swax has gradients of parameters the twin lacks: {missing}")
    worst_name = max(per, key=lambda k: per[k][0])
    worst, norm = per[worst_name]
    ok = worst <= GRADS_TOL
    exact = {}
    if a.exact and a.dtype == "float32":
        # As for the logits: both f32 gradients held to the float64 twin's, over every tensor.
        grads = {name: q.grad for name, q in model.named_parameters()}
        del model
        ref = fresh(torch.float64)
        ref.loss(x, y, window).backward()
        swax64, twin64 = {}, {}
        for name, q in ref.named_parameters():
            swax64[name] = errors(step0[f"grad.{name}"], q.grad)[0]
            twin64[name] = errors(grads[name], q.grad)[0]
        del ref, grads
        exact = {"swax": max(swax64.values()), "twin_f32": max(twin64.values()),
                 "swax_worst_param": max(swax64, key=swax64.get),
                 "twin_worst_param": max(twin64, key=twin64.get)}
        ok = ok or exact["swax"] <= max(GRADS_TOL, EXACT_FACTOR * exact["twin_f32"])
    else:
        del model
    print(f"| (b) gradients of {len(per)} tensors, worst {worst_name} | {worst:.2e} | "
          f"{max(e[1] for e in per.values()):.2e} | {GRADS_TOL:.0e} | {'pass' if ok else 'FAIL'} |")
    if exact:
        print(f"| (b) against the float64 twin: swax {exact['swax']:.2e} "
              f"({exact['swax_worst_param']}), the float32 twin {exact['twin_f32']:.2e} "
              f"({exact['twin_worst_param']}) | | | | |")
    lines.append({**base, "check": "grads", "worst": worst, "worst_param": worst_name,
                  "norm": max(e[1] for e in per.values()), "tolerance": GRADS_TOL,
                  "per_param": {k: {"worst": w, "norm": n} for k, (w, n) in per.items()},
                  **({"exact": exact} if exact else {}), "verdict": "pass" if ok else "fail"})

    if a.swax_run:
        theirs = swax_losses(a.swax_run)
        n = min(rows["inputs"].shape[0], len(theirs))
        if n == 0:
            raise ValueError(f"{a.swax_run}/metrics.jsonl holds no training step")
        clock = time.perf_counter()
        ours = train(fresh(), rows, cfg, a.device, n)
        secs = time.perf_counter() - clock
        for step, (_, lr, window, _) in enumerate(ours):
            r = theirs[step]
            if r["window"] != window or abs(r["lr"] - lr) > 1e-9 * max(lr, 1e-30):
                raise ValueError(f"step {step}: swax trained at window {r['window']}, lr {r['lr']}; "
                                 f"the dump says window {window}, the schedule lr {lr}")
        tail = range(max(0, n - TRAIN_TAIL), n)
        twin_tail = sum(ours[s][0] for s in tail) / len(tail)
        swax_tail = sum(theirs[s]["loss"] for s in tail) / len(tail)
        rel = abs(twin_tail - swax_tail) / abs(swax_tail)
        step_rel = [abs(ours[s][0] - theirs[s]["loss"]) / abs(theirs[s]["loss"]) for s in range(n)]
        norm_rel = [abs(ours[s][3] - theirs[s]["grad_norm"]) / abs(theirs[s]["grad_norm"])
                    for s in range(n)]
        ok = rel <= TRAIN_TOL
        print(f"| (c) training, {n} steps ({secs:.0f} s): mean loss of the last {len(tail)} twin "
              f"{twin_tail:.5f}, swax {swax_tail:.5f}; worst step {max(step_rel):.2e}, first "
              f"{step_rel[0]:.2e} | | {rel:.2e} | {TRAIN_TOL:.0e} | {'pass' if ok else 'FAIL'} |")
        print("\n| step | window | lr | swax loss | twin loss | relative | swax grad norm | twin grad norm |")
        print("|---|---|---|---|---|---|---|---|")
        for s in sorted(set(range(0, n, max(1, n // 10))) | {n - 1}):
            print(f"| {s + 1} | {ours[s][2]} | {ours[s][1]:.3e} | {theirs[s]['loss']:.5f} | "
                  f"{ours[s][0]:.5f} | {step_rel[s]:.1e} | {theirs[s]['grad_norm']:.4f} | "
                  f"{ours[s][3]:.4f} |")
        lines.append({**base, "check": "train", "steps": n, "tail": len(tail),
                      "loss_twin_tail": twin_tail, "loss_swax_tail": swax_tail, "norm": rel,
                      "worst_step": max(step_rel), "first_step": step_rel[0],
                      "worst_grad_norm": max(norm_rel), "twin_seconds": secs,
                      "loss_twin": [o[0] for o in ours],
                      "loss_swax": [theirs[s]["loss"] for s in range(n)],
                      "tolerance": TRAIN_TOL, "verdict": "pass" if ok else "fail"})

    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    with open(a.results, "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"appended {len(lines)} lines to {a.results}")
    if any(line["verdict"] != "pass" for line in lines):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
