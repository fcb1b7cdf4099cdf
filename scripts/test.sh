#!/usr/bin/env bash
# Set up everything the tests need (Python env, Neovim for the headless editor test, the VS Code
# extension's node modules), then run the whole suite: pytest, which includes the VS Code
# extension's npm tests and the Neovim end-to-end test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
editors/neovim/install_nvim_for_tests.sh || echo "Neovim could not be installed: its tests will skip" >&2
editors/neovim/install_nvim012.sh || echo "Neovim 0.12 could not be installed: its real-editor test will skip" >&2
scripts/setup_suffix.sh || echo "arctic-inference could not be built: the suffix method's tests will skip" >&2
scripts/install_code_server.sh || echo "code-server/Chromium could not be installed: the real VS Code test will skip" >&2
if command -v npm >/dev/null 2>&1; then
  (cd editors/vscode && npm ci --no-audit --no-fund --loglevel=error && npm run -s compile)
else
  echo "npm not found: the VS Code extension tests will skip" >&2
fi
if [ "${FASTCODER_VLLM_TESTS:-0}" = 1 ]; then  # opt-in (CI sets it): ~6 min and 3.5 GB the first time; pytest -m vllm
  scripts/setup_vllm.sh || echo "vLLM could not be installed: the real-vLLM test will skip" >&2
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
