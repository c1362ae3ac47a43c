#!/usr/bin/env bash
# hf-parity.sh: swax's Hugging Face export against swax (docs/export.md). For each layer pattern:
# swax trains a small run in f32; twin-dump writes a batch and swax's logits of it from the
# trained weights; `swax export --hf` writes the folder; `swax generate` continues a prompt longer
# than the window greedily for NEW tokens; hf_parity.py loads the folder with
# AutoModelForCausalLM.from_pretrained(trust_remote_code=True), checks its logits and its greedy
# generation (with the cache) against swax's (in bf16, where the texts part, swax's token must be
# a near tie in transformers' logits), and appends JSON lines to $RESULTS. Exits non-zero if any
# check failed.
#
#   SWAX_BIN=.gpu/bin bench/hf-parity.sh                    # on the GPU machine
#   SWAX_BIN=.gpu/bin DTYPE=bf16 bench/hf-parity.sh         # both sides in bf16
#   PATTERNS="S M" STEPS=20 DEVICE=cpu bench/hf-parity.sh   # on a CPU with torch and transformers
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SWAX_BIN:-target/release}
DEVICE=${DEVICE:-$( (command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1) && echo cuda || echo cpu)}
PATTERNS=${PATTERNS:-S F M G R MRGS}
STEPS=${STEPS:-200}
NEW=${NEW:-256}
OUT=${OUT:-runs/hf-parity}
RESULTS=${RESULTS:-bench/results/hf-parity.jsonl}
PYTHON=${PYTHON:-python3}
DTYPE=${DTYPE:-f32}
case $DTYPE in
  f32) torch_dtype=float32 ;;
  bf16) torch_dtype=bfloat16 ;;
  *) echo "DTYPE=$DTYPE: f32 or bf16" >&2; exit 2 ;;
esac

# 4 layers, d_model 128, two query heads of 64 on one key/value head, T 256 of the embedded
# corpus (bytes), the window drawn from 32 and 64; in f32 (the default) rounding is f32's alone,
# in bf16 swax computes as it trains on a GPU and the export runs in bfloat16.
config=(--config swax-tiny --set model.n_layers=4 --set model.d_model=128 --set model.n_heads=2
  --set model.n_kv_heads=1 --set model.d_ff=384 --set 'data.source="corpus"'
  --set data.seq_len=256 --set data.batch_size=8 --set data.corpus_train_tokens=400000
  --set train.w_short=32 --set train.w_long=64 --set "train.dtype=\"$DTYPE\""
  --set train.recall_probes=0 --set train.eval_every=0 --set train.eval_batches=1)

mkdir -p "$OUT"
# The prompt: the README's first 200 bytes (the byte tokenizer's ids), longer than the window.
head -c 200 README.md | od -An -v -tu1 | tr -s ' \n' ' ' > "$OUT/prompt.ids"

failed=()
for pattern in $PATTERNS; do
  case=$pattern
  [ "$DTYPE" = f32 ] || case=$pattern-$DTYPE
  dir=$OUT/$case
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "=== $case"
  "$BIN/swax" train "${config[@]}" --set "model.pattern=\"$pattern\"" --set train.steps="$STEPS" \
    --out "$dir/run" --device "$DEVICE" --quiet
  "$BIN/twin-dump" --weights "$dir/run" --steps 1 --out "$dir/dump" --device "$DEVICE"
  "$BIN/swax" export "$dir/run" --hf "$dir/hf"
  "$BIN/swax" generate "$dir/run" --prompt-ids "$(cat "$OUT/prompt.ids")" --max-tokens "$NEW" \
    --ids --no-stop --device "$DEVICE" > "$dir/swax.ids"
  "$PYTHON" bench/peers/hf_parity.py "$dir/hf" --dump "$dir/dump" --prompt-ids "$OUT/prompt.ids" \
    --swax-tokens "$dir/swax.ids" --device "$DEVICE" --dtype "$torch_dtype" --case "$case" \
    --results "$RESULTS" \
    || failed+=("$case")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
echo "every case passed"
