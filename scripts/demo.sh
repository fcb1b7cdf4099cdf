#!/usr/bin/env bash
# Set up, then run the headless demo: the real language server driven like an editor over a
# real repository (jinja2's sources, installed with the dependencies) with tiny-py-coder.
# Extra arguments go to `fastcoder demo` (e.g. --repo DIR --file F --positions 12).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
MODEL="${FASTCODER_MODEL:-$(cd .. && pwd)/shared/models/tiny-py-coder}"
REPO="$(.venv/bin/python -c 'import jinja2, os; print(os.path.dirname(jinja2.__file__))')"
exec .venv/bin/fastcoder demo --repo "$REPO" --model "$MODEL" "$@"
