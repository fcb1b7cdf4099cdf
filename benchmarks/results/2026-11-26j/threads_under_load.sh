#!/usr/bin/env bash
# The server's load and completions with torch on 1 or 2 threads: `fastcoder demo` (jinja2) twice each, alternated;
# then, with the verify-cost cache moved aside (so the load measures c(n)) and a busy loop on one core for the
# whole load, once with OMP_NUM_THREADS=1 and once with the default (every core). Prints each run's ready time,
# the probe's kernel choice and the latency summary. ~10 min (the 2-thread load under the busy loop takes minutes).
set -uo pipefail
cd "$(dirname "$0")/../../.."
demo() { timeout 600 .venv/bin/fastcoder demo --repo .venv/lib/python3.11/site-packages/jinja2 \
  --model ../shared/models/tiny-py-coder --verbose 2>&1 | grep -E "native few-row|packed 1|ready after|not ready|summary"; }
for t in 1 2 1 2; do echo "== OMP_NUM_THREADS=$t, no busy loop"; OMP_NUM_THREADS=$t demo; done
cache="${FASTCODER_CACHE_DIR:-$HOME/.cache/fastcoder}/verify_cost"
for t in 1 2; do
  mv "$cache" "$cache.aside" 2>/dev/null
  python3 -c "import time; t = time.time()
while time.time() - t < 400: pass" & hog=$!
  echo "== OMP_NUM_THREADS=$t, a busy loop on one core, c(n) measured at load"; OMP_NUM_THREADS=$t demo
  kill $hog 2>/dev/null; rm -rf "$cache"; mv "$cache.aside" "$cache" 2>/dev/null
done
