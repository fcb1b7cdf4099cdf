"""The LM head's argmax by int8 screening against the whole head, on tiny-py-coder (1 thread), interleaved:

1. exactness and rescoring on real final hidden states over third-party code (pluggy, jinja2), on the CPU's best
   instruction set (AVX-512 VNNI here) and on the AVX2 path;
2. the head's argmax alone per row count (warm loop, median of 200 alternating calls): whole head, VNNI, AVX2;
3. a plain decode step and a 6-token tree's forward at 512 and 1,024 cached tokens, each call timed in alternating
   rounds with the whole head and the screen on both paths (median over rounds).

Usage (from the repository root): OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-26p/exp_screen.py
"""

from __future__ import annotations

import glob
import time

import numpy as np
import torch

from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.model import load_model
from engine.native import library
from engine.native.screened_head import screened_head
from engine.steps import decode_one_token, decode_one_token_greedy
from engine.verify import argmax_rows, tree_forward, tree_forward_greedy

torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder")
model, head = loaded.model, loaded.model.lm_head
screen = screened_head(head)
site = ".venv/lib/python3.11/site-packages"
files = sorted(glob.glob(f"{site}/pluggy/*.py"))[:6] + sorted(glob.glob(f"{site}/jinja2/*.py"))[:4]
with torch.inference_mode():
    hidden = torch.cat([model(input_ids=loaded.tokenizer(open(f).read(), return_tensors="pt").input_ids[:, :1000],
                              output_hidden_states=True).hidden_states[-1][0] for f in files]).contiguous()
    want = head(hidden).numpy().argmax(-1)
    lib = library()
    for isa, name in ((0, "best (VNNI)"), (1, "AVX2")):
        lib.fc_screen_use(isa)
        rows0, exact0 = screen.rows, screen.exact
        got = np.array([t for i in range(0, len(hidden), 7) for t in screen.argmax(hidden[i:i + 7])])
        per_row = (screen.exact - exact0) / (screen.rows - rows0)
        print(f"{name}: real rows: {len(hidden)}, argmax differs from the whole head's at {int((got != want).sum())}; "
              f"exact logits per row {per_row:.3f}")
    lib.fc_screen_use(0)

    def screened_on(isa, x):
        lib.fc_screen_use(isa)
        out = screen.argmax(x)
        lib.fc_screen_use(0)
        return out

    for m in (1, 2, 4, 6, 8, 16):
        x = hidden[100:100 + m].contiguous()
        full, scr, avx2 = [], [], []
        for _ in range(200):
            t = time.perf_counter(); argmax_rows(head(x)); full.append(time.perf_counter() - t)
            t = time.perf_counter(); screened_on(0, x); scr.append(time.perf_counter() - t)
            t = time.perf_counter(); screened_on(1, x); avx2.append(time.perf_counter() - t)
        print(f"head argmax, {m:2d} rows: whole head {np.median(full) * 1e6:6.1f} us, "
              f"screened {np.median(scr) * 1e6:6.1f} us, screened on AVX2 {np.median(avx2) * 1e6:6.1f} us")
    gen = torch.Generator().manual_seed(0)
    for ctx in (512, 1024):
        cache = new_kv_cache(model, ctx + 16)
        model(input_ids=torch.randint(0, loaded.vocab_size, (1, ctx), generator=gen), past_key_values=cache,
              use_cache=True, logits_to_keep=1)
        calls = {  # the tree is built before the timer starts, as engine.cost_model times c(n)
            "plain, whole head": lambda ids, tree: decode_one_token(model, cache, ids[0], ctx),
            "plain, screened": lambda ids, tree: decode_one_token_greedy(model, cache, ids[0], ctx),
            "6-token tree, whole head": lambda ids, tree: tree_forward(model, cache, ids[0], tree, ctx),
            "6-token tree, screened": lambda ids, tree: tree_forward_greedy(model, cache, ids[0], tree, ctx),
            "plain, screened on AVX2": lambda ids, tree: (lib.fc_screen_use(1),
                                                          decode_one_token_greedy(model, cache, ids[0], ctx),
                                                          lib.fc_screen_use(0)),
            "6-token tree, screened on AVX2": lambda ids, tree: (lib.fc_screen_use(1),
                                                                 tree_forward_greedy(model, cache, ids[0], tree, ctx),
                                                                 lib.fc_screen_use(0)),
        }
        times = {k: [] for k in calls}
        for _ in range(60):
            for name, call in calls.items():
                ids = torch.randint(0, loaded.vocab_size, (7,), generator=gen).tolist()
                tree = DraftTree.from_chain(ids[1:], 0)
                t = time.perf_counter(); call(ids, tree); times[name].append(time.perf_counter() - t)
                cache.crop(ctx - cache.get_seq_length())
        print(f"{ctx} cached tokens: " + "; ".join(
            f"{k} {np.median(v) * 1e3:.3f} ms ({np.percentile(v, 25) * 1e3:.3f}-{np.percentile(v, 75) * 1e3:.3f})"
            for k, v in times.items()))
