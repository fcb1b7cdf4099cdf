#!/usr/bin/env bash
# The nine cells (ar, copyspec, suffix, fastcoder; 10 tasks x 128 tokens; 1 thread; --repeats 2) as in 2026-11-26h,
# written here: cells/ at a2d1d49 (c(n) format 5), CELLS=cells-plain with the plain step's position known. Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-26i/cells/*.json
cd "$(dirname "$0")/../../.." && OUT_ROOT=benchmarks/results/2026-11-26i exec bash benchmarks/results/2026-11-26h/cells.sh
