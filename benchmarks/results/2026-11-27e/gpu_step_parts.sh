#!/usr/bin/env bash
# On a lent GPU (device tool, carry=[".device"] after ../2026-11-26g/prepare.sh), from the repository root:
#   run(command="bash benchmarks/results/2026-11-27e/gpu_step_parts.sh", carry=[".device"], timeout_s=200)
# gpu_step_parts.py over `function` pluggy (5 tasks, ar and fastcoder, float32, 1 CPU thread) twice: as the bench
# runs (SYNC=0), then with each part synchronised and one fastcoder generation under torch.profiler (SYNC=1 PROFILE=1).
# Also runs here: DEVICE=cpu PY=.venv/bin/python SKIP_WHEELS=1.
set -uo pipefail
OUT=${OUT:-/tmp/fc_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; PY=${PY:-python3}; D=$PWD/.device
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FASTCODER_CACHE_DIR=/tmp/fc_cache OMP_NUM_THREADS=1
if [ -z "${SKIP_WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $D/whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
[ -d /tmp/fc_stdlib ] || $PY - <<PYEOF
import json, numpy as np
from engine.datastore.store import Datastore, _build_sa
meta = json.load(open("$D/stdlib/meta.json")); tokens = np.load("$D/stdlib/tokens.npy")
Datastore(tokens, _build_sa(tokens), meta["vocab_size"], meta["num_documents"], meta["tokenizer_fingerprint"]).save("/tmp/fc_stdlib")
PYEOF
for mode in "SYNC=0" "SYNC=1 PROFILE=1"; do
  env $mode $PY benchmarks/results/2026-11-27e/gpu_step_parts.py bench --model $D/model --repo $D/repos/pluggy \
    --common /tmp/fc_stdlib --tasks 5 --max-new-tokens 128 --seed 0 --threads 1 --task-kind function \
    --methods ar,fastcoder --device $DEVICE --dtype float32 --no-headroom --no-progress \
    --json "$OUT/parts_${mode%% *}.json" > "$OUT/parts_${mode%% *}.log" 2>&1
  echo "$mode: rc $?"; grep -A40 "^SYNC=" "$OUT/parts_${mode%% *}.log"
done
