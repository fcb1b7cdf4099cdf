#!/usr/bin/env bash
# The oracle replay with the draft head fed each step's hidden state (benchmarks/replay_methods.py's default since
# 2026-11-28i) and without it (--unfed-head, the replay before): fastcoder, its node model and fastcoder without the
# draft head, 9 cells x task seeds 0 and 1, into OUT/{fed,unfed}_s<seed>.jsonl (one process per seed).
# Then: python benchmarks/results/2026-11-28i/fed_replay.py OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: fed_replay.sh OUT}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for seed in 0 1; do (for mode in fed unfed; do for k in function fim-block fim-line; do for r in pluggy jinja2 pygls; do
  flag=(); [ $mode = unfed ] && flag=(--unfed-head)
  .venv/bin/python benchmarks/replay_methods.py --repo .venv/lib/python3.11/site-packages/$r --task-kind $k \
    --tasks 10 --seed $seed --score-measured "${flag[@]}" --variant fastcoder-no-head=fastcoder:draft_head=false \
    --methods fastcoder,fastcoder-node-model,fastcoder-no-head 2>/dev/null | sed "s/^/$k $r $seed /" >> "$out/${mode}_s$seed.jsonl"
done; done; done) & done; wait
