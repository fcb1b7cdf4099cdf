"""First suggestion in a file opened 1 s earlier (issue #10 target: <= 150 ms).

The real server (stdio, tiny-py-coder, D_c stdlib) on a third-party package; for each of N files: open
it, wait 1 s (the background prefill of the open document runs meanwhile), then ask for an inline
completion at the first function-body start in the file's first 3,000 characters, and time the
request at the client. Run with warmCache on and off.

    python benchmarks/measure_first_suggestion.py [--package pluggy] [--files 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from lsp_raw import RawServer  # noqa: E402

from lsp_server.demo import function_body_starts  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "tiny-py-coder"


def run(root: Path, files: list[Path], warm: bool) -> list[float]:
    server = RawServer(cwd=Path(tempfile.mkdtemp()))
    out = []
    try:
        server.initialize(root, {"model": str(MODEL), "warmCache": warm})
        server.wait_ready(600)
        for path in files:
            text = path.read_text(encoding="utf-8")
            lines = text.split("\n")
            starts = [ln for ln in function_body_starts(text, 1000) if sum(len(x) + 1 for x in lines[:ln]) < 3000]
            if not starts:
                continue
            line = starts[0]
            col = len(lines[line]) - len(lines[line].lstrip())
            uri = path.as_uri()
            server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                                    "version": 1, "text": text}})
            time.sleep(1.0)  # the user looks at the file for a second
            t = time.perf_counter()
            server.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                             "position": {"line": line, "character": col},
                                                             "context": {"triggerKind": 2}})
            out.append((time.perf_counter() - t) * 1000)
        server.close()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", default="pluggy")
    ap.add_argument("--files", type=int, default=8)
    args = ap.parse_args()
    root = Path(list(importlib.util.find_spec(args.package).submodule_search_locations)[0])
    files = sorted(p for p in root.rglob("*.py") if function_body_starts(p.read_text(encoding="utf-8"), 1))[:args.files]
    report = {}
    for warm in (True, False):
        ms = run(root, files, warm)
        report["warm cache on" if warm else "warm cache off"] = {
            "n": len(ms), "p50_ms": round(statistics.median(ms), 1), "max_ms": round(max(ms), 1),
            "all_ms": [round(x, 1) for x in ms]}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
