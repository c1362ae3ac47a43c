#!/usr/bin/env bash
# twin-parity.sh: swax against its PyTorch twin (docs/parity.md). For each layer pattern, at each
# shape: twin-dump writes the config, the initial weights, the trainer's batches and step 0's
# logits and gradients; swax trains the dumped config (the small shape only); twin_parity.py
# checks the twin's logits, gradients and training against them and appends JSON lines to
# $RESULTS. Exits non-zero if any check failed.
#
#   bench/twin-parity.sh                                   # every pattern, both shapes
#   SWAX_BIN=.gpu/bin bench/twin-parity.sh                 # on the GPU machine
#   PATTERNS="S M" SHAPES=small STEPS=150 DEVICE=cpu bench/twin-parity.sh
#   PATTERNS=SM SHAPES=swax-small LARGE_STEPS=200 bench/twin-parity.sh   # train at swax-small
#
# Shapes: `small` (4 layers, d_model 128, two query heads of 64 sharing one key/value head,
# B 8, T 256, the window drawn per step from 32 and 128: logits, gradients and STEPS steps of
# training) and `swax-small` (configs/swax-small.toml with the pattern: 12 layers, d_model 768,
# B 1, T 4096 at window 2048: logits and gradients, and LARGE_STEPS steps of training where it is
# above 0; a step there takes the twin's T x T matrices, so it is left to the GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SWAX_BIN:-target/release}
DEVICE=${DEVICE:-$( (command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1) && echo cuda || echo cpu)}
PATTERNS=${PATTERNS:-S F M G R SM MRGS}
SHAPES=${SHAPES:-small swax-small}
STEPS=${STEPS:-300}
LARGE_STEPS=${LARGE_STEPS:-0}
OUT=${OUT:-runs/twin-parity}
RESULTS=${RESULTS:-bench/results/twin-parity.jsonl}
PYTHON=${PYTHON:-python3}

common=(--set 'train.dtype="f32"' --set train.recall_probes=0 --set train.eval_every=0
  --set train.eval_batches=1 --set train.checkpoints=false)
small=(--config swax-tiny --set model.n_layers=4 --set model.d_model=128 --set model.n_heads=2
  --set model.n_kv_heads=1 --set model.d_ff=384 --set data.seq_len=256 --set data.batch_size=8
  --set data.mqar_pairs=16 --set train.w_short=32 --set train.w_long=128)
large=(--config swax-small --set data.batch_size=1 --set data.corpus_train_tokens=200000
  --set data.corpus_val_tokens=20000 --set train.w_short=2048 --set train.w_long=2048)

failed=()
for shape in $SHAPES; do
  for pattern in $PATTERNS; do
    case=$pattern-$shape
    dir=$OUT/$case
    rm -rf "$dir" "$dir-swax"
    echo "=== $case"
    if [ "$shape" = small ]; then
      shape_args=("${small[@]}") steps=$STEPS
    else
      shape_args=("${large[@]}") steps=$LARGE_STEPS
    fi
    "$BIN/twin-dump" "${shape_args[@]}" "${common[@]}" --set "model.pattern=\"$pattern\"" \
      --set train.steps="$((steps > 0 ? steps : 1))" --steps "$((steps > 0 ? steps : 1))" \
      --out "$dir" --device "$DEVICE"
    run=()
    if [ "$steps" -gt 0 ]; then
      "$BIN/swax" train --config "$dir/config.toml" --out "$dir-swax" --device "$DEVICE" --quiet
      run=(--swax-run "$dir-swax")
    fi
    exact=()
    [ "$shape" = small ] || exact=(--exact)
    "$PYTHON" bench/peers/twin_parity.py "$dir" "${run[@]}" "${exact[@]}" --device "$DEVICE" \
      --case "$case" --results "$RESULTS" || failed+=("$case")
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
echo "every case passed"
