"""``fastcoder bench-serving``: N simulated editors typing into a real repository at once, against
OpenAI-compatible endpoints (vLLM without speculation, with ``ngram``, ``suffix`` and fastcoder's proposer).

Workload. Functions of the repository are picked as in :mod:`engine.bench` (seeded, deterministic). An
editor "types" a function's body line by line; at the start of each of the first ``--lines`` lines it asks
for a completion of ``--max-tokens`` tokens (greedy) of the file's text so far (prompt token ids, left-cut
to ``--prompt-tokens``), waits for the answer, then types the line. Client c of N takes tasks c, c+N, ...
(``--tasks-per-client`` each). Every request carries ``vllm_xargs`` ``{"fastcoder_repo": ID,
"fastcoder_doc": FILE}`` (vLLM's own methods ignore it). The requests depend only on the repository, so
every endpoint gets the same ones.

Leakage. The typed bodies must not be in D_r: ``--launch`` (below) indexes a copy of the repository with
the chosen functions' bodies removed; against a server of your own, start it on such a copy
(``--write-workspace DIR`` writes one) or read fastcoder's numbers as an upper bound.

Measures per endpoint and N: throughput (completion tokens over the wall time of the N editors), p50/p95
request latency, acceptance from vLLM's ``/metrics`` (accepted / drafted tokens and mean acceptance length
per verification, bonus token included), and ``lossless``: how many completions equal, token for token,
those of the endpoint labelled ``none`` (no speculation).

``--launch MODEL`` starts each configuration itself (``--speculation none,ngram,suffix,fastcoder``), one
at a time on ``--port``, runs every N against it and stops it by PID (:mod:`engine.serving.serve_vllm`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

NONE_LABEL = "none"


@dataclass
class EditorRequest:
    """One completion request of a simulated editor."""

    key: str            # "<task id>#<line>"
    doc: str            # the file's path in the repository
    prompt_ids: list[int]


def editor_requests(root: Path, tokenizer, tasks: list, lines: int, prompt_tokens: int) -> list[list[EditorRequest]]:
    """Per task, the requests of an editor typing its body: one at the start of each of its first
    ``lines`` lines (the file's text before that point is the prompt)."""
    out = []
    for task in tasks:
        source = (root / task.path).read_text(encoding="utf-8")
        body = source[task.body_start:task.body_end]
        starts = [0]
        for i, ch in enumerate(body):
            if ch == "\n" and i + 1 < len(body):
                starts.append(i + 1)
        reqs = []
        for j, off in enumerate(starts[:lines]):
            text = source[:task.body_start + off]
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][-prompt_tokens:]
            reqs.append(EditorRequest(f"{task.task_id}#{j}", task.path, [int(t) for t in ids]))
        out.append(reqs)
    return out


def write_workspace(root: Path, tasks: list, out: Path) -> Path:
    """A copy of the repository at ``out`` with the tasks' function bodies removed (no leakage into D_r)."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(root, out, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
    by_file: dict[str, list] = {}
    for t in tasks:
        by_file.setdefault(t.path, []).append(t)
    for rel, ts in by_file.items():
        path = out / rel
        text = path.read_text(encoding="utf-8")
        for t in sorted(ts, key=lambda t: -t.body_start):
            text = text[:t.body_start] + text[t.body_end:]
        path.write_text(text, encoding="utf-8")
    return out


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def spec_metrics(base_url: str) -> dict:
    """vLLM's speculative-decoding counters from ``/metrics`` (drafts, draft tokens, accepted tokens)."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    out = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    names = {"vllm:spec_decode_num_drafts_total": "drafts", "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted_tokens"}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


def model_name(base_url: str) -> str:
    with urllib.request.urlopen(base_url + "/v1/models", timeout=30) as r:
        return json.load(r)["data"][0]["id"]


def run_clients(base_url: str, clients: list[list[EditorRequest]], max_tokens: int, repo_id: str | None,
                timeout: float = 600.0, session: str = "") -> dict:
    """Run the editors at once against ``base_url``; returns throughput, latencies, acceptance and outputs."""
    model = model_name(base_url)
    before = spec_metrics(base_url)
    results: dict[str, list[int]] = {}
    latencies: list[float] = []
    tokens = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def editor(reqs: list[EditorRequest]) -> None:
        for r in reqs:
            body = {"model": model, "prompt": r.prompt_ids, "max_tokens": max_tokens, "temperature": 0.0,
                    "return_token_ids": True, "vllm_xargs": {"fastcoder_doc": session + r.doc}}
            if repo_id:
                body["vllm_xargs"]["fastcoder_repo"] = repo_id
            t0 = time.perf_counter()
            try:
                out = _post(base_url + "/v1/completions", body, timeout)
            except Exception as err:  # noqa: BLE001 - reported, the run goes on
                with lock:
                    errors.append(f"{r.key}: {err}")
                continue
            dt = time.perf_counter() - t0
            choice = out["choices"][0]
            ids = choice.get("token_ids") or []
            with lock:
                latencies.append(dt)
                tokens[0] += int(out.get("usage", {}).get("completion_tokens", len(ids)))
                results[r.key] = [int(t) for t in ids] if ids else choice.get("text", "")

    threads = [threading.Thread(target=editor, args=(reqs,), daemon=True) for reqs in clients]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = spec_metrics(base_url)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("drafts", "draft_tokens", "accepted_tokens")}
    lat = sorted(latencies)
    return {
        "clients": len(clients), "requests": len(latencies), "errors": errors, "wall_s": round(wall, 3),
        "completion_tokens": tokens[0], "tokens_per_s": round(tokens[0] / wall, 2) if wall > 0 else None,
        "latency_p50_s": round(statistics.median(lat), 3) if lat else None,
        "latency_p95_s": round(lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))], 3) if lat else None,
        "draft_tokens": int(d["draft_tokens"]), "accepted_tokens": int(d["accepted_tokens"]),
        "acceptance_rate": round(d["accepted_tokens"] / d["draft_tokens"], 4) if d["draft_tokens"] else None,
        "mean_acceptance_length": round(1 + d["accepted_tokens"] / d["drafts"], 3) if d["drafts"] else None,
        "outputs": results,
    }


def compare(results: dict, reference: dict) -> dict:
    """``lossless``: completions identical to the reference's (same request keys)."""
    same = sum(1 for k, v in results["outputs"].items() if reference["outputs"].get(k) == v)
    diff = [k for k, v in results["outputs"].items() if k in reference["outputs"] and reference["outputs"][k] != v]
    return {"identical": same, "compared": same + len(diff), "differing": diff[:10]}


def render_markdown(result: dict) -> str:
    lines = [f"Repository `{result['repo']}`, model `{result['model']}`, {result['max_tokens']} tokens per "
             f"completion, {result['requests_per_client']} requests per editor, greedy; machine: {result['machine']}.",
             "", "| speculation | N | tokens/s | p50 latency (s) | p95 latency (s) | acceptance | mean accepted length "
             "| identical to none |", "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        acc = "-" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.2f}"
        mal = "-" if row["mean_acceptance_length"] is None else f"{row['mean_acceptance_length']:.2f}"
        ll = row.get("lossless")
        ll_s = "-" if ll is None else f"{ll['identical']}/{ll['compared']}"
        lines.append(f"| {row['label']} | {row['clients']} | {row['tokens_per_s']} | {row['latency_p50_s']} | "
                     f"{row['latency_p95_s']} | {acc} | {mal} | {ll_s} |")
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--endpoint", action="append", default=[], metavar="[LABEL=]URL",
                   help="a running OpenAI-compatible server, e.g. none=http://127.0.0.1:8000 (repeatable; the "
                        "one labelled 'none' is the lossless reference)")
    p.add_argument("--launch", metavar="MODEL", default=None,
                   help="start vLLM for each --speculation with this model instead (fastcoder serve-vllm)")
    p.add_argument("--speculation", default="none,ngram,suffix,fastcoder", help="with --launch (comma list)")
    p.add_argument("--port", type=int, default=8391, help="with --launch")
    p.add_argument("--ready-timeout", type=float, default=900.0,
                   help="with --launch: seconds to wait for each server (default 900; a busy 2-core machine is slow)")
    p.add_argument("-k", "--num-speculative-tokens", type=int, default=8, help="with --launch")
    p.add_argument("--venv", default=None, help="with --launch: vLLM's venv")
    p.add_argument("--vllm-arg", action="append", default=[],
                   help="with --launch: one more argument for `vllm serve` (repeatable), e.g. --enforce-eager")
    p.add_argument("--clients", default="1", help="N, or a comma list (e.g. 1,4,8)")
    p.add_argument("--repo", type=Path, required=True, help="the repository the editors type into")
    p.add_argument("--repo-id", default=None,
                   help="vllm_xargs fastcoder_repo (default: the indexed folder with --launch, else --repo)")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: --launch MODEL)")
    p.add_argument("--tasks-per-client", type=int, default=2)
    p.add_argument("--lines", type=int, default=3, help="completion requests per function (one per typed line)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--session", default="",
                   help="prefix of the fastcoder_doc keys, so a server's per-document caches from an earlier run "
                        "against it are not reused")
    p.add_argument("--write-workspace", type=Path, default=None,
                   help="write the repository copy without the typed bodies here (for a server of your own)")
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--markdown", default=None)
    return p


def add_command(sub) -> None:
    p = sub.add_parser("bench-serving", help="simulated editors against vLLM endpoints (throughput, latency, acceptance)",
                       description="N simulated editors typing into a real repository at once, against vLLM "
                                   "without speculation, with ngram, suffix and fastcoder's proposer.")
    add_arguments(p)
    p.set_defaults(func=run)


def _parse_endpoints(specs: list[str]) -> list[tuple[str, str]]:
    out = []
    for i, spec in enumerate(specs):
        label, sep, url = spec.partition("=")
        if not sep or label.startswith("http"):
            label, url = (NONE_LABEL if i == 0 and len(specs) == 1 else f"endpoint{i}"), spec
        url = url.rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        out.append((label, url))
    return out


def run(args: argparse.Namespace) -> int:
    import os
    import platform

    from transformers import AutoTokenizer  # noqa: PLC0415

    from ..bench import extract_tasks  # noqa: PLC0415
    from ..cli import CLIError  # noqa: PLC0415

    if not args.endpoint and not args.launch:
        raise CLIError("give --endpoint URL (repeatable) or --launch MODEL")
    ns = [int(x) for x in str(args.clients).split(",") if x.strip()]
    if not ns or min(ns) < 1:
        raise CLIError("--clients must be positive integers")
    tok_name = args.tokenizer or args.launch
    if tok_name is None:
        raise CLIError("--tokenizer is needed with --endpoint (the model's tokenizer folder)")
    root = args.repo.resolve()
    if not root.is_dir():
        raise CLIError(f"--repo {args.repo} is not a folder")
    tokenizer = AutoTokenizer.from_pretrained(tok_name)
    tasks = extract_tasks(root, tokenizer, max(ns) * args.tasks_per_client, seed=args.seed,
                          max_prompt_tokens=args.prompt_tokens)
    per_task = editor_requests(root, tokenizer, tasks, args.lines, args.prompt_tokens)
    if args.write_workspace:
        write_workspace(root, tasks, args.write_workspace)
        print(f"fastcoder: workspace without the typed bodies at {args.write_workspace}", file=sys.stderr)

    def clients_for(n: int) -> list[list[EditorRequest]]:
        return [[r for t in range(c, n * args.tasks_per_client, n) for r in per_task[t]] for c in range(n)]

    rows: list[dict] = []
    reference: dict[int, dict] = {}

    def write_results() -> str:
        """The table so far (JSON and markdown written after every configuration: a long run that is
        stopped keeps what it measured)."""
        for row in rows:
            ref = reference.get(row["clients"])
            row["lossless"] = compare(row, ref) if ref is not None and row["label"] != NONE_LABEL else None
        result = {"repo": str(root), "model": args.launch or tok_name, "max_tokens": args.max_tokens,
                  "vllm_args": list(args.vllm_arg) if args.launch else None,
                  "requests_per_client": args.tasks_per_client * args.lines, "clients": ns,
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "rows": [{k: v for k, v in r.items() if k != "outputs"} for r in rows]}
        md = render_markdown(result)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=1))
        if args.markdown:
            Path(args.markdown).write_text(md)
        return md

    def bench(label: str, url: str, repo_id: str | None) -> None:
        for n in ns:
            print(f"fastcoder: {label}, {n} editor(s) ...", file=sys.stderr)
            res = run_clients(url, clients_for(n), args.max_tokens, repo_id, session=f"{args.session}N{n}:")
            res["label"] = label
            if label == NONE_LABEL:
                reference[n] = res
            rows.append(res)
        write_results()

    if args.launch:
        from . import serve_vllm  # noqa: PLC0415

        specs = [s.strip() for s in args.speculation.split(",") if s.strip()]
        if NONE_LABEL in specs:  # the reference first
            specs.remove(NONE_LABEL)
            specs.insert(0, NONE_LABEL)
        work = Path(tempfile.mkdtemp(prefix="fastcoder-bench-serving-"))
        try:
            workspace = write_workspace(root, tasks, work / root.name)
            for spec in specs:
                config = None
                if spec == "fastcoder":
                    config = serve_vllm.prepare_config(tokenizer, [str(workspace)], "stdlib", tokenizer_path=tok_name)
                try:
                    server = serve_vllm.start_server(args.launch, args.port, speculation=spec, config=config,
                                                     k=args.num_speculative_tokens, venv=args.venv,
                                                     state_dir=work / f"state-{spec}", extra_args=args.vllm_arg)
                except serve_vllm.ServeError as err:
                    raise CLIError(str(err)) from None
                try:
                    waited = server.wait_ready(args.ready_timeout)
                    print(f"fastcoder: vLLM ({spec}) ready in {waited:.0f} s", file=sys.stderr)
                    bench(spec, server.url, args.repo_id or str(workspace))
                except serve_vllm.ServeError as err:
                    raise CLIError(str(err)) from None
                finally:
                    server.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    else:
        for label, url in _parse_endpoints(args.endpoint):
            bench(label, url, args.repo_id or str(root))

    sys.stdout.write(write_results())
    return 0
