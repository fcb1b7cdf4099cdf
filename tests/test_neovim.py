"""Headless Neovim tests of the fastcoder plugin (editors/neovim), on any Neovim >= 0.7.

- Unit checks of the plugin's pure helpers (no server): editors/neovim/tests/unit.lua.
- End to end against the real ``python -m lsp_server`` with the tiny test model:
  editors/neovim/tests/e2e.lua starts the server through ``require("fastcoder").setup()``, opens a real
  file, waits for ``fastcoder/status`` = ready, requests ``textDocument/inlineCompletion`` with
  ``client.request_sync``, shows cancel-previous (two quick requests for one buffer: the first comes back
  cancelled or empty, the second with the completion) and inserts a completion with the manual trigger.

Neovim comes from PATH, else from ``editors/neovim/install_nvim_for_tests.sh``'s directory
($FASTCODER_NVIM_DIR or ~/.cache/fastcoder/nvim); the tests skip with a reason when none is found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLUGIN_DIR = REPO / "editors" / "neovim"
MODEL = Path(os.environ.get("FASTCODER_TEST_MODEL", REPO.parent / "shared" / "models" / "tiny-py-coder"))

SOURCE = '''import os


def list_python_files(root):
    """Return the paths of the .py files below root."""
    result = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(".py"):
                result.append(os.path.join(dirpath, name))
    return result


def count_lines(path):
    with open(path) as f:
        return len(f.readlines())


def main():
    for path in list_python_files(".
'''
POSITION = {"line": 19, "character": 36}  # after `list_python_files(".` (0-based, UTF-16)
SETTINGS = {"method": "fastcoder", "maxNewTokens": 24, "stopAt": "line", "commonDatastore": "none",
            "repoIndex": True, "device": "cpu", "temperature": 0}


def find_nvim() -> str | None:
    """Path of an nvim executable: PATH first, then the install script's directory."""
    on_path = shutil.which("nvim")
    if on_path:
        return on_path
    base = os.environ.get("FASTCODER_NVIM_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fastcoder" / "nvim")
    candidate = Path(base) / "bin" / "nvim"
    return str(candidate) if os.access(candidate, os.X_OK) else None


NVIM = find_nvim()
pytestmark = pytest.mark.skipif(
    NVIM is None, reason="nvim not found on PATH or in ~/.cache/fastcoder/nvim: run editors/neovim/install_nvim_for_tests.sh")


def run_nvim(script: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``script`` with ``nvim --headless --clean -u NONE`` from the repository root."""
    return subprocess.run([NVIM, "--headless", "--clean", "-u", "NONE", "-c", f"luafile {script}"],
                          cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)


def load_checks(path: Path, proc: subprocess.CompletedProcess) -> dict[str, dict]:
    assert path.is_file(), f"nvim wrote no result (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    data = json.loads(path.read_text())
    return {c["name"]: c for c in data["checks"]} | {"_version": {"ok": True, "detail": data.get("version", "")}}


def test_plugin_units(tmp_path):
    """Pure helpers: command resolution, settings cleaning, item parsing, status text, insertion, setup()
    without a server (clear error, commands still defined)."""
    result = tmp_path / "unit.json"
    proc = run_nvim(PLUGIN_DIR / "tests" / "unit.lua",
                    {"FASTCODER_NVIM_PLUGIN_DIR": str(PLUGIN_DIR), "FASTCODER_NVIM_TEST_RESULT": str(result)}, 60)
    checks = load_checks(result, proc)
    failed = {k: v["detail"] for k, v in checks.items() if not v["ok"]}
    assert not failed, failed
    assert len(checks) >= 15


def _lsp_server_importable() -> str | None:
    if not MODEL.is_dir():
        return f"test model missing: {MODEL}"
    probe = subprocess.run([sys.executable, "-c", "import lsp_server.server"], cwd=REPO, capture_output=True, text=True)
    return None if probe.returncode == 0 else f"lsp_server not importable: {probe.stderr.strip()[-300:]}"


@pytest.fixture(scope="module")
def e2e_checks(tmp_path_factory):
    """Run editors/neovim/tests/e2e.lua once (one server start) and return its checks by name."""
    reason = _lsp_server_importable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("nvim-e2e")
    workspace = work / "ws"
    workspace.mkdir()
    (workspace / "pyproject.toml").write_text("[project]\nname = 'walk'\n")
    file = workspace / "walk.py"
    file.write_text(SOURCE)
    result = work / "result.json"
    config = {
        "plugin_dir": str(PLUGIN_DIR),
        "cmd": [sys.executable, "-m", "lsp_server"],
        "cmd_env": {"FASTCODER_MODEL": str(MODEL), "PYTHONUNBUFFERED": "1"},
        "file": str(file),
        "settings": SETTINGS,
        "position": POSITION,
        "result_path": str(result),
        "ready_timeout_ms": 180000,
    }
    config_path = work / "config.json"
    config_path.write_text(json.dumps(config))
    proc = run_nvim(PLUGIN_DIR / "tests" / "e2e.lua", {"FASTCODER_NVIM_TEST_CONFIG": str(config_path)}, 400)
    return load_checks(result, proc)


E2E_CHECKS = ["setup", "attach", "inlineCompletionProvider", "ready", "status_format", "settings_reached_server",
              "cursor_warms",
              "request_sync_completion", "cancel_previous", "manual_complete_inserts",
              "manual_complete_equals_request_sync"]


@pytest.mark.slow
@pytest.mark.parametrize("name", E2E_CHECKS)
def test_neovim_end_to_end(e2e_checks, name):
    """Each step of the end-to-end scenario passed (details show the server's answers)."""
    assert "no_lua_error" not in e2e_checks, e2e_checks["no_lua_error"]["detail"]
    assert name in e2e_checks, f"step {name} did not run; checks: {json.dumps(e2e_checks, indent=1)[:3000]}"
    assert e2e_checks[name]["ok"], f"{name}: {e2e_checks[name]['detail']} (nvim {e2e_checks['_version']['detail']})"
