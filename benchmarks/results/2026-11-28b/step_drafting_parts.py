"""Where a fused step's drafting time goes in Python: per call, the wall time of DraftAhead.ready (made ready ahead
by prime/draft_first, or not) and of what it calls (point_args, _sync_cache, _arm, the drafter's cost_at), of
next_tree and of the drafter's observe_path and DraftAhead.observed; printed at exit.
Usage: as `python -m engine bench ...` (one method: fastcoder)."""
import atexit
import sys
import time
from collections import defaultdict

import numpy as np

import engine.drafters as drafters_module
from engine.native import draft_ahead as da

T = defaultdict(list)
A = da.DraftAhead


def timed(owner, name, label):
    real = getattr(owner, name)

    def wrapper(*a, **k):
        t = time.perf_counter()
        got = real(*a, **k)
        T[label].append(time.perf_counter() - t)
        return got
    setattr(owner, name, wrapper)


real_ready = A.ready


def ready(self, n_ctx, out_len):
    primed = self.primed is not None and self.primed[:2] == (n_ctx, out_len)
    t = time.perf_counter()
    got = real_ready(self, n_ctx, out_len)
    T["ready primed" if primed else "ready"].append(time.perf_counter() - t)
    return got


A.ready = ready
for name in ("point_args", "_sync_cache"):
    timed(da, name, f"  ready: {name}")
timed(A, "_arm", "  ready: _arm")
timed(A, "next_tree", "next_tree")
timed(A, "observed", "observed")
timed(drafters_module.FastCoderDrafter, "observe_path", "drafter.observe_path")
timed(drafters_module.FastCoderDrafter, "cost_at", "drafter.cost_at (anywhere)")


@atexit.register
def report():
    for name, v in sorted(T.items()):
        v = np.array(v) * 1e6
        print(f"{name}: n={len(v)} mean {v.mean():.1f} us p50 {np.median(v):.1f} p90 {np.percentile(v, 90):.1f} "
              f"sum {v.sum() / 1e3:.1f} ms", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
