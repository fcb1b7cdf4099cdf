"""Timers around the fastcoder drafter's calls (reset, propose: the first step apart, _verifiable, observe, finish, the
completion history's add) and the native datastore step, inside a normal `engine bench` run; printed at exit (us).
Usage: PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-27/drafting_timers.py bench [bench args]"""
import sys, time, collections
import numpy as np
from engine import drafters
from engine.native import propose as nprop
T = collections.defaultdict(list)
state = {"step": 0}
def wrap(cls, name, key=None):
    f = getattr(cls, name)
    def g(self, *a, **k):
        t = time.perf_counter(); r = f(self, *a, **k); dt = time.perf_counter() - t
        nm = key or name
        if name == "propose":
            nm = "propose_first" if state["step"] == 0 else "propose_later"
            state["step"] += 1
        if name == "reset": state["step"] = 0
        T[nm].append(dt * 1e6); return r
    setattr(cls, name, g)
from engine import decoder as _dec
wrap(_dec.SpeculativeDecoder, "_verifiable")
for n in ("reset", "propose", "observe", "finish"):
    wrap(drafters.FastCoderDrafter, n)
from engine.native import propose as _np
_orig_rn = _np._retrieve_native
def _rn(*a, **k):
    t = time.perf_counter(); r = _orig_rn(*a, **k); T["retrieve_native"].append((time.perf_counter() - t) * 1e6); return r
_np._retrieve_native = _rn
from engine import history as _h
wrap(_h.CompletionHistory, "add"); wrap(_h.CompletionHistory, "_drop_oldest_half"); wrap(_h.CompletionHistory, "_append")
import atexit
def report():
    for k, v in T.items():
        v = np.array(v); print(f"{k:15s} n={len(v):4d} median {np.median(v):7.1f} mean {v.mean():7.1f} us  total {v.sum()/1e3:7.2f} ms", file=sys.stderr)
atexit.register(report)
from engine.cli import main
sys.argv = ["engine"] + sys.argv[1:]
main()
