#!/usr/bin/env bash
# study-regime: a short sweep for the window study's regime, on one GPU, from the repository
# root. The study can show the papers' mechanism (a long window lets the model lean on attention,
# so the memory stays lazy beyond it) only where attention alone (S) learns MQAR within its window
# (at least 90% held-out recall) and the memory alone (M) learns it too. At the default study's
# settings S stays at chance (issue 43), so this trains S and M at a few settings (the list
# below, each with why it is tried), several seeds each, JOBS processes of `learn` at a time on
# the one GPU, and appends one JSON line per run (learn's, with "setting" added) to RESULTS.
#
#   SWAX_BIN=.gpu/bin bench/study-regime.sh
#
# SWAX_BIN: the folder holding the swax and learn binaries (tools/gpu-pack builds them).
# Optional: JOBS (16), SEEDS (4: seeds 0..SEEDS-1), BUDGET_S (450: no run starts after it and a
# run still going at BUDGET_S + 30 is stopped, so the sweep ends within about 8 minutes), OUT
# (bench/runs/study-regime), RESULTS (bench/results/study-regime.jsonl), SETTINGS (names, comma
# separated: only those). A run stopped by the budget writes no line; the summary counts them.
set -euo pipefail
: "${SWAX_BIN:?set SWAX_BIN to the folder holding the swax and learn binaries}"
learn="$SWAX_BIN/learn"
[ -x "$learn" ] || { echo "study-regime: no learn binary in $SWAX_BIN" >&2; exit 2; }
jobs_at_once=${JOBS:-16}
seeds=${SEEDS:-4}
budget=${BUDGET_S:-450}
out=${OUT:-bench/runs/study-regime}
results=${RESULTS:-bench/results/study-regime.jsonl}
only=${SETTINGS:-}

# name  T  pairs  heads  steps  lrs: every setting trains S and M as the study's model (4 layers,
# d_model 128, batch 32, the window the whole sequence: the study's long window). In the order
# they run, the most informative first, so a budget cut drops the last.
settings=(
  # The default study's regime (T 128, 8 pairs, 2 heads of 64, 2000 steps at 1e-3): the
  # reference, where S stayed at chance.
  "base 128 8 2 2000 1e-3"
  # More heads: attention's MQAR needs a head to match a key and copy its value; more, narrower
  # heads give it more chances. The mLSTM's state shrinks with the head width, so M may lose.
  "heads4 128 8 4 2000 1e-3"
  "heads8 128 8 8 2000 1e-3"
  # Longer training: S may be slow rather than unable.
  "steps4k 128 8 2 4000 1e-3"
  # Fewer pairs: an easier task, learned sooner by both.
  "pairs4 128 4 2 2000 1e-3"
  # The learning rate, both ways: attention on MQAR is known to be sensitive to it.
  "lr 128 8 2 2000 3e-4,3e-3"
  # More heads and longer training together: the likeliest candidate if each helps alone.
  "heads4-steps4k 128 8 4 4000 1e-3"
  # T 256 at the learning gate's shape (16 pairs): the gate's own numbers to compare with.
  "T256 256 16 2 2000 1e-3"
  # T 256 with more heads and longer training.
  "T256-heads4-steps4k 256 16 4 4000 1e-3"
)

mkdir -p "$out" "$(dirname "$results")"
start=$(date +%s)
deadline=$((start + budget))
pending=() skipped=0
run_one() { # name seq pairs heads steps lrs pattern seed
  local name=$1 t=$2 pairs=$3 heads=$4 steps=$5 lrs=$6 pattern=$7 seed=$8
  local dir="$out/$name" left=$((deadline + 30 - $(date +%s)))
  # timeout 0 would mean no limit.
  [ "$left" -ge 1 ] || left=1
  mkdir -p "$dir"
  timeout "$left" "$learn" --task mqar --patterns "$pattern" --lrs "$lrs" --layers 4 \
    --d-model 128 --heads "$heads" --seq-len "$t" --pairs "$pairs" --steps "$steps" \
    --batch 32 --seed "$seed" --out "$dir" --results "$dir/$pattern-s$seed.jsonl" \
    > "$dir/$pattern-s$seed.log" 2>&1 || echo "study-regime: $name $pattern seed $seed: \
exit $? (see $dir/$pattern-s$seed.log)" >&2
}

for line in "${settings[@]}"; do
  read -r name t pairs heads steps lrs <<< "$line"
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  for seed in $(seq 0 $((seeds - 1))); do
    for pattern in S M; do
      pending+=("$name $t $pairs $heads $steps $lrs $pattern $seed")
    done
  done
done
echo "study-regime: ${#pending[@]} jobs, $jobs_at_once at a time, budget ${budget}s, into $out" >&2
for job in "${pending[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_at_once" ]; do wait -n || true; done
  if [ "$(date +%s)" -ge "$deadline" ]; then skipped=$((skipped + 1)); continue; fi
  # shellcheck disable=SC2086 # the job's fields are words
  run_one $job &
done
wait || true

# Each run's line, tagged with its setting, into RESULTS.
lines=0
for line in "${settings[@]}"; do
  read -r name _ <<< "$line"
  for f in "$out/$name"/*.jsonl; do
    [ -e "$f" ] || continue
    sed "s/^{/{\"setting\":\"$name\",/" "$f" >> "$results"
    lines=$((lines + $(wc -l < "$f")))
    rm "$f"
  done
done
echo "study-regime: $lines runs appended to $results in $(($(date +%s) - start)) s;" \
  "$skipped jobs not started (budget)" >&2

# The verdict per setting and pattern, from this sweep's lines: seeds at 90% or more, the median.
if command -v python3 > /dev/null; then
  tail -n "$lines" "$results" | python3 -c '
import json, statistics, sys
runs = {}
for l in sys.stdin:
    r = json.loads(l)
    runs.setdefault((r["setting"], r["pattern"], r["lr"]), []).append(r["final_accuracy"])
print("| setting | pattern | lr | seeds at 90% | median final | per seed |")
print("|---|---|---|---|---|---|")
for (s, p, lr), f in runs.items():
    ok = sum(x >= 0.9 for x in f)
    print(f"| {s} | {p} | {lr:g} | {ok} of {len(f)} | {100 * statistics.median(f):.1f}% | "
          + " ".join(f"{100 * x:.1f}" for x in f) + " |")
'
fi
