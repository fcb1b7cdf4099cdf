#!/usr/bin/env bash
# The nine cells (10 tasks x 128 tokens, 1 thread, --repeats 2, D_c the standard library): ar, suffix and fastcoder.
# CELLS=name picks the folder (under DIR, default this script's folder), METHODS the methods. Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-27/cells/*.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${DIR:-benchmarks/results/2026-11-27}/${CELLS:-cells}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for kind in ${KINDS:-function fim-block fim-line}; do for repo in jinja2 pluggy pygls; do
  .venv/bin/python -m engine bench --model ../shared/models/tiny-py-coder \
    --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
    --threads 1 --task-kind $kind --methods ${METHODS:-ar,suffix,fastcoder} --no-headroom \
    --repeats 2 --json "$out/${kind}_$repo.json" --markdown "$out/${kind}_$repo.md" > "$out/${kind}_$repo.log" 2>&1
done; done
echo "cells done $(date +%T)"
