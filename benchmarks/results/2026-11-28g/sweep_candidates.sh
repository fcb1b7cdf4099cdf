#!/usr/bin/env bash
# The replay (benchmarks/replay_methods.py) of the nine cells (fim-line with 30 tasks) with fastcoder's candidate
# settings varied one at a time: occurrences per datastore query (max_matches, 32), tokens per continuation
# (draft_len, 24), how far a context copy runs past its match (copy_factor, 3x) and its share threshold
# (copy_min_prob, 0.1). One JSON line per method and cell into sweep_candidates.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
out=benchmarks/results/2026-11-28g/sweep_candidates.jsonl; : > "$out"
variants=(m16=fastcoder:max_matches=16 m64=fastcoder:max_matches=64 l16=fastcoder:draft_len=16
          l32=fastcoder:draft_len=32 f2=fastcoder:copy_factor=2.0 f5=fastcoder:copy_factor=5.0
          p05=fastcoder:copy_min_prob=0.05 p20=fastcoder:copy_min_prob=0.2)
args=(); names=fastcoder
for v in "${variants[@]}"; do args+=(--variant "$v"); names+=",${v%%=*}"; done
for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
  n=10; [ "$kind" = fim-line ] && n=30
  echo "$kind $repo $n"
done; done | xargs -P 2 -L 1 sh -c '.venv/bin/python benchmarks/replay_methods.py \
  --repo .venv/lib/python3.11/site-packages/$1 --task-kind $0 --tasks $2 --score-measured '"${args[*]}"' \
  --methods '"$names"' 2>/dev/null | sed "s/^{/{\"cell\": \"$0 $1\", /"' >> "$out"
