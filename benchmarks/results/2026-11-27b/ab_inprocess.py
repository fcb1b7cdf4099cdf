"""The one-call greedy forward (engine/native/step.c) against the three calls it replaced, inside one bench run:
methods ``ar-calls``, ``suffix-calls`` and ``fastcoder-calls`` are ar, suffix and fastcoder with the model's greedy step
off for their generations (FASTCODER_GREEDY_STEP=0's path), interleaved per task with the methods themselves, so the
machine's load drifts over both alike. One c(n) curve serves both (measured through the step at load). Usage:
PYTHONPATH=. OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-27b/ab_inprocess.py bench
--model ../shared/models/tiny-py-coder --repo .venv/lib/python3.11/site-packages/REPO --common stdlib --tasks 10
--max-new-tokens 128 --seed 0 --threads 1 --task-kind KIND
--methods ar,ar-calls,suffix,suffix-calls,fastcoder,fastcoder-calls --no-headroom --repeats 2 --json OUT.json"""
import sys

from engine import lean_forward
from engine.bench import runner

for name in ("ar", "suffix", "fastcoder"):
    runner.METHOD_SPECS[f"{name}-calls"] = runner.METHOD_SPECS[name]
run_one = runner.run_one


def run_one_toggled(decoder, method, *args, **kwargs):
    holder = decoder.loaded.model.__dict__[lean_forward.STEP_ATTR][0]
    if not method.endswith("-calls"):
        return run_one(decoder, method, *args, **kwargs)
    saved, holder[0] = holder[0], False
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        holder[0] = saved


runner.run_one = run_one_toggled
from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
