#!/bin/bash
# The model-output D_c of these results (engine/model_outputs.py): tiny-py-coder's greedy output at 4,000 sampled
# positions of 15 installed third-party packages, none of them a benchmark repository (pluggy, jinja2, pygls) or
# one of their dependencies. OUTPUTS (default $OUT/ds_outputs) is the folder to pass as --common.
source "$(dirname "$0")/../2026-11-25h/exp_env.sh"
OUTPUTS=${OUTPUTS:-$OUT/ds_outputs}
args=()
for p in setuptools selenium sympy networkx transformers matplotlib trio urllib3 watchdog typer sortedcontainers \
         yaml wsproto scipy torchgen; do args+=(--model-outputs "$SITE/$p"); done
cd "$ROOT" && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 PYTHONPATH=$ROOT $PY -m engine index build \
    --model "$SHARED/models/tiny-py-coder" "${args[@]}" --samples 4000 --new-tokens 64 --out "$OUTPUTS" --json
