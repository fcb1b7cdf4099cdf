"""Fuzz: >= 1,000 seeded malformed requests and notifications against the real server over stdio.

Every request that carries a valid id gets a response with that id (a result or an error); messages
whose id cannot be read (invalid JSON, a bad id) get an error with ``"id": null``; the process stays
alive, completes normally afterwards, exits with 0 after shutdown + exit, and writes nothing into the
workspace (issue #12).
"""

from __future__ import annotations

import collections
import json
import random

import pytest

from conftest import TINY_CODER
from lsp_raw import RawServer

SEED = 12
COUNT = 1200

METHODS = ["textDocument/inlineCompletion", "textDocument/hover", "textDocument/completion", "fastcoder/status",
           "fastcoder/repoContains", "fastcoder/rebuildIndex", "workspace/executeCommand", "initialize",
           "textDocument/definition", "$/unknownRequest", "nope/nope", ""]
NOTIFICATIONS = ["textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "textDocument/didSave",
                 "workspace/didChangeConfiguration", "workspace/didChangeWatchedFiles", "$/cancelRequest",
                 "$/setTrace", "$/unknown", "custom/notification", "initialized"]


def _junk(rng: random.Random, depth: int = 0):
    kinds = ["int", "str", "null", "bool", "float", "list", "dict", "huge", "neg"]
    kind = rng.choice(kinds if depth < 2 else kinds[:5])
    return {"int": lambda: rng.randint(-5, 5), "str": lambda: rng.choice(["", "x", "file:///nope", "\u00e9\x00"]),
            "null": lambda: None, "bool": lambda: rng.random() < 0.5, "float": lambda: rng.random() * 1e9,
            "list": lambda: [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))],
            "dict": lambda: {rng.choice(["a", "uri", "line", "position", "textDocument"]): _junk(rng, depth + 1)
                             for _ in range(rng.randint(0, 3))},
            "huge": lambda: 2 ** 63, "neg": lambda: -(2 ** 31)}[kind]()


def _completion_params(rng: random.Random, uri: str) -> dict:
    params = {"textDocument": {"uri": uri}, "position": {"line": rng.choice([0, 1, -1, 10 ** 9, 2 ** 40]),
                                                         "character": rng.choice([0, 3, -7, 10 ** 12])},
              "context": {"triggerKind": rng.choice([1, 2, 0, 7, "x", None])}}
    for _ in range(rng.randint(0, 2)):  # drop or garble fields
        key = rng.choice(list(params))
        if rng.random() < 0.5:
            params.pop(key)
        else:
            params[key] = _junk(rng)
    return params


def _message(rng: random.Random, msg_id: int, uri: str):
    """One malformed message: (object or bytes, expected answer: 'id' | 'null' | None, length delta)."""
    roll = rng.random()
    if roll < 0.30:
        return {"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion",
                "params": _completion_params(rng, uri)}, "id", 0
    if roll < 0.45:
        return {"jsonrpc": "2.0", "id": msg_id, "method": rng.choice(METHODS), "params": _junk(rng)}, "id", 0
    if roll < 0.55:
        return {"jsonrpc": "2.0", "method": rng.choice(NOTIFICATIONS), "params": _junk(rng)}, None, 0
    if roll < 0.62:  # a notification sent with an id
        return {"jsonrpc": "2.0", "id": msg_id, "method": rng.choice(NOTIFICATIONS[:6]), "params": _junk(rng)}, "id", 0
    if roll < 0.68:  # method not a string
        return {"jsonrpc": "2.0", "id": msg_id, "method": _junk(rng) if rng.random() < 0.5 else 7, "params": {}}, "id", 0
    if roll < 0.72:  # a bad id
        return {"jsonrpc": "2.0", "id": rng.choice([1.5, None, [1], {"a": 1}, True]), "method": "fastcoder/status"}, \
            "null", 0
    if roll < 0.76:  # wrong or missing protocol version
        msg = {"id": msg_id, "method": "fastcoder/status"}
        if rng.random() < 0.5:
            msg["jsonrpc"] = rng.choice(["1.0", 2, None])
        return msg, "id", 0
    if roll < 0.82:  # invalid JSON or not an object
        return rng.choice([b"{", b"[1, 2", b"nul", b"\xff\xfe", b'{"jsonrpc": "2.0", "id": ']), "null", 0
    if roll < 0.85:
        return rng.choice([42, "text", None, []]), "null", 0
    if roll < 0.92:  # a batch: each element is answered on its own
        return [{"jsonrpc": "2.0", "id": msg_id, "method": "fastcoder/status"},
                {"jsonrpc": "2.0", "method": "$/unknown"}], "id", 0
    # a Content-Length that is too short: the cut body is a parse error (id null) and the reader
    # resynchronises on the next header
    return {"jsonrpc": "2.0", "id": msg_id, "method": "fastcoder/status"}, "short", -rng.randint(1, 10)


@pytest.mark.slow
def test_every_malformed_request_is_answered_and_the_server_survives(tmp_path, model_workspace):
    ws = model_workspace
    (ws / "app.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    before = sorted((p.relative_to(ws), p.stat().st_mtime_ns) for p in ws.rglob("*"))
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "commonDatastore": "none"})
        assert server.wait_ready()["state"] == "ready"
        uri = server.open(ws / "app.py")
        rng = random.Random(SEED)
        expected_ids, expected_null, sent = [], 0, collections.Counter()
        for i in range(COUNT):
            msg_id = 10_000 + i
            obj, answer, delta = _message(rng, msg_id, uri)
            server.send(obj, length_delta=delta)
            sent[answer or "notification"] += 1
            if answer == "id":
                expected_ids.append(msg_id)
            elif answer in ("null", "short"):
                expected_null += 1
        # everything sent before this request has been read and dispatched by the time it is answered
        status = server.request("fastcoder/status", None, timeout=120)
        assert server.wait_until(lambda: all(i in server.responses for i in expected_ids), 120), \
            f"unanswered: {[i for i in expected_ids if i not in server.responses][:10]}"
        assert server.wait_until(lambda: len(server.null_id) >= expected_null, 30), \
            (len(server.null_id), expected_null)
        assert server.proc.poll() is None and status["result"]["state"] == "ready"
        codes = collections.Counter(server.responses[i].get("error", {}).get("code", "result") for i in expected_ids)
        codes.update(f"null:{m['error']['code']}" for m in server.null_id)
        print(f"\nfuzz: sent {dict(sent)}; answers by code {dict(codes)}")
        assert sum(sent.values()) >= 1000
        # a valid completion afterwards
        done = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}, "context": {"triggerKind": 1}},
            timeout=120)
        assert "error" not in done and isinstance(done["result"]["items"], list)
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    after = sorted((p.relative_to(ws), p.stat().st_mtime_ns) for p in ws.rglob("*"))
    assert after == before, "the server wrote into the workspace"


def test_exit_without_shutdown_exits_with_1(tmp_path):
    server = RawServer(cwd=tmp_path)
    server.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    server.notify("exit")
    assert server.proc.wait(30) == 1


def test_a_too_short_content_length_does_not_leave_the_server_deaf(tmp_path):
    server = RawServer(cwd=tmp_path)
    try:
        server.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        server.send({"jsonrpc": "2.0", "id": 5, "method": "fastcoder/status"}, length_delta=-3)
        server.send({"jsonrpc": "2.0", "id": 6, "method": "fastcoder/status"}, length_delta=+40)  # swallows id 7
        server.send({"jsonrpc": "2.0", "id": 7, "method": "fastcoder/status"})
        server.send({"jsonrpc": "2.0", "id": 8, "method": "fastcoder/status"})
        assert "result" in server.wait_for(8)
        assert "result" in server.wait_for(6) and "result" in server.wait_for(7)
        assert server.null_id and server.null_id[0]["error"]["code"] == -32700
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def test_malformed_input_raises_no_error_popup(tmp_path):
    server = RawServer(cwd=tmp_path)
    try:
        server.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        server.notify("textDocument/didChange", {"garbage": True})
        server.send(b"{broken")
        assert server.request("textDocument/hover", {"x": 1})["error"]["code"] == -32601
        shown = [n for n in server.notifications if n["method"] == "window/showMessage"]
        assert not [n for n in shown if "Error in server" in json.dumps(n)]
    finally:
        server.proc.kill()
