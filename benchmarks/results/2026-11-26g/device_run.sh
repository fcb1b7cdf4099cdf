#!/usr/bin/env bash
# The GPU table of issue #9, run on the lent device machine from the repository root (see README.md here):
#   run(command="bash benchmarks/results/2026-11-26g/device_run.sh", carry=[".device"], timeout_s=360)
# (gpu1, gpu2: that command twice; gpu3: the bf16 check after the cuDNN-attention fix, see README.md here)
# Builds SuffixDecoding's _C and the stdlib D_c's suffix array there, then runs the nine bench cells (three
# repositories x three task kinds, 10 tasks x 128 tokens, ar/copyspec/suffix/fastcoder, fp32, 1 CPU thread)
# and one bf16 cell if time is left. Everything lands in $OUT/gpu.tgz (re-packed after each cell, so a run
# cut short still returns what it finished).
set -uo pipefail
OUT=${OUT:-/tmp/fc_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; TASKS=${TASKS:-10}; PY=${PY:-python3}; BUDGET_S=${BUDGET_S:-300}
RES=/tmp/fc_res; rm -rf "$RES"; mkdir -p "$RES/cells"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FASTCODER_CACHE_DIR=/tmp/fc_cache OMP_NUM_THREADS=1
D=$PWD/.device
pack() { tar czf "$OUT/gpu.tgz" -C "$RES" . ; }
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nproc --all; $PY -c "import sys, torch, transformers; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available()); print('transformers', transformers.__version__)"
} > "$RES/env.txt" 2>&1
if [ -z "${SKIP_WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $D/whl/*.whl \
    > "$RES/pip.log" 2>&1
  export PYTHONPATH=/tmp/site:$D/arctic/pkg:$PWD
else
  export PYTHONPATH=$D/arctic/pkg:$PWD
fi
t0=$SECONDS
( cmake -S $D/arctic/csrc -B /tmp/sdbuild -DPython_EXECUTABLE=$(command -v $PY) -DCMAKE_BUILD_TYPE=Release -GNinja \
  && cmake --build /tmp/sdbuild -j16 && cp /tmp/sdbuild/_C*.so $D/arctic/pkg/arctic_inference/suffix_decoding/ ) \
  > "$RES/build_suffix.log" 2>&1
$PY -c "import arctic_inference.suffix_decoding" >> "$RES/build_suffix.log" 2>&1 && echo "suffix ok in $((SECONDS - t0)) s" >> "$RES/env.txt"
$PY - > "$RES/stdlib_ds.log" 2>&1 <<PYEOF
import json, time, numpy as np
from engine.datastore.store import Datastore, _build_sa
t0 = time.perf_counter()
meta = json.load(open("$D/stdlib/meta.json"))
tokens = np.load("$D/stdlib/tokens.npy")
Datastore(tokens, _build_sa(tokens), meta["vocab_size"], meta["num_documents"], meta["tokenizer_fingerprint"]).save("/tmp/fc_stdlib")
print(f"stdlib D_c: {tokens.size} tokens, suffix array in {time.perf_counter() - t0:.1f} s")
PYEOF
pack
cell() {  # kind repo dtype name
  local left=$((BUDGET_S - SECONDS))
  if [ $left -lt 25 ]; then echo "skipped $4: ${left} s left" >> "$RES/env.txt"; return; fi
  local s=$SECONDS
  $PY ${BENCH:--m engine} bench --model $D/model --repo $D/repos/$2 --common /tmp/fc_stdlib --tasks $TASKS \
    --max-new-tokens 128 --seed 0 --threads 1 --task-kind $1 --methods ${METHODS:-ar,copyspec,suffix,fastcoder} \
    --device $DEVICE --dtype $3 --repeats ${REPEATS:-1} ${5:-} --no-progress --json "$RES/cells/$4.json" --markdown "$RES/cells/$4.md" \
    > "$RES/cells/$4.log" 2>&1
  echo "$4: rc $? in $((SECONDS - s)) s" >> "$RES/env.txt"
  pack
}
if [ -n "${MICRO:-}" ]; then
  $PY benchmarks/results/2026-11-26g/attention_steps.py $D/model $DEVICE > "$RES/attention_steps.txt" 2>&1
  echo "attention_steps: rc $? at $SECONDS s" >> "$RES/env.txt"; pack
fi
# BENCH: what runs `bench` (default `-m engine`; an A/B script such as ../2026-11-28a/ab_graphs.py). REPEATS: --repeats per cell (default 1). METHODS: --methods (default ar,copyspec,suffix,fastcoder). CELLS: "kind:repo:dtype:name[:extra flag]" entries (default: the nine fp32 cells, then one bf16 cell)
CELLS=${CELLS:-"function:pluggy:float32:function_pluggy function:jinja2:float32:function_jinja2
function:pygls:float32:function_pygls fim-line:pluggy:float32:fim-line_pluggy:--no-headroom
fim-line:jinja2:float32:fim-line_jinja2:--no-headroom fim-line:pygls:float32:fim-line_pygls:--no-headroom
fim-block:pluggy:float32:fim-block_pluggy:--no-headroom fim-block:jinja2:float32:fim-block_jinja2:--no-headroom
fim-block:pygls:float32:fim-block_pygls:--no-headroom function:pluggy:bfloat16:bf16_function_pluggy"}
for spec in $CELLS; do IFS=: read -r kind repo dtype name extra <<< "$spec"; cell $kind $repo $dtype $name $extra; done
cp -r "$FASTCODER_CACHE_DIR/verify_cost" "$RES/" 2>/dev/null
echo "total ${SECONDS} s" >> "$RES/env.txt"; pack; cat "$RES/env.txt"
