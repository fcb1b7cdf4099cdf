"""Are the acceptance estimates calibrated alike after a step that accepted nothing, part or all of its tree's first
path? Per verified tree (fastcoder, fused step): the expected accepted draft tokens by the estimates (the sum of the
nodes' path probabilities: products of their conditional estimates) and the accepted count, grouped by the previous step's outcome in the same generation.
BY=size (added 2026-11-27h) groups by the tree's size instead (8: 8 or more nodes) and adds the first level alone: the
estimated chance that a depth-1 node is accepted (the sum of their estimates) against how often one was.
Printed at exit. Usage: as `python -m engine bench ...` (methods: fastcoder)."""
import atexit
import os
import sys
from collections import defaultdict

import numpy as np

from engine.native.step import BoundVerify

real = BoundVerify.verify_draft
S = defaultdict(lambda: [0, 0.0, 0, 0])  # group -> [trees, expected, accepted, draft tokens]
FIRST = defaultdict(lambda: [0.0, 0])  # group -> [estimated chance of a depth-1 hit, summed; trees with one]
BY_SIZE = os.environ.get("BY") == "size"
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
        group = min(len(t), 8) if BY_SIZE else state["prev"]
        s = S[group]
        FIRST[group][0] += float(path[t.depths == 1].sum())
        FIRST[group][1] += accepted > 0
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
        first = (f"P(first level hit) est {FIRST[k][0] / n:.2f} got {FIRST[k][1] / n:.2f}; " if BY_SIZE else "")
        print(f"{'size' if BY_SIZE else 'after'} {k}: {first}trees {n} draft tokens/tree {d / n:.2f} expected accepted {e / n:.2f} "
              f"accepted {a / n:.2f} ratio {a / max(e, 1e-9):.2f}", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
