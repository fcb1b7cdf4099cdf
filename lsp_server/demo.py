"""``fastcoder demo``: drive the real language server headlessly, as an editor would, and print a report.

Starts ``python -m lsp_server`` as a subprocess, talks LSP to it with pygls' client (initialize with the
repository as the workspace folder, wait until ``fastcoder/status`` says ready, open a real file, type into
it with incremental ``didChange``, ask for inline completions at the start of function bodies) and prints,
per position, file:line, what was typed, the completion, the original line, latency (ms) and accepted
length, then p50/p95 latency. Nothing here imports torch: the model lives in the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

STATUS_METHOD = "fastcoder/status"
DEF_RE = re.compile(r"^(\s*)(async\s+)?def\s+\w+\s*\(.*\)\s*(->.*)?:\s*$")


def default_model(repo: Path | None = None) -> str:
    """``$FASTCODER_MODEL``, else ``../shared/models/tiny-py-coder`` relative to the repository (or to this
    checkout), else ``engine.DEFAULT_MODEL``."""
    if os.environ.get("FASTCODER_MODEL"):
        return os.environ["FASTCODER_MODEL"]
    for base in (repo, Path(__file__).resolve().parents[1]):
        if base is not None:
            cand = (Path(base).resolve() / ".." / "shared" / "models" / "tiny-py-coder").resolve()
            if cand.is_dir():
                return str(cand)
    from .settings import default_model_name  # noqa: PLC0415

    return default_model_name()


class ServerSession:
    """An LSP client connected to a freshly started fastcoder server subprocess (stdio).

    Use ``await ServerSession.start(root, options)`` then :meth:`open`, :meth:`type_text`, :meth:`complete`,
    :meth:`status`, and finally :meth:`close`. ``messages`` collects showMessage texts; ``stderr_lines``
    the server's log (kept in memory so the pipe never fills).
    """

    def __init__(self, client: LanguageClient, root: Path):
        self.client = client
        self.root = root
        self.messages: list[str] = []
        self.stderr_lines: list[str] = []
        self.versions: dict[str, int] = {}
        self.texts: dict[str, str] = {}
        self.initialize_ms: float | None = None
        self._stderr_task: asyncio.Task | None = None

    @classmethod
    async def start(cls, root: Path, options: dict, log_level: str = "INFO", echo_stderr: bool = False,
                    env: dict | None = None) -> "ServerSession":
        """Start the server, initialize with ``root`` as the only workspace folder and ``options`` as
        initializationOptions (section ``fastcoder``)."""
        client = LanguageClient("fastcoder-demo", "0.1")
        session = cls(client, root)

        @client.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(ls, params: types.ShowMessageParams):
            session.messages.append(params.message)

        @client.feature(types.WINDOW_LOG_MESSAGE)
        def _log(ls, params):
            pass

        @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def _create(ls, params):
            return None

        @client.feature(types.PROGRESS)
        def _progress(ls, params):
            pass

        @client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def _register(ls, params):
            return None

        await client.start_io(sys.executable, "-m", "lsp_server", "--log-level", log_level,
                              env={**os.environ, **(env or {})})
        session._stderr_task = asyncio.ensure_future(session._drain_stderr(echo_stderr))
        caps = types.ClientCapabilities(
            text_document=types.TextDocumentClientCapabilities(
                inline_completion=types.InlineCompletionClientCapabilities(),
                synchronization=types.TextDocumentSyncClientCapabilities(did_save=True)),
            window=types.WindowClientCapabilities(work_done_progress=True),
            workspace=types.WorkspaceClientCapabilities(workspace_folders=True))
        t0 = time.perf_counter()
        await asyncio.wait_for(client.initialize_async(types.InitializeParams(
            capabilities=caps, root_uri=root.as_uri(), initialization_options={"fastcoder": options},
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)])), 30)
        session.initialize_ms = (time.perf_counter() - t0) * 1000
        client.initialized(types.InitializedParams())
        return session

    async def _drain_stderr(self, echo: bool) -> None:
        stream = self.client._server.stderr if self.client._server else None
        if stream is None:
            return
        while True:
            line = await stream.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            self.stderr_lines.append(text)
            if echo:
                print(f"[server] {text}", file=sys.stderr)

    async def status(self) -> dict:
        """The server's ``fastcoder/status`` answer as a plain dict."""
        res = await asyncio.wait_for(self.client.protocol.send_request_async(STATUS_METHOD, {}), 30)
        return to_plain(res)

    async def wait_ready(self, timeout: float = 120.0, need_repo: bool = True) -> dict:
        """Poll status until the model is ready (and, with need_repo, no folder is still indexing); returns
        the last status. Raises TimeoutError, or RuntimeError when the server reports an error state."""
        deadline = time.perf_counter() + timeout
        while True:
            st = await self.status()
            if st.get("state") == "error":
                raise RuntimeError(f"server error: {st.get('error')}")
            repos = st.get("repo") or []
            if st.get("state") == "ready" and not (need_repo and any(r.get("state") == "indexing" for r in repos)):
                return st
            if time.perf_counter() > deadline:
                raise TimeoutError(f"server not ready after {timeout:.0f} s: {st.get('state')}")
            await asyncio.sleep(0.1)

    def open(self, path: Path, text: str | None = None) -> str:
        """didOpen ``path`` (its text from disk unless given); returns the URI."""
        uri = path.resolve().as_uri()
        text = path.read_text(encoding="utf-8") if text is None else text
        self.versions[uri], self.texts[uri] = 1, text
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=text)))
        return uri

    def edit(self, uri: str, start: tuple[int, int], end: tuple[int, int], new_text: str) -> None:
        """One incremental didChange replacing the range start..end ((line, character) pairs, UTF-16 units
        as a client counts them; ASCII here) with ``new_text``; the local copy is updated the same way."""
        self.versions[uri] += 1
        rng = types.Range(types.Position(*start), types.Position(*end))
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangePartial(range=rng, text=new_text)]))
        lines = self.texts[uri].split("\n")
        a = sum(len(ln) + 1 for ln in lines[: start[0]]) + start[1]
        b = sum(len(ln) + 1 for ln in lines[: end[0]]) + end[1]
        self.texts[uri] = self.texts[uri][:a] + new_text + self.texts[uri][b:]

    def type_text(self, uri: str, line: int, character: int, text: str) -> tuple[int, int]:
        """Type ``text`` (no newlines) one character per didChange at (line, character); returns the cursor."""
        for ch in text:
            self.edit(uri, (line, character), (line, character), ch)
            character += 1
        return line, character

    async def complete(self, uri: str, line: int, character: int, timeout: float = 30.0):
        """textDocument/inlineCompletion at (line, character); returns (items, client round trip ms)."""
        t0 = time.perf_counter()
        res = await asyncio.wait_for(self.client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))),
            timeout)
        ms = (time.perf_counter() - t0) * 1000
        items = res.items if isinstance(res, types.InlineCompletionList) else list(res or [])
        return items, ms

    async def close(self) -> None:
        """shutdown + exit, wait for the process."""
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 15)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 15)
        except Exception:
            server = self.client._server
            if server is not None and server.returncode is None:
                server.kill()
        if self._stderr_task is not None:
            self._stderr_task.cancel()


def to_plain(obj: Any) -> Any:
    """Convert pygls' namedtuple-like ``Object`` answers (custom methods) into dicts/lists."""
    if hasattr(obj, "_asdict"):
        return {k: to_plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def function_body_starts(text: str, limit: int) -> list[int]:
    """0-based line numbers of the first body line of up to ``limit`` functions (one-line bodies skipped,
    docstrings skipped: the first statement after them), spread evenly over the file."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines[:-1]):
        if not DEF_RE.match(line):
            continue
        j = i + 1
        if lines[j].strip().startswith(('"""', "'''")):
            quote = lines[j].strip()[:3]
            if lines[j].strip().count(quote) < 2 or lines[j].strip() == quote:
                j += 1
                while j < len(lines) and quote not in lines[j]:
                    j += 1
            j += 1
        if j < len(lines) and len(lines[j].strip()) >= 4 and not lines[j].strip().startswith("#"):
            found.append(j)
    if len(found) <= limit:
        return found
    step = len(found) / limit
    return [found[int(k * step)] for k in range(limit)]


def pick_file(repo: Path) -> Path | None:
    """A .py file of the repository with several functions (the one with most ``def`` lines, <= 3000
    lines), skipping hidden dirs, venvs and tests' fixtures."""
    best, best_n = None, 0
    for path in sorted(repo.rglob("*.py")):
        if any(part.startswith(".") or part in ("venv", "node_modules", "__pycache__", "build")
               for part in path.relative_to(repo).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.count("\n") > 3000:
            continue
        n = len(function_body_starts(text, 10_000))
        if n > best_n:
            best, best_n = path, n
    return best


@dataclass
class DemoRow:
    """One completion of the demo: where, what was typed, what came back and how long it took (ms)."""

    where: str
    typed: str
    completion: str | None
    original: str
    client_ms: float
    server_ms: float | None
    accepted_length: float | None


async def run_demo(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    if not repo.is_dir():
        print(f"fastcoder demo: --repo {repo} is not a directory", file=sys.stderr)
        return 2
    path = (repo / args.file).resolve() if args.file else pick_file(repo)
    if path is None or not path.is_file():
        print(f"fastcoder demo: no Python file to complete in {repo} (use --file)", file=sys.stderr)
        return 2
    options = {"model": args.model or default_model(repo), "method": args.method, "maxNewTokens": args.max_new_tokens,
               "commonDatastore": args.common, "stopAt": args.stop_at}
    print(f"fastcoder demo: repo {repo}\n  model {options['model']}, method {args.method}, "
          f"common datastore {args.common}, stopAt {args.stop_at}")
    t0 = time.perf_counter()
    session = await ServerSession.start(repo, options, echo_stderr=args.verbose)
    try:
        print(f"  initialize answered in {session.initialize_ms:.0f} ms")
        try:
            st = await session.wait_ready(args.timeout)
        except (TimeoutError, RuntimeError) as exc:
            print(f"fastcoder demo: {exc}", file=sys.stderr)
            for m in session.messages:
                print(f"  server said: {m}", file=sys.stderr)
            return 1
        print(f"  ready after {(time.perf_counter() - t0):.1f} s on {st.get('device')}; "
              + "; ".join(f"D_r {Path(v.get('root', '')).name}: {v.get('tokens')} tokens / {v.get('files')} files"
                          for v in (st.get("repo") or []))
              + f"; D_c: {st.get('common', {}).get('tokens')} tokens")
        rows = await _complete_positions(session, repo, path, args.positions, args.typed_chars)
    finally:
        await session.close()
    _print_report(rows, session.messages)
    return 0


async def _complete_positions(session: ServerSession, repo: Path, path: Path, n: int, typed_chars: int) -> list[DemoRow]:
    text = path.read_text(encoding="utf-8")
    uri = session.open(path, text)
    rows = []
    for line_no in function_body_starts(text, n):
        original = session.texts[uri].split("\n")[line_no]
        indent = original[: len(original) - len(original.lstrip())]
        typed = original.strip()[:typed_chars]
        session.edit(uri, (line_no, 0), (line_no, len(original)), "")  # clear the line, then type it
        cursor = session.type_text(uri, line_no, 0, indent + typed)
        await asyncio.sleep(0.05)  # an editor's debounce
        items, ms = await session.complete(uri, *cursor)
        st = await session.status()
        last = st.get("last") or {}
        rows.append(DemoRow(f"{path.relative_to(repo)}:{line_no + 1}", typed,
                            items[0].insert_text if items else None, original.strip(), ms,
                            last.get("latency_ms"), last.get("mean_accepted_length")))
        session.edit(uri, (line_no, 0), (line_no, cursor[1]), original)  # restore the line
    return rows


def _print_report(rows: list[DemoRow], messages: list[str]) -> None:
    print()
    for r in rows:
        shown = "<none>" if r.completion is None else repr(r.completion)
        exact = r.completion is not None and (r.typed + r.completion).strip() == r.original
        print(f"{r.where}")
        print(f"    typed      {r.typed!r}")
        print(f"    completion {shown}{'  (matches the original)' if exact else ''}")
        print(f"    original   {r.original!r}")
        al = f"{r.accepted_length:.2f}" if isinstance(r.accepted_length, (int, float)) else "-"
        srv = f"{r.server_ms:.0f}" if isinstance(r.server_ms, (int, float)) else "-"
        print(f"    latency    {r.client_ms:.0f} ms round trip, {srv} ms in the server; accepted length {al}")
    lat = sorted(r.client_ms for r in rows)
    if lat:
        p50 = statistics.median(lat)
        p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
        shown = sum(r.completion is not None for r in rows)
        exact = sum(r.completion is not None and (r.typed + r.completion).strip() == r.original for r in rows)
        als = [r.accepted_length for r in rows if isinstance(r.accepted_length, (int, float))]
        print(f"\nsummary: {len(rows)} positions, {shown} with a completion, {exact} equal to the original line; "
              f"latency p50 {p50:.0f} ms, p95 {p95:.0f} ms (round trip)"
              + (f"; mean accepted length {statistics.mean(als):.2f}" if als else ""))
    else:
        print("summary: no function bodies found to complete")
    for m in messages:
        print(f"server message: {m}")


def _add_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--repo", required=True, help="repository to open as the workspace")
    p.add_argument("--file", help="file to type into (relative to --repo); default: the one with most functions")
    p.add_argument("--model", help="model path or hub id (default: $FASTCODER_MODEL, ../shared/models/tiny-py-coder)")
    p.add_argument("--positions", type=int, default=8, help="number of completion positions (default 8)")
    p.add_argument("--method", default="fastcoder", help="decoding method (default fastcoder)")
    p.add_argument("--common", default="stdlib", help="common datastore: stdlib | none | PATH (default stdlib)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--stop-at", default="line", choices=["line", "block"])
    p.add_argument("--typed-chars", type=int, default=3, help="characters of each body line typed before asking")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the server to be ready")
    p.add_argument("--verbose", action="store_true", help="echo the server's log")
    return p


def build_parser() -> argparse.ArgumentParser:
    """Options of ``fastcoder demo``."""
    return _add_options(argparse.ArgumentParser(prog="fastcoder demo", description=__doc__.split("\n")[0]))


def add_command(sub) -> None:
    """Register ``demo`` on the ``fastcoder`` command's subparsers (see :mod:`fastcoder.cli`)."""
    p = sub.add_parser("demo", help="headless demo: drive the language server like an editor would",
                       description=__doc__.split("\n")[0])
    _add_options(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(run_demo(args))
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``fastcoder demo``; returns the exit status (0 ok, 1 server failure, 2 bad arguments)."""
    return _run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
