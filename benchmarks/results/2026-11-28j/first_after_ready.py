"""Is a server's first completion dearer than later cold ones? The real server over stdio, waited until ready (no
requests while it loads), then one single-line completion at a function-body start in each of FILES files it has not
seen (a cold prefill each), printing the server-side latency of each; ROUNDS fresh servers.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-28j/first_after_ready.py [rounds] [files]"""
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from lsp_server.bench_latency import function_body_starts  # noqa: E402
from lsp_server.demo import ServerSession  # noqa: E402

SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"


async def one_server(files: int) -> list[float]:
    work = Path(tempfile.mkdtemp(prefix="fastcoder-first-"))
    shutil.copytree(SITE / "pluggy", work / "pluggy")
    session = await ServerSession.start(work, {"model": str(ROOT.parent / "shared" / "models" / "tiny-py-coder"),
                                               "commonDatastore": "stdlib"})
    try:
        await session.wait_ready(600)
        await asyncio.sleep(1.0)  # the folder's index built, the loader idle
        out = []
        targets = [p for p in sorted(work.rglob("*.py")) if function_body_starts(p.read_text(), 1)][:files]
        for path in targets:
            text = path.read_text()
            uri = session.open(path, text)
            line = function_body_starts(text, 1)[0]
            before = (await session.status()).get("last")
            await session.complete(uri, line, len(text.split("\n")[line]))
            st = await session.status()
            out.append(round(st["latencies_ms"][-1], 1) if st.get("last") is not before else float("nan"))
        return out
    finally:
        await session.close()
        shutil.rmtree(work, ignore_errors=True)


async def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    for r in range(rounds):
        t0 = time.perf_counter()
        lat = await one_server(files)
        print(f"server {r}: completion latencies (ms, server side, in order): {lat}  ({time.perf_counter() - t0:.0f} s)",
              flush=True)


if __name__ == "__main__":
    asyncio.run(main())
