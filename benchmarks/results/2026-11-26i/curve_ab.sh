#!/usr/bin/env bash
# Wall clock: fastcoder with the format-5 curve (the user cache) against fastcoder-oldcurve ($OLD_CURVE, format 4),
# interleaved with ar, --repeats 3; KINDS picks task kinds. Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-26i/curve-ab/*.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/2026-11-26i/curve-ab; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for kind in ${KINDS:-function fim-block fim-line}; do for repo in jinja2 pluggy pygls; do
  .venv/bin/python benchmarks/results/2026-11-26i/bench_variant.py bench --model ../shared/models/tiny-py-coder \
    --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
    --threads 1 --task-kind $kind --methods ar,fastcoder-oldcurve,fastcoder --no-headroom --repeats ${REP:-3} \
    --json $out/${kind}_$repo.json > /dev/null 2>&1
done; done
