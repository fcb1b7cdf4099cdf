"""What a tree row costs at short and long contexts on this CPU: the greedy tree forward (the engine's own call,
`engine.verify.tree_forward_greedy`) of a chain of n - 1 draft tokens after the pending one, on tiny-py-coder's KV
cache of 64 / 512 / 1,000 tokens, median ms of 5 interleaved rounds x 20 calls, 1 thread. The per-row slope past 2
rows at 1,000 tokens less the one at 64 is the attention over the context a row pays.
PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-28a/row_cost_by_context.py"""
import statistics
import time

import numpy as np
import torch

from engine import load_model
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.steps import prefill
from engine.verify import tree_forward_greedy

torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder", device="cpu")
model = loaded.model
rng = np.random.default_rng(0)
CONTEXTS, ROWS = (64, 512, 1000), (1, 2, 4, 6, 8)
times = {(L, n): [] for L in CONTEXTS for n in ROWS}
with torch.inference_mode():
    caches = {}
    for L in CONTEXTS:
        caches[L] = new_kv_cache(model, L + 80)
        prefill(model, caches[L], torch.tensor([rng.integers(0, 8000, L).tolist()]))
    trees = {n: DraftTree.from_chain(rng.integers(0, 8000, n - 1).tolist(), 0) if n > 1 else DraftTree.empty()
             for n in ROWS}
    for _ in range(5):
        for L in CONTEXTS:
            for n in ROWS:
                for _ in range(20):
                    t = time.perf_counter()
                    tree_forward_greedy(model, caches[L], 5, trees[n], L)
                    times[(L, n)].append(time.perf_counter() - t)
                    caches[L].crop(-n)
med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
for L in CONTEXTS:
    base = med[(L, 1)]
    print(f"{L:5d} tokens: " + "  ".join(f"{n} rows {med[(L, n)]:.3f} ms (c {med[(L, n)] / base:.2f})" for n in ROWS)
          + f"  slope 2->8 rows {(med[(L, 8)] - med[(L, 2)]) / 6:.3f} ms a row")
