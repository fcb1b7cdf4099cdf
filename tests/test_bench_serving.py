"""``fastcoder bench-serving`` against fake OpenAI-compatible endpoints (no vLLM needed).

A fake endpoint answers /v1/models, /v1/completions (greedy "model": the prompt's last tokens, or a
different answer when told to differ) and /metrics (vLLM's speculative-decoding counters); the test
checks the editors' requests, the table and the lossless comparison.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import TINY_CODER


def fake_endpoint(differ: bool = False, drafts: tuple[int, int, int] = (0, 0, 0)):
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": "fake-model"}]}).encode())
            elif self.path == "/metrics":
                n = len(seen)
                text = (f'vllm:spec_decode_num_drafts_total{{engine="0"}} {n * drafts[0]}\n'
                        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {n * drafts[1]}\n'
                        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {n * drafts[2]}\n')
                self._send(200, text.encode(), "text/plain")
            else:
                self._send(404, b"{}")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            ids = list(body["prompt"][-4:]) * (body["max_tokens"] // 4)
            if differ:
                ids = ids[::-1]
            self._send(200, json.dumps({"choices": [{"text": "x", "token_ids": ids}],
                                        "usage": {"completion_tokens": len(ids)}}).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, seen


@pytest.fixture()
def endpoints():
    made = [fake_endpoint(), fake_endpoint(drafts=(2, 10, 7)), fake_endpoint(differ=True, drafts=(1, 5, 1))]
    yield made
    for server, _ in made:
        server.shutdown()
        server.server_close()


def test_bench_serving_table_against_fake_endpoints(endpoints, tmp_path, capsys):
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    from engine.cli import main

    pluggy = Path(importlib.util.find_spec("pluggy").submodule_search_locations[0])
    urls = [f"http://127.0.0.1:{s.server_address[1]}" for s, _ in endpoints]
    out = tmp_path / "bench.json"
    status = main(["bench-serving", "--endpoint", f"none={urls[0]}", "--endpoint", f"fastcoder={urls[1]}/v1",
                   "--endpoint", f"broken={urls[2]}", "--tokenizer", str(TINY_CODER), "--repo", str(pluggy),
                   "--clients", "1,2", "--tasks-per-client", "1", "--lines", "2", "--max-tokens", "8",
                   "--json", str(out), "--markdown", str(tmp_path / "bench.md")])
    assert status == 0
    result = json.loads(out.read_text())
    rows = {(r["label"], r["clients"]): r for r in result["rows"]}
    assert set(rows) == {(label, n) for label in ("none", "fastcoder", "broken") for n in (1, 2)}
    assert rows[("none", 2)]["requests"] == 4 and rows[("none", 1)]["requests"] == 2
    assert rows[("fastcoder", 2)]["lossless"] == {"identical": 4, "compared": 4, "differing": []}
    assert rows[("broken", 1)]["lossless"]["identical"] == 0 and rows[("broken", 1)]["lossless"]["compared"] == 2
    assert rows[("fastcoder", 2)]["acceptance_rate"] == 0.7
    assert rows[("fastcoder", 2)]["mean_acceptance_length"] == 4.5
    assert rows[("none", 1)]["tokens_per_s"] > 0 and rows[("none", 1)]["latency_p95_s"] >= rows[("none", 1)]["latency_p50_s"]
    # every request names the repository and the document, greedy, the same prompts everywhere
    sent = [b for _, seen in endpoints for b in seen]
    assert all(b["temperature"] == 0.0 and b["vllm_xargs"]["fastcoder_repo"] == str(pluggy.resolve())
               and b["vllm_xargs"]["fastcoder_doc"].endswith(".py") for b in sent)
    prompts = [sorted(map(tuple, (b["prompt"] for b in seen))) for _, seen in endpoints]
    assert prompts[0] == prompts[1] == prompts[2]
    table = capsys.readouterr().out
    assert "| fastcoder | 2 |" in table and "4/4" in table


def test_workspace_copy_drops_the_typed_bodies(tmp_path, tiny_tokenizer):
    from engine.bench import extract_tasks
    from engine.serving.bench_serving import editor_requests, write_workspace

    pluggy = Path(importlib.util.find_spec("pluggy").submodule_search_locations[0])
    tasks = extract_tasks(pluggy, tiny_tokenizer, 3, seed=0)
    ws = write_workspace(pluggy, tasks, tmp_path / "ws")
    for t in tasks:
        source = (pluggy / t.path).read_text()
        body = source[t.body_start:t.body_end]
        assert body not in (ws / t.path).read_text()
        assert (ws / t.path).read_text().startswith(source[:t.body_start])
    reqs = editor_requests(pluggy, tiny_tokenizer, tasks, lines=2, prompt_tokens=300)
    assert [len(r) for r in reqs] == [2, 2, 2]
    assert all(len(r.prompt_ids) <= 300 for rs in reqs for r in rs)
    assert reqs[0][0].prompt_ids != reqs[0][1].prompt_ids  # the second line's prompt has the first typed
