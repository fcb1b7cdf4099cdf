#!/usr/bin/env bash
# On the lent GPU, from the repository root (after ../2026-11-26g/prepare.sh here, results set aside as there):
#   run(command="bash benchmarks/results/2026-11-28a/device_graphs.sh", carry=[".device"], timeout_s=560)
# First gpu_smoke.py (the CUDA graphs against the eager forward: forward times, tokens; float32 and bfloat16); where it
# fails, stop there. Then the nine cells (and the bf16 cell) through ab_graphs.py: ar, suffix, fastcoder graphed and
# eager, interleaved per task. Everything in $OUT/gpu.tgz (device_run.sh) and $OUT/smoke.txt.
set -uo pipefail
OUT=${OUT:-/tmp/fc_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FASTCODER_CACHE_DIR=/tmp/fc_cache OMP_NUM_THREADS=1
D=$PWD/.device
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $D/whl/*.whl \
  > "$OUT/smoke.txt" 2>&1
t0=$SECONDS
PYTHONPATH=/tmp/site:$D/arctic/pkg:$PWD timeout 150 python3 benchmarks/results/2026-11-28a/gpu_smoke.py $D/model \
  $D/repos/pluggy >> "$OUT/smoke.txt" 2>&1
rc=$?
echo "smoke: rc $rc in $((SECONDS - t0)) s" >> "$OUT/smoke.txt"
grep -v "Loading weights" "$OUT/smoke.txt"
[ $rc -eq 0 ] || exit $rc
BENCH=benchmarks/results/2026-11-28a/ab_graphs.py METHODS=${METHODS:-ar,ar-eager,suffix,suffix-eager,fastcoder,fastcoder-eager} \
  REPEATS=${REPEATS:-2} BUDGET_S=$((${BUDGET_S:-420} - SECONDS)) bash benchmarks/results/2026-11-26g/device_run.sh
