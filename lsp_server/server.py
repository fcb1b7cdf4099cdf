"""The fastcoder language server (pygls 2): creates the server and registers its features.

Handlers stay thin (jedi-language-server style): fetch the document, call into :mod:`lsp_server.host` /
:mod:`lsp_server.prompt` / :mod:`lsp_server.postprocess`, convert to LSP types. Nothing blocking runs on the
asyncio message loop: decoding and D_r updates run on the host's single model-worker thread, loading and
indexing on its loader thread; notifications from those threads are marshalled back with
``loop.call_soon_threadsafe``.

Backends (:mod:`lsp_server.backends`, setting ``backend``): ``local`` decodes with the host's model;
``openai`` streams from an OpenAI-compatible endpoint on the message loop (no model is loaded here). Both
answer through ``backend.submit(req)``, a future of a :class:`~lsp_server.host.CompletionOutcome`.

Unsaved buffers and D_r: on ``didChange`` the document's buffer text is pushed into D_r after
``BUFFER_DEBOUNCE_S`` seconds without further edits (and at once on ``didSave``); on ``didClose`` the file on
disk counts again. The FIM prompt always uses the live buffer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .backends import CancelEvent, LocalBackend, OpenAIBackend
from .host import MAX_DOCUMENT_CHARS, CompletionRequest, EngineHost
from .protocol import FastcoderProtocol, serve
from .typethrough import Suggestion, type_through
from .repo_watch import RepoWatcher
from .settings import ENDPOINT_KEYS, SECTION, Settings, parse_settings

log = logging.getLogger("fastcoder.lsp")

SERVER_NAME = "fastcoder-lsp"
SERVER_VERSION = "0.1.0"
BUFFER_DEBOUNCE_S = 1.0
# Idle time after an edit before the document's prompt is prefilled. Neovim asks 0.2 s after the last keystroke;
# at 0.15 s the prefill (PSM order: the text after the cursor is re-run after every edit, ~250 tokens) had not
# finished when the request came, and the request waited for the chunk running, then prefilled the rest itself.
# bench-latency (pluggy, Neovim-style, 4 pairs alternating): p50 54-65 -> 38-44 ms, p95 110-141 -> 67-73 ms,
# warm prompt share 0.89-0.90 -> 0.999. A newer edit cancels a running prefill at its next chunk.
WARM_DEBOUNCE_S = 0.05
# A cursor that came to rest (``fastcoder/cursor``, sent by the clients ~150 ms after the cursor stops moving) is
# prefilled after this much more idle time: a jump to another function otherwise made the first keystroke's
# request prefill ~900 cold prompt tokens itself (120-300 ms on 2 cores).
CURSOR_WARM_DELAY_S = 0.05
WARM_OPEN_CHARS = 3000  # on open, the prompt for a cursor this far in is prefilled (all of a small file)
STATUS_METHOD = "fastcoder/status"
REPO_CONTAINS_METHOD = "fastcoder/repoContains"
REBUILD_INDEX_METHOD = "fastcoder/rebuildIndex"
CURSOR_METHOD = "fastcoder/cursor"
REPO_CONTAINS_MAX_CHARS = 4096

_LEVELS = {"info": types.MessageType.Info, "warning": types.MessageType.Warning, "error": types.MessageType.Error}


class FastcoderServer(LanguageServer):
    """pygls server holding the :class:`EngineHost`, the file watcher and per-document request state."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("protocol_cls", FastcoderProtocol)
        super().__init__(*args, **kwargs)
        self.host = EngineHost(notify=self._notify_threadsafe, progress=self._progress_threadsafe)
        self.backend: LocalBackend | OpenAIBackend = LocalBackend(self.host)
        self._backend_started = False
        self.watcher = RepoWatcher(self._on_file_batch,
                                   on_overflow=lambda: self.host.rescan("file events were lost (inotify queue overflow)"))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.inflight: dict[str, InFlight] = {}
        self.shown: dict[str, Suggestion] = {}  # per document: the last suggestion answered
        self._warm_timers: dict[str, asyncio.TimerHandle] = {}
        self._buffer_timers: dict[str, asyncio.TimerHandle] = {}
        self._progress_queue: asyncio.Queue | None = None
        self._shown: set[str] = set()
        self._pull_config = False

    # ---- transport
    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        """Serve LSP over stdio with :func:`lsp_server.protocol.serve` (resynchronising framing, an
        answer for every request) instead of pygls' reader loop; returns at end of input or ``exit``."""
        import sys  # noqa: PLC0415

        from pygls.io_ import StdinAsyncReader, StdoutWriter  # noqa: PLC0415

        self._stop_event = threading.Event()
        reader = StdinAsyncReader(stdin or sys.stdin.buffer, self.thread_pool)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            asyncio.run(serve(self.protocol, reader, self._stop_event))
        except BrokenPipeError:
            log.error("the client closed the connection; shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    @property
    def exit_code(self) -> int:
        """0 after ``shutdown`` then ``exit``, else 1 (LSP: exit without shutdown, or end of input)."""
        return self.protocol.exit_code

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Log errors instead of pygls' generic "Error in server" pop-up: requests already get an
        error response, and a malformed notification is the client's bug, not the user's."""
        log.error("%s: %s", getattr(source, "__name__", source), error)

    # ---- messages and progress (callable from any thread)
    def _notify_threadsafe(self, level: str, message: str) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.show, level, message)

    def show(self, level: str, message: str) -> None:
        """showMessage once per distinct message, and always logMessage (on the loop thread)."""
        kind = _LEVELS.get(level, types.MessageType.Info)
        self.window_log_message(types.LogMessageParams(type=kind, message=message))
        if level != "info" and message not in self._shown:
            self._shown.add(message)
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def _progress_threadsafe(self, stage: str, message: str, pct: int | None, done: bool) -> None:
        if self.loop is not None and self._progress_queue is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._progress_queue.put_nowait, (stage, message, pct, done))

    async def progress_pump(self) -> None:
        """Turn host progress events into server-initiated ``$/progress`` (only if the client supports it)."""
        assert self._progress_queue is not None
        window = self.client_capabilities.window
        supported = bool(window and window.work_done_progress)
        token: str | None = None
        count = 0
        while True:
            stage, message, pct, done = await self._progress_queue.get()
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Log,
                                                           message=f"fastcoder: {stage}: {message}"))
            if not supported:
                continue
            try:
                if token is None and not done:
                    count += 1
                    token = f"fastcoder-load-{count}"
                    await asyncio.wait_for(self.work_done_progress.create_async(token), 10)
                    self.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                        title="fastcoder", message=message, percentage=pct or 0, cancellable=False))
                elif token is not None and not done:
                    self.work_done_progress.report(token, types.WorkDoneProgressReport(message=message,
                                                                                       percentage=pct))
                elif token is not None:
                    self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
                    self.work_done_progress.tokens.pop(token, None)
                    token = None
            except Exception as exc:  # a client that refuses progress must not stop the pump
                log.debug("progress: %s", exc)
                token = None

    # ---- file events
    def _on_file_batch(self, batch: dict[str, str]) -> None:
        """Watcher callback (debouncer thread): open documents' buffers win over the disk contents."""
        open_paths = self._open_paths()
        changed = {p: k for p, k in batch.items() if p not in open_paths}
        if changed:
            self.host.file_events(changed)

    def _open_paths(self) -> set[str]:
        paths = set()
        for uri in list(self.workspace.text_documents):
            path = uri_to_path(uri)
            if path:
                paths.add(path)
        return paths

    def schedule_buffer_update(self, uri: str, delay: float = BUFFER_DEBOUNCE_S) -> None:
        """Push the open document's buffer into D_r after ``delay`` seconds without further edits."""
        old = self._buffer_timers.pop(uri, None)
        if old is not None:
            old.cancel()
        if self.loop is not None:
            self._buffer_timers[uri] = self.loop.call_later(delay, self._push_buffer, uri)

    def _push_buffer(self, uri: str) -> None:
        self._buffer_timers.pop(uri, None)
        path = uri_to_path(uri)
        doc = self.workspace.text_documents.get(uri)
        if path and doc is not None and len(doc.source) <= MAX_DOCUMENT_CHARS and "\0" not in doc.source:
            self.host.file_events({path: "changed"}, buffers={path: doc.source})

    # ---- warm cache
    def schedule_warm(self, uri: str, offset: int | None, delay: float = WARM_DEBOUNCE_S) -> None:
        """Prefill the prompt for a cursor at ``offset`` (None: the document's start region) after
        ``delay`` seconds without further edits, in the background (:meth:`EngineHost.warm`)."""
        old = self._warm_timers.pop(uri, None)
        if old is not None:
            old.cancel()
        if self.loop is not None and self.host.settings.warm_cache:
            self._warm_timers[uri] = self.loop.call_later(delay, self._warm_now, uri, offset)

    def _warm_now(self, uri: str, offset: int | None) -> None:
        self._warm_timers.pop(uri, None)
        doc = self.workspace.text_documents.get(uri)
        if doc is None or uri in self.inflight or self.host.state != "ready":
            return
        source = doc.source
        if len(source) > MAX_DOCUMENT_CHARS or "\0" in source:
            return
        if offset is None:  # no cursor yet: the region a first request most likely shares
            offset = min(len(source), WARM_OPEN_CHARS)
        offset = max(0, min(len(source), offset))
        self.host.warm(CompletionRequest(uri=uri, version=doc.version, prefix=source[:offset],
                                         suffix=source[offset:], folder=self.host.folder_of(uri_to_path(uri))))

    # ---- folders and settings
    def folder_paths(self) -> list[str]:
        """Filesystem paths of the workspace folders (the root path when the client sent no folders)."""
        paths = [uri_to_path(uri) for uri in self.workspace.folders]
        paths = [p for p in paths if p]
        if not paths and self.workspace.root_path:
            paths = [self.workspace.root_path]
        return [str(Path(p)) for p in paths]

    def apply_raw_settings(self, raw: Any) -> str | None:
        """Parse settings over the current ones, warn about invalid values, apply; returns the host's action
        or None when ``raw`` held nothing for the ``fastcoder`` section."""
        from .settings import section_of  # noqa: PLC0415

        if section_of(raw) is None:
            return None
        new, warnings = parse_settings(raw, self.host.settings)
        for w in warnings:
            self.show("warning", w)
        changed = new.changed_keys(self.host.settings)
        if new.backend == "openai" or self.host.settings.backend == "openai":
            if self._backend_started and changed & set(ENDPOINT_KEYS):
                self.host.settings = new
                self.start_backend(self.folder_paths())
                return "backend"
            if new.backend == "openai":  # the local model is not used: nothing to reload
                self.host.settings = new
                return "none"
        return self.host.apply_settings(new)

    def start_backend(self, folders: list[str]) -> None:
        """Start the backend the settings name (on the loop thread). ``local``: load the model and index the
        folders (:meth:`EngineHost.start`, unless already loaded). ``openai``: load the tokenizer and probe
        the endpoint; the folders are only recorded (``repoId: "auto"``), no model is loaded and no D_r built
        here: the endpoint's side has its own (``fastcoder index build --repo``)."""
        old, self._backend_started = self.backend, True
        old.close()
        if self.host.settings.backend == "openai":
            self.host.set_folders(folders)
            self.backend = OpenAIBackend(self.host, self._notify_threadsafe)
            assert self.loop is not None
            self.loop.create_task(self.backend.start())
        else:  # at start, or back from openai: (re)load, the model settings may have changed meanwhile
            self.backend = LocalBackend(self.host)
            self.host.start(folders)

    async def pull_settings(self) -> None:
        """Ask the client for section ``fastcoder`` (workspace/configuration) when it supports that."""
        if not self._pull_config:
            return
        try:
            pulled = await asyncio.wait_for(self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])), 5)
        except Exception as exc:
            log.info("workspace/configuration failed: %s", exc)
            return
        item = pulled[0] if isinstance(pulled, (list, tuple)) and pulled else pulled
        if item:
            self.apply_raw_settings({SECTION: item})


def uri_to_path(uri: str) -> str | None:
    """Filesystem path of a ``file:`` URI, or None for other schemes / malformed URIs."""
    try:
        return to_fs_path(uri) if uri.startswith("file:") else None
    except Exception:
        return None


def create_server() -> FastcoderServer:
    """Build the server and register every feature (handlers below are thin wrappers)."""
    server = FastcoderServer(SERVER_NAME, SERVER_VERSION, max_workers=4,
                             text_document_sync_kind=types.TextDocumentSyncKind.Incremental)

    @server.feature(types.INITIALIZE)
    def on_initialize(ls: FastcoderServer, params: types.InitializeParams) -> None:
        base, warnings = parse_settings(params.initialization_options, Settings())
        ls.host.settings = base
        ls._startup_warnings = warnings
        ws = params.capabilities.workspace
        ls._pull_config = bool(ws and ws.configuration)

    @server.feature(types.INITIALIZED)
    async def on_initialized(ls: FastcoderServer, params: types.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls._progress_queue = asyncio.Queue()
        ls.loop.create_task(ls.progress_pump())
        for w in getattr(ls, "_startup_warnings", []):
            ls.show("warning", w)
        await ls.pull_settings()
        folders = ls.folder_paths()
        ls.start_backend(folders)
        for root in folders:
            if not ls.watcher.add(root):
                ls.show("warning", f"fastcoder: cannot watch workspace folder {root}")
        await _register_file_watching(ls)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: FastcoderServer, params: types.InlineCompletionParams):
        return await complete(ls, params)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: FastcoderServer, params: types.DidOpenTextDocumentParams) -> None:
        # pygls' built-in handler stores the document; D_r already holds the file from disk
        ls.schedule_warm(params.text_document.uri, None, delay=0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: FastcoderServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.workspace.text_documents.get(uri)
        prev = ls.inflight.get(uri)
        if prev is not None and (doc is None or not prev.continued_by(doc)):
            prev.cancel.set()  # the running completion no longer fits the text: stop it now
        ls.schedule_buffer_update(uri)
        ls.schedule_warm(uri, _edit_end_offset(doc, params.content_changes))

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: FastcoderServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.schedule_buffer_update(params.text_document.uri, delay=0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: FastcoderServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        for timers in (ls._buffer_timers, ls._warm_timers):
            timer = timers.pop(uri, None)
            if timer is not None:
                timer.cancel()
        ls.shown.pop(uri, None)
        ls.host.drop_document(uri)
        path = uri_to_path(uri)
        if path:
            ls.host.file_events({path: "changed"})  # the file on disk counts again

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: FastcoderServer, params: types.DidChangeConfigurationParams) -> None:
        if ls.apply_raw_settings(params.settings) is None:
            await ls.pull_settings()

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: FastcoderServer, params: types.DidChangeWatchedFilesParams) -> None:
        batch = {}
        for ev in params.changes:
            path = uri_to_path(ev.uri)
            if path:
                batch[path] = "deleted" if ev.type == types.FileChangeType.Deleted else "changed"
        ls._on_file_batch(batch)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(ls: FastcoderServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        folders = ls.folder_paths()  # pygls' built-in handler already updated ls.workspace
        for removed in params.event.removed:
            path = uri_to_path(removed.uri)
            if path:
                ls.watcher.remove(str(Path(path)))
        for root in folders:
            ls.watcher.add(root)
        ls.host.set_folders(folders)

    @server.feature(STATUS_METHOD)
    def status(ls: FastcoderServer, params: Any) -> dict:
        return {**ls.host.status(), **ls.backend.status(), "pending_buffer_pushes": len(ls._buffer_timers)}

    @server.feature(REBUILD_INDEX_METHOD)
    def rebuild_index(ls: FastcoderServer, params: Any) -> dict:
        return {"folders": ls.host.rebuild_index()}

    @server.feature(CURSOR_METHOD)
    def on_cursor(ls: FastcoderServer, params: Any) -> None:
        # a notification: nothing to answer; malformed params are ignored (logged)
        if not ls.host.settings.warm_on_cursor:
            return
        found = cursor_offset(ls.workspace, params)
        if found is not None:
            ls.schedule_warm(found[0], found[1], delay=CURSOR_WARM_DELAY_S)

    @server.feature(REPO_CONTAINS_METHOD)
    async def repo_contains(ls: FastcoderServer, params: Any) -> dict:
        text = getattr(params, "text", None)
        if not isinstance(text, str) or not text or ls.host.state != "ready":
            return {"folders": []}
        if len(text) > REPO_CONTAINS_MAX_CHARS:  # a debug request must not hold the model worker
            raise JsonRpcInvalidParams(f"text longer than {REPO_CONTAINS_MAX_CHARS} characters")
        found = await asyncio.get_running_loop().run_in_executor(ls.host.model_pool, ls.host.repo_contains, text)
        return {"folders": found}

    @server.feature(types.SHUTDOWN)
    def on_shutdown(ls: FastcoderServer, params: Any) -> None:
        for flight in list(ls.inflight.values()):
            flight.cancel.set()
        ls.backend.close()
        ls.host.preempt_background()
        ls.watcher.stop()
        ls.host.shutdown()

    return server


async def _register_file_watching(ls: FastcoderServer) -> None:
    """Ask the client to send didChangeWatchedFiles when it supports dynamic registration (VS Code)."""
    ws = ls.client_capabilities.workspace
    if not (ws and ws.did_change_watched_files and ws.did_change_watched_files.dynamic_registration):
        return
    try:
        await asyncio.wait_for(ls.client_register_capability_async(types.RegistrationParams(registrations=[
            types.Registration(id="fastcoder-watch", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                               register_options=types.DidChangeWatchedFilesRegistrationOptions(
                                   watchers=[types.FileSystemWatcher(glob_pattern="**/*")]))])), 10)
    except Exception as exc:
        log.info("client refused file-watch registration: %s", exc)


def _position_valid(lines: Any, pos: types.Position) -> bool:
    """True when ``pos`` lies inside the document (a character index up to the line's length in UTF-16
    units, the largest of the encodings' unit counts; one past the last line only at character 0)."""
    if pos.line < 0 or pos.character < 0 or pos.line > len(lines):
        return False
    if pos.line == len(lines):
        return pos.character == 0
    line = lines[pos.line].rstrip("\r\n")
    return pos.character <= len(line.encode("utf-16-le")) // 2


def cursor_offset(workspace: Any, params: Any) -> tuple[str, int] | None:
    """``(uri, offset)`` of a ``fastcoder/cursor`` notification's ``{textDocument: {uri}, position: {line,
    character}}`` (the position in the negotiated encoding, as in ``textDocument/inlineCompletion``); None,
    logged, for params that are not that, a document that is not open or a position outside it."""
    try:
        uri = params.textDocument.uri if hasattr(params, "textDocument") else params.text_document.uri
        pos = types.Position(line=int(params.position.line), character=int(params.position.character))
    except (AttributeError, TypeError, ValueError):
        log.info("%s: malformed params %r", CURSOR_METHOD, params)
        return None
    doc = workspace.text_documents.get(uri) if isinstance(uri, str) else None
    if doc is None or not _position_valid(doc.lines, pos):
        log.info("%s: no open document %r or position %s outside it", CURSOR_METHOD, uri, pos)
        return None
    return uri, doc.offset_at_position(pos)


def _empty() -> types.InlineCompletionList:
    return types.InlineCompletionList(items=[])


async def complete(ls: FastcoderServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
    """``textDocument/inlineCompletion``: an empty list unless the backend is ready, the document is known and
    the position valid; cancel-previous per document; results for an outdated document version are dropped.
    Every request leaves one DEBUG line with how it ended (``fastcoder-lsp --log-level DEBUG`` or
    ``FASTCODER_LOG_LEVEL=DEBUG``): a failure seen once in an editor can be read in its log."""
    t_start = time.perf_counter()
    how = "cancelled"  # what the DEBUG line says when _complete raises CancelledError
    try:
        result, how = await _complete(ls, params, t_start)
        return result
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        how = f"error {type(exc).__name__}"
        raise
    finally:
        pos = params.position
        log.debug("inlineCompletion %s:%d:%d %s after %.0f ms", params.text_document.uri, pos.line, pos.character,
                  how, (time.perf_counter() - t_start) * 1000)


async def _complete(ls: FastcoderServer, params: types.InlineCompletionParams,
                    t_start: float) -> tuple[types.InlineCompletionList, str]:
    """:func:`complete`'s answer, and how it ended in words (for its DEBUG line)."""
    if ls.backend.state != "ready":
        return _empty(), f"empty: backend {ls.backend.state}"
    uri = params.text_document.uri
    doc = ls.workspace.text_documents.get(uri)
    if doc is None:
        ls.show("info", f"fastcoder: inline completion for a document that is not open: {uri}")
        return _empty(), "empty: document not open"
    pos = params.position
    lines = doc.lines
    if not _position_valid(lines, pos):
        log.info("position %s outside %s (%d lines)", pos, uri, len(lines))
        return _empty(), "empty: position outside the document"
    source = doc.source
    if len(source) > MAX_DOCUMENT_CHARS or "\0" in source:
        ls.show("info", f"fastcoder: {uri} is too large or binary; no completions")
        return _empty(), "empty: document too large or binary"
    offset = doc.offset_at_position(pos)
    path = uri_to_path(uri)
    prefix, suffix = source[:offset], source[offset:]
    line_prefix = prefix[prefix.rfind("\n") + 1:]
    nl = suffix.find("\n")
    line_suffix = suffix if nl < 0 else suffix[:nl]  # no copy of the rest of a large document
    settings = ls.host.settings
    if settings.type_through:
        rest = type_through(ls.shown.get(uri), uri, pos.line, line_prefix, line_suffix)
        if rest is None:
            rest = await _type_through_inflight(ls, uri, pos.line, line_prefix, line_suffix)
        if rest is not None:
            ls.host.counters["type_through"] += 1
            ls.host.type_through_ms.append((time.perf_counter() - t_start) * 1000)
            return _items(rest, pos), f"typed through: {rest!r}"
    req = CompletionRequest(uri=uri, version=doc.version, prefix=prefix, suffix=suffix,
                            folder=ls.host.folder_of(path), cancel=CancelEvent())
    previous = ls.inflight.get(uri)
    if previous is not None:
        previous.cancel.set()  # cancel-previous: the older request stops within one forward and answers empty
    flight = InFlight(req.cancel, pos.line, line_prefix, line_suffix)
    ls.inflight[uri] = flight
    try:
        flight.future = ls.backend.submit(req)  # local: the model worker; openai: a task streaming over HTTP
        # shielded: cancelling this request must not cancel the job a type-through request may await
        outcome = await asyncio.shield(flight.future)
    except asyncio.CancelledError:
        # $/cancelRequest (pygls answers -32800): stop decoding, unless the user typed on along the line
        # since (VS Code cancels on every keystroke): then the next request types through the answer
        current = ls.workspace.text_documents.get(uri)
        if not (settings.type_through and current is not None and flight.continued_by(current, grown=True)):
            req.cancel.set()  # the job stops at its next forward (or at once if still queued)
        raise
    finally:
        if ls.inflight.get(uri) is flight:
            del ls.inflight[uri]
    if outcome.text is not None:
        ls.shown[uri] = Suggestion(uri, pos.line, line_prefix, line_suffix, outcome.text)
    current = ls.workspace.text_documents.get(uri)
    if outcome.text is None or current is None or current.version != req.version:
        if outcome.text is not None:  # computed for an older version: never shown
            ls.host.counters["stale_answers"] += 1
            ls.host.counters["wasted_tokens"] += int(outcome.stats.get("new_tokens") or 0)
        return _empty(), f"empty: {outcome.finish_reason}" if outcome.text is None else \
            f"empty: stale (version {req.version}, now {current.version if current is not None else 'closed'})"
    return _items(outcome.text, pos), f"{outcome.finish_reason} {outcome.latency_ms:.0f} ms: {outcome.text!r}"


def _items(text: str, pos: types.Position) -> types.InlineCompletionList:
    return types.InlineCompletionList(items=[types.InlineCompletionItem(
        insert_text=text, range=types.Range(start=pos, end=pos))])


class InFlight:
    """A completion running for a document: its cancel event, cursor line and line text around the cursor,
    and (once submitted) the future of its outcome."""

    def __init__(self, cancel: threading.Event, line: int, line_prefix: str, line_suffix: str):
        self.cancel, self.line, self.line_prefix, self.line_suffix = cancel, line, line_prefix, line_suffix
        self.future: asyncio.Future | None = None

    def continued_by(self, doc: Any, grown: bool = False) -> bool:
        """Whether the document's cursor line still starts with this request's line prefix and ends
        with its line suffix (the user typed on at the cursor, or nothing changed there): its answer may
        still be typed through. ``grown``: only if characters were typed since."""
        lines = doc.lines
        if self.line >= len(lines):
            return False
        text = lines[self.line].rstrip("\r\n")
        extra = len(text) - len(self.line_prefix) - len(self.line_suffix)
        return text.startswith(self.line_prefix) and text.endswith(self.line_suffix) and \
            extra >= (1 if grown else 0)


async def _type_through_inflight(ls: FastcoderServer, uri: str, line: int, line_prefix: str,
                                 line_suffix: str) -> str | None:
    """When the completion still running for ``uri`` was asked on this line before the characters typed
    since, wait for it (instead of restarting) and type through its answer."""
    flight = ls.inflight.get(uri)
    if flight is None or flight.future is None or flight.line != line or flight.line_suffix != line_suffix \
            or not line_prefix.startswith(flight.line_prefix) or line_prefix == flight.line_prefix:
        return None
    try:
        outcome = await asyncio.shield(flight.future)
    except Exception:
        return None
    if outcome.text is None:
        return None
    return type_through(Suggestion(uri, line, flight.line_prefix, line_suffix, outcome.text), uri, line,
                        line_prefix, line_suffix)


def _edit_end_offset(doc: Any, changes: Any) -> int | None:
    """Offset (code points) just after the text inserted by the last change: where the cursor most
    likely is; None for a full-text change or an unknown document."""
    if doc is None or not changes:
        return None
    last = changes[-1]
    rng = getattr(last, "range", None)
    if rng is None:
        return None
    try:
        return doc.offset_at_position(rng.start) + len(last.text)
    except Exception:
        return None
