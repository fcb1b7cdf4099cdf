# Experiment script (2026-11-25 night, benchmarks/README.md "Update 2026-11-25 (night)"): run from the repository root.
import sys, time, runpy, pickle
import engine.drafters as D
import engine.draft_tree as T
captured = []
f = D.build_draft_tree
def w(cands, budget, min_prob, est, cost):
    if len(captured) < 300:
        captured.append((cands, budget, min_prob, est, cost))
    return f(cands, budget, min_prob, est, cost)
D.build_draft_tree = w
import atexit
@atexit.register
def rep():
    import numpy as np, copy, timeit
    from engine.native.tree import build_sized_parts
    from engine import native
    lib = native.library()
    res = []; res2 = []; resc = []
    for cands, budget, mp, est, cost in captured[50:250]:
        parts = [c for c in cands if c.tokens.size and len(c.counts)]
        if not parts: continue
        c2 = cost.at(1000)
        t = time.perf_counter()
        for _ in range(50): f(cands, budget, mp, est, c2)
        res.append((time.perf_counter() - t) / 50)
        t = time.perf_counter()
        for _ in range(50): build_sized_parts(lib, parts, budget, mp, est, c2)
        res2.append((time.perf_counter() - t) / 50)
    print(f"warm build_draft_tree med {np.median(res)*1e6:.1f} us; build_sized_parts {np.median(res2)*1e6:.1f} us; parts/call {np.mean([len(c[0]) for c in captured]):.2f}")
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
