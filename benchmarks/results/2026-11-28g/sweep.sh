#!/usr/bin/env bash
# The replay (benchmarks/replay_methods.py) of the nine cells (fim-line with 30 tasks) with fastcoder beside variants
# of it, each NAME=fastcoder:key=value[,key=value] (replay_methods.parse_variant). One JSON line per method and cell
# into OUT (sweep_table.py prints the geometric means against fastcoder).
# Usage: bash benchmarks/results/2026-11-28g/sweep.sh OUT.jsonl NAME=fastcoder:key=value ...
set -euo pipefail
out=$(realpath -m "$1"); shift
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
: > "$out"
args=(); names=fastcoder
for v in "$@"; do args+=(--variant "$v"); names+=",${v%%=*}"; done
for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
  n=10; [ "$kind" = fim-line ] && n=30
  echo "$kind $repo $n"
done; done | xargs -P 2 -L 1 sh -c '.venv/bin/python benchmarks/replay_methods.py \
  --repo .venv/lib/python3.11/site-packages/$1 --task-kind $0 --tasks $2 --score-measured '"${args[*]}"' \
  --methods '"$names"' 2>/dev/null | sed "s/^{/{\"cell\": \"$0 $1\", /"' >> "$out"
