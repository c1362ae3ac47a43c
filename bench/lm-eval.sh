#!/usr/bin/env bash
# lm-eval.sh: a swax run evaluated by lm-evaluation-harness through its Hugging Face export,
# beside `swax eval`'s own scores of the same run (docs/export.md). It exports RUN to OUT/hf,
# runs `swax eval` (needles, passkey and the loss at LENGTH) and writes the loss's held-out text,
# then has lm-eval's `hf` model score RULER's needle tasks at LENGTH and that same held-out text
# (`swax_held_out`, a rolling log-likelihood task: bits per byte beside swax's loss in bits per
# token, the same figure for a byte-level run).
#
#   bench/lm-eval.sh runs/mine runs/mine-lm-eval
#   LENGTH=4096 LIMIT=50 RULER=niah_single_1 bench/lm-eval.sh runs/mine /tmp/lme
#
# Needs python3 with torch, transformers and lm_eval (`pip install "lm_eval[ruler]"`); on a
# machine without a network, carried as wheels (docs/export.md). RULER's niah_single_1,
# niah_multikey_2 and niah_multikey_3 build their haystacks offline; the essay tasks
# (niah_single_2, niah_multikey_1, ...) download their essays.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:?usage: bench/lm-eval.sh RUN OUT}
OUT=${2:?usage: bench/lm-eval.sh RUN OUT}
BIN=${SWAX_BIN:-target/release}
PYTHON=${PYTHON:-python3}
LENGTH=${LENGTH:-4096}
LIMIT=${LIMIT:-100}
SAMPLES=${SAMPLES:-8}
RULER=${RULER:-niah_single_1,niah_multikey_2}
DEVICE=${DEVICE:-$( (command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1) && echo cuda || echo cpu)}

mkdir -p "$OUT/tasks"
OUT=$(cd "$OUT" && pwd)
[ -f "$OUT/hf/config.json" ] || "$BIN/swax" export "$RUN" --hf "$OUT/hf"

# swax's own scores at LENGTH; the loss's held-out text goes to lm-eval.
rm -f "$OUT/held-out.jsonl"
"$BIN/swax" eval "$RUN" --tasks niah,passkey,loss --lengths "$LENGTH" --samples "$SAMPLES" \
  --device "$DEVICE" --write-held-out "$OUT/held-out.jsonl" | tee "$OUT/swax-eval.md"

cat >"$OUT/tasks/swax_held_out.yaml" <<YAML
task: swax_held_out
dataset_path: json
dataset_kwargs:
  data_files:
    test: $OUT/held-out.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 1.0
YAML

"$PYTHON" -m lm_eval --model hf \
  --model_args "pretrained=$OUT/hf,trust_remote_code=True,dtype=float32,max_length=$LENGTH" \
  --tasks "$RULER,swax_held_out" --include_path "$OUT/tasks" \
  --metadata "{\"max_seq_lengths\": [$LENGTH]}" --limit "$LIMIT" --batch_size 1 \
  --device "$DEVICE" --output_path "$OUT/lm-eval" | tee "$OUT/lm-eval.md"
