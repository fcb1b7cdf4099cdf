"""The forward's AVX-512 kernels against its AVX2 ones inside real decode steps (tiny-py-coder, 1 thread): the few-row
products (fc_gemm: 2-8 rows a register block) and the attention (fc_attention: shared keys two and four rows at a
time), switched together as ``$FASTCODER_ISA`` does.

A plain greedy step and greedy tree forwards of 1-12 draft tokens (a chain: 2-13 rows) at 512 and 1,024 cached
tokens, each timed in alternating rounds with the two kernel sets (each one first in half of the rounds) (``fc_gemm_use``, ``fc_attention_use``: the same bits, checked), the
tree built before the timer starts as engine.cost_model times c(n). Prints the median ms (25th-75th percentile) and
c(n) = tree / plain step of the same kernels.

Usage (from the repository root): OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-26q/exp_isa.py
"""

from __future__ import annotations

import numpy as np
import torch

from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.model import load_model
from engine.native import library
from engine.steps import decode_one_token_greedy
from engine.verify import tree_forward_greedy

import time

torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder")
model, lib = loaded.model, library()
SIZES = (0, 1, 2, 4, 6, 7, 8, 12)
KERNELS = {"avx2": 1, "avx512": 0}
gen = torch.Generator().manual_seed(0)
with torch.inference_mode():
    for ctx in (512, 1024):
        cache = new_kv_cache(model, ctx + 16)
        model(input_ids=torch.randint(0, loaded.vocab_size, (1, ctx), generator=gen), past_key_values=cache,
              use_cache=True, logits_to_keep=1)
        times = {(k, n): [] for k in KERNELS for n in SIZES}
        for rnd in range(80):
            for n in SIZES:
                ids = torch.randint(0, loaded.vocab_size, (n + 1,), generator=gen).tolist()
                tree = DraftTree.from_chain(ids[1:], 0)
                outs = []
                order = list(KERNELS.items())
                for name, code in (order if rnd % 2 else order[::-1]):  # each first in half of the rounds
                    lib.fc_gemm_use(code), lib.fc_attention_use(code)
                    t = time.perf_counter()
                    out = (decode_one_token_greedy(model, cache, ids[0], ctx) if n == 0
                           else tree_forward_greedy(model, cache, ids[0], tree, ctx))
                    times[(name, n)].append(time.perf_counter() - t)
                    cache.crop(ctx - cache.get_seq_length())
                    outs.append(out)
                assert outs[0] == outs[1], "the two kernel sets chose different tokens"
        lib.fc_gemm_use(0), lib.fc_attention_use(0)
        med = {key: float(np.median(v)) * 1e3 for key, v in times.items()}
        print(f"{ctx} cached tokens (median of 80 alternating rounds, ms; c(n) = / plain step of the same kernels)")
        for n in SIZES:
            cells = []
            for name in KERNELS:
                v = np.array(times[(name, n)]) * 1e3
                cells.append(f"{name} {med[(name, n)]:.3f} ({np.percentile(v, 25):.3f}-{np.percentile(v, 75):.3f})"
                             + (f" c={med[(name, n)] / med[(name, 0)]:.2f}" if n else ""))
            print(f"  {'plain step' if n == 0 else f'{n:2d} draft tokens'}: " + "; ".join(cells)
                  + f"; avx512/avx2 {med[('avx512', n)] / med[('avx2', n)]:.3f}")
