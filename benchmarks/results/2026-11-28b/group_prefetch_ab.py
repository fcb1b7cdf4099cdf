"""A/B of the few-row products' next-panel-group prefetch (engine/native/small_gemm.c, fc_gemm_group_prefetch) in the
engine's own greedy tree forward (`engine.verify.tree_forward_greedy`): a chain of n - 1 draft tokens after the
pending one on tiny-py-coder's KV cache of 64 / 512 / 1,000 tokens, modes interleaved call by call (0: as before;
1: the passes over a panel group already in L2 prefetch the next group). Median ms of ROUNDS x 10 calls per cell,
1 thread. Same outputs in every mode (checked). (The first run of this session also had a mode 3, 7 rows as 6 + 1.)
PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-28b/group_ahead_ab.py"""
import os
import statistics
import time

import numpy as np
import torch

from engine import load_model
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.native import library
from engine.steps import prefill
from engine.verify import tree_forward_greedy

torch.set_num_threads(1)
lib = library()
loaded = load_model("../shared/models/tiny-py-coder", device="cpu")
model = loaded.model
rng = np.random.default_rng(0)
CONTEXTS = tuple(int(x) for x in os.environ.get("CONTEXTS", "64,512,1000").split(","))
ROWS = tuple(int(x) for x in os.environ.get("ROWS", "1,2,4,6,7,8,9,10,12,13").split(","))
MODES = (0, 1)
ROUNDS = int(os.environ.get("ROUNDS", "7"))
times = {(L, n, m): [] for L in CONTEXTS for n in ROWS for m in MODES}
with torch.inference_mode():
    caches = {}
    for L in CONTEXTS:
        caches[L] = new_kv_cache(model, L + 80)
        prefill(model, caches[L], torch.tensor([rng.integers(0, 8000, L).tolist()]))
    trees = {n: DraftTree.from_chain(rng.integers(0, 8000, n - 1).tolist(), 0) if n > 1 else DraftTree.empty()
             for n in ROWS}
    for L in CONTEXTS:  # same outputs in every mode
        for n in ROWS:
            outs = []
            for m in MODES:
                lib.fc_gemm_group_prefetch(m)
                outs.append(tree_forward_greedy(model, caches[L], 5, trees[n], L))
                caches[L].crop(-n)
            assert all(str(o) == str(outs[0]) for o in outs), (L, n)
    for _ in range(ROUNDS):
        for L in CONTEXTS:
            for n in ROWS:
                for _ in range(10):
                    for m in MODES:
                        lib.fc_gemm_group_prefetch(m)
                        t = time.perf_counter()
                        tree_forward_greedy(model, caches[L], 5, trees[n], L)
                        times[(L, n, m)].append(time.perf_counter() - t)
                        caches[L].crop(-n)
lib.fc_gemm_group_prefetch(1)
med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
for L in CONTEXTS:
    print(f"{L} cached tokens: rows, ms per mode {MODES} (c(n) of mode 0 / mode 1), mode 1 / mode 0")
    for n in ROWS:
        cells = " ".join(f"{med[(L, n, m)]:.3f}" for m in MODES)
        c0, c1 = med[(L, n, 0)] / med[(L, 1, 0)], med[(L, n, 1)] / med[(L, 1, 1)]
        print(f"  {n:2d} rows {cells}  (c {c0:.2f} / {c1:.2f})  {med[(L, n, 1)] / med[(L, n, 0)]:.3f}")
