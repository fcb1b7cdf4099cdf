"""Replay (benchmarks/replay_methods.py, predicted speedup with and without the drafting time on the measured c(n)) of
fastcoder with the fitted acceptance prior's strength (pseudo-observations per bucket; packaged: 8) changed, and the
estimator's pooled back-off (prior_strength, pool_strength; 2 and 4) changed.

Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \\
    .venv/bin/python benchmarks/results/2026-11-28g/replay_prior_strength.py REPO KIND 8:2:4,16:2:4,..."""
import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import replay_methods as rm  # noqa: E402

from engine.acceptance import AcceptanceEstimator  # noqa: E402
from engine.acceptance_prior import find_prior  # noqa: E402
from engine.bench import runner  # noqa: E402

SETTING = [8.0, 2.0, 4.0]


def new_estimator(loaded=None):
    prior = find_prior(loaded.model) if loaded is not None else None
    if prior is not None:
        prior = dataclasses.replace(prior, strength=SETTING[0])
    return AcceptanceEstimator(SETTING[1], SETTING[2], prior=prior)


runner._new_estimator = new_estimator
repo, kind = sys.argv[1], sys.argv[2]
for spec in sys.argv[3].split(","):
    SETTING[:] = [float(x) for x in spec.split(":")]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rm.main(["--repo", repo, "--task-kind", kind, "--tasks", "30" if kind == "fim-line" else "10",
                 "--score-measured", "--methods", "fastcoder"])
    for line in buf.getvalue().splitlines():
        if line.startswith("{") and '"method"' in line:
            d = json.loads(line)
            print(kind, Path(repo).name, "prior:prior_strength:pool", spec, "accepted length", d["accepted_length"],
                  "tree", d["mean_tree"], "predicted", d["predicted_speedup_without_drafting"], "with drafting",
                  d["predicted_speedup"], flush=True)
