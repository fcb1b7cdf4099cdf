"""Replay with deep first-choice buckets' estimates pushed up: K pseudo-accepts in every bucket of depth >= D0."""
import os, sys, json
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import numpy as np
from engine.bench import runner
from engine import acceptance as A
K = float(os.environ.get("DEEP_K", "0")); D0 = int(os.environ.get("DEEP_D0", "6"))
orig = runner._new_estimator
def boosted(loaded):
    est = orig(loaded)
    if K > 0:
        keys = np.arange(A.ALTERNATIVE_STRIDE)
        d = (keys % A.SOURCE_STRIDE) // ((len(A.SHARE_EDGES) + 1) * (len(A.MATCH_EDGES) + 1))
        sel = keys[d >= D0 - 1]
        est.accepted[sel] += K; est.tried[sel] += K
        pk = np.unique(A.pooled_keys(sel))
        est.pooled_accepted[pk] += K; est.pooled_tried[pk] += K
    return est
runner._new_estimator = boosted
import replay_methods
sys.exit(replay_methods.main(sys.argv[1:]))
