"""Per fastcoder tree step of a bench run: the tree size verified and whether anything was accepted (engine.generation.Generation
records draft_sizes and accepted_lengths); prints how many drafted steps accepted nothing and the miss rate by size (12: 12 or more).
Usage: as `python -m engine bench ...` with `--methods fastcoder`."""
import atexit, sys
from collections import Counter
import numpy as np
import engine.generation as g
pairs = []
real = g.Generation.run
def run(self):
    res = real(self)
    if self.drafter is not None and type(self.drafter).__name__ == "FastCoderDrafter":
        pairs.extend(zip(self.draft_sizes, self.accepted_lengths[-len(self.draft_sizes):] if self.draft_sizes else []))
    return res
g.Generation.run = run
@atexit.register
def rep():
    a = np.array(pairs)
    if not len(a): return
    n, acc = a[:, 0], a[:, 1]
    print("steps", len(a), "empty trees", int((n == 0).sum()), "drafted & nothing accepted", int(((n > 0) & (acc == 1)).sum()),
          "mean size of those", round(float(n[(n > 0) & (acc == 1)].mean()), 2), "mean size all drafted", round(float(n[n > 0].mean()), 2), file=sys.stderr)
    c = Counter(); t = Counter()
    for s, k in pairs:
        b = min(s, 12); t[b] += 1; c[b] += k == 1
    print("miss rate by size:", {b: f"{c[b]}/{t[b]}" for b in sorted(t)}, file=sys.stderr)
from engine.cli import main
sys.argv = ["engine"] + sys.argv[1:]
main()
