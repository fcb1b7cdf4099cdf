# Experiment script (2026-11-25 late evening, benchmarks/README.md "Update 2026-11-25 (late evening)"): run from the
# repository root as `python benchmarks/results/2026-11-25g/exp_coldtree.py bench ...` (the arguments of `fastcoder bench`).
# build_draft_tree's inputs captured from a run, each replayed after streaming 48 MB; WARM_EST=1 touches the
# acceptance tables first.
import sys, time, runpy, os
WARM_EST = os.environ.get('WARM_EST') == '1'
import numpy as np
import engine.drafters as D
import engine.native.tree as NT
captured = []
f = D.build_draft_tree
def w(cands, budget, min_prob, est, cost):
    if len(captured) < 400:
        captured.append((cands, budget, min_prob, est, cost))
    return f(cands, budget, min_prob, est, cost)
D.build_draft_tree = w

def _timed_build_sized_parts():
    """engine.native.tree.build_sized_parts with timers between its sections (setup, parts loop, fill, C call,
    _tree_from), made from its source text."""
    import inspect
    import engine.native.tree as NT
    fn = inspect.getsource(NT.build_sized_parts)
    marks = [('    upto = getattr(cost, "upto", None)', '    _t0 = _pc()\n'), ('    fields: list = []', '    _t1 = _pc()\n'),
             ('    sc.parts[:len(fields)] = fields', '    _t2 = _pc()\n'), ('    kept = lib.fc_build_sized_parts(', '    _t3 = _pc()\n')]
    for line, mark in marks:
        fn = fn.replace(line, mark + line, 1)
    fn = fn.replace('    return _tree_from(sc, kept)', '    _t4 = _pc()\n    tr = _tree_from(sc, kept)\n    _T.append((_t1 - _t0, _t2 - _t1, _t3 - _t2, _t4 - _t3, _pc() - _t4))\n    return tr', 1)
    ns = dict(vars(NT))
    ns.update(_pc=time.perf_counter, _T=[])
    exec(fn, ns)
    return ns

import atexit
@atexit.register
def rep():
    import engine.tree_builder as T
    ns = _timed_build_sized_parts()
    NT.build_sized_parts = ns['build_sized_parts']
    big = np.ones(12_000_000, dtype=np.float32)
    res = []
    for rnd in range(3):
        for cands, budget, mp, est, cost in captured[20:300]:
            big.sum()
            if WARM_EST:
                est.accepted.sum(); est.tried.sum(); est.pooled_accepted.sum(); est.pooled_tried.sum()
            t = time.perf_counter()
            T.build_draft_tree(cands, budget, mp, est, cost)
            res.append(time.perf_counter() - t)
    res = np.array(res) * 1e6
    print(f"cold build_draft_tree: median {np.median(res):.1f} us")
    TT = np.array(ns['_T']) * 1e6
    print("sections median us: setup/estimator, parts loop, numpy fill+table, C call, _tree_from:", np.round(np.median(TT, axis=0), 1))
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
