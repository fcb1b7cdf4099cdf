#!/usr/bin/env bash
# ab_inprocess.py over the nine cells (10 tasks x 128 tokens, --repeats 2). OUT=name picks the folder.
# Table: python benchmarks/results/2026-11-27b/ab_inprocess_table.py benchmarks/results/2026-11-27b/${OUT:-inprocess}
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/2026-11-27b/${OUT:-inprocess}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for kind in ${KINDS:-function fim-block fim-line}; do for repo in jinja2 pluggy pygls; do
  .venv/bin/python benchmarks/results/2026-11-27b/ab_inprocess.py bench --model ../shared/models/tiny-py-coder \
    --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
    --threads 1 --task-kind $kind --methods ar,ar-calls,suffix,suffix-calls,fastcoder,fastcoder-calls --no-headroom \
    --repeats 2 --json "$out/${kind}_$repo.json" --markdown "$out/${kind}_$repo.md" > "$out/${kind}_$repo.log" 2>&1
done; done
echo "inprocess cells done $(date +%T)"
