"""Where a language server's first start goes before it is ready: the steps of lsp_server.host's load, timed one
after the other in a fresh process (run it twice: the first run may measure the c(n) curve and build D_c).

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-28f/latency/load_probe.py"""
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
t = time.perf_counter()


def lap(msg):
    global t
    now = time.perf_counter()
    print(f"{(now - t) * 1000:8.0f} ms  {msg}", flush=True)
    t = now


from engine import load_model  # noqa: E402

lap("import engine (torch)")
loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
lap("load_model (transformers' modules and from_pretrained)")
from engine.cost_model import load_or_measure_verify_cost  # noqa: E402

load_or_measure_verify_cost(loaded)
lap("verify cost c(n)")
from engine import native  # noqa: E402

native.library()
lap("native library")
from engine.acceptance_prior import find_prior  # noqa: E402

find_prior(loaded.model).rates()
lap("acceptance prior")
from engine.draft_head import find_draft_head  # noqa: E402

find_draft_head(loaded.model)
lap("draft head")
from lsp_server.host import _make_greedy_step, _screen_lm_head  # noqa: E402

_screen_lm_head(loaded)
lap("LM head screen")
_make_greedy_step(loaded)
lap("greedy step")
from engine.common_datastore import load_common_datastore  # noqa: E402

load_common_datastore(loaded.tokenizer, "stdlib", build_if_missing=True)
lap("D_c")
