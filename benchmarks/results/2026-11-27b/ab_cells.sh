#!/usr/bin/env bash
# The nine cells (10 tasks x 128 tokens, 1 thread, --repeats 2, D_c the standard library; ar, suffix, fastcoder), each
# run twice in a row: greedy forwards through the one native call (engine/native/step.c, "step") and through the three
# calls it replaced (FASTCODER_GREEDY_STEP=0, "calls"), the order alternating per cell. OUT=name picks the folder.
# Table: python benchmarks/results/2026-11-27b/ab_table.py benchmarks/results/2026-11-27b/${OUT:-ab}
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/2026-11-27b/${OUT:-ab}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
i=0
for kind in ${KINDS:-function fim-block fim-line}; do for repo in jinja2 pluggy pygls; do
  if (( i % 2 )); then order="calls step"; else order="step calls"; fi
  for v in $order; do
    if [[ $v == calls ]]; then flag=0; else flag=1; fi
    FASTCODER_GREEDY_STEP=$flag .venv/bin/python -m engine bench --model ../shared/models/tiny-py-coder \
      --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
      --threads 1 --task-kind $kind --methods ${METHODS:-ar,suffix,fastcoder} --no-headroom \
      --repeats 2 --json "$out/${v}_${kind}_$repo.json" --markdown "$out/${v}_${kind}_$repo.md" \
      > "$out/${v}_${kind}_$repo.log" 2>&1
  done
  i=$((i + 1))
done; done
echo "ab cells done $(date +%T)"
