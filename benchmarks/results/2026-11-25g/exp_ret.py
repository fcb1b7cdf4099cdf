# Experiment script (2026-11-25 late evening, benchmarks/README.md "Update 2026-11-25 (late evening)"): run from the
# repository root as `python benchmarks/results/2026-11-25g/exp_ret.py bench ...` (the arguments of `fastcoder bench`).
# timers around Datastore.search, longest_match and _rows per datastore.
import sys, time, runpy, collections
import engine.datastore.store as S
import engine.drafters as D
acc = collections.defaultdict(list)
def wrap(cls, name):
    f = getattr(cls, name)
    def w(self, *a, **k):
        t = time.perf_counter(); r = f(self, *a, **k); dt = time.perf_counter() - t
        acc[f"{name}[{len(self)}]"].append(dt); return r
    setattr(cls, name, w)
for n in ("search", "longest_match", "_rows"): wrap(S.Datastore, n)
f = D.FastCoderDrafter._retrieve
def r(self, ctx):
    t = time.perf_counter(); out = f(self, ctx); acc["_retrieve"].append(time.perf_counter() - t); return out
D.FastCoderDrafter._retrieve = r
import atexit
@atexit.register
def rep():
    for k in sorted(acc):
        v = acc[k]; v2 = sorted(v)
        print(f"{k:32s} n {len(v):5d} total {sum(v)*1e3:8.1f} ms  mean {sum(v)/len(v)*1e6:7.1f} us  median {v2[len(v2)//2]*1e6:7.1f} us")
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
