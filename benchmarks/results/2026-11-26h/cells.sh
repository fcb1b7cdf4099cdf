#!/usr/bin/env bash
# The nine cells at this session's head (ar, copyspec, suffix, fastcoder; 10 tasks x 128 tokens; 1 thread; D_c the
# standard library), each with --repeats 2 (the spread per method); CELLS=name picks the folder (under $OUT_ROOT, default this one). Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-26h/cells/*.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT_ROOT:-benchmarks/results/2026-11-26h}/${CELLS:-cells}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
  .venv/bin/python -m engine bench --model ../shared/models/tiny-py-coder \
    --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
    --threads 1 --task-kind $kind --methods ar,copyspec,suffix,fastcoder --no-headroom --repeats 2 \
    --json "$out/${kind}_$repo.json" --markdown "$out/${kind}_$repo.md" > "$out/${kind}_$repo.log" 2>&1
done; done
echo "cells done $(date +%T)"
