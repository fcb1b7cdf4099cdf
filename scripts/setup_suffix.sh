#!/usr/bin/env bash
# Optional: the `suffix` / `suffix-tree` methods (SuffixDecoding, arctic-inference's own drafter) in .venv.
# PyPI has only arctic-inference's sdist, whose setup.py imports torch: build it against the CPU torch
# already in .venv (no build isolation, no dependencies: isolation would pull CUDA torch). ~3-6 min the
# first time on 2 cores, then pip's wheel cache; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if .venv/bin/python -c "import arctic_inference.suffix_decoding" 2>/dev/null; then exit 0; fi
.venv/bin/python -m pip install -q -c constraints.txt "nanobind==2.9.2" grpcio-tools protobuf cmake ninja
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pip install -q -c constraints.txt --no-build-isolation --no-deps \
  "arctic-inference==0.3.0"
.venv/bin/python -c "import arctic_inference.suffix_decoding"
