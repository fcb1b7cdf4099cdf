"""A/B inside one bench run: the step after a fused call that drafted made ready by moving the lengths only
(DraftAhead.steady, this commit: `fastcoder`) against the full DraftAhead.ready of every step before it
(`fastcoder-full`: DraftAhead.observed never leaves a steady step), interleaved per task. Same trees (tested).
Usage: as `python -m engine bench ...` with `--methods ar,suffix,fastcoder,fastcoder-full`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-27i"))
from ab_kernel import run_with  # noqa: E402

from engine.bench import runner  # noqa: E402
from engine.native import draft_ahead  # noqa: E402

runner.METHOD_SPECS["fastcoder-full"] = runner.METHOD_SPECS["fastcoder"]
full = [False]
real_observed = draft_ahead.DraftAhead.observed


def observed(self, committed):
    real_observed(self, committed)
    if full[0]:
        self.steady = None


draft_ahead.DraftAhead.observed = observed
run_with(lambda method: full.__setitem__(0, bool(method and method.endswith("-full"))))
