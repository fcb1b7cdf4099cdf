"""Per-call wall time of the decode step's Python-side parts (propose and its pieces, the verify call, the estimator's
update, the drafter's observe, the draft head's step) inside a real bench run: each wrapped with perf_counter, means,
medians and 90th percentiles printed at exit. Usage: as `python -m engine bench ...` (e.g. --methods fastcoder)."""
import sys, time, collections, atexit, runpy
import numpy as np
import engine.drafters as D, engine.decoder as Dec, engine.native.propose as P
acc = collections.defaultdict(list)
def wrap(obj, name, label):
    f = getattr(obj, name)
    def w(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[label].append(time.perf_counter() - t); return r
    setattr(obj, name, w)
wrap(D.FastCoderDrafter, "propose", "propose")
wrap(D.FastCoderDrafter, "observe", "observe")
wrap(Dec.SpeculativeDecoder, "_verifiable", "_verifiable")
import engine.acceptance as A, engine.draft_head as H
wrap(A.AcceptanceEstimator, "update", "estimator.update")
wrap(Dec.SpeculativeDecoder, "_feed_head", "_feed_head")
wrap(Dec.SpeculativeDecoder, "_learn", "_learn (all)")
wrap(Dec, "verify_greedy", "verify_greedy")
wrap(P, "_call", "  C fc_propose/_retrieve call")
wrap(P, "_retrieve_native", "  _retrieve_native")
wrap(P, "_tree_from", "  _tree_from")
wrap(P, "_sync_cache", "  _sync_cache")
wrap(P, "set_limits", "  set_limits")
@atexit.register
def rep():
    for k, v in acc.items():
        v = np.array(v) * 1e6
        print(f"{k:34s} n={len(v):6d} mean {v.mean():7.1f} us  p50 {np.median(v):6.1f}  p90 {np.percentile(v,90):7.1f}", file=sys.stderr)
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
