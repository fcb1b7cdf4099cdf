"""Type-through and the warm cache through the real server (issue #10)."""

from __future__ import annotations

import pytest

from conftest import TINY_CODER
from lsp_raw import RawServer
from lsp_server.typethrough import Suggestion, type_through


def test_type_through_rules():
    shown = Suggestion("u", 3, "    x = ", "", "compute(a, b)")
    assert type_through(shown, "u", 3, "    x = comp", "") == "ute(a, b)"
    assert type_through(shown, "u", 3, "    x = ", "") is None  # nothing typed: ask the model
    assert type_through(shown, "u", 3, "    x = cx", "") is None  # diverged
    assert type_through(shown, "u", 4, "    x = comp", "") is None  # another line
    assert type_through(shown, "v", 3, "    x = comp", "") is None  # another document
    assert type_through(shown, "u", 3, "    x = compute(a, b)", "") is None  # all typed
    assert type_through(shown, "u", 3, "    x = comp", ")") is None  # the text after the cursor changed


def _wait_counter(server: RawServer, name: str, at_least: int) -> dict:
    """``fastcoder/status`` once counter ``name`` reaches ``at_least`` (polled, 30 s at most)."""
    status: dict = {}
    for _ in range(600):
        status = server.request("fastcoder/status")["result"]
        if status["counters"].get(name, 0) >= at_least:
            break
        with server._cond:
            server._cond.wait(0.05)
    return status


BODY = ("def area(width, height):\n    return width * height\n\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n\n\n"
        "def volume(width, height, depth):\n    ")


@pytest.mark.slow
def test_typing_what_the_suggestion_says_is_answered_without_the_model(tmp_path, model_workspace):
    ws = model_workspace
    (ws / "shapes.py").write_text(BODY)
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "commonDatastore": "none"})
        assert server.wait_ready()["state"] == "ready"
        uri = server.open(ws / "shapes.py", BODY)
        line, col = BODY.count("\n"), 4
        # the open document is prefilled in the background before anything is asked
        deadline_status = _wait_counter(server, "warm_prefills", 1)
        assert deadline_status["counters"].get("warm_prefills", 0) >= 1
        first = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": col},
            "context": {"triggerKind": 2}})["result"]["items"]
        status = server.request("fastcoder/status")["result"]
        assert status["last"]["reused_prompt_tokens"] > 0  # the warm prefill served the request
        assert first, "the model suggested nothing here"
        text = first[0]["insertText"]
        assert len(text) >= 2
        model_calls = status["counters"]["requests"]
        typed = text[0]
        server.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": 2},
            "contentChanges": [{"range": {"start": {"line": line, "character": col},
                                          "end": {"line": line, "character": col}}, "text": typed}]})
        second = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": col + 1},
            "context": {"triggerKind": 2}})["result"]["items"]
        assert second and second[0]["insertText"] == text[1:]
        after = server.request("fastcoder/status")["result"]
        assert after["counters"]["requests"] == model_calls  # no model call
        assert after["counters"]["type_through"] == 1
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def test_deadline_answers_hold_whole_lines_only_and_healed_bytes_are_stripped():
    from lsp_server.postprocess import strip_healed, whole_lines

    assert whole_lines("x = compute(a") == ""
    assert whole_lines("x = 1\ny = comp") == "x = 1\n"
    assert strip_healed(" return x", b" ret") == "urn x"
    assert strip_healed("other", b" ret") == "other"  # not constrained: unchanged


def test_typing_replay_plan_blanks_bodies_and_types_them_back():
    from lsp_server.bench_latency import plan_typing

    start, keys = plan_typing(BODY.replace("    ", "    ", 1) + "return width\n", 3, 1000, seed=1)
    original_lines = (BODY + "return width\n").split("\n")
    lines = start.split("\n")
    typed_lines = {k.line for k in keys}
    for line in typed_lines:  # each typed line starts blank (indentation kept) and is typed back whole
        body = original_lines[line]
        assert lines[line] == body[:len(body) - len(body.lstrip())]
        assert "".join(k.char for k in keys if k.line == line) == body.strip()
    assert all(0.05 < k.gap_s < 1.0 for k in keys)
    assert keys[0].rest.startswith(keys[0].char)


@pytest.mark.slow
def test_cancelling_a_request_another_one_types_through_does_not_cancel_that_one(tmp_path, model_workspace):
    """VS Code cancels request A when it sends B on the next keystroke; B may be waiting for A's answer
    (type-through of a running completion): B must still get an answer, not RequestCancelled."""
    ws = model_workspace
    (ws / "shapes.py").write_text(BODY)
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "commonDatastore": "none", "stopAt": "block",
                               "maxNewTokens": 64, "warmCache": False})
        assert server.wait_ready()["state"] == "ready"
        uri = server.open(ws / "shapes.py", BODY)
        line, col = BODY.count("\n"), 4
        for attempt in range(3):
            server.send({"jsonrpc": "2.0", "id": 500 + attempt, "method": "textDocument/inlineCompletion",
                         "params": {"textDocument": {"uri": uri}, "position": {"line": line, "character": col},
                                    "context": {"triggerKind": 2}}})
            server.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": 2 + attempt},
                "contentChanges": [{"range": {"start": {"line": line, "character": col},
                                              "end": {"line": line, "character": col}}, "text": "r"}]})
            server.send({"jsonrpc": "2.0", "id": 600 + attempt, "method": "textDocument/inlineCompletion",
                         "params": {"textDocument": {"uri": uri}, "position": {"line": line, "character": col + 1},
                                    "context": {"triggerKind": 2}}})
            server.notify("$/cancelRequest", {"id": 500 + attempt})
            second = server.wait_for(600 + attempt)
            assert "result" in second, second  # answered, not cancelled
            server.wait_for(500 + attempt)  # the cancelled one is answered too (error or empty)
            col += 1
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()



@pytest.mark.slow
def test_cursor_notification_prefills_where_the_cursor_rests(tmp_path, model_workspace):
    """``fastcoder/cursor`` (sent by both clients when the cursor stops) prefills the prompt there, so the first
    request at that place reuses it; malformed notifications are ignored and the server keeps answering."""
    ws = model_workspace
    (ws / "shapes.py").write_text(BODY)
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "commonDatastore": "none", "maxNewTokens": 8})
        assert server.wait_ready()["state"] == "ready"
        uri = server.open(ws / "shapes.py", BODY)
        opened = _wait_counter(server, "warm_prefills", 1)["counters"]["warm_prefills"]  # the open document's
        for bad in (None, [], {"position": "x"}, {"textDocument": {"uri": 5}, "position": {"line": 0, "character": 0}},
                    {"textDocument": {"uri": uri}, "position": {"line": 99, "character": 0}},
                    {"textDocument": {"uri": "file:///not/open.py"}, "position": {"line": 0, "character": 0}}):
            server.notify("fastcoder/cursor", bad)
        status = server.request("fastcoder/status")["result"]
        assert status["state"] == "ready" and status["counters"].get("errors", 0) == 0
        # the cursor rests in the first function's body: far from the open document's warm prompt (its end)
        server.notify("fastcoder/cursor", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}})
        status = _wait_counter(server, "warm_prefills", opened + 1)
        assert status["counters"]["warm_prefills"] == opened + 1
        server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}, "context": {"triggerKind": 2}})
        last = server.request("fastcoder/status")["result"]["last"]
        # all of the prompt but its last token (re-run for its logits) came from the cursor's prefill
        assert last["reused_prompt_tokens"] >= last["prompt_tokens"] - 1, last
        server.notify("workspace/didChangeConfiguration", {"settings": {"fastcoder": {"warmOnCursor": False}}})
        assert server.request("fastcoder/status")["result"]["settings"]["warm_on_cursor"] is False
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
