#!/usr/bin/env bash
# Create .venv and install fastcoder with its test extras. torch is pinned through
# constraints.txt to the CPU build (letting pip choose pulls several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e '.[test,train]'
