"""Are the acceptance estimates calibrated alike for small and large trees? Per verified tree (fastcoder, fused step),
grouped by the tree's size (8: 8 or more nodes): the expected accepted draft tokens by the estimates (the sum of the
nodes' path probabilities: products of their conditional estimates) against the accepted count, and the first level
alone: the estimated chance that a depth-1 node is accepted (the sum of their estimates) against how often one was.
Adapted from 2026-11-27g/calibration_by_regime.py. Printed at exit. Usage: as `python -m engine bench ...`
(methods: fastcoder)."""
import atexit
import sys
from collections import defaultdict

import numpy as np

from engine.native.step import BoundVerify

real = BoundVerify.verify_draft
S = defaultdict(lambda: [0, 0.0, 0, 0])
P = defaultdict(list)
H = defaultdict(list)  # regime -> [trees, expected, accepted, draft tokens]
state = {"prev": None, "past": None}


def verify_draft(self, pending, tree, past, ahead):
    t = tree.tree() if getattr(tree, "in_builder", False) else tree
    expected = 0.0
    if len(t):
        path = np.ones(len(t))
        for i, (up, q) in enumerate(zip(t.parents.tolist(), np.asarray(t.probs).tolist())):
            path[i] = q * (path[up] if up >= 0 else 1.0)  # parents before children
        expected = float(path.sum())
    got = real(self, pending, tree, past, ahead)
    if state["past"] is None or past < state["past"]:
        state["prev"] = "first"
    accepted = len(got[0])
    if len(t):
        s = S[min(len(t), 8)]
        P[min(len(t), 8)].append(path[t.depths == 1].sum() if len(t) else 0.0)
        H[min(len(t), 8)].append(accepted > 0)
        s[0] += 1
        s[1] += expected
        s[2] += accepted
        s[3] += len(t)
    depth = int(np.max(t.depths)) if len(t) else 0
    state["prev"] = "none" if accepted == 0 else ("all" if accepted >= depth else "part")
    state["past"] = past
    return got


BoundVerify.verify_draft = verify_draft


@atexit.register
def report():
    for k, (n, e, a, d) in sorted(S.items()):
        print(f"size {k}: P(first level hit) est {np.mean(P[k]):.2f} got {np.mean(H[k]):.2f}; trees {n} draft tokens/tree {d / n:.2f} expected accepted {e / n:.2f} "
              f"accepted {a / n:.2f} ratio {a / max(e, 1e-9):.2f}", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
