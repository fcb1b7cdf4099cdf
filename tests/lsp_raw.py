"""A raw stdio LSP client for tests that must send bytes a well-behaved client never would
(malformed JSON, wrong Content-Length, batches, bad ids). Waits on events, never on sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class RawServer:
    """``python -m lsp_server`` as a subprocess with a reader thread collecting every message.

    ``responses`` maps each response id (None for id-null errors, collected in ``null_id``) to the
    message; ``notifications`` lists server-sent notifications; ``wait_for(id)`` blocks on an event.
    """

    def __init__(self, cwd: Path | None = None, env: dict | None = None):
        full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "lsp_server"], cwd=cwd or ROOT, env=full_env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.responses: dict[Any, dict] = {}
        self.null_id: list[dict] = []
        self.notifications: list[dict] = []
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        self._next_id = 1_000_000
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    # ---- input from the server
    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            line = out.readline()
            if not line:
                break
            if not line.lower().startswith(b"content-length"):
                continue
            size = int(line.split(b":")[1])
            while out.readline().strip():
                pass
            msg = json.loads(out.read(size))
            with self._cond:
                if "method" in msg and "id" in msg:  # a server -> client request: answer null
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                elif "method" in msg:
                    self.notifications.append(msg)
                elif msg.get("id") is None:
                    self.null_id.append(msg)
                else:
                    self.responses[msg["id"]] = msg
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode("utf-8", "replace"))

    # ---- output to the server
    def send_bytes(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj: Any, length_delta: int = 0) -> None:
        """Frame ``obj`` (any JSON value, or bytes sent as the body verbatim) and send it."""
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_bytes(b"Content-Length: %d\r\n\r\n" % (len(body) + length_delta) + body)

    def request(self, method: str, params: Any = None, timeout: float = 60.0) -> dict:
        """Send a request and wait for its response (the whole message)."""
        self._next_id += 1
        msg_id = self._next_id
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.wait_for(msg_id, timeout)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_for(self, msg_id: Any, timeout: float = 60.0) -> dict:
        with self._cond:
            ok = self._cond.wait_for(lambda: msg_id in self.responses or self.proc.poll() is not None, timeout)
            if msg_id not in self.responses:
                raise TimeoutError(f"no response to {msg_id!r} (server alive: {self.proc.poll() is None}, "
                                   f"ok={ok}); stderr tail: {''.join(self.stderr[-20:])}")
            return self.responses[msg_id]

    def wait_until(self, predicate, timeout: float = 60.0) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def initialize(self, root: Path, options: dict, timeout: float = 60.0) -> dict:
        result = self.request("initialize", {"processId": os.getpid(), "rootUri": root.as_uri(),
                                             "capabilities": {}, "initializationOptions": {"fastcoder": options},
                                             "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}]},
                              timeout)
        self.notify("initialized", {})
        return result

    def open(self, path: Path, text: str | None = None) -> str:
        """didOpen ``path`` (its text from disk unless given) as version 1; returns its URI."""
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": path.read_text() if text is None else text}})
        return uri

    def wait_ready(self, timeout: float = 180.0) -> dict:
        """Poll ``fastcoder/status`` (each poll waits on its response) until the state is ready."""
        import time  # noqa: PLC0415

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.request("fastcoder/status", None, timeout)["result"]
            if status["state"] in ("ready", "error"):
                return status
            with self._cond:  # wait for any message (progress, logs) rather than a fixed sleep
                self._cond.wait(0.2)
        raise TimeoutError("server not ready")

    def wait_indexed(self, timeout: float = 180.0) -> dict:
        """Poll ``fastcoder/status`` until no workspace folder is still indexing; returns the status."""
        import time  # noqa: PLC0415

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.request("fastcoder/status", None, timeout)["result"]
            if status["repo"] and all(r["state"] != "indexing" for r in status["repo"]):
                return status
            with self._cond:
                self._cond.wait(0.1)
        raise TimeoutError("workspace never finished indexing")

    def close(self, timeout: float = 20.0) -> int:
        """shutdown + exit; returns the exit status (kills the process if it does not exit)."""
        try:
            if self.proc.poll() is None:
                self.request("shutdown", None, timeout)
                self.notify("exit")
            return self.proc.wait(timeout)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)
            raise
