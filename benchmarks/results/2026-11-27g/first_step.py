"""A generation's first tree (the drafter's propose right after the prefill) against the steps after it: per call, the
wall time of FastCoderDrafter.propose (first call after a reset / later calls) and the native calls in it, and the
fused steps' drafting (DraftAhead: ready + the C drafting + next_tree), printed at exit.
Usage: as `python -m engine bench ...` (one method: fastcoder). DETAIL=1 (added 2026-11-27h) also prints each timer's
largest eight calls and the C drafting by the call's datastores' turn (vp[VP_RETRIEVED]) and context bucket (256s)."""
import atexit
import os
import sys
import time
from collections import defaultdict

import numpy as np

import engine.drafters as drafters_module
from engine.native import draft_ahead as da_module
from engine.native import library

T = defaultdict(list)
DETAIL = os.environ.get("DETAIL") == "1"
native = [0.0]
first = {}

lib = library()
for name in ("fc_propose", "fc_propose_retrieve"):
    real = getattr(lib, name)

    def wrapped(*a, _real=real):
        t = time.perf_counter()
        got = _real(*a)
        native[0] += time.perf_counter() - t
        return got
    setattr(lib, name, wrapped)

D = drafters_module.FastCoderDrafter
real_reset, real_propose = D.reset, D.propose


def reset(self, *a, **k):
    first[id(self)] = True
    return real_reset(self, *a, **k)


def propose(self, context):
    native[0] = 0.0
    t = time.perf_counter()
    got = real_propose(self, context)
    dt = time.perf_counter() - t
    tag = "first" if first.pop(id(self), False) else "later"
    T[f"propose {tag}"].append(dt)
    T[f"propose {tag} native"].append(native[0])
    return got


D.reset, D.propose = reset, propose
A = da_module.DraftAhead
for name in ("ready", "next_tree", "observed", "draft_first", "prime"):
    real = getattr(A, name)

    def timed(self, *a, _real=real, _name=name):
        t = time.perf_counter()
        got = _real(self, *a)
        T[f"ahead.{_name}"].append(time.perf_counter() - t)
        if _name in ("ready", "draft_first"):
            first.pop(id(self.drafter), None)
        if _name == "draft_first":
            T["draft_first C"].append(int(self.vp[da_module.VP_PROPOSE_NS]) * 1e-9)
        return got
    setattr(A, name, timed)
real_s = A.drafting_s


def drafting_s(self):
    s = real_s(self)
    T["ahead C drafting"].append(s)
    if DETAIL:
        T[f"ahead C drafting turn={int(self.vp[da_module.VP_RETRIEVED])} "
          f"ctx={int(self.vp[da_module.VP_CTX_LEN]) // 256}"].append(s)
    return s


A.drafting_s = drafting_s


@atexit.register
def report():
    for name, v in sorted(T.items()):
        v = np.array(v) * 1e6
        if DETAIL:
            print(name, "largest", np.sort(v)[-8:].round(0).tolist(), file=sys.stderr)
        print(f"{name}: n={len(v)} mean {v.mean():.1f} us p50 {np.median(v):.1f} p90 {np.percentile(v, 90):.1f} "
              f"sum {v.sum() / 1e3:.1f} ms", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
