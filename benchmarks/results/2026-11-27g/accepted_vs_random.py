"""Why a tree step costs more in a generation than in the load-time c(n) loop: the same bound verification on a real
prompt (700 tokens of third-party code), a chain of the model's own next n tokens (all accepted: the walk, the KV
compaction) against a chain of random tokens (nothing accepted, as the load-time measurement has it), interleaved,
the cache cropped back after each call. Prints the median ms per call per n.
Usage: python benchmarks/results/2026-11-27g/accepted_vs_random.py"""
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
# the model's own continuation after ids[-1]
own, pending, past = [], ids[-1], context
with torch.inference_mode(), weights_pinned(model):
    for _ in range(16):
        _, committed, _ = bound(pending, empty, past)
        own.append(committed[0])
        pending, past = committed[0], past + 1
    cache.crop(context - cache.get_seq_length())
    rng = np.random.default_rng(0)
    T = {}
    for rnd in range(30):
        for n in (0, 3, 7, 12):
            for kind in ("random", "own"):
                chain = own[:n] if kind == "own" else rng.integers(100, loaded.vocab_size, n).tolist()
                tree = DraftTree.from_chain(chain, 0) if n else empty
                t = time.perf_counter()
                path, committed, _ = bound(ids[-1], tree, context)
                T.setdefault((n, kind), []).append(time.perf_counter() - t)
                if kind == "own" and n:
                    assert len(path) == n, (len(path), n)
                cache.crop(context - cache.get_seq_length())
for n in (0, 3, 7, 12):
    r, o = np.median(T[(n, "random")]) * 1e3, np.median(T[(n, "own")]) * 1e3
    print(f"n={n}: random {r:.3f} ms, own (all accepted) {o:.3f} ms, ratio {o / r:.3f}")
