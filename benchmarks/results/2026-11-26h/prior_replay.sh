#!/usr/bin/env bash
# fastcoder with and without the fitted acceptance prior (engine/data/acceptance_prior/tiny-py-coder.json, fitted on
# click, rich and markdown-it), oracle replay on this machine's c(n): 9 cells x task seeds 0 and 1.
# Usage (repository root): bash benchmarks/results/2026-11-26h/prior_replay.sh > benchmarks/results/2026-11-26h/prior_replay.jsonl
set -euo pipefail
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for seed in 0 1; do for kind in function fim-line fim-block; do for repo in pluggy jinja2 pygls; do
  for prior in off default; do
    if [ $prior = off ]; then export FASTCODER_ACCEPTANCE_PRIOR=off; else unset FASTCODER_ACCEPTANCE_PRIOR; fi
    .venv/bin/python benchmarks/replay_methods.py --repo .venv/lib/python3.11/site-packages/$repo --task-kind $kind \
        --tasks 10 --seed $seed --methods fastcoder 2>/dev/null \
      | sed "s/^{/{\"repo\": \"$repo\", \"kind\": \"$kind\", \"seed\": $seed, \"prior\": \"$prior\", /"
  done
done; done; done
