"""Does a branching draft tree cost more to verify than a chain of the same size (the load-time c(n) times chains)?
The bound verification on a real 700-token prompt, interleaved, the cache cropped back after each call: a chain of n
random tokens against a tree of n random tokens with the same node count (a root fan-out of 2-3, then chains), and
Prints the median ms per call.
Usage: python benchmarks/results/2026-11-27g/chain_vs_tree.py"""
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bound_on_prompt import bound_on_prompt  # noqa: E402

from engine.draft_tree import DraftTree  # noqa: E402
from engine.lean_forward import weights_pinned  # noqa: E402

loaded, ids, context, cache, bound = bound_on_prompt()
model = loaded.model
empty = DraftTree.empty()
rng = np.random.default_rng(0)


def branching(n: int) -> DraftTree:
    """n nodes: min(3, n) children of the root, the rest a chain below the first child."""
    fan = min(3, n)
    parents = [-1] * fan + [0] + list(range(fan, n - 1))
    parents = parents[:n]
    toks = np.asarray(rng.integers(100, loaded.vocab_size, n), dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    for i, up in enumerate(parents):
        depths[i] = 1 if up < 0 else depths[up] + 1
    return DraftTree(toks, np.asarray(parents, dtype=np.int64), depths, np.zeros(n, dtype=np.uint8), np.ones(n))


T = {}
with torch.inference_mode(), weights_pinned(model):
    for rnd in range(40):
        for n in (0, 3, 7, 12):
            for kind in ("chain", "tree"):
                if n == 0:
                    tree = empty
                elif kind == "chain":
                    tree = DraftTree.from_chain(rng.integers(100, loaded.vocab_size, n).tolist(), 0)
                else:
                    tree = branching(n)
                t = time.perf_counter()
                bound(ids[-1], tree, context)
                T.setdefault((n, kind), []).append(time.perf_counter() - t)
                cache.crop(context - cache.get_seq_length())
base = np.median(T[(0, "chain")])
for n in (0, 3, 7, 12):
    c, t = np.median(T[(n, "chain")]), np.median(T[(n, "tree")])
    print(f"n={n}: chain {c * 1e3:.3f} ms ({c / base:.2f}), tree {t * 1e3:.3f} ms ({t / base:.2f})")
