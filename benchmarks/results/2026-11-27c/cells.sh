#!/usr/bin/env bash
# The nine cells (ar, suffix, fastcoder; 10 tasks x 128 tokens, 1 thread, --repeats 2) into this folder: the
# 2026-11-27 session's script with DIR set. CELLS=name picks the subfolder. Table:
#   python benchmarks/summarize_runs.py benchmarks/results/2026-11-27c/cells/*.json
cd "$(dirname "$0")/../../.." && DIR=benchmarks/results/2026-11-27c exec bash benchmarks/results/2026-11-27/cells.sh
