"""A fake OpenAI-compatible completions server on 127.0.0.1 for the ``openai`` backend's tests.

``GET /v1/models`` lists one model; ``POST /v1/completions`` records the JSON body and streams ``pieces`` as
server-sent events (``data: {"choices": [{"text": ...}]}`` ... ``data: [DONE]``), like vLLM. With
``hold_after=N`` it stops after N pieces and waits until the client closes the connection (``closed`` is
set then) or ``release`` is set. ``status`` != 200 answers an OpenAI-style error body instead. Stdlib only
(http.server); every wait is on an event or a socket, never a sleep.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    """Start with :meth:`start` (or as a context manager); ``url`` is the base URL (``.../v1``)."""

    def __init__(self, pieces: list[str] | None = None, model: str = "fake-model", port: int = 0):
        self.pieces = list(pieces or [])
        self.model = model
        self.port = port
        self.hold_after: int | None = None
        self.status = 200
        self.requests: list[dict] = []
        self.got_request = threading.Event()
        self.sent_held = threading.Event()  # the pieces before a hold were sent
        self.closed = threading.Event()     # the client closed the connection during a hold
        self.release = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeOpenAI":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, code: int, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                fake.requests.append(body)
                fake.got_request.set()
                if self.path.rstrip("/") != "/v1/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if fake.status != 200:
                    self._json(fake.status, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                                       "type": "NotFoundError", "code": fake.status}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for i, piece in enumerate(fake.pieces):
                    if fake.hold_after is not None and i == fake.hold_after:
                        self.wfile.flush()
                        fake.sent_held.set()
                        if self._wait_for_close():
                            fake.closed.set()
                            return
                    self._event({"id": "cmpl-1", "object": "text_completion", "model": fake.model,
                                 "choices": [{"index": 0, "text": piece, "finish_reason": None}]})
                self._event({"id": "cmpl-1", "object": "text_completion", "model": fake.model,
                             "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _event(self, obj: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.flush()

            def _wait_for_close(self) -> bool:
                """Block until the client closes the connection (True) or ``release`` is set (False)."""
                conn = self.connection
                while not fake.release.is_set():
                    readable, _, _ = select.select([conn], [], [], 0.05)
                    if readable:
                        try:
                            data = conn.recv(1, socket.MSG_PEEK)
                        except OSError:
                            return True
                        if not data:
                            return True
                return False

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def closed_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
