"""Where completions come from: the in-process model (``local``) or an OpenAI-compatible endpoint (``openai``).

Setting ``fastcoder.backend`` picks one (:mod:`lsp_server.settings`). Both take a
:class:`~lsp_server.host.CompletionRequest` and give a :class:`~lsp_server.host.CompletionOutcome` whose text
went through the same post-processing (:func:`lsp_server.postprocess.postprocess`); the server's handlers do
not know which one answers (``backend.submit(req)`` returns an awaitable future either way).

``local`` (:class:`LocalBackend`) is the engine host: model, D_c and D_r in this process, decoding on the
host's model worker thread.

``openai`` (:class:`OpenAIBackend`) sends ``POST {endpoint}/completions`` with ``"stream": true`` to any server
speaking the OpenAI completions API (vLLM, llama.cpp's ``llama-server``, Ollama) and reads the server-sent
events with httpx2 (``httpx2.EventSource``). Choices, all documented in the README text of issue #14:

- The prompt is the local backend's FIM prompt, as text: :func:`lsp_server.prompt.build_fim_prompt` with the
  tokenizer of ``fastcoder.model`` (loaded alone, no weights; it must be the served model's tokenizer) and the
  same budget, decoded with its special tokens (``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``) into the
  request's ``prompt``. Not the ``suffix`` field: vLLM refuses it and llama.cpp only has it on ``/infill``.
  The endpoint re-tokenizes the text with the same tokenizer. Token healing is off (the API cannot constrain
  the first generated token), the only difference from the local prompt.
- ``stop`` carries the same stop strings as the local decoder (:func:`~lsp_server.postprocess.generation_stop`);
  ``max_tokens``, ``temperature``, ``top_p``, ``seed`` and (when > 0) ``top_k`` come from the settings.
- With ``fastcoder.repoId`` set, the body carries ``"vllm_xargs": {"fastcoder_repo": ID, "fastcoder_doc":
  URI}`` for fastcoder's vLLM proposer (:mod:`engine.serving.vllm_proposer`): drafts from that repository's
  D_r (built with ``fastcoder index build --repo`` into a folder the vLLM server reads) and one FastCoder cache
  per document. ``"auto"`` sends the document's workspace folder path.
- Cancellation: a superseded or ``$/cancelRequest``-ed request sets its :class:`CancelEvent`, which cancels the
  task reading the stream; leaving httpx2's ``stream`` context closes the HTTP response (the connection),
  so the endpoint stops generating (vLLM aborts a request whose client went away).
- An unreachable endpoint (connection refused, DNS, connect timeout) answers empty, is reported ONCE per
  outage (``notify("error", ...)``: the server shows it with ``window/showMessage``) and shows in
  ``fastcoder/status`` (``endpoint.state: "unreachable"``, ``endpoint.error``, and ``error``); while it lasts,
  requests retry the connection at most every :data:`RETRY_S` seconds and answer empty at once in between.
- Authorization: ``Bearer $FASTCODER_API_KEY`` when that environment variable is set (``vllm serve
  --api-key``); settings never hold secrets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from typing import Any, Callable

from .host import CompletionOutcome, CompletionRequest, EngineHost
from .postprocess import CursorContext, generation_stop, postprocess, whole_lines
from .prompt import build_fim_prompt, detect_fim_template, model_max_tokens, prompt_budget

log = logging.getLogger("fastcoder.lsp")

#: Seconds to wait for a TCP connection to the endpoint before it counts as unreachable.
CONNECT_TIMEOUT_S = 3.0
#: Seconds without a byte of the streamed answer before the request fails (a model loading on the server).
READ_TIMEOUT_S = 60.0
#: While the endpoint is unreachable, requests retry the connection at most this often (seconds).
RETRY_S = 2.0
#: Environment variable holding the endpoint's API key (sent as ``Authorization: Bearer``).
API_KEY_ENV = "FASTCODER_API_KEY"


class CancelEvent(threading.Event):
    """A :class:`threading.Event` that also runs callbacks when set (from whatever thread sets it).

    The local decoder polls it between forward passes; the openai backend registers a callback that cancels
    the task reading the HTTP stream, so a cancelled request closes its connection at once."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._cb_lock = threading.Lock()

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` when the event is set (now, if it already is)."""
        with self._cb_lock:
            if not self.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def remove_callback(self, fn: Callable[[], None]) -> None:
        with self._cb_lock:
            if fn in self._callbacks:
                self._callbacks.remove(fn)

    def set(self) -> None:
        with self._cb_lock:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:  # a callback must not stop the others or the caller
                log.exception("cancel callback failed")


class EndpointUnreachable(Exception):
    """No connection to the endpoint (refused, unknown host, connect timeout)."""


class EndpointError(Exception):
    """The endpoint answered, but not with a completion (HTTP error, bad stream, read timeout)."""


def normalize_endpoint(url: str) -> str:
    """The base URL requests are made under: no trailing slash, ``/completions`` removed, ``/v1`` added
    when the URL has no path (``http://127.0.0.1:8000`` -> ``http://127.0.0.1:8000/v1``)."""
    url = url.strip().rstrip("/")
    for tail in ("/completions", "/chat/completions"):
        if url.endswith(tail):
            url = url[: -len(tail)]
    scheme, sep, rest = url.partition("://")
    if sep and "/" not in rest:
        url += "/v1"
    return url


def prompt_text(tokenizer: Any, token_ids: list[int]) -> str:
    """The prompt as text with its FIM special tokens spelled out (what the endpoint re-tokenizes). A
    leading BOS is dropped: servers add their own."""
    bos = getattr(tokenizer, "bos_token_id", None)
    ids = list(token_ids)
    if ids and bos is not None and ids[0] == bos:
        ids = ids[1:]
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


class LocalBackend:
    """Today's path: the engine host's model, decoded on its single model-worker thread."""

    name = "local"

    def __init__(self, host: EngineHost):
        self.host = host

    @property
    def state(self) -> str:
        return self.host.state

    def start(self, folders: list[str]) -> None:
        self.host.start(folders)

    def submit(self, req: CompletionRequest) -> asyncio.Future:
        """Queue ``req`` on the model worker; a background prefill yields the model within one chunk."""
        self.host.preempt_background()
        return asyncio.get_running_loop().run_in_executor(self.host.model_pool, self.host.complete, req)

    def status(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        pass


class OpenAIBackend:
    """Completions from an OpenAI-compatible ``/v1/completions`` endpoint (see the module docstring).

    host: the :class:`EngineHost` (its settings, folders, loader thread and counters; its model is never
    loaded). notify(level, message): user-facing messages, from any thread. All coroutines run on the
    server's event loop; the tokenizer loads on the host's loader thread.
    """

    name = "openai"

    def __init__(self, host: EngineHost, notify: Callable[[str, str], None]):
        self.host = host
        self.notify = notify
        s = host.settings
        self.url = normalize_endpoint(s.endpoint)
        self.state = "loading"  # loading | ready | error (the tokenizer)
        self.error: str | None = None
        self.tokenizer: Any = None
        self.template: str | None = None
        self.endpoint_state = "unknown"  # unknown | reachable | unreachable | error
        self.endpoint_error: str | None = None
        self.served_models: list[str] = []
        self.model_name: str | None = s.endpoint_model or None
        self.counters = {"requests": 0, "streamed": 0, "cancelled": 0, "unreachable": 0, "errors": 0,
                         "skipped_while_unreachable": 0}
        self.last_request: dict | None = None  # the body of the latest request (status / tests)
        self._retry_at = 0.0
        self._client: Any = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Load the tokenizer (loader thread), then probe ``GET {endpoint}/models``."""
        model = self.host.settings.resolved_model()
        loop = asyncio.get_running_loop()
        try:
            self.tokenizer = await loop.run_in_executor(self.host.loader_pool, _load_tokenizer, model)
        except Exception as exc:
            self.state = "error"
            self.error = (f"the openai backend builds the FIM prompt with the served model's tokenizer, and "
                          f"fastcoder.model {model!r} gives none ({type(exc).__name__}: {exc}); set "
                          "fastcoder.model to the served model's folder or hub id")
            log.error("%s", self.error)
            self.notify("error", f"fastcoder: {self.error}. Completions are disabled.")
            return
        found = detect_fim_template(self.tokenizer)
        self.template = found[0].name if found else "prefix-only"
        self.state = "ready"
        log.info("openai backend: endpoint %s, tokenizer %s (FIM template %s)", self.url, model, self.template)
        await self.probe()

    async def probe(self) -> bool:
        """``GET {endpoint}/models``: marks the endpoint reachable (and learns the served model's name when
        ``endpointModel`` is empty) or reports it unreachable. Returns whether it answered."""
        try:
            resp = await self._http().get(self.url + "/models", headers=self._headers())
        except Exception as exc:
            err = _classify(exc)
            if isinstance(err, EndpointUnreachable):
                self._unreachable(err)
            else:
                self._failed(err)
            return False
        if resp.status_code >= 400:
            # some servers have no /models (or guard it): the endpoint is up, completions will tell more
            self._reachable()
            return True
        try:
            data = resp.json().get("data") or []
            self.served_models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
        except Exception:
            self.served_models = []
        if not self.model_name and self.served_models:
            self.model_name = self.served_models[0]
        self._reachable()
        return True

    def close(self) -> None:
        """Stop: later requests answer empty; the HTTP client closes on the loop."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            try:
                asyncio.get_running_loop().create_task(client.aclose())
            except RuntimeError:  # no running loop (tests): nothing left to close it with
                pass

    def _http(self) -> Any:
        if self._client is None:
            import httpx2  # noqa: PLC0415 (only the openai backend needs it)

            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
        return self._client

    @staticmethod
    def _headers() -> dict:
        key = os.environ.get(API_KEY_ENV, "").strip()
        return {"Authorization": f"Bearer {key}"} if key else {}

    # ------------------------------------------------------------------ reachability
    def _unreachable(self, err: Exception) -> None:
        self.counters["unreachable"] += 1
        self._retry_at = time.monotonic() + RETRY_S
        first = self.endpoint_state != "unreachable"
        self.endpoint_state, self.endpoint_error = "unreachable", str(err)
        if first:  # once per outage
            msg = (f"fastcoder: the completion endpoint {self.url} is unreachable ({err}). Inline completions "
                   "are empty until it answers; start the server or fix fastcoder.endpoint.")
            log.error("%s", msg)
            self.notify("error", msg)

    def _failed(self, err: Exception) -> None:
        self.counters["errors"] += 1
        first = self.endpoint_error != str(err)
        self.endpoint_state, self.endpoint_error = "error", str(err)
        if first:
            self.notify("error", f"fastcoder: the completion endpoint {self.url} failed: {err}")

    def _reachable(self) -> None:
        if self.endpoint_state in ("unreachable", "error"):
            self.notify("info", f"fastcoder: the completion endpoint {self.url} answers again")
        self.endpoint_state, self.endpoint_error = "reachable", None

    def status(self) -> dict:
        """The ``fastcoder/status`` fields of this backend (merged over the host's)."""
        out: dict[str, Any] = {
            "backend": self.name, "state": self.state,
            "endpoint": {"url": self.url, "state": self.endpoint_state, "error": self.endpoint_error,
                         "model": self.model_name, "served_models": self.served_models,
                         "template": self.template, "repo_id": self.host.settings.repo_id or None,
                         "counters": dict(self.counters)}}
        if self.error:
            out["error"] = self.error
        elif self.endpoint_state in ("unreachable", "error"):
            out["error"] = f"endpoint {self.url} {self.endpoint_state}: {self.endpoint_error}"
        return out

    # ------------------------------------------------------------------ completions
    def submit(self, req: CompletionRequest) -> asyncio.Future:
        return asyncio.ensure_future(self.complete(req))

    def request_body(self, req: CompletionRequest, prompt: str, ctx: CursorContext) -> dict:
        """The JSON body of ``POST /completions`` for ``req`` (see the module docstring)."""
        s = self.host.settings
        body: dict[str, Any] = {"model": self.model_name or s.resolved_model(), "prompt": prompt,
                                "max_tokens": s.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p,
                                "stream": True, "stop": generation_stop(s.stop_at, ctx) or []}
        if s.top_k > 0:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        repo = s.repo_id
        if repo == "auto":
            repo = req.folder or ""
        if repo:
            body["vllm_xargs"] = {"fastcoder_repo": repo, "fastcoder_doc": req.uri}
        return body

    def build_prompt(self, req: CompletionRequest) -> str:
        """The local backend's FIM prompt for ``req`` (same budget, no token healing), as text."""
        s = self.host.settings
        budget = prompt_budget(s.max_prompt_tokens, model_max_tokens(None, self.tokenizer), s.max_new_tokens)
        prompt = build_fim_prompt(self.tokenizer, req.prefix, req.suffix, budget, heal=None)
        return prompt_text(self.tokenizer, prompt.token_ids)

    async def complete(self, req: CompletionRequest) -> CompletionOutcome:
        """Stream one completion; never raises (errors and cancellation give ``text=None``)."""
        host = self.host
        if req.cancel.is_set():
            self.counters["cancelled"] += 1
            return host._outcome(req, None, "cancelled", {})
        if self.state != "ready" or self._closed:
            return host._outcome(req, None, "not-ready", {})
        if self.endpoint_state == "unreachable" and time.monotonic() < self._retry_at:
            self.counters["skipped_while_unreachable"] += 1
            return host._outcome(req, None, "unreachable", {})
        s = host.settings
        loop = asyncio.get_running_loop()
        ctx = CursorContext.from_split(req.prefix, req.suffix)
        prompt = await loop.run_in_executor(None, self.build_prompt, req)  # tokenising: off the loop
        body = self.request_body(req, prompt, ctx)
        self.last_request = body
        self.counters["requests"] += 1
        parts: list[str] = []
        t0 = time.perf_counter()
        stream = loop.create_task(self._stream(body, parts))
        on_cancel = lambda: loop.call_soon_threadsafe(stream.cancel)  # noqa: E731
        if not isinstance(req.cancel, CancelEvent):  # a plain Event: checked when the stream ends only
            on_cancel = None
        else:
            req.cancel.add_callback(on_cancel)
        try:
            timeout = None
            if s.deadline_ms:
                timeout = max(0.0, s.deadline_ms / 1000 - (time.perf_counter() - req.received))
            done, _ = await asyncio.wait({stream}, timeout=timeout)
            finish = "deadline"
            if not done:
                stream.cancel()
                await asyncio.gather(stream, return_exceptions=True)
            elif stream.cancelled() or req.cancel.is_set():
                self.counters["cancelled"] += 1
                return host._outcome(req, None, "cancelled", {"endpoint_ms": _ms(t0)})
            else:
                finish = stream.result()
        except EndpointUnreachable as exc:
            self._unreachable(exc)
            return host._outcome(req, None, "unreachable", {})
        except EndpointError as exc:
            self._failed(exc)
            return host._outcome(req, None, f"error: {exc}", {})
        finally:
            if on_cancel is not None:
                req.cancel.remove_callback(on_cancel)
            if not stream.done():
                stream.cancel()
        self._reachable()
        self.counters["streamed"] += 1
        raw = "".join(parts)
        if finish == "deadline":
            raw = whole_lines(raw)
        text = postprocess(raw, ctx, s.stop_at)
        return host._outcome(req, text, finish, {"endpoint_ms": _ms(t0), "chunks": len(parts)}, record=True)

    async def _stream(self, body: dict, parts: list[str]) -> str:
        """POST ``body`` and append each streamed text piece to ``parts``; returns the finish reason.
        Raises EndpointUnreachable / EndpointError. Cancelling the task closes the response."""
        import httpx2  # noqa: PLC0415

        finish = "length"
        try:
            async with self._http().stream("POST", self.url + "/completions", json=body,
                                           headers=self._headers()) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode("utf-8", "replace")
                    raise EndpointError(f"HTTP {resp.status_code} from {self.url}/completions: "
                                        f"{_error_message(detail)}")
                ctype = resp.headers.get("content-type", "")
                if not ctype.startswith("text/event-stream"):  # a server that ignored "stream": one JSON
                    data = json.loads(await resp.aread())
                    choice = _first_choice(data)
                    parts.append(str(choice.get("text") or ""))
                    return str(choice.get("finish_reason") or finish)
                async for event in httpx2.EventSource(resp):
                    data = event.data.strip()
                    if data == "[DONE]":
                        break
                    if not data:
                        continue
                    obj = json.loads(data)
                    if isinstance(obj, dict) and obj.get("error"):
                        raise EndpointError(_error_message(json.dumps(obj)))
                    choice = _first_choice(obj)
                    if choice.get("text"):
                        parts.append(str(choice["text"]))
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
        except (EndpointError, asyncio.CancelledError):
            raise
        except json.JSONDecodeError as exc:
            raise EndpointError(f"the stream from {self.url} is not JSON: {exc}") from None
        except Exception as exc:
            raise _classify(exc) from None
        return finish


def _load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer  # noqa: PLC0415

    return AutoTokenizer.from_pretrained(model)


def _first_choice(obj: Any) -> dict:
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}  # e.g. a usage-only chunk


def _error_message(detail: str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body's start."""
    try:
        obj = json.loads(detail)
        err = obj.get("error") if isinstance(obj, dict) else None
        msg = err.get("message") if isinstance(err, dict) else (err or (obj.get("detail") if isinstance(obj, dict) else None))
        if msg:
            return str(msg)[:300]
    except Exception:
        pass
    return detail.strip()[:300] or "(empty body)"


def _classify(exc: Exception) -> Exception:
    """An httpx2 exception as EndpointUnreachable (no connection) or EndpointError (anything else)."""
    import httpx2  # noqa: PLC0415

    if isinstance(exc, (EndpointUnreachable, EndpointError)):
        return exc
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.UnsupportedProtocol)):
        return EndpointUnreachable(f"{type(exc).__name__}: {reason}")
    if isinstance(exc, httpx2.TimeoutException):
        return EndpointError(f"no answer within {READ_TIMEOUT_S:.0f} s ({type(exc).__name__})")
    return EndpointError(f"{type(exc).__name__}: {reason}")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000
