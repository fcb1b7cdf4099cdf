"""Each decode step's forward time by draft-tree size in a real bench run (one call a step), against c(n)."""
import json, os, sys, time
import engine.generation as G

REC = []
_tree, _plain = G.Generation.tree_step, G.Generation.plain_step


def tree_step(self, pending):
    f0, n0 = self.forward_s, len(self.draft_sizes)
    r = _tree(self, pending)
    if len(self.draft_sizes) > n0:
        REC.append((self.draft_sizes[-1], self.n_ctx, (self.forward_s - f0) * 1e3))
    return r


def plain_step(self, pending):
    f0 = self.forward_s
    r = _plain(self, pending)
    REC.append((-1, self.n_ctx, (self.forward_s - f0) * 1e3))
    return r


G.Generation.tree_step, G.Generation.plain_step = tree_step, plain_step
from engine.bench.cli import main
try:
    main(sys.argv[1:])
finally:
    json.dump(REC, open(os.environ["STEP_OUT"], "w"))
