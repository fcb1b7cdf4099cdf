"""Micro-benchmark of the cost-sized draft-tree builder on recorded fastcoder inputs (not a test).

Usage: ``PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 python benchmarks/measure_draft_tree.py REC.pkl``
where REC.pkl holds ``(rec,)``: a list of per-decode-step lists of :class:`engine.draft_tree.Candidates`,
recorded from fastcoder's drafter by ``benchmarks/replay_methods.py --methods fastcoder
--record-candidates REC.pkl``. An estimator is trained by replaying the steps (each tree's
first-child chain accepted with probability 0.6 per node), then every step is built by
:func:`engine.tree_builder._build_sized` and by the array builder it replaced (``_trie`` +
``_choose_by_estimate``, still the module's fallback); every DraftTree field must be equal, and both are
timed: milliseconds per step over all steps, best of 5 passes (and the spread), interleaved.
"""

from __future__ import annotations

import pickle
import sys
import time

import numpy as np

from engine import tree_builder as dt
from engine.acceptance import AcceptanceEstimator
from engine.cost_model import VerifyCost

COST = VerifyCost([1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
                  [1.3435, 1.5717, 1.6664, 1.8026, 1.9834, 2.1364, 2.418, 2.6945, 3.3182, 3.882], 7.3, 512)


def array_builder(candidates, budget, min_prob, estimator, cost):
    """build_draft_tree as it was before the Python sized path (its array fallback)."""
    saved = dt._build_sized
    dt._build_sized = lambda *args: None
    try:
        return dt.build_draft_tree(candidates, budget, min_prob, estimator, cost)
    finally:
        dt._build_sized = saved


def fields(t):
    return [None if a is None else (a.dtype.str, a.tolist())
            for a in (t.tokens, t.parents, t.depths, t.sources, t.weights, t.keys, t.probs)] + [t.n_adaptive]


def main(path: str) -> None:
    rec, = pickle.load(open(path, "rb"))
    est = AcceptanceEstimator()
    rng = np.random.default_rng(0)
    for _ in range(3):
        for c in rec:
            t = array_builder(c, 64, 0.0, est, COST)
            if len(t) == 0:
                continue
            accepted, node = [], 0
            while node is not None and rng.random() < 0.6:
                accepted.append(node)
                kids = np.flatnonzero(t.parents == node)
                node = int(kids[0]) if len(kids) else None
            est.update(t.keys, t.parents[:t.n_draft], accepted)
    bad = sum(fields(array_builder(c, 64, mp, est, COST)) != fields(dt.build_draft_tree(c, 64, mp, est, COST))
              for c in rec for mp in (0.0, 0.1))
    print(f"{len(rec)} steps x min_prob (0, 0.1): {bad} trees differ")
    for _ in range(2):
        for name, fn in (("array (before)", array_builder), ("sized (now)", dt.build_draft_tree)):
            times = []
            for _ in range(5):
                start = time.perf_counter()
                for c in rec:
                    fn(c, 64, 0.0, est, COST)
                times.append((time.perf_counter() - start) / len(rec) * 1e3)
            print(f"{name:15s} best {min(times):.4f} ms/step, spread {min(times):.4f}-{max(times):.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
