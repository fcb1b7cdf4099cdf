#!/usr/bin/env bash
# Grow the packaged output store with 20 more third-party packages, in two parts built at once (one core each),
# then merge them after the packaged store (fastcoder build-output-store --add). None of the benchmark's
# repositories (jinja2, pluggy, pygls) nor their relatives (markupsafe, lsprotocol, cattrs, attrs) is used.
#   bash benchmarks/results/2026-11-28d/build_parts.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?output folder}
mkdir -p "$OUT"
SITE=.venv/lib/python3.11/site-packages
A="pygments selenium setuptools huggingface_hub pydantic hypothesis PIL mpmath accelerate torchgen"
B="markdown_it urllib3 typer websocket watchdog dateutil yaml pip grpc arctic_inference"
part() {
  local name=$1; shift
  local repos=()
  for p in "$@"; do repos+=(--repo "$SITE/$p"); done
  OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONPATH=$PWD /usr/bin/time -v .venv/bin/python -m engine build-output-store \
    --model ../shared/models/tiny-py-coder "${repos[@]}" --tasks 30 --threads 1 --out "$OUT/$name.npz" \
    > "$OUT/$name.json" 2> "$OUT/$name.log"
}
part a $A &
part b $B &
wait
OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONPATH=$PWD .venv/bin/python - "$OUT" <<'PY'
import sys
from pathlib import Path
from engine.output_store import OutputStore
out = Path(sys.argv[1])
base = OutputStore.load("engine/data/output_store/tiny-py-coder.npz")
parts = [OutputStore.load(out / f"{n}.npz") for n in ("a", "b")]
info = {**base.info, "seconds": sum(float(s.info.get("seconds") or 0) for s in (base, *parts))}
merged = OutputStore.merged([base, *parts], info)
merged.save(out / "tiny-py-coder.npz")
print({k: v for k, v in merged.describe().items() if k != "built_on"}, len(merged.info["built_on"]))
PY
