#!/usr/bin/env bash
# The nine cells into $HERE/$CELLS/ (defaults: this folder, ab/): benchmarks/run_cells.sh, which this script was
# until 2026-11-29 (the results of later sessions name it). $1, optional: an A/B script of the folder HERE, run in
# place of `python -m engine`. Table: python benchmarks/summarize_runs.py $HERE/$CELLS/*.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=${HERE:-benchmarks/results/2026-11-27d}
OUT=$here/${CELLS:-ab} exec bash benchmarks/run_cells.sh ${1:+"$here/$1"}
