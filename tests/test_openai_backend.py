"""The ``openai`` backend (lsp_server.backends.OpenAIBackend) against a fake OpenAI server on 127.0.0.1:
streaming, the FIM prompt it sends, cancellation closing the stream, an unreachable endpoint reported once.
No vLLM and no model weights: only tiny-py-coder's tokenizer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lsp_server import backends
from lsp_server.backends import CancelEvent, OpenAIBackend, normalize_endpoint, prompt_text
from lsp_server.host import CompletionRequest, EngineHost
from lsp_server.postprocess import CursorContext, postprocess
from lsp_server.prompt import build_fim_prompt, prompt_budget
from lsp_server.settings import Settings, parse_settings
from tests.conftest import TINY_CODER
from tests.fake_openai import FakeOpenAI, closed_port

pytestmark = pytest.mark.skipif(not TINY_CODER.exists(), reason=f"tiny-py-coder tokenizer not at {TINY_CODER}")

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"
PIECES = ["return", " a", " +", " b", "\n", "\n", "def sub(a, b):"]


class Backend:
    """An OpenAIBackend on its own EngineHost, collecting notifications."""

    def __init__(self, endpoint: str, **options):
        settings, warnings = parse_settings({"fastcoder": {"backend": "openai", "endpoint": endpoint,
                                                           "model": str(TINY_CODER), "maxNewTokens": 16,
                                                           "stopAt": "line", **options}})
        assert not warnings, warnings
        self.messages: list[tuple[str, str]] = []
        self.host = EngineHost(settings, notify=lambda level, msg: self.messages.append((level, msg)))
        self.backend = OpenAIBackend(self.host, self.host.notify)

    def request(self, prefix: str = PREFIX, suffix: str = SUFFIX) -> CompletionRequest:
        return CompletionRequest(uri="file:///ws/m.py", version=1, prefix=prefix, suffix=suffix,
                                 folder="/ws", cancel=CancelEvent())

    def errors(self) -> list[str]:
        return [m for level, m in self.messages if level == "error"]

    def close(self) -> None:
        self.host.shutdown()


def run(coro, timeout: float = 60.0):
    async def main():
        return await asyncio.wait_for(coro(), timeout)

    return asyncio.run(main())


def test_settings_and_endpoint_normalization():
    s, warnings = parse_settings({"backend": "openai", "endpoint": "localhost:8000", "repoId": " r1 "})
    assert s.backend == "openai" and s.repo_id == "r1"
    assert warnings == ["fastcoder.endpoint: expected an http:// or https:// URL such as http://127.0.0.1:8000/v1, "
                        "got 'localhost:8000'; using 'http://127.0.0.1:8000/v1'"]
    _, warnings = parse_settings({"backend": "vllm"})
    assert "fastcoder.backend: expected one of local, openai" in warnings[0]
    assert Settings().backend == "local"
    assert normalize_endpoint("http://h:8000") == "http://h:8000/v1"
    assert normalize_endpoint("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalize_endpoint("https://h/api/v1/completions") == "https://h/api/v1"


def test_streams_the_same_fim_prompt_and_postprocesses(tiny_tokenizer):
    with FakeOpenAI(PIECES) as fake:
        b = Backend(fake.url, repoId="team-repo", seed=7)

        async def go():
            await b.backend.start()
            return await b.backend.complete(b.request())

        try:
            out = run(go)
        finally:
            b.close()
    ctx = CursorContext.from_split(PREFIX, SUFFIX)
    assert out.text == postprocess("".join(PIECES), ctx, "line") == "return a + b"
    assert out.finish_reason == "stop"
    body = fake.requests[-1]
    # the local backend's FIM prompt (same budget, no healing) as text; re-tokenized it is the same ids
    ids = build_fim_prompt(tiny_tokenizer, PREFIX, SUFFIX, prompt_budget(None, None, 16)).token_ids
    assert body["prompt"] == prompt_text(tiny_tokenizer, ids)
    assert body["prompt"].startswith("<|fim_prefix|>def add") and body["prompt"].endswith("<|fim_middle|>")
    assert tiny_tokenizer.encode(body["prompt"], add_special_tokens=False) == ids
    assert body["model"] == "fake-model"  # learned from GET /v1/models
    assert body["stream"] is True and body["max_tokens"] == 16 and body["seed"] == 7
    assert body["stop"] == ["\n"]
    assert body["vllm_xargs"] == {"fastcoder_repo": "team-repo", "fastcoder_doc": "file:///ws/m.py"}
    st = b.backend.status()
    assert st["endpoint"]["state"] == "reachable" and st["endpoint"]["counters"]["streamed"] == 1
    assert b.errors() == []


def test_no_repo_id_sends_no_vllm_xargs_and_auto_sends_the_folder():
    with FakeOpenAI(PIECES) as fake:
        plain, auto = Backend(fake.url), Backend(fake.url, repoId="auto")

        async def go():
            await plain.backend.start()
            await auto.backend.start()
            await plain.backend.complete(plain.request())
            await auto.backend.complete(auto.request())

        try:
            run(go)
        finally:
            plain.close()
            auto.close()
    assert "vllm_xargs" not in fake.requests[0]
    assert fake.requests[1]["vllm_xargs"]["fastcoder_repo"] == "/ws"


def test_cancel_closes_the_stream():
    with FakeOpenAI(PIECES) as fake:
        fake.hold_after = 2
        b = Backend(fake.url)

        async def go():
            await b.backend.start()
            req = b.request()
            task = asyncio.ensure_future(b.backend.complete(req))
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, fake.sent_held.wait, 20), "no stream started"
            req.cancel.set()  # what a newer request / $/cancelRequest does, from the loop or any thread
            out = await task
            closed = await loop.run_in_executor(None, fake.closed.wait, 10)
            return out, closed

        try:
            out, closed = run(go)
        finally:
            b.close()
    assert out.text is None and out.finish_reason == "cancelled"
    assert closed, "the HTTP connection stayed open after the request was cancelled"
    assert b.backend.counters["cancelled"] == 1


def test_unreachable_endpoint_reported_once_then_recovers(monkeypatch):
    monkeypatch.setattr(backends, "RETRY_S", 0.0)  # retry the connection on every request
    port = closed_port()
    b = Backend(f"http://127.0.0.1:{port}/v1")

    async def down():
        await b.backend.start()  # the probe fails
        return [await b.backend.complete(b.request()) for _ in range(3)]

    try:
        outs = run(down)
        assert [o.text for o in outs] == [None, None, None]
        assert {o.finish_reason for o in outs} == {"unreachable"}
        errors = b.errors()
        assert len(errors) == 1, errors
        assert f"127.0.0.1:{port}/v1 is unreachable" in errors[0]
        st = b.backend.status()
        assert st["state"] == "ready" and st["endpoint"]["state"] == "unreachable"
        assert "unreachable" in st["error"] and st["endpoint"]["counters"]["unreachable"] == 4
        with FakeOpenAI(PIECES, port=port):  # the server comes up: the next request streams
            out = run(lambda: b.backend.complete(b.request()))
        assert out.text == "return a + b"
        assert b.backend.status()["endpoint"]["state"] == "reachable" and "error" not in b.backend.status()
        assert any("answers again" in m for level, m in b.messages if level == "info")
        assert len(b.errors()) == 1
    finally:
        b.close()


def test_http_error_reported_once_and_empty():
    with FakeOpenAI(PIECES) as fake:
        fake.status = 404
        b = Backend(fake.url, endpointModel="no-such-model")

        async def go():
            await b.backend.start()
            return [await b.backend.complete(b.request()) for _ in range(2)]

        try:
            outs = run(go)
        finally:
            b.close()
    assert [o.text for o in outs] == [None, None]
    assert fake.requests[0]["model"] == "no-such-model"
    errors = b.errors()
    assert len(errors) == 1 and "HTTP 404" in errors[0] and "no-such-model" in errors[0], errors
    assert b.backend.status()["endpoint"]["state"] == "error"


def test_deadline_keeps_whole_lines():
    with FakeOpenAI(["x = 1\n", "y = 2", " + 1\n"]) as fake:
        fake.hold_after = 2  # the stream stalls mid-line
        b = Backend(fake.url, deadlineMs=1500, stopAt="block")

        async def go():
            await b.backend.start()
            return await b.backend.complete(b.request(prefix="", suffix=""))

        try:
            out = run(go)
        finally:
            b.close()
    assert out.finish_reason == "deadline" and out.text == "x = 1"


def test_tokenizer_missing_is_an_error_state(tmp_path):
    b = Backend("http://127.0.0.1:9/v1")
    b.host.settings = Settings(backend="openai", model=str(tmp_path / "nothing"))
    try:
        run(b.backend.start)
        out = run(lambda: b.backend.complete(b.request()))
    finally:
        b.close()
    assert b.backend.state == "error" and out.text is None
    assert "fastcoder.model" in b.errors()[0]


def test_index_build_repo_saves_a_loadable_datastore(tmp_path, capsys, tiny_tokenizer):
    """``fastcoder index build --repo``: D_r reaches the endpoint's side as a saved datastore folder."""
    import importlib.util
    import json
    import shutil

    import numpy as np

    from engine.cli import REPO_INFO_FILE, main
    from engine.common_datastore import tokenizer_fingerprint
    from engine.datastore import Datastore

    src = Path(importlib.util.find_spec("pluggy").submodule_search_locations[0])  # third-party code
    repo = tmp_path / "pluggy-copy"
    shutil.copytree(src, repo, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "shared" / "dr-pluggy"
    assert main(["index", "build", "--model", str(TINY_CODER), "--device", "cpu", "--repo", str(repo),
                 "--repo-id", "pluggy", "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["repo_id"] == "pluggy" and info["root"] == str(repo.resolve()) and info["path"] == str(out)
    assert json.loads((out / REPO_INFO_FILE).read_text()) == info
    ds = Datastore.load(out, tokenizer_fingerprint=tokenizer_fingerprint(tiny_tokenizer))
    assert ds.num_tokens == info["tokens"] + ds.num_documents and info["files"] >= 5
    text = (repo / "_hooks.py").read_text()
    ids = tiny_tokenizer.encode(text[1000:1400], add_special_tokens=False)
    hit = ds.search(np.asarray(ids[:40]), n_max=16, n_min=4, draft_len=8)
    assert hit.match_length == 16  # the repository's own code is found in the saved D_r
    assert main(["index", "build", "--repo", str(tmp_path / "missing")]) == 2


@pytest.mark.vllm
def test_real_endpoint_matches_the_local_greedy_completion(tiny_coder):
    """Against a real server (vLLM: ``vllm serve tiny-py-coder --dtype float32``) named by
    $FASTCODER_TEST_OPENAI_ENDPOINT: the openai backend's completion equals the local backend's greedy
    completion (token healing off, the only prompt difference) at positions of real third-party code."""
    import os

    from engine import SpeculativeDecoder
    from lsp_server.postprocess import generation_stop
    from tests.conftest import third_party_sources

    endpoint = os.environ.get("FASTCODER_TEST_OPENAI_ENDPOINT")
    if not endpoint:
        pytest.skip("set FASTCODER_TEST_OPENAI_ENDPOINT to a server running tiny-py-coder (e.g. vllm serve)")
    b = Backend(endpoint)
    decoder = SpeculativeDecoder(tiny_coder, method="ar")
    cases = []
    for path in third_party_sources(3):
        text = path.read_text(encoding="utf-8")
        for frac in (0.3, 0.6):
            cut = text.find("\n", int(len(text) * frac)) + 1
            line_end = text.find("\n", cut)
            cut += (line_end - cut) // 2  # mid-line
            cases.append((path.name, text[:cut], text[cut:]))

    async def go():
        await b.backend.start()
        assert b.backend.endpoint_state == "reachable", b.backend.status()
        return [await b.backend.complete(b.request(prefix, suffix)) for _, prefix, suffix in cases]

    try:
        outs = run(go, timeout=600)
    finally:
        b.close()
    matched = 0
    for (name, prefix, suffix), out in zip(cases, outs):
        prompt = build_fim_prompt(tiny_coder.tokenizer, prefix, suffix, prompt_budget(None, None, 16))
        ctx = CursorContext.from_split(prefix, suffix)
        res = decoder.generate(prompt.token_ids, max_new_tokens=16, stop=generation_stop("line", ctx))
        local = postprocess(res.text, ctx, "line")
        assert out.text == local, (name, out.finish_reason, out.text, local)
        matched += local is not None
    assert matched >= 3, "too few non-empty completions to compare"
