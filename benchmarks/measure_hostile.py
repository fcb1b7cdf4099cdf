"""Hostile-workspace measurements for the language server (issue #12).

Builds a synthetic repository of N Python files, starts the real server (stdio) on it with
tiny-py-coder, waits until ready, then simulates a `git checkout` that rewrites every file at once
while an editor keeps asking: it sends `fastcoder/status` every 20 ms and one inline completion
right after the checkout, and reports:

- time to index the workspace at start (the server's own build_ms) and peak RSS of the server,
- status round trip p50 / p95 / max during the storm (ms),
- the completion's latency during the storm (ms) and whether it was answered,
- seconds until D_r converged to the files on disk (no pending events, rebuilt or updated).

    python benchmarks/measure_hostile.py --files 5000 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from lsp_raw import RawServer  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "tiny-py-coder"


def write_repo(root: Path, files: int, variant: int) -> None:
    for i in range(files):
        sub = root / f"pkg{i // 100}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_text(
            f"def handler_{i}_{variant}(request, retries={variant}):\n"
            f"    value = request.get('key_{i}')\n    if value is None:\n        return {variant}\n"
            f"    return value * {i}\n")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--options", default="{}", help="extra server settings (JSON)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fastcoder-hostile-"))
    ws = tmp / "ws"
    ws.mkdir()
    t0 = time.perf_counter()
    write_repo(ws, args.files, 0)
    (ws / "main.py").write_text("def main(request):\n    value = request.get('key_1')\n")
    server = RawServer(cwd=tmp)
    out: dict = {"files": args.files}
    try:
        server.initialize(ws, {"model": str(MODEL), "commonDatastore": "none", **json.loads(args.options)})
        status = server.wait_ready(600)
        while not status["repo"] or status["repo"][0]["state"] != "ready":
            status = server.request("fastcoder/status")["result"]
        out["index_ms"] = status["repo"][0]["build_ms"]
        out["index_tokens"] = status["repo"][0]["tokens"]
        uri = (ws / "main.py").as_uri()
        server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": (ws / "main.py").read_text()}})
        for attempt in range(3):  # the same completion on a quiet server, for comparison (last of 3)
            t = time.perf_counter()
            server.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": {"line": 1, "character": 4},
                "context": {"triggerKind": 1}}, timeout=300)
        out["completion_ms_quiet"] = round((time.perf_counter() - t) * 1000, 1)
        quiet = []
        for _ in range(20):
            t = time.perf_counter()
            server.request("fastcoder/status")
            quiet.append((time.perf_counter() - t) * 1000)
        out["status_rtt_ms_quiet_p95"] = round(sorted(quiet)[int(0.95 * 19)], 1)
        rtts: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                server.request("fastcoder/status", timeout=60)
                rtts.append((time.perf_counter() - t) * 1000)
                stop.wait(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        t_checkout = time.perf_counter()
        write_repo(ws, args.files, 1)  # the checkout: every file rewritten
        out["checkout_write_s"] = round(time.perf_counter() - t_checkout, 2)
        poller.start()
        t = time.perf_counter()
        answer = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}, "context": {"triggerKind": 1}},
            timeout=300)
        out["completion_ms_during_storm"] = round((time.perf_counter() - t) * 1000, 1)
        out["completion_answered"] = "result" in answer
        converged = None
        deadline = time.perf_counter() + 300
        while time.perf_counter() < deadline:
            st = server.request("fastcoder/status")["result"]
            found = server.request("fastcoder/repoContains",
                                   {"text": f"    return value * {args.files - 1}\n"})["result"]
            new = server.request("fastcoder/repoContains", {"text": "retries=1):\n    value"})["result"]
            if st["index"]["pending_file_events"] == 0 and st["repo"][0]["state"] == "ready" \
                    and new["folders"] and new["folders"][0]["found"] and found["folders"][0]["found"]:
                converged = time.perf_counter() - t_checkout
                break
            with server._cond:
                server._cond.wait(0.2)
        stop.set()
        poller.join(5)
        out["converged_s"] = round(converged, 2) if converged else None
        out["status_rtt_ms"] = {"n": len(rtts), "p50": round(statistics.median(rtts), 1),
                                "p95": round(sorted(rtts)[int(0.95 * (len(rtts) - 1))], 1),
                                "max": round(max(rtts), 1)} if rtts else None
        out["server_peak_rss_mb"] = round(peak_rss_mb(server.proc.pid), 1)
        out["index"] = server.request("fastcoder/status")["result"]["index"]
        out["exit_code"] = server.close()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    out["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
