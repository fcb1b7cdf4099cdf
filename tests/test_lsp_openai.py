"""End to end: the real language server (``python -m lsp_server`` over stdio, tests/lsp_raw.py) with
``backend: openai`` against a fake OpenAI server on 127.0.0.1 (tests/fake_openai.py). No model weights are
loaded (only tiny-py-coder's tokenizer) and no vLLM is needed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lsp_server.postprocess import CursorContext, postprocess
from tests.conftest import TINY_CODER
from tests.fake_openai import FakeOpenAI, closed_port
from tests.lsp_raw import RawServer

pytestmark = pytest.mark.skipif(not TINY_CODER.exists(), reason=f"tiny-py-coder tokenizer not at {TINY_CODER}")

TEXT = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
LINE, CHAR = 1, 4
PIECES = ["return", " a", " +", " b", "  # sum", "\n", "\n", "def sub(a, b):"]


def options(endpoint: str, **extra) -> dict:
    return {"backend": "openai", "endpoint": endpoint, "model": str(TINY_CODER), "maxNewTokens": 16,
            "stopAt": "line", **extra}


def inline(server: RawServer, uri: str, timeout: float = 30.0) -> dict:
    return server.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": LINE, "character": CHAR},
        "context": {"triggerKind": 1}}, timeout)


def shown(server: RawServer, needle: str) -> list[str]:
    return [n["params"]["message"] for n in list(server.notifications)
            if n["method"] == "window/showMessage" and needle in n["params"]["message"]]


def start(tmp_path: Path, opts: dict) -> tuple[RawServer, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "m.py").write_text(TEXT)
    server = RawServer(cwd=tmp_path)
    server.initialize(ws, opts)
    return server, ws


def test_inline_completion_is_the_postprocessed_streamed_answer(tmp_path):
    with FakeOpenAI(PIECES) as fake:
        server, ws = start(tmp_path, options(fake.url, repoId="auto"))
        try:
            status = server.wait_ready(120)
            assert status["state"] == "ready", status
            assert status["backend"] == "openai" and status["endpoint"]["url"] == fake.url
            uri = server.open(ws / "m.py")
            items = inline(server, uri)["result"]["items"]
            status = server.request("fastcoder/status")["result"]
        finally:
            assert server.close() == 0
    prefix = TEXT[:TEXT.index("\n") + 1 + CHAR]
    expected = postprocess("".join(PIECES), CursorContext.from_split(prefix, TEXT[len(prefix):]), "line")
    assert expected == "return a + b  # sum"
    assert [i["insertText"] for i in items] == [expected]
    body = fake.requests[-1]
    assert body["prompt"].startswith("<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>")
    assert Path(body["vllm_xargs"]["fastcoder_repo"]).resolve() == ws.resolve()
    assert body["vllm_xargs"]["fastcoder_doc"] == uri
    assert status["endpoint"]["state"] == "reachable" and status["endpoint"]["model"] == "fake-model"
    assert status["model"] == str(TINY_CODER) and status["error"] is None
    assert status["last"]["finish_reason"] == "stop"


def test_endpoint_down_answers_empty_and_reports_once(tmp_path):
    port = closed_port()
    server, ws = start(tmp_path, options(f"http://127.0.0.1:{port}"))
    try:
        assert server.wait_ready(120)["state"] == "ready"
        # the start-up probe already failed: reported once, shown in the status
        assert server.wait_until(lambda: shown(server, "unreachable"), 30), server.notifications
        uri = server.open(ws / "m.py")
        answers = [inline(server, uri)["result"] for _ in range(3)]
        status = server.request("fastcoder/status")["result"]
        messages = shown(server, "unreachable")
    finally:
        assert server.close() == 0
    assert answers == [{"items": []}] * 3
    assert len(messages) == 1, messages
    assert f"http://127.0.0.1:{port}/v1 is unreachable" in messages[0]
    assert status["endpoint"]["state"] == "unreachable"
    assert "unreachable" in status["error"] and "ConnectError" in status["endpoint"]["error"]


def test_cancel_request_closes_the_stream(tmp_path):
    with FakeOpenAI(PIECES) as fake:
        fake.hold_after = 2
        server, ws = start(tmp_path, options(fake.url))
        try:
            assert server.wait_ready(120)["state"] == "ready"
            uri = server.open(ws / "m.py")
            server.send({"jsonrpc": "2.0", "id": 77, "method": "textDocument/inlineCompletion", "params": {
                "textDocument": {"uri": uri}, "position": {"line": LINE, "character": CHAR},
                "context": {"triggerKind": 1}}})
            assert fake.sent_held.wait(30), "the server never streamed"
            server.notify("$/cancelRequest", {"id": 77})
            answer = server.wait_for(77, 30)
            closed = fake.closed.wait(10)
            fake.hold_after = None
            after = inline(server, uri)["result"]["items"]  # the server still streams afterwards
        finally:
            assert server.close() == 0
    assert answer.get("error", {}).get("code") == -32800 or answer.get("result") == {"items": []}, answer
    assert closed, "the HTTP stream stayed open after $/cancelRequest"
    assert [i["insertText"] for i in after] == ["return a + b  # sum"]


def test_endpoint_setting_changed_at_runtime(tmp_path):
    """didChangeConfiguration with a new endpoint restarts the openai backend: from a dead port to a live one."""
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    server, ws = start(tmp_path, options(dead))
    with FakeOpenAI(PIECES) as fake:
        try:
            assert server.wait_ready(120)["state"] == "ready"
            assert server.wait_until(lambda: shown(server, "unreachable"), 30)
            server.notify("workspace/didChangeConfiguration", {"settings": {"fastcoder": options(fake.url)}})

            deadline = time.monotonic() + 60
            while True:  # each poll waits on its response, then on any message from the server
                st = server.request("fastcoder/status")["result"]
                if st["endpoint"]["url"] == fake.url and st["endpoint"]["state"] == "reachable":
                    break
                assert time.monotonic() < deadline, st
                server.wait_until(lambda: False, 0.2)
            uri = server.open(ws / "m.py")
            items = inline(server, uri)["result"]["items"]
            status = server.request("fastcoder/status")["result"]
        finally:
            assert server.close() == 0
    assert [i["insertText"] for i in items] == ["return a + b  # sum"]
    assert status["error"] is None and len(shown(server, "unreachable")) == 1
