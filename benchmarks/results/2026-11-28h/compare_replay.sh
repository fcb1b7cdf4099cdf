#!/usr/bin/env bash
# The oracle replay (benchmarks/replay_methods.py) of fastcoder with and without the node model, 9 cells x task seeds
# 0 and 1, into OUT/s<seed>.jsonl (one process per seed). PRIOR: the prior file with the node model (default: the
# shipped one). Then: python benchmarks/results/2026-11-28h/compare_replay.py OUT/s*.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: compare_replay.sh OUT}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
[ -n "${PRIOR:-}" ] && export FASTCODER_ACCEPTANCE_PRIOR=$PRIOR
for seed in 0 1; do (for k in function fim-block fim-line; do for r in pluggy jinja2 pygls; do
  .venv/bin/python benchmarks/replay_methods.py --repo .venv/lib/python3.11/site-packages/$r --task-kind $k \
    --tasks 10 --seed $seed --score-measured --methods fastcoder,fastcoder-node-model 2>/dev/null | sed "s/^/$k $r $seed /"
done; done > "$out/s$seed.jsonl") & done; wait
