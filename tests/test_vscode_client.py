"""Run the VS Code extension's own test suite (`npm test` in editors/vscode) from pytest.

The suite compiles nothing itself: CI runs `npm ci && npm run compile` first (see editors/vscode/README.md).
It holds unit tests of the extension's pure modules and an end-to-end test that drives the real
`python -m lsp_server` with vscode-languageserver-protocol (initialize, inline completion, cancellation).
Skips with a reason when Node/npm, node_modules or the compiled output is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

VSCODE_DIR = Path(__file__).resolve().parent.parent / "editors" / "vscode"


def _skip_reason() -> str | None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        return "node/npm not on PATH"
    if not (VSCODE_DIR / "node_modules").is_dir():
        return "editors/vscode/node_modules missing: run `npm ci` in editors/vscode"
    if not (VSCODE_DIR / "out" / "extension.js").is_file():
        return "editors/vscode/out missing: run `npm run compile` in editors/vscode"
    return None


def _failures(out: str) -> str:
    """The TAP report's failing subtests, each with the lines that follow it (its error and location): the tail of
    a long report alone does not show which test failed."""
    lines = out.splitlines()
    picked = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("not ok"):
            picked.append("\n".join(lines[i:i + 30]))
    return ("failing:\n" + "\n---\n".join(picked) + "\n\n") if picked else ""


@pytest.mark.slow
def test_vscode_extension_npm_test():
    """`npm test` passes: unit tests plus the end-to-end test against the real server (~1 min)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ)
    env.setdefault("FASTCODER_TEST_PYTHON", sys.executable)
    proc = subprocess.run(["npm", "test"], cwd=VSCODE_DIR, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, _failures(out) + out[-3000:]
    assert "# fail 0" in out, _failures(out) + out[-3000:]
    # The end-to-end suite must really run here (the Python env running pytest has lsp_server).
    assert "# skipped 0" in out, "end-to-end suite skipped:\n" + out[-3000:]
