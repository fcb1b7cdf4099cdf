# Experiment script (2026-11-25 night, benchmarks/README.md "Update 2026-11-25 (night)"): run from the repository root.
import sys, time, runpy, collections, numpy as np
import engine.decoder as DEC
acc = collections.defaultdict(float); cnt = collections.Counter()
def wrapmod(mod, name):
    f = getattr(mod, name)
    def w(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[name] += time.perf_counter() - t; cnt[name] += 1; return r
    setattr(mod, name, w)
def wrapm(cls, name):
    f = getattr(cls, name)
    def w(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[name] += time.perf_counter() - t; cnt[name] += 1; return r
    setattr(cls, name, w)
for n in ("tree_forward", "compact_cache", "decode_one_token", "prefill"): wrapmod(DEC, n)
import engine.verify as V
wrapmod(V, "argmax_rows")
for n in ("_accept", "_learn", "_verifiable", "_generate"): wrapm(DEC.SpeculativeDecoder, n)
import engine.drafters as D
wrapm(D.FastCoderDrafter, "propose")
import atexit
@atexit.register
def rep():
    steps = cnt["tree_forward"] or cnt["decode_one_token"]
    gen = acc["_generate"]
    for k in sorted(acc, key=lambda k: -acc[k]):
        print(f"{k:18s} n {cnt[k]:6d} total {acc[k]*1e3:9.1f} ms per step {acc[k]/steps*1e6:8.1f} us  share {acc[k]/gen*100:5.1f}%")
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
