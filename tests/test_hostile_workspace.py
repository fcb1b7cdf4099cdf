"""Hostile workspaces (issue #12): special files never block indexing or the server."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from conftest import TINY_CODER
from engine.repo_datastore import RepoDatastore, read_source_text
from lsp_raw import RawServer


def _hostile_tree(root):
    (root / "good.py").write_text("def ok():\n    return 1\n")
    os.mkfifo(root / "late.py")
    os.mkfifo(root / ".gitignore")  # a FIFO where the ignore file should be
    (root / "loop.py").symlink_to(root / "loop.py")  # ELOOP
    (root / "dangling.py").symlink_to(root / "missing.py")
    sub = root / "sub"
    sub.mkdir()
    (sub / "up").symlink_to(root, target_is_directory=True)  # a directory loop
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock.py"))
    return sock


def test_special_files_are_never_read_and_never_block(tmp_path, tiny_tokenizer):
    sock = _hostile_tree(tmp_path)
    try:
        for name in ("late.py", ".gitignore", "loop.py", "dangling.py", "sock.py"):
            assert read_source_text(tmp_path / name) is None, name
        done = threading.Event()
        result = {}

        def build():
            result["ds"] = RepoDatastore.build(tmp_path, tiny_tokenizer)
            done.set()

        threading.Thread(target=build, daemon=True).start()
        assert done.wait(60), "indexing blocked on a special file"
        assert result["ds"].files() == ["good.py"]
    finally:
        sock.close()


@pytest.mark.slow
def test_a_fifo_in_the_workspace_does_not_hang_the_server(tmp_path, model_workspace):
    ws = model_workspace
    sock = _hostile_tree(ws)
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "commonDatastore": "none"})
        status = server.wait_ready()
        assert status["state"] == "ready"
        os.mkfifo(ws / "later.py")  # created while the server runs: the watcher sees it
        uri = server.open(ws / "good.py")
        server.notify("textDocument/didSave", {"textDocument": {"uri": (ws / "later.py").as_uri()}})
        answer = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}, "context": {"triggerKind": 1}},
            timeout=60)
        assert "result" in answer
        repo = server.wait_indexed()["repo"]  # indexing finished despite the FIFOs
        assert repo and repo[0]["state"] == "ready"
        assert server.close() == 0  # shutdown + exit end the process
    finally:
        sock.close()
        if server.proc.poll() is None:
            server.proc.kill()


@pytest.mark.slow
def test_a_checkout_of_many_files_does_not_block_completions_and_d_r_converges(tmp_path):
    """Rewriting 1,500 files at once (a `git checkout`): the completion asked meanwhile is answered
    from the index as it was (it used to wait behind every file's update), and D_r converges."""
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from measure_hostile import write_repo  # noqa: PLC0415

    ws = tmp_path / "ws"
    ws.mkdir()
    write_repo(ws, 1500, 0)
    (ws / "main.py").write_text("def main(request):\n    value = request.get('key_1')\n")
    server = RawServer(cwd=tmp_path)
    try:
        server.initialize(ws, {"model": str(TINY_CODER), "commonDatastore": "none", "maxIncrementalFiles": 5})
        assert server.wait_ready()["state"] == "ready"
        server.wait_indexed()
        uri = server.open(ws / "main.py")
        params = {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 4},
                  "context": {"triggerKind": 1}}
        server.request("textDocument/inlineCompletion", params, timeout=120)  # warm
        write_repo(ws, 1500, 1)
        t = time.perf_counter()
        answer = server.request("textDocument/inlineCompletion", params, timeout=120)
        assert "result" in answer and time.perf_counter() - t < 5.0
        deadline = time.perf_counter() + 120
        while time.perf_counter() < deadline:
            found = server.request("fastcoder/repoContains", {"text": "retries=1):\n    value"})["result"]["folders"]
            status = server.request("fastcoder/status")["result"]
            if found and found[0]["found"] and status["index"]["pending_file_events"] == 0:
                break
            with server._cond:
                server._cond.wait(0.2)
        else:
            pytest.fail("D_r did not converge to the files on disk")
        assert status["index"]["rebuilds"] >= 1, status["index"] | {"counters": status["counters"]}
        assert server.close() == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def test_an_inotify_overflow_triggers_a_rescan(tmp_path):
    """watchdog reports a kernel queue overflow only in its log; the watcher turns it into a callback."""
    import logging  # noqa: PLC0415

    from lsp_server.repo_watch import RepoWatcher  # noqa: PLC0415

    overflows = threading.Event()
    watcher = RepoWatcher(lambda batch: None, on_overflow=overflows.set)
    try:
        logging.getLogger("watchdog.observers.inotify_c").warning("Inotify queue overflowed; filesystem events were lost")
        assert overflows.is_set()
    finally:
        watcher.stop()
    overflows.clear()
    logging.getLogger("watchdog.observers.inotify_c").warning("Inotify queue overflowed")
    assert not overflows.is_set(), "a stopped watcher must not listen any more"


def _inotify_watches() -> int:
    """Kernel inotify watches held by this process (lines 'inotify wd:' in /proc/self/fdinfo)."""
    import pathlib  # noqa: PLC0415

    total = 0
    for info in pathlib.Path("/proc/self/fdinfo").iterdir():
        try:
            total += info.read_text().count("inotify wd:")
        except OSError:
            pass
    return total


def test_ignored_trees_get_no_inotify_watches(tmp_path):
    import sys  # noqa: PLC0415

    from lsp_server.repo_watch import RepoWatcher  # noqa: PLC0415

    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux-only")
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    for i in range(60):  # a node_modules tree of 60 x 3 directories
        (tmp_path / "node_modules" / f"m{i}" / "lib" / "deep").mkdir(parents=True)
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    before = _inotify_watches()
    batches: list[dict] = []
    seen = threading.Event()
    watcher = RepoWatcher(lambda batch: (batches.append(batch), seen.set()), debounce_s=0.05)
    try:
        assert watcher.add(str(tmp_path)) and watcher.prunes_ignored_trees
        watches = _inotify_watches() - before
        assert 1 <= watches <= 4, watches  # root, src, src/pkg: not the 180 ignored directories
        (tmp_path / "src" / "pkg" / "new.py").write_text("x = 1\n")  # still seen below the root
        assert seen.wait(10)
        assert any(p.endswith("new.py") for b in batches for p in b)
    finally:
        watcher.stop()
