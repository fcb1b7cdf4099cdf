"""The real-vLLM test's two servers, started as soon as collection has selected the test.

Each ``vllm serve`` start-up is ~60-100 s of imports in three processes, mostly on one core. Started when the test
itself runs (near the end of the suite), the two start-ups were most of its 100-135 s. Started from
``tests/conftest.py``'s ``pytest_collection_modifyitems`` instead, they run while the suite's first tests do, on the
core those (single-threaded) tests leave idle; the test then finds them ready. ``pytest_sessionfinish`` stops any
the test did not take (deselected by a failure, ``-x``, an interrupt).

What the servers serve (tiny-py-coder; no speculation, and fastcoder's proposer with D_r of the installed ``pluggy``
and a D_r built elsewhere under two ids) is set up here too, in a temporary folder, before any test runs: the
cache folder variable is set only around that (no test sees it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

from tests.conftest import TINY_CODER

#: what :func:`start` made: {"base": Path, "servers": [plain, fastcoder] or None, "error": str or None, ...}
_STARTED: dict = {}


def vllm_venv() -> Path:
    """vLLM's own venv (``scripts/setup_vllm.sh``)."""
    from engine.serving.serve_vllm import default_venv

    return default_venv()


def available() -> bool:
    """Whether the real-vLLM test can run here: vLLM's venv and the dev model are present."""
    return (vllm_venv() / "bin" / "vllm").is_file() and TINY_CODER.exists()


def pluggy_folder() -> Path:
    return Path(importlib.util.find_spec("pluggy").submodule_search_locations[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_one(base: Path, name: str, speculation: str, config=None):
    """Start one ``vllm serve`` (not waiting for it)."""
    from engine.serving.serve_vllm import start_server

    state = base / name
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(state / "inductor"), OMP_NUM_THREADS="1")
    # --enforce-eager: no torch.compile warm-up (start-up ~20 s instead of 60-130 s on 2 busy cores)
    return start_server(str(TINY_CODER), _free_port(), speculation=speculation, config=config, k=6,
                        state_dir=state, env=env, extra_args=["--enforce-eager"])


def _config(base: Path):
    """The fastcoder server's proposer configuration: D_r of pluggy (``pluggy`` and its folder, indexed into
    ``base/cache``), and a D_r built elsewhere (``fastcoder index build``'s format) served as ``shared-pluggy`` (its
    ``repo.json``) and ``lsp-pluggy`` (the id the language server's openai backend sends as its repoId)."""
    from transformers import AutoTokenizer

    from engine.common_datastore import tokenizer_fingerprint
    from engine.repo_datastore import RepoDatastore
    from engine.serving.serve_vllm import prepare_config

    tokenizer = AutoTokenizer.from_pretrained(TINY_CODER)
    pluggy = pluggy_folder()
    shared = RepoDatastore.build(pluggy, tokenizer).to_datastore(tokenizer_fingerprint(tokenizer)).save(
        base / "shared" / "pluggy")
    (shared / "repo.json").write_text(json.dumps({"repo_id": "shared-pluggy"}))
    before = os.environ.get("FASTCODER_CACHE_DIR")
    os.environ["FASTCODER_CACHE_DIR"] = str(base / "cache")
    try:
        return prepare_config(tokenizer, [f"pluggy={pluggy}"], common="none", progress=False,
                              repo_datastores=[str(shared), f"lsp-pluggy={shared}"])
    finally:
        if before is None:
            os.environ.pop("FASTCODER_CACHE_DIR", None)
        else:
            os.environ["FASTCODER_CACHE_DIR"] = before


def start() -> None:
    """Set up and start both servers (not waiting for them); once per session, and only where :func:`available`.
    An error is kept for :func:`take` to raise in the test, not raised into pytest's collection."""
    if _STARTED or not available():
        return
    base = Path(tempfile.mkdtemp(prefix="fastcoder-vllm-test-"))
    _STARTED.update(base=base, servers=None, error=None)
    servers = []
    try:
        config = _config(base)
        servers.append(_start_one(base, "none", "none"))
        servers.append(_start_one(base, "fastcoder", "fastcoder", config))
        _STARTED["servers"] = servers
    except Exception as err:  # noqa: BLE001  (the test reports it)
        for server in servers:
            server.stop()
        _STARTED["error"] = f"{type(err).__name__}: {err}"


def take(timeout: float = 1500.0):
    """``(plain, fastcoder)``, both ready (started now where :func:`start` was not called); the caller stops them.
    Raises RuntimeError where the set-up failed, and vLLM's own error where a server did not come up (both are then
    stopped)."""
    start()
    if _STARTED.get("error"):
        raise RuntimeError(f"the vLLM servers' set-up failed: {_STARTED['error']}")
    servers, _STARTED["servers"] = _STARTED.get("servers"), None
    if not servers:
        raise RuntimeError("no vLLM servers to take: vLLM or the dev model is missing here, or a test took them")
    try:
        for server in servers:
            server.wait_ready(timeout=timeout)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def state_dir(name: str) -> Path:
    """The folder of server ``name`` (``none`` or ``fastcoder``): its vllm.log, the proposer's statistics."""
    return _STARTED["base"] / name


def stop() -> None:
    """Stop the servers the test did not take, and remove the set-up's folder (pytest_sessionfinish)."""
    for server in _STARTED.get("servers") or ():
        server.stop()
    if _STARTED.get("base") is not None:
        shutil.rmtree(_STARTED["base"], ignore_errors=True)
    _STARTED.clear()
