"""End-to-end tests that need a fresh fastcoder server each: answers while loading, a model that fails to
load, a workspace folder that vanishes. The real server subprocess and the real engine throughout."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp_server.demo import to_plain

MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "tiny-py-coder"
pytestmark = pytest.mark.skipif(not MODEL.is_dir(), reason="tiny-py-coder not available")


async def wait(coro, timeout: float = 30.0):
    return await asyncio.wait_for(coro, timeout)


async def status(client: LanguageClient) -> dict:
    return to_plain(await wait(client.protocol.send_request_async("fastcoder/status", {})))


async def start(client: LanguageClient, root: Path, options: dict) -> None:
    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def _register(ls, params):
        return None

    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()),
        window=types.WindowClientCapabilities(work_done_progress=True))
    await wait(client.initialize_session(types.InitializeParams(
        capabilities=caps, root_uri=root.as_uri(), initialization_options={"fastcoder": options},
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)])))


def open_and_params(client: LanguageClient, path: Path, text: str, line: int, ch: int):
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=path.as_uri(), language_id="python", version=1, text=text)))
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri()), position=types.Position(line, ch),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server"]))
async def client(lsp_client: LanguageClient):
    yield
    await wait(lsp_client.shutdown_session())


async def test_empty_answers_while_loading_then_progress(client: LanguageClient, tmp_path: Path):
    (tmp_path / "a.py").write_text("def f(x):\n    return x\n")
    await start(client, tmp_path, {"model": str(MODEL), "commonDatastore": "none"})
    params = open_and_params(client, tmp_path / "a.py", "def f(x):\n    return x\n\nf(", 3, 2)
    t0 = time.perf_counter()
    res = await wait(client.text_document_inline_completion_async(params))
    assert list(res.items) == [] and (time.perf_counter() - t0) < 1.0
    assert (await status(client))["state"] == "loading"
    deadline = time.monotonic() + 120
    while (await status(client))["state"] != "ready":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    # server-initiated progress: begin ... end
    deadline = time.monotonic() + 30
    while not any(isinstance(r[-1], types.WorkDoneProgressEnd) for r in client.progress_reports.values() if r):
        assert time.monotonic() < deadline, client.progress_reports
        await asyncio.sleep(0.1)
    reports = next(iter(client.progress_reports.values()))
    assert isinstance(reports[0], types.WorkDoneProgressBegin)


async def test_model_that_fails_to_load(client: LanguageClient, tmp_path: Path):
    await start(client, tmp_path, {"model": str(tmp_path / "no-such-model"), "commonDatastore": "none"})
    deadline = time.monotonic() + 60
    while (st := await status(client))["state"] != "error":
        assert time.monotonic() < deadline, st
        await asyncio.sleep(0.1)
    assert "no-such-model" in st["error"]
    params = open_and_params(client, tmp_path / "b.py", "x = 1\n", 1, 0)
    for _ in range(2):
        res = await wait(client.text_document_inline_completion_async(params))
        assert list(res.items) == []
    errors = [m for m in client.messages if m.type == types.MessageType.Error]
    assert len(errors) == 1 and "no-such-model" in errors[0].message  # said once, with the reason
    # a corrected setting recovers without a restart
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"fastcoder": {"model": str(MODEL)}}))
    deadline = time.monotonic() + 120
    while (st := await status(client))["state"] != "ready":
        assert time.monotonic() < deadline, st
        await asyncio.sleep(0.1)


async def test_workspace_folder_that_vanishes(client: LanguageClient, tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "m.py").write_text("def g(y):\n    return y * 2\n")
    shutil.rmtree(root)  # gone before the index is built
    await start(client, root, {"model": str(MODEL), "commonDatastore": "none"})
    deadline = time.monotonic() + 120
    while True:
        st = await status(client)
        if st["state"] == "ready" and st["repo"][0]["state"] == "error":
            break
        assert time.monotonic() < deadline, st
        await asyncio.sleep(0.1)
    assert "does not exist" in st["repo"][0]["error"]
    assert any("does not exist" in m.message for m in client.messages)
    params = open_and_params(client, root / "m.py", "def g(y):\n    return y", 1, 12)
    res = await wait(client.text_document_inline_completion_async(params), 60)
    assert isinstance(res.items, (list, tuple))  # served without D_r
