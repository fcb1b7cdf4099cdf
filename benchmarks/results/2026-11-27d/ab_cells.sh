#!/usr/bin/env bash
# The cells (KINDS x REPOS; 10 tasks x 128 tokens, 1 thread, REPEATS repeats, D_c the standard library) with the
# methods METHODS in one bench run each (interleaved per task), into CELLS/. $1, optional: an A/B script of this
# folder (HERE: another results folder, for its scripts and outputs) run in place of `python -m engine`. Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-27d/$CELLS/*.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=${HERE:-benchmarks/results/2026-11-27d}; out=$here/${CELLS:-ab}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
if [ -n "${1:-}" ]; then run=("$here/$1"); else run=(-m engine); fi
for kind in ${KINDS:-function fim-block fim-line}; do for repo in ${REPOS:-jinja2 pluggy pygls}; do
  .venv/bin/python "${run[@]}" bench --model ../shared/models/tiny-py-coder \
    --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
    --threads 1 --task-kind $kind --methods ${METHODS:-ar,suffix,fastcoder} --no-headroom \
    --repeats ${REPEATS:-2} --json "$out/${kind}_$repo.json" > "$out/${kind}_$repo.log" 2>&1
done; done
echo "done $(date +%T)"
