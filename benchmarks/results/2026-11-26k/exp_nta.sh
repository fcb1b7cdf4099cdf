#!/usr/bin/env bash
# The forward's weight stream with non-temporal prefetches (small_gemm.c: -DPF_HINT=_MM_HINT_NTA, and PF1=16 lines
# ahead in the one-row kernel) against the default hints: `fastcoder bench` (ar, fastcoder; function tasks of one
# repository; 10 tasks x 128 tokens, 1 thread, --repeats 2), the two builds alternated ROUNDS times. The question:
# does keeping the weights out of the caches keep the step's other work (drafting, acceptance, Python) warm?
# Each build measures its own c(n) on its first run. Prints ms per token and the step shares per run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benchmarks/results/2026-11-26k/nta; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
repo=${REPO:-jinja2}
for round in $(seq 1 ${ROUNDS:-2}); do
  for variant in base nta; do
    flags=""; [ $variant = nta ] && flags="-DPF_HINT=_MM_HINT_NTA -DPF1=16"
    FASTCODER_NATIVE_CFLAGS="$flags" .venv/bin/python -m engine bench --model ../shared/models/tiny-py-coder \
      --repo .venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
      --threads 1 --task-kind function --methods ar,fastcoder --no-headroom --repeats 2 \
      --json "$out/${variant}_$round.json" > "$out/${variant}_$round.log" 2>&1
    .venv/bin/python -c "
import json; d = json.load(open('$out/${variant}_$round.json'))
for m in ('ar', 'fastcoder'):
    x = d['methods'][m]
    print('$variant', $round, m, 'ms/token %.3f' % x['ms_per_token'], 'speedup %.3f' % x['speedup'],
          'drafting %.1f%%' % (100 * x.get('step_retrieval_share') or 0), 'other %.1f%%' % (100 * (x.get('step_other_share') or 0)),
          'forward ms/step %.3f' % (x.get('forward_ms_per_step') or 0))"
  done
done
