"""The language server's ``method`` setting with SDSAT (issue #11): a model without adaptive-token
metadata is refused with a message that says what to do, and an SDSAT model completes exactly as ``ar``.

The SDSAT model here is tiny-py-coder's files plus an ``sdsat.json`` naming its reserved token (never
trained as an adaptive token: its drafts are mostly rejected, which is what losslessness must survive).
"""

from __future__ import annotations

import json

import pytest

from lsp_raw import RawServer
from tests.conftest import TINY_CODER

BODY = ("def area(width, height):\n    return width * height\n\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n\n\n"
        "def volume(width, height, depth):\n    ")


def _complete(server, uri):
    return server.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": BODY.count("\n"), "character": 4},
        "context": {"triggerKind": 1}})["result"]["items"]


def _set(server, **options):
    server.notify("workspace/didChangeConfiguration", {"settings": {"fastcoder": options}})


@pytest.mark.slow
def test_sdsat_method_needs_an_sdsat_model_and_matches_ar(tmp_path, model_workspace):
    from transformers import AutoTokenizer

    sdsat_model = tmp_path / "tiny-sdsat"
    sdsat_model.mkdir()
    for f in TINY_CODER.iterdir():
        (sdsat_model / f.name).symlink_to(f)
    reserved = AutoTokenizer.from_pretrained(str(TINY_CODER)).convert_tokens_to_ids("<|reserved_0|>")
    (sdsat_model / "sdsat.json").write_text(json.dumps({"adaptive_token_id": reserved, "max_window": 8}))
    ws = model_workspace
    (ws / "shapes.py").write_text(BODY)
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "method": "sdsat", "commonDatastore": "none",
                               "warmCache": False, "maxNewTokens": 24})
        status = server.wait_ready()
        assert status["state"] == "error" and "train-sdsat" in status["error"], status
        assert any("train-sdsat" in n["params"].get("message", "") for n in server.notifications
                   if n["method"] == "window/showMessage"), "the user is told, not only the status"
        uri = server.open(ws / "shapes.py", BODY)
        assert _complete(server, uri) == [], "no model: an empty answer, never a hang"

        _set(server, model=str(sdsat_model), method="sdsat", commonDatastore="none", warmCache=False,
             maxNewTokens=24)
        assert server.wait_ready()["state"] == "ready"
        with_sdsat = _complete(server, uri)
        status = server.request("fastcoder/status")["result"]
        assert status["method"] == "sdsat" and status["last"]["forward_passes"] >= 1

        _set(server, model=str(sdsat_model), method="ar", commonDatastore="none", warmCache=False,
             maxNewTokens=24)
        assert server.wait_ready()["state"] == "ready"
        with_ar = _complete(server, uri)
        assert with_ar and [i["insertText"] for i in with_sdsat] == [i["insertText"] for i in with_ar]
    finally:
        assert server.close() == 0
