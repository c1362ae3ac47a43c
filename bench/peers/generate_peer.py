"""The generation peer of bench-generate: a transformers model of swax-small's size (Mistral's
layout: d_model 768, 12 layers, 12 heads of 64, SwiGLU 2048, vocabulary 50304), or of
swax-1.4b's (`--size 1.4b`: d_model 2048, 24 layers, 16 heads of 128, SwiGLU 5632) with random
weights, bf16, SDPA attention, every layer a sliding window of --window tokens (0: full causal
attention). It reads a prompt in pieces through its KV cache (the cache built from the config,
which keeps only the window for sliding layers), then decodes one token at a time, timed from the
token ids on the host to the last logits back on the host, and again to the greedy ids back on
the host, as bench-generate times swax.

    python3 bench/peers/generate_peer.py --batches 1,64 --contexts 4096,32768,131072 --window 2048
    python3 bench/peers/generate_peer.py --size 1.4b --batches 1,8 --contexts 4096

Prints prefill tokens/s, the median decode latency per token and torch's peak memory per phase,
and appends one JSON line per case (bench "generate-peer") to bench/results/generate.jsonl. A
case that runs out of memory is recorded as such.
"""
import argparse
import datetime
import json
import os
import time

from swax_commit import commit

import torch
import transformers
from transformers import MistralConfig, MistralForCausalLM
from transformers.cache_utils import DynamicCache


def case(model, cfg, batch, context, piece_tokens, decode, warmup):
    v = cfg.vocab_size
    piece = max(1, min(context, piece_tokens // batch))
    ids = ((torch.arange(context) * 7919 + 13) % v).expand(batch, context).cuda()
    try:
        cache = DynamicCache(config=cfg)
    except TypeError:
        cache = DynamicCache()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for s in range(0, context, piece):
        out = model(input_ids=ids[:, s:s + piece], past_key_values=cache, use_cache=True,
                    logits_to_keep=1)
    out.logits[:, -1].float().cpu()
    prefill_s = time.perf_counter() - start
    peak_prefill = torch.cuda.max_memory_allocated()
    in_use_prefill = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(warmup + decode):
        nxt = ((torch.arange(batch) + step) % v)[:, None]
        start = time.perf_counter()
        out = model(input_ids=nxt.cuda(), past_key_values=cache, use_cache=True)
        out.logits[:, -1].float().cpu()
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    # The same steps to the greedy ids on the host (the argmax on the GPU), as swax times them.
    greedy = []
    for step in range(warmup + decode):
        nxt = ((torch.arange(batch) + step) % v)[:, None]
        start = time.perf_counter()
        out = model(input_ids=nxt.cuda(), past_key_values=cache, use_cache=True)
        out.logits[:, -1].argmax(-1).cpu()
        if step >= warmup:
            greedy.append((time.perf_counter() - start) * 1e3)
    greedy.sort()
    layers = getattr(cache, "layers", None)
    return {
        "cache": type(layers[0]).__name__ if layers else type(cache).__name__,
        "piece": piece,
        "prefill_s": prefill_s,
        "prefill_tokens_per_s": batch * context / prefill_s,
        "decode_ms_per_token": times[len(times) // 2],
        "decode_tokens_per_s": batch / times[len(times) // 2] * 1e3,
        "greedy_ms_per_token": greedy[len(greedy) // 2],
        "decode_steps": decode,
        "peak_bytes_prefill": peak_prefill,
        "peak_bytes_decode": torch.cuda.max_memory_allocated(),
        "in_use_bytes_after_prefill": in_use_prefill,
        "in_use_bytes_after_decode": torch.cuda.memory_allocated(),
    }


# Mistral's shape at each swax config's size: (layers, d_model, heads, head dim, SwiGLU width).
SIZES = {"small": (12, 768, 12, 64, 2048), "1.4b": (24, 2048, 16, 128, 5632)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--contexts", default="4096,32768,131072")
    p.add_argument("--window", type=int, default=2048)
    p.add_argument("--piece-tokens", type=int, default=65536)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--results", default="bench/results/generate.jsonl")
    a = p.parse_args()
    layers, width, heads, head_dim, ff = SIZES[a.size]
    cfg = MistralConfig(
        vocab_size=50304, hidden_size=width, intermediate_size=ff, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
        max_position_embeddings=262144, rope_theta=10000.0, rms_norm_eps=1e-6,
        sliding_window=a.window or None, tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = MistralForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    name = f"transformers {transformers.__version__} Mistral, " + (
        f"sliding window {a.window}" if a.window else "full attention")
    print(f"{name}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("batch  context  cache layer  prefill tok/s  decode ms/token  greedy ms/token  decode tok/s  peak GiB prefill/decode")
    lines = []
    gib = 1 << 30
    for batch in map(int, a.batches.split(",")):
        with torch.no_grad():  # kernels loaded and the allocator filled before anything is timed
            case(model, cfg, batch, min(4096, a.piece_tokens // batch), a.piece_tokens, 2, 1)
        for context in map(int, a.contexts.split(",")):
            base = {
                "bench": "generate-peer", "date": datetime.date.today().isoformat(),
                "commit": commit(), "device": torch.cuda.get_device_name(), "peer": name,
                "n_layers": layers, "d_model": width, "dtype": "BF16", "batch": batch,
                "context": context, "window": a.window,
            }
            try:
                with torch.no_grad():
                    r = case(model, cfg, batch, context, a.piece_tokens, a.decode_tokens, a.warmup)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                print(f"{batch:>5}  {context:>7}  out of memory")
                lines.append({**base, "error": "out of memory"})
                continue
            print(f"{batch:>5}  {context:>7}  {r['cache']}  {r['prefill_tokens_per_s']:>13.0f}  "
                  f"{r['decode_ms_per_token']:>15.2f}  {r['greedy_ms_per_token']:>15.2f}  "
                  f"{r['decode_tokens_per_s']:>12.0f}  "
                  f"{r['peak_bytes_prefill'] / gib:>11.2f} / {r['peak_bytes_decode'] / gib:.2f}",
                  flush=True)
            lines.append({**base, **r})
    os.makedirs(os.path.dirname(a.results) or ".", exist_ok=True)
    with open(a.results, "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"appended {len(lines)} lines to {a.results}")


if __name__ == "__main__":
    main()
