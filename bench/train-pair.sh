#!/usr/bin/env bash
# train-pair: the training benchmark and its PyTorch peer in one call on a GPU machine, from the
# repository root. The peer first (bench/peers/train_peer.py, its JSON lines into
# OUT/training-peer.jsonl), then bench-train reading them (its lines, the peer's figures filled
# in, into OUT/training.jsonl), each with the GPU to itself, at each window.
#
#   bench/train-pair.sh BENCH_TRAIN OUT [WINDOWS] [bench-train arguments...]
#   e.g. bench/train-pair.sh /tmp/p/bin/bench-train "$OUT" 128,2048
#
# The peer's mlstm_kernels, which the GPU machine lacks and cannot download, is installed from
# the wheels carried in .whl/ (bench/peer-env.sh). The commit both record: SWAX_COMMIT, else
# .gpu/commit, else what git says.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
bench_train=$1 out=$2 windows=${3:-128,2048}
shift $(($# < 3 ? $# : 3))
source bench/peer-env.sh
mkdir -p "$out"
python3 bench/peers/train_peer.py --windows "$windows" --results "$out/training-peer.jsonl"
"$bench_train" --windows "$windows" --peer "$out/training-peer.jsonl" \
  --results "$out/training.jsonl" "$@"
