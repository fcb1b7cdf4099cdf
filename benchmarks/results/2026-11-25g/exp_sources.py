# Experiment script (2026-11-25 late evening, benchmarks/README.md "Update 2026-11-25 (late evening)"): run from the
# repository root as `python benchmarks/results/2026-11-25g/exp_sources.py bench ...` (the arguments of `fastcoder bench`).
# timers around propose (by step of a generation), each source, observe, reset and finish.
import sys, time, runpy, collections
import engine.drafters as D
import engine.history as H
acc = collections.defaultdict(list)
state = {"i": 0}
def wrap(cls, name, key=None):
    f = getattr(cls, name)
    def w(self, *a, **k):
        t = time.perf_counter(); r = f(self, *a, **k); dt = time.perf_counter() - t
        kk = key or name
        if name == "propose":
            kk = f"propose#{min(state['i'], 3)}"; state["i"] += 1
        elif kk.startswith("  "):
            kk = f"{kk}#{min(state['i'], 3)}"
        if name == "reset":
            state["i"] = 0
        acc[kk].append(dt); return r
    setattr(cls, name, w)
for n in ("propose", "observe", "finish", "reset"): wrap(D.FastCoderDrafter, n)
wrap(D.FastCoderDrafter, "candidates", "  candidates")
wrap(H.CompletionHistory, "search", "  history.search")
wrap(H.CompletionHistory, "add", "  history.add")
wrap(D.FastCoderCache, "search", "  cache.search")
wrap(D.FastCoderCache, "add", "  cache.add")
wrap(D.FastCoderDrafter, "_retrieve", "  retrieve")
import engine.context_match as CM
import engine.draft_tree as DT
_b = D.build_draft_tree
def bt(*a, **k):
    t = time.perf_counter(); r = _b(*a, **k); acc[f"  build_tree#{min(state['i'], 3)}"].append(time.perf_counter() - t); return r
D.build_draft_tree = bt
wrap(CM.SuffixMatchIndex, "candidates", "  copy.candidates")
wrap(CM.SuffixMatchIndex, "extend_to", "  copy.extend_to")
import atexit
@atexit.register
def rep():
    for k in sorted(acc):
        v = acc[k]; v2 = sorted(v)
        print(f"{k:22s} n {len(v):5d} total {sum(v)*1e3:8.1f} ms  mean {sum(v)/len(v)*1e6:7.1f} us  median {v2[len(v2)//2]*1e6:7.1f} us")
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
