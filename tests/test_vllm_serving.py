"""A real vLLM server on 127.0.0.1 with tiny-py-coder: fastcoder's proposer is lossless and accepted.

Needs vLLM's own venv (``scripts/setup_vllm.sh``); skips with one line otherwise. Two servers start
together (no speculation, and fastcoder's proposer with D_r of a real third-party package); each is stopped by PID
and the test checks that none of its processes is left. ~2-3 minutes on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import TINY_CODER

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _venv() -> Path:
    from engine.serving.serve_vllm import default_venv

    return default_venv()


@pytest.fixture(scope="module")
def vllm_venv():
    venv = _venv()
    if not (venv / "bin" / "vllm").is_file():
        pytest.skip(f"vLLM not installed: run scripts/setup_vllm.sh (expected {venv}/bin/vllm)")
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    return venv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _complete(url: str, prompt_ids: list[int], xargs: dict | None, max_tokens: int = 48) -> list[int]:
    body = {"model": str(TINY_CODER), "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0.0,
            "return_token_ids": True}
    if xargs is not None:
        body["vllm_xargs"] = xargs
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]["token_ids"]


def _start(tmp_path: Path, name: str, speculation: str, config=None):
    """Start one ``vllm serve`` (not waiting for it)."""
    from engine.serving.serve_vllm import start_server

    state = tmp_path / name
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(state / "inductor"), OMP_NUM_THREADS="1")
    # --enforce-eager: no torch.compile warm-up (start-up ~20 s instead of 60-130 s on 2 busy cores)
    return start_server(str(TINY_CODER), _free_port(), speculation=speculation, config=config, k=6,
                        state_dir=state, env=env, extra_args=["--enforce-eager"])


def _serve_both(tmp_path: Path, config):
    """The plain server and fastcoder's, started together: each start-up is ~60 s of imports in three processes,
    mostly on one core, so on 2 cores the two overlap. Both are stopped if either fails to come up."""
    servers = []
    try:
        servers.append(_start(tmp_path, "none", "none"))
        servers.append(_start(tmp_path, "fastcoder", "fastcoder", config))
        for server in servers:
            server.wait_ready(timeout=1500)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def _gone(server) -> bool:
    from engine.serving.serve_vllm import _alive

    return server.process.poll() is not None and not any(_alive(p) for p in server.pids)


def test_fastcoder_proposer_in_vllm_is_lossless_and_accepted(vllm_venv, tiny_tokenizer, tmp_path, monkeypatch):
    from engine.serving.serve_vllm import prepare_config

    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path / "cache"))
    pluggy = Path(importlib.util.find_spec("pluggy").submodule_search_locations[0])
    prompts = []
    for name in ("_hooks.py", "_manager.py"):
        text = (pluggy / name).read_text(encoding="utf-8")
        for frac in (0.4, 0.8):
            cut = text.find("\n", int(len(text) * frac)) + 1
            prompts.append(tiny_tokenizer(text[:cut], add_special_tokens=False)["input_ids"][-1000:])

    # a D_r built elsewhere (`fastcoder index build --repo DIR --repo-id ID --out PATH`), served under two ids:
    # one for direct requests, one that the language server's openai backend sends as its repoId
    from engine.common_datastore import tokenizer_fingerprint
    from engine.repo_datastore import RepoDatastore

    shared = RepoDatastore.build(pluggy, tiny_tokenizer).to_datastore(tokenizer_fingerprint(tiny_tokenizer)).save(
        tmp_path / "shared" / "pluggy")
    (shared / "repo.json").write_text(json.dumps({"repo_id": "shared-pluggy"}))
    config = prepare_config(tiny_tokenizer, [f"pluggy={pluggy}"], common="none", progress=False,
                            repo_datastores=[str(shared), f"lsp-pluggy={shared}"])
    plain, server = _serve_both(tmp_path, config)
    try:
        try:
            reference = [_complete(plain.url, p, None) for p in prompts]
        finally:
            plain.stop()
        assert _gone(plain)
        with_repo = [_complete(server.url, p, {"fastcoder_repo": "pluggy", "fastcoder_doc": str(i)})
                     for i, p in enumerate(prompts)]
        by_folder = _complete(server.url, prompts[0], {"fastcoder_repo": str(pluggy)})
        unknown = _complete(server.url, prompts[1], {"fastcoder_repo": "no-such-repository"})
        built_elsewhere = _complete(server.url, prompts[2], {"fastcoder_repo": "shared-pluggy"})
        lsp_items = _complete_through_the_language_server(server.url, pluggy, tmp_path)
        with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
        import time

        deadline = time.monotonic() + 20  # the proposer rewrites its statistics at most once a second
        stats = server.proposer_stats() or {}
        while stats.get("rows_by_repo", {}).get("no-such-repository") is None and time.monotonic() < deadline:
            time.sleep(0.5)
            stats = server.proposer_stats() or {}
    finally:
        server.stop()
    assert _gone(server)

    assert with_repo == reference  # token for token, greedy
    assert by_folder == reference[0] and unknown == reference[1] and built_elsewhere == reference[2]
    assert lsp_items and lsp_items[0]["insertText"].strip(), lsp_items  # the editor got a suggestion from vLLM
    accepted = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("vllm:spec_decode_num_accepted_tokens_total"))
    assert accepted > 0, metrics
    assert stats["errors"] == 0, stats
    assert stats["rows_by_repo"].get("pluggy", 0) > 0 and stats["unknown_repo_rows"] > 0, stats
    # the D_r built elsewhere drafted, and the language server's requests reached the proposer with its repoId
    assert stats["rows_by_repo"].get("shared-pluggy", 0) > 0 and stats["rows_by_repo"].get("lsp-pluggy", 0) > 0, stats
    assert stats["accepted_by_source"].get("repo", 0) > 0, stats  # D_r of the real repository drafted


def _complete_through_the_language_server(url: str, pluggy: Path, tmp_path: Path) -> list[dict]:
    """The real language server (stdio) with ``backend: openai`` against ``url`` and ``repoId: lsp-pluggy``:
    one inline completion inside a function body of a pluggy file; returns its items."""
    from tests.lsp_raw import RawServer

    ws = tmp_path / "lsp-ws"
    ws.mkdir()
    text = (pluggy / "_manager.py").read_text(encoding="utf-8")
    (ws / "_manager.py").write_text(text)
    lines = text.splitlines()
    line = next(i for i, l in enumerate(lines) if l.strip().startswith("return ") and i > len(lines) // 3)
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"backend": "openai", "endpoint": url + "/v1", "model": str(TINY_CODER),
                               "repoId": "lsp-pluggy", "maxNewTokens": 24, "stopAt": "line"})
        assert server.wait_ready(300)["state"] == "ready"
        uri = server.open(ws / "_manager.py")
        col = len(lines[line]) - len(lines[line].lstrip()) + len("return ")
        reply = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": col},
            "context": {"triggerKind": 1}}, timeout=300)
        return reply["result"]["items"]
    finally:
        assert server.close() == 0
