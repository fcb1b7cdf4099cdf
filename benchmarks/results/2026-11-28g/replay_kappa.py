"""Replay (benchmarks/replay_methods.py) of fastcoder with trees sized against c(n) + kappa, a fixed cost per step in
plain steps (the drafting and the loop's Python around a forward), instead of c(n): the builders read the curve's
table through VerifyCost.upto, shifted here (the C builder and the native propose switched off: they keep a pointer
to the first table they see; the Python path gives the same trees, bit for bit); the replay still scores on the
measured c(n). The engine as it is.

Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
    .venv/bin/python benchmarks/results/2026-11-28g/replay_kappa.py \
    REPO KIND 0,0.05,0.1,0.2"""
import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import types  # noqa: E402

import engine.cost_model as cm  # noqa: E402
import engine.drafters as dr  # noqa: E402
import engine.tree_builder as tb  # noqa: E402
import replay_methods as rm  # noqa: E402

original = cm.VerifyCost.upto
KAPPA = [0.0]


def upto(self, n):
    table = original(self, n)
    if KAPPA[0] == 0.0:
        return table
    cache = self.__dict__.setdefault("_kappa", {})
    key = (KAPPA[0], id(table), len(table))
    if key not in cache:
        shifted = np.asarray(table) + KAPPA[0]
        shifted.setflags(write=False)
        cache[key] = shifted
    return cache[key]


cm.VerifyCost.upto = upto
tb.native = types.SimpleNamespace(library=lambda: None)
dr.native_propose.supported = lambda self: False
repo, kind = sys.argv[1], sys.argv[2]
for kappa in (float(x) for x in sys.argv[3].split(",")):
    KAPPA[0] = kappa
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rm.main(["--repo", repo, "--task-kind", kind, "--tasks", "10", "--score-measured", "--methods", "fastcoder"])
    for line in buf.getvalue().splitlines():
        if line.startswith("{") and '"method"' in line:
            d = json.loads(line)
            print(kind, Path(repo).name, "kappa", kappa, "accepted length", d["accepted_length"], "tree",
                  d["mean_tree"], "drafting ms", d["drafting_ms_per_step"], "predicted",
                  d["predicted_speedup_without_drafting"], "with drafting", d["predicted_speedup"], flush=True)
