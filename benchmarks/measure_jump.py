"""The first keystroke after the cursor jumps to another function, with and without ``fastcoder/cursor``.

The real server (stdio, tiny-py-coder, D_c stdlib) on a third-party package's file with the most functions:
for each of N function bodies, the cursor comes to rest at the body's first line (with ``--notify``, the client
sends ``fastcoder/cursor`` there, as both editor clients do 150 ms after the cursor stops), 1 s later the user
types the line's first character and the client asks for an inline completion at once (VS Code's timing); the
round trip is timed at the client, the character removed again. Prints the round trips and the server's
latency breakdown (medians over the run).

    python benchmarks/measure_jump.py [--package pluggy] [--bodies 12] [--notify]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lsp_server.demo import ServerSession, default_model, function_body_starts, pick_file  # noqa: E402
from lsp_server.server import CURSOR_METHOD  # noqa: E402


async def run(repo: Path, bodies: int, notify: bool) -> dict:
    file = pick_file(repo)
    text = file.read_text(encoding="utf-8")
    session = await ServerSession.start(repo, {"model": default_model(ROOT), "commonDatastore": "stdlib"})
    try:
        await session.wait_ready(600)
        uri = session.open(file, text)
        await asyncio.sleep(2.0)  # the open document's own background prefill
        lines = text.split("\n")
        round_trips = []
        for line in function_body_starts(text, bodies):
            indent = len(lines[line]) - len(lines[line].lstrip())
            if notify:
                session.client.protocol.notify(CURSOR_METHOD, {
                    "textDocument": {"uri": uri}, "position": {"line": line, "character": indent}})
            await asyncio.sleep(1.0)
            session.type_text(uri, line, indent, lines[line][indent])
            _, ms = await session.complete(uri, line, indent + 1)
            round_trips.append(round(ms, 1))
            session.edit(uri, (line, indent), (line, indent + 1), "")
            await asyncio.sleep(0.3)
        status = await session.status()
    finally:
        await session.close()
    return {"file": str(file.relative_to(repo)), "notify": notify, "round_trips_ms": round_trips,
            "p50_ms": statistics.median(round_trips) if round_trips else None,
            "server_breakdown_ms": status.get("latency_breakdown_ms")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--package", default="pluggy", help="a package installed in this environment")
    p.add_argument("--bodies", type=int, default=12)
    p.add_argument("--notify", action="store_true", help="send fastcoder/cursor where the cursor rests")
    args = p.parse_args()
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec(args.package)
    if spec is None or not spec.submodule_search_locations:
        p.error(f"package {args.package!r} is not installed")
    repo = Path(list(spec.submodule_search_locations)[0])
    print(json.dumps(asyncio.run(run(repo, args.bodies, args.notify)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
