#!/bin/bash
# Experiment (2026-11-25 night): fastcoder function tasks, two source trees alternating, per-part step timers
# (exp_steps.py). Run from the repository root:
#   benchmarks/results/2026-11-25f/exp_ab2.sh TAG ROUNDS "pluggy jinja2 pygls" TREE_A TREE_B
# TREE_A/TREE_B: two checkouts (e.g. git worktrees) sharing this clone's .venv; results in ./ab_TAG/.
set -euo pipefail
tag=$1; rounds=$2; repos=$3; tree_a=$(realpath "$4"); tree_b=$(realpath "$5")
here=$(dirname "$(realpath "$0")")
root=$(realpath "$here/../../..")
model=$(realpath "$root/../shared/models/tiny-py-coder")
out=$(realpath -m "ab_$tag"); mkdir -p "$out"
py="$root/.venv/bin/python"
for r in $(seq 1 "$rounds"); do for repo in $repos; do for w in a b; do
  tree=$tree_a; [ "$w" = b ] && tree=$tree_b
  pkg=$("$py" -c 'import importlib.util, sys; print(list(importlib.util.find_spec(sys.argv[1]).submodule_search_locations)[0])' "$repo")
  (cd "$tree" && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 PYTHONPATH=. timeout 1200 "$py" "$here/exp_steps.py" bench \
    --model "$model" --repo "$pkg" --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 --threads 1 \
    --task-kind function --methods fastcoder --no-headroom --no-progress --json "$out/${w}_${repo}_$r.json" \
    > "$out/${w}_${repo}_$r.log" 2>&1)
done; done; done
