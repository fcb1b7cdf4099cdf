#!/usr/bin/env bash
# The nine cells (ar, suffix, fastcoder; 10 tasks x 128 tokens, 1 thread, --repeats 2) into this folder: the previous
# session's script (../2026-11-27/cells.sh) with DIR set. CELLS=name picks the subfolder. Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-27b/cells/*.json
cd "$(dirname "$0")/../../.." && DIR=benchmarks/results/2026-11-27b exec bash benchmarks/results/2026-11-27/cells.sh
