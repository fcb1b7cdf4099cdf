#!/usr/bin/env bash
# Ceiling of tree sizing and of the draft sources on this machine's c(n) (oracle replay, no wall clock):
# per cell, the engine's trees, the same trees pruned to their accepted paths, and the widest trees the
# drafters build (flat cost) pruned the same way; suffix and copyspec for reference.
# Usage (repository root): bash benchmarks/results/2026-11-26h/ceiling.sh > benchmarks/results/2026-11-26h/ceiling.jsonl
set -euo pipefail
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for kind in function fim-line fim-block; do
  for repo in pluggy jinja2 pygls; do
    r=.venv/lib/python3.11/site-packages/$repo
    .venv/bin/python benchmarks/replay_methods.py --repo "$r" --task-kind $kind --tasks 10 \
        --methods copyspec,suffix,fastcoder 2>/dev/null | sed "s/^{/{\"repo\": \"$repo\", \"kind\": \"$kind\", \"drafting\": \"measured\", /"
    FASTCODER_VERIFY_COST=flat .venv/bin/python benchmarks/replay_methods.py --score-measured --repo "$r" \
        --task-kind $kind --tasks 10 --methods fastcoder 2>/dev/null | sed "s/^{/{\"repo\": \"$repo\", \"kind\": \"$kind\", \"drafting\": \"flat\", /"
  done
done
