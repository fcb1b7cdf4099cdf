"""Replay (benchmarks/replay_methods.py, predicted speedup without drafting time on this machine's measured c(n)) of
fastcoder with trees sized by the step's own ratio against the long-run rate (Dinkelbach) at several scales, and the
smaller of the two choices ("min"). Needs dinkelbach.diff applied (`git apply benchmarks/results/2026-11-28g/
dinkelbach.diff`: the decoder option size_by_rate, AcceptanceEstimator.rate, the builders' lambda; "min" is a Python
path only, so the C builder and the native propose are switched off here: the same trees, bit for bit).

Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
    .venv/bin/python benchmarks/results/2026-11-28g/replay_rate.py \
    REPO KIND dinkelbach:0.9,min:1.0,..."""
import contextlib
import io
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import engine.acceptance as acc  # noqa: E402
import engine.drafters as dr  # noqa: E402
import engine.tree_builder as tb  # noqa: E402
import replay_methods as rm  # noqa: E402

tb.native = types.SimpleNamespace(library=lambda: None)
dr.native_propose.supported = lambda self: False
repo, kind = sys.argv[1], sys.argv[2]
first = True
for spec in sys.argv[3].split(","):
    mode, scale = spec.split(":")
    tb._EXP_MODE[0], acc.RATE_SCALE = mode, float(scale)
    methods = "fastcoder-ratio,fastcoder" if first else "fastcoder"
    first = False
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rm.main(["--repo", repo, "--task-kind", kind, "--tasks", "10", "--score-measured",
                 "--variant", "fastcoder-ratio=fastcoder:size_by_rate=false", "--methods", methods])
    for line in buf.getvalue().splitlines():
        if line.startswith("{") and '"method"' in line:
            d = json.loads(line)
            name = "ratio" if d["method"] == "fastcoder-ratio" else spec
            print(kind, Path(repo).name, name, "accepted length", d["accepted_length"], "tree", d["mean_tree"],
                  "predicted", d["predicted_speedup_without_drafting"], flush=True)
