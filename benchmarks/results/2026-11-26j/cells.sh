#!/usr/bin/env bash
# The nine cells (ar, copyspec, suffix, fastcoder; 10 tasks x 128 tokens; 1 thread; --repeats 2) as in 2026-11-26h,
# written here (CELLS=name picks the folder). Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-26j/cells/*.json
cd "$(dirname "$0")/../../.." && OUT_ROOT=benchmarks/results/2026-11-26j exec bash benchmarks/results/2026-11-26h/cells.sh
