#!/usr/bin/env bash
# gpu-check.sh: what a change to a kernel, a layer, a norm, the optimizer or the trainer shows on
# a GPU machine (CONTRIBUTING.md): every packed test binary with its GPU tests, then the learning
# gate, then the twin parity check; on request also the Hugging Face export's parity (hf), a
# text run through lm-eval (text) and generation beside transformers (generate). Each part's
# output goes to its own file in OUT as it runs, so what finished is kept even where a time limit
# stops the rest; OUT/summary.txt says how each part ended.
#
#   tools/gpu-pack                                     # here: binaries into .gpu/
#   bench/gpu-check.sh OUT [PARTS...]                  # there: PARTS of tests, gate, twin, hf,
#                                                      #   text, generate (default: the first three)
#   GATE_ARGS="--cases M-T256" bench/gpu-check.sh /tmp/check gate
#   DTYPE=bf16 bench/gpu-check.sh /tmp/check hf        # the export's parity in bf16
#   GEN_ARGS="--batches 1,8,64 --contexts 4096,32768" bench/gpu-check.sh /tmp/check generate
#                                                      #   (KERNELS=N: the N costliest kernels of a step)
#
# `text` trains swax-tiny on recall-mix text, has lm-eval score its export beside `swax eval`
# (bench/lm-eval.sh: needs lm_eval) and times the generation-scored needle evaluation at 32k.
# `benchmark` trains the learning benchmark's table at 3 seeds, `passkey` bench/passkey-budget.toml,
# `study` a shipped study (STUDY=window-text, default window-regime; JOBS at a time), `kernels`
# the recurrent kernels beside their peers (carry .whl), and `sanitize` runs compute-sanitizer's
# memcheck, racecheck, synccheck and initcheck over one GPU test (SANITIZE="gpu_decode
# sampling_draws", the default). Run timing parts (kernels, generate) alone on the GPU.
#
# Parts run one after another; parts joined by "+" run side by side (`gate+benchmark+study`:
# small training runs leave most of a GPU idle). Never put a timing part (kernels, generate)
# beside another. LIMIT=S bounds the whole check to S seconds: when they have passed, every
# process of the running parts is sent SIGTERM and the parts not yet started are skipped, each
# said so in OUT/summary.txt (Ctrl-C stops the running parts the same way). A study stops after
# its step with a checkpoint, a learn run keeps its last periodic checkpoint: the same command
# into the same OUT continues both.
#
#   LIMIT=540 bench/gpu-check.sh /tmp/check tests gate+benchmark
#
# On a fresh machine the first process to use a kernel compiles it (NVRTC, then the disk cache
# every later process reads): the tests run first and leave the gate's kernels compiled.
set -uo pipefail
cd "$(dirname "$0")/.."
KNOWN="tests gate twin hf text generate benchmark passkey study kernels sanitize"
OUT=${1:?usage: bench/gpu-check.sh OUT [PARTS...], each part one of: $KNOWN}
shift
PARTS=${*:-tests gate twin}
if [[ ! ${LIMIT:-} =~ ^[0-9]*$ ]]; then
  echo "LIMIT=$LIMIT: expected a whole number of seconds" >&2
  exit 2
fi
for p in ${PARTS//+/ }; do
  if [[ " $KNOWN " != *" $p "* ]]; then
    echo "unknown part $p: expected one of $KNOWN" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
export SWAX_COMMIT=${SWAX_COMMIT:-$(cat .gpu/commit 2>/dev/null || git rev-parse --short HEAD)}
start=$(date +%s)
note() { echo "$1: $2 after $(($(date +%s) - start)) s" >>"$OUT/summary.txt"; }
part() {
  case $1 in
    tests)
      # Each binary's verdicts only: the full logs of a few hundred tests are long.
      for t in .gpu/tests/*; do
        echo "=== $t"
        SWAX_REQUIRE_CUDA=1 "$t" --include-ignored 2>&1 | grep -E "^test |test result|panicked|FAILED"
      done >"$OUT/tests.txt" 2>&1
      note tests "$(grep -c ' FAILED' "$OUT/tests.txt") failed"
      ;;
    gate)
      .gpu/bin/learn --check bench/learning-gate.toml --out "$OUT/gate-runs" \
        --results "$OUT/gate-runs/learn.jsonl" ${GATE_ARGS:-} >"$OUT/gate.txt" 2>&1
      note gate "exit $?"
      ;;
    twin)
      SWAX_BIN=.gpu/bin OUT="$OUT/twin-runs" RESULTS="$OUT/twin-parity.jsonl" \
        bash bench/twin-parity.sh >"$OUT/twin.txt" 2>&1
      note twin "exit $?"
      ;;
    hf)
      SWAX_BIN=.gpu/bin OUT="$OUT/hf-runs" RESULTS="$OUT/hf-parity.jsonl" \
        bash bench/hf-parity.sh >"$OUT/hf.txt" 2>&1
      note hf "exit $?"
      ;;
    text)
      run=$OUT/text-run
      .gpu/bin/swax train --config swax-tiny --data recall-mix --set data.seq_len=512 \
        --set train.steps=2000 --set train.w_short=128 --set train.w_long=512 --out "$run" \
        --quiet >"$OUT/text.txt" 2>&1
      SWAX_BIN=.gpu/bin LENGTH=4096 LIMIT=50 bash bench/lm-eval.sh "$run" "$OUT/lm-eval" \
        >>"$OUT/text.txt" 2>&1
      lme=$?
      clock=$(date +%s.%N)
      .gpu/bin/swax eval "$run" --tasks niah --lengths 32768 --scoring generate --samples 8 \
        >>"$OUT/text.txt" 2>&1
      scored=$?
      echo "generation-scored niah at 32768, 8 samples: $(awk "BEGIN{print $(date +%s.%N) - $clock}") s" \
        >>"$OUT/text.txt"
      note text "exit $lme (lm-eval), $scored (swax eval --scoring generate)"
      ;;
    generate)
      # swax and the transformers peer one after the other, never beside another part: timings.
      gen=(--config swax-small --kernels "${KERNELS:-15}" ${GEN_ARGS:-})
      .gpu/bin/bench-generate "${gen[@]}" --results "$OUT/generate.jsonl" >"$OUT/generate.txt" 2>&1
      peer=$?
      python3 bench/peers/generate_peer.py ${GEN_ARGS:-} --results "$OUT/generate.jsonl" \
        >>"$OUT/generate.txt" 2>&1
      note generate "exit $peer (swax), $? (peer)"
      ;;
    benchmark)
      # The learning benchmark's patterns at 3 seeds each, side by side.
      .gpu/bin/learn --check bench/learning-benchmark.toml --forms fused --jobs 27 \
        --out "$OUT/benchmark-runs" --results "$OUT/learning-benchmark.jsonl" \
        >"$OUT/benchmark.txt" 2>&1
      note benchmark "exit $?"
      ;;
    passkey)
      .gpu/bin/learn --check bench/passkey-budget.toml --forms fused --jobs 16 \
        --out "$OUT/passkey-runs" --results "$OUT/passkey-budget.jsonl" >"$OUT/passkey.txt" 2>&1
      note passkey "exit $?"
      ;;
    study)
      # A shipped study (STUDY, default window-regime), JOBS runs at a time.
      study=${STUDY:-window-regime}
      .gpu/bin/swax study "$study" --jobs "${JOBS:-16}" --out "$OUT/$study" --quiet \
        >"$OUT/study-$study.txt" 2>&1
      note "study $study" "exit $?"
      ;;
    kernels)
      # The recurrent mixers' kernels beside their PyTorch peers (docs/peers.md): timings.
      bash bench/kernel-pair.sh recurrent .gpu/bin/bench-recurrent-gpu "$OUT" paper,swax-small \
        >"$OUT/kernels.txt" 2>&1
      note kernels "exit $?"
      ;;
    sanitize)
      # compute-sanitizer's four tools over one GPU test (SANITIZE: its binary's name and a test
      # filter; default the device sampling's).
      read -r bin filter <<<"${SANITIZE:-gpu_decode sampling_draws}"
      for tool in memcheck racecheck synccheck initcheck; do
        echo "=== $tool"
        SWAX_REQUIRE_CUDA=1 compute-sanitizer --tool "$tool" .gpu/tests/"$bin"-* \
          --include-ignored $filter 2>&1 | tail -4
      done >"$OUT/sanitize.txt" 2>&1
      note sanitize "$(grep -c 'ERROR SUMMARY: 0 errors\|(0 errors' "$OUT/sanitize.txt") of 4 tools clean"
      ;;
  esac
}
# Each part runs as a process group of its own (set -m), so that a stop reaches every process
# it started (a gate's runs, a study's jobs) and nothing else on the machine.
set -m
running=() limited=
stop_parts() {
  for pid in "${running[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
}
trap 'stop_parts; wait; exit 130' INT TERM
for group in $PARTS; do
  if [ -n "$limited" ]; then
    note "$group" "skipped (LIMIT=$LIMIT s had passed)"
    continue
  fi
  running=()
  for p in ${group//+/ }; do
    # A handler, not an ignored signal, so that the part's programs still take SIGTERM and the
    # part still notes how they ended.
    (trap : TERM; part "$p") &
    running+=($!)
  done
  while kill -0 "${running[@]}" 2>/dev/null; do
    if [ -n "${LIMIT:-}" ] && [ -z "$limited" ] && [ $(($(date +%s) - start)) -ge "$LIMIT" ]; then
      limited=1
      note limit "the running parts stopped at $LIMIT s"
      stop_parts
    fi
    sleep 1
  done
  wait "${running[@]}"
done
cat "$OUT/summary.txt"
