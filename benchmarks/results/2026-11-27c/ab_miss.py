"""The after-a-miss regime of the acceptance estimates (AcceptanceEstimator.set_after_miss) against one regime, inside one bench
run: method ``fastcoder-one`` is fastcoder with set_after_miss a no-op for its generations (its own decoder and estimator),
interleaved per task with fastcoder itself. Usage as ab_inprocess.py of 2026-11-27b with
--methods ar,suffix,fastcoder,fastcoder-one."""
import sys

from engine.acceptance import AcceptanceEstimator
from engine.bench import runner

runner.METHOD_SPECS["fastcoder-one"] = runner.METHOD_SPECS["fastcoder"]
run_one = runner.run_one
real = AcceptanceEstimator.set_after_miss


def run_one_toggled(decoder, method, *args, **kwargs):
    AcceptanceEstimator.set_after_miss = (lambda self, on: None) if method == "fastcoder-one" else real
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        AcceptanceEstimator.set_after_miss = real


runner.run_one = run_one_toggled
from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
