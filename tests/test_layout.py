"""Layering: the engine decodes and never imports the language server (DESIGN.md, "Layout")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)
    return found


def test_engine_never_imports_the_language_server():
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in _imported_modules(p)
                                                   if m.split(".")[0] in ("lsp_server", "fastcoder"))
                 for p in (ROOT / "engine").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_fastcoder_command_lists_engine_and_server_commands():
    out = subprocess.run([sys.executable, "-m", "fastcoder", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for command in ("generate", "index", "bench", "demo"):
        assert command in out.stdout
    engine_only = subprocess.run([sys.executable, "-c", "import sys, engine.cli; "
                                  "print('lsp_server' in sys.modules)"], cwd=ROOT, capture_output=True, text=True)
    assert engine_only.stdout.strip() == "False"


def test_a_wheel_carries_the_native_kernels_sources():
    """The native kernels compile from their C sources on first use: a regular (not editable) install must ship
    every source and header the build reads, or it silently runs the slower Python and torch code."""
    import fnmatch  # noqa: PLC0415

    import pytest  # noqa: PLC0415

    from engine import native  # noqa: PLC0415

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = patterns.get("engine.native", [])
    needed = (*native.SOURCES, *native.HEADERS)
    assert all((ROOT / "engine" / "native" / name).exists() for name in needed)
    assert [n for n in needed if not any(fnmatch.fnmatch(n, p) for p in shipped)] == []
