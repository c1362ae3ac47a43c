#!/usr/bin/env bash
# kernel-pair: a kernel benchmark (bench-attention-gpu or bench-recurrent-gpu) and its PyTorch
# peers in one call on a GPU machine, from the repository root. The peers first
# (bench/peers/KIND_peers.py, their JSON lines into OUT/KIND-peer.jsonl), then the benchmark
# reading them (a line per case, set beside its fastest peer, into OUT/KIND.jsonl), each with
# the GPU to itself, at each shape. The commit both record: SWAX_COMMIT, else .gpu/commit, else
# what git says; the peers' wheels come from .whl/ (bench/peer-env.sh).
#
#   bench/kernel-pair.sh attention|recurrent BENCH_BIN OUT [SHAPES] [benchmark arguments...]
#   e.g. bench/kernel-pair.sh attention /tmp/p/bin/bench-attention-gpu "$OUT" paper,swax-small
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,10p' "$0"; exit 2; }
kind=$1 bench=$2 out=$3 shapes=${4:-paper,swax-small}
shift $(($# < 4 ? $# : 4))
case $kind in
  attention | recurrent) ;;
  *) echo "kernel-pair: $kind: expected attention or recurrent" >&2; exit 2 ;;
esac
source bench/peer-env.sh
mkdir -p "$out"
python3 "bench/peers/${kind}_peers.py" --shapes "$shapes" --results "$out/$kind-peer.jsonl"
"$bench" --shapes "$shapes" --peer "$out/$kind-peer.jsonl" --results "$out/$kind.jsonl" "$@"
