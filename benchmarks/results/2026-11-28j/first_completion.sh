#!/bin/bash
# The first completion after the server's start, probes timed (FASTCODER_PROBE_CACHE=0) against read from the probe
# cache, alternating, ROUNDS rounds each: benchmarks/measure_lsp.py's startup numbers (D_c and c(n) cached).
# Usage: ROUNDS=3 bash benchmarks/results/2026-11-28j/first_completion.sh
set -u
HERE=$(dirname "$0")
for r in $(seq 1 "${ROUNDS:-3}"); do
  for pc in 0 1; do
    [ $((r % 2)) = 0 ] && pc=$((1 - pc))
    HF_HUB_OFFLINE=1 FASTCODER_PROBE_CACHE=$pc .venv/bin/python benchmarks/measure_lsp.py --positions 2 \
      --repo-lines 20000 --json "$HERE/first_r${r}_cache${pc}.json" > "$HERE/first_r${r}_cache${pc}.log" 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d['startup_and_index']; print(sys.argv[1], \
{k: v for k, v in s.items() if k in ('initialize_ms', 'first_completion_s')})" "$HERE/first_r${r}_cache${pc}.json"
  done
done
