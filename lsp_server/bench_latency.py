"""``fastcoder bench-latency``: replay realistic typing through the real server and measure what a user feels.

Function bodies of real files of a repository are removed and typed back character by character at a
human pace (seeded inter-key gaps, longer pauses at line ends), through the real language server over
stdio (:class:`lsp_server.demo.ServerSession`). Requests are fired the way the two editors fire them:

- ``nvim``: Neovim 0.12's ``vim.lsp.inline_completion``: one request 200 ms after the last keystroke,
  no client-side cancellation;
- ``vscode``: a request on every keystroke, ``$/cancelRequest`` of the previous one still pending.

Both clients tell the server where the cursor comes to rest (``fastcoder/cursor``, :data:`CURSOR_REST_S` after
it stops moving); the replay does so when it moves to the next function body, before typing there. Each
body's first request (after the jump) is also reported on its own (``jump_p50_ms``, ``jump_p95_ms``).

Each configuration (every feature on, then each of warm cache, type-through and token healing off)
runs the same keystrokes. Reported per configuration and mode: request -> answer latency p50 / p95 /
p99 (ms, client side) and the server's median time per part (waiting for the model worker, prompt, prefill,
decode), suggestions shown per keystroke, cancellations, wasted decoded tokens (tokens
decoded for answers that were cancelled or stale), share of prompt tokens served from a warm KV cache,
type-through answers, healed prompts, and exact-prefix acceptance (a shown suggestion is exactly what
the user typed next on that line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types

from .demo import ServerSession, default_model, function_body_starts, pick_file
from .host import LATENCY_PARTS
from .server import CURSOR_METHOD

CONFIGS = {
    "all features": {},
    "warm cache off": {"warmCache": False},
    "cursor warm off": {"warmOnCursor": False},
    "type-through off": {"typeThrough": False},
    "token healing off": {"tokenHealing": False},
}
MODES = ("nvim", "vscode")
NVIM_DEBOUNCE_S = 0.2
#: The clients' debounce of ``fastcoder/cursor`` (editors/vscode/src/extension.ts, editors/neovim/lua): seconds
#: after the cursor stops moving.
CURSOR_REST_S = 0.15


@dataclass
class Keystroke:
    """One character typed at (line, character) of a file; ``rest`` is the rest of that line to be typed."""

    line: int
    character: int
    char: str
    rest: str
    gap_s: float
    first: bool = False  # the first keystroke of a body: the cursor jumped here during gap_s


@dataclass
class RunStats:
    latencies_ms: list[float] = field(default_factory=list)
    jump_latencies_ms: list[float] = field(default_factory=list)  # each body's first request
    shown: int = 0
    accepted: int = 0
    requests: int = 0
    cancelled: int = 0
    keystrokes: int = 0


def plan_typing(text: str, bodies: int, chars: int, seed: int) -> tuple[str, list[Keystroke]]:
    """The file with the first body lines of up to ``bodies`` functions blanked (indentation kept), and
    the keystrokes that type them back (at most ``chars``), with human gaps (s): 60-180 ms between
    keys, a 250-600 ms pause before 15% of them (thinking mid-line), 400-900 ms before a line."""
    rng = random.Random(seed)
    lines = text.split("\n")
    keys: list[Keystroke] = []
    for line in function_body_starts(text, bodies):
        body = lines[line]
        indent = len(body) - len(body.lstrip())
        typed = body[indent:].rstrip()
        lines[line] = body[:indent]
        for i, ch in enumerate(typed):
            if i == 0:
                gap = rng.uniform(0.4, 0.9)
            elif rng.random() < 0.15:
                gap = rng.uniform(0.25, 0.6)
            else:
                gap = rng.uniform(0.06, 0.18)
            keys.append(Keystroke(line, indent + i, ch, typed[i:], gap, i == 0))
        if len(keys) >= chars:
            break
    return "\n".join(lines), keys[:chars]


async def replay(session: ServerSession, uri: str, keys: list[Keystroke], mode: str) -> RunStats:
    """Type ``keys`` into ``uri`` and fire requests as the editor of ``mode`` does."""
    stats = RunStats()
    pending: dict[int, asyncio.Future] = {}
    tasks: list[asyncio.Task] = []
    client = session.client
    next_id = [1000]

    asked_lines: set[int] = set()

    async def ask(key: Keystroke, line: int, character: int) -> None:
        jump = line not in asked_lines
        asked_lines.add(line)
        next_id[0] += 1
        msg_id = next_id[0]
        if mode == "vscode":
            for old_id, fut in list(pending.items()):
                if not fut.done():
                    client.cancel_request(types.CancelParams(id=old_id))
                    stats.cancelled += 1
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        t0 = time.perf_counter()
        fut = asyncio.ensure_future(client.protocol.send_request_async(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id))
        pending[msg_id] = fut
        stats.requests += 1
        try:
            res = await asyncio.wait_for(fut, 60)
        except Exception:  # cancelled (-32800) or timed out
            return
        finally:
            pending.pop(msg_id, None)
        stats.latencies_ms.append((time.perf_counter() - t0) * 1000)
        if jump:
            stats.jump_latencies_ms.append(stats.latencies_ms[-1])
        items = getattr(res, "items", None) or []
        if items and items[0].insert_text:
            stats.shown += 1
            if key.rest[1:].startswith(items[0].insert_text):
                stats.accepted += 1

    debounce: asyncio.TimerHandle | None = None
    loop = asyncio.get_running_loop()
    for key in keys:
        if key.first and key.gap_s > CURSOR_REST_S:  # the cursor moved here; the client says where it rests
            await asyncio.sleep(CURSOR_REST_S)
            client.protocol.notify(CURSOR_METHOD, {"textDocument": {"uri": uri},
                                                   "position": {"line": key.line, "character": key.character}})
            await asyncio.sleep(key.gap_s - CURSOR_REST_S)
        else:
            await asyncio.sleep(key.gap_s)
        session.type_text(uri, key.line, key.character, key.char)
        stats.keystrokes += 1
        if mode == "vscode":
            tasks.append(asyncio.ensure_future(ask(key, key.line, key.character + 1)))
        else:
            if debounce is not None:
                debounce.cancel()
            debounce = loop.call_later(NVIM_DEBOUNCE_S, lambda k=key: tasks.append(
                asyncio.ensure_future(ask(k, k.line, k.character + 1))))
    await asyncio.sleep(NVIM_DEBOUNCE_S + 0.05)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    return stats


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))], 1)


async def run_config(repo: Path, file: Path, model: str, options: dict, mode: str, bodies: int, chars: int,
                     seed: int, common: str) -> dict:
    text = file.read_text(encoding="utf-8")
    start_text, keys = plan_typing(text, bodies, chars, seed)
    session = await ServerSession.start(repo, {"model": model, "commonDatastore": common, **options})
    try:
        await session.wait_ready(600)
        uri = session.open(file, start_text)
        stats = await replay(session, uri, keys, mode)
        status = await session.status()
    finally:
        await session.close()
    counters = status.get("counters") or {}
    lat = stats.latencies_ms
    return {
        "mode": mode, "keystrokes": stats.keystrokes, "requests": stats.requests,
        "p50_ms": _pct(lat, 50), "p95_ms": _pct(lat, 95), "p99_ms": _pct(lat, 99),
        "mean_ms": round(statistics.mean(lat), 1) if lat else None,
        "jump_p50_ms": _pct(stats.jump_latencies_ms, 50), "jump_p95_ms": _pct(stats.jump_latencies_ms, 95),
        "shown_per_keystroke": round(stats.shown / max(stats.keystrokes, 1), 3),
        "client_cancellations": stats.cancelled,
        "server_cancelled": counters.get("cancelled", 0),
        "model_calls": counters.get("requests", 0),
        "wasted_decoded_tokens": counters.get("wasted_tokens", 0),
        "decoded_tokens": counters.get("decoded_tokens", 0),
        "warm_prompt_share": round(status["warm_prompt_share"], 3) if status.get("warm_prompt_share") else 0.0,
        "type_through": counters.get("type_through", 0),
        "type_through_p95_ms": round(status["type_through_p95_ms"], 2) if status.get("type_through_p95_ms") else None,
        "healed_prompts": counters.get("healed_prompts", 0),
        "exact_prefix_acceptance": round(stats.accepted / stats.shown, 3) if stats.shown else None,
        **_server_parts(status.get("latency_breakdown_ms")),
    }


def _server_parts(breakdown: dict | None) -> dict:
    """The server's median time per part of a completion (``server_<part>_p50``, ms: waiting for the model
    worker, building the prompt, prefill, decode, all of it; :data:`lsp_server.host.LATENCY_PARTS`), over the
    completions it answered (cancelled ones excluded)."""
    return {f"server_{part[:-3]}_p50_ms": ((breakdown or {}).get(part) or {}).get("p50") for part in LATENCY_PARTS}


def to_markdown(results: dict) -> str:
    cols = ["p50_ms", "p95_ms", "p99_ms", "jump_p50_ms", "jump_p95_ms", *(f"server_{part[:-3]}_p50_ms" for part in LATENCY_PARTS), "shown_per_keystroke", "exact_prefix_acceptance", "warm_prompt_share",
            "type_through", "type_through_p95_ms", "healed_prompts", "client_cancellations", "wasted_decoded_tokens", "model_calls"]
    out = ["| configuration | editor | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for name, rows in results["runs"].items():
        for row in rows:
            out.append(f"| {name} | {row['mode']} | " + " | ".join(str(row.get(c)) for c in cols) + " |")
    return "\n".join(out) + "\n"


def _add_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--repo", required=True, type=Path, help="repository to open as the workspace")
    p.add_argument("--file", type=Path, help="file to type into (default: the one with most functions)")
    p.add_argument("--model", help="default: $FASTCODER_MODEL or ../shared/models/tiny-py-coder")
    p.add_argument("--bodies", type=int, default=12, help="function bodies typed (first line of each)")
    p.add_argument("--chars", type=int, default=250, help="keystrokes per run at most")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--common", default="stdlib", help="common datastore: stdlib | none | PATH")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    p.add_argument("--modes", default=",".join(MODES), help="nvim,vscode")
    p.add_argument("--json", type=Path, required=True, help="write the results here")
    p.add_argument("--markdown", type=Path, help="also write a markdown table here")
    return p


def add_command(sub) -> None:
    """Register ``bench-latency`` on the ``fastcoder`` command (see :mod:`fastcoder.cli`)."""
    p = sub.add_parser("bench-latency", help="typing replay through the real server: latency as a user feels it",
                       description=__doc__.split("\n")[0])
    _add_options(p)
    p.set_defaults(func=lambda args: asyncio.run(_main(args)))


async def _main(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    if not repo.is_dir():
        print(f"fastcoder: error: --repo {args.repo} is not a folder", file=sys.stderr)
        return 2
    file = (repo / args.file) if args.file else pick_file(repo)
    if file is None or not file.is_file():
        print(f"fastcoder: error: no Python file with functions in {repo}", file=sys.stderr)
        return 2
    model = args.model or default_model(repo)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        print(f"fastcoder: error: unknown configuration(s) {unknown}; choose from {list(CONFIGS)}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"repo": str(repo), "file": str(file.relative_to(repo)), "model": model,
                               "bodies": args.bodies, "chars": args.chars, "seed": args.seed, "runs": {}}
    for name in configs:
        results["runs"][name] = []
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            row = await run_config(repo, file, model, CONFIGS[name], mode, args.bodies, args.chars, args.seed,
                                   args.common)
            results["runs"][name].append(row)
            print(f"{name:18s} {mode:6s} p50 {row['p50_ms']} ms  p95 {row['p95_ms']} ms  jump p50 {row['jump_p50_ms']} "
                  f"ms  shown/key "
                  f"{row['shown_per_keystroke']}  exact-prefix {row['exact_prefix_acceptance']}  warm "
                  f"{row['warm_prompt_share']}  type-through {row['type_through']}", file=sys.stderr)
    args.json.write_text(json.dumps(results, indent=1))
    if args.markdown:
        args.markdown.write_text(to_markdown(results))
    return 0
