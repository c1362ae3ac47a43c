"""Parity of a swax run exported to Hugging Face's format with swax itself (docs/export.md).

Given the export (`swax export RUN --hf OUT`), a dump of the same run (`twin-dump --weights RUN`:
a batch and swax's f32 logits of it at the window of its step 0) and the tokens `swax generate
--prompt-ids ... --ids --no-stop` printed greedily after a prompt, it loads the export with
`AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)` and checks:

  (a) logits: transformers' logits of the dump's first row against swax's;
  (b) generation: `generate` (greedy, with the model's cache) after the same prompt gives the
      same tokens as swax.

With `--dtype bfloat16` (a run whose swax side computed in bf16) both sides round to bf16 at
different points, so (a) is held to bf16's tolerance, and in (b) the texts may part where two
candidates are closer than bf16 tells apart: greedy decoding may take either, and from there
the texts differ. So (b) checks the first token where they part: transformers, reading the
prompt and swax's tokens before it, must rank swax's choice within (a)'s tolerance of its own
best (relative to the position's largest logit). A real defect parts where one candidate is
clearly ahead, and fails.

Appends one JSON line per check to --results; exits non-zero when a check fails.

    python3 bench/peers/hf_parity.py OUT --dump DUMP --prompt-ids PROMPT --swax-tokens TOKENS
"""
import argparse
import datetime
import json
import os
import sys
import time
import warnings

# torch warns at import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch
import transformers
from transformers import AutoModelForCausalLM

from swax_commit import commit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hybrid", "python"))
from modeling_swax import load_safetensors  # noqa: E402

# In f32 the two sides differ by the order of their sums only; in bf16 by where each rounds.
LOGITS_TOL = {"float32": 1e-5, "bfloat16": 3e-2}


def errors(got, want):
    """(worst element relative to the largest, norm of the difference relative to the norm)."""
    got, want = got.double().cpu(), want.double().cpu()
    diff = got - want
    scale, norm = want.abs().max().item(), want.norm().item()
    return diff.abs().max().item() / scale, diff.norm().item() / norm


def choice_gap(model, ids, token, device):
    """How far below the best of transformers' next-token logits after `ids` the logit of `token`
    lies, relative to the largest logit's magnitude there: 0 where `token` is its own choice."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].double()
    return (logits.max() - logits[token]).item() / logits.abs().max().item()


def ids_of(path):
    with open(path) as f:
        return [int(t) for t in f.read().split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export", help="the folder swax export --hf wrote")
    p.add_argument("--dump", required=True, help="twin-dump --weights RUN's folder")
    p.add_argument("--prompt-ids", required=True, help="a file of the prompt's token ids")
    p.add_argument("--swax-tokens", required=True,
                   help="a file of the ids swax generate --ids --no-stop printed after it")
    p.add_argument("--case", help="the case's name in the results")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(LOGITS_TOL), default="float32",
                   help="the export's dtype in transformers (the swax run's, as it computed)")
    p.add_argument("--results", default="bench/results/hf-parity.jsonl")
    a = p.parse_args()
    tol = LOGITS_TOL[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    model = AutoModelForCausalLM.from_pretrained(a.export, trust_remote_code=True)
    model = model.to(device=a.device, dtype=getattr(torch, a.dtype)).eval()
    cfg = model.config
    step0, meta = load_safetensors(os.path.join(a.dump, "step0.safetensors"))
    rows, _ = load_safetensors(os.path.join(a.dump, "rows.safetensors"))
    case = a.case or os.path.basename(os.path.normpath(a.export))
    base = {
        "bench": "hf-parity", "case": case, "pattern": cfg.pattern, "n_layers": cfg.n_layers,
        "d_model": cfg.d_model, "window": cfg.window, "swax_dtype": meta.get("dtype"),
        "swax_device": meta.get("device"), "device": a.device, "dtype": a.dtype,
        "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }
    lines = []
    print(f"{case}: {cfg.pattern} x{cfg.n_layers} layers, d_model {cfg.d_model}, window "
          f"{cfg.window}; swax {meta.get('dtype')} on {meta.get('device')}, transformers "
          f"{transformers.__version__} in {a.dtype} on {base['device_name']}")

    # (a) The dump's logits are at its step 0's window: run the export at that one.
    window = int(meta["window"])
    x = rows["inputs"][0, 0, :1].to(a.device)
    want = step0["logits"][:1]
    kept, cfg.window = cfg.window, window
    with torch.no_grad():
        # A plain call, as lm-eval and most callers make it (the config's use_cache decides).
        got = model(input_ids=x).logits
        # The same row through the cache: a prompt of half, then a token a step (the
        # recurrences generate runs), against swax's one pass.
        half = x.shape[1] // 2
        out = model(input_ids=x[:, :half], use_cache=True)
        steps, state = [out.logits], out["cache"] if "cache" in out else out.past_key_values
        for t in range(half, x.shape[1]):
            out = model(input_ids=x[:, t:t + 1], use_cache=True, past_key_values=state)
            steps.append(out.logits)
        stepped = torch.cat(steps, dim=1)
    cfg.window = kept
    worst, norm = errors(got, want)
    ok = worst <= tol
    print(f"(a) logits of {x.shape[1]} tokens at window {window}: worst {worst:.2e}, norm "
          f"{norm:.2e} (tolerance {tol:.0e}): {'pass' if ok else 'FAIL'}")
    lines.append({**base, "check": "logits", "T": x.shape[1], "logits_window": window,
                  "worst": worst, "norm": norm, "tolerance": tol,
                  "verdict": "pass" if ok else "fail"})
    worst, norm = errors(stepped, want)
    ok = worst <= tol
    print(f"(a') the same through the cache, {half} tokens then one a step: worst {worst:.2e}, "
          f"norm {norm:.2e}: {'pass' if ok else 'FAIL'}")
    lines.append({**base, "check": "logits-cached", "T": x.shape[1], "logits_window": window,
                  "prompt": half, "worst": worst, "norm": norm, "tolerance": tol,
                  "verdict": "pass" if ok else "fail"})

    # (b) Greedy generation with the cache, after a prompt longer than the window.
    prompt = ids_of(a.prompt_ids)
    theirs = ids_of(a.swax_tokens)
    ids = torch.tensor([prompt], device=a.device)
    clock = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=len(theirs), min_new_tokens=len(theirs),
                             do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0,
                             attention_mask=torch.ones_like(ids))
    secs = time.perf_counter() - clock
    ours = out[0, len(prompt):].tolist()
    first = next((i for i, (o, t) in enumerate(zip(ours, theirs)) if o != t), None)
    ok = ours == theirs
    gap = None
    if not ok and a.dtype != "float32":
        gap = choice_gap(model, prompt + theirs[:first], theirs[first], a.device)
        ok = gap <= tol
    verdict = "pass" if ok else "fail"
    if first is None:
        said = "the same tokens"
    elif gap is None:
        said = f"first difference at token {first}"
    elif gap == 0:
        said = (f"parted at token {first}, where transformers, reading the prompt and swax's "
                f"tokens in one pass, takes swax's token too (a near tie)")
    else:
        said = (f"parted at token {first}, where transformers ranks swax's token {gap:.1e} "
                f"below its best (tolerance {tol:.0e}: {'a near tie' if ok else 'not a tie'})")
    print(f"(b) greedy generation of {len(theirs)} tokens after {len(prompt)} ({secs:.1f} s): "
          f"{said}: {verdict}")
    if first is not None:
        print(f"    swax:         {theirs[:64]}\n    transformers: {ours[:64]}")
    lines.append({**base, "check": "generate", "prompt_tokens": len(prompt),
                  "new_tokens": len(theirs), "first_difference": first, "choice_gap": gap,
                  "tolerance": tol if gap is not None else None, "seconds": secs,
                  "verdict": verdict})

    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    with open(a.results, "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    if any(line["verdict"] == "fail" for line in lines):
        sys.exit(1)


if __name__ == "__main__":
    main()
