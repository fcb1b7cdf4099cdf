"""A/B: the forward's streamed buffers (packed weights, KV cache, LM-head screen) on 2 MB pages (engine.huge_pages)
against ordinary 4 KB pages. Two models in one process, one loaded with FASTCODER_HUGE_PAGES=0 (its cache made
the same way), forwards alternating per round (each first in half of the rounds), 1,000 cached tokens, a 24 MB
sweep between forwards (caches cold as after drafting); asserts the same tokens.
Usage: OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/results/2026-11-27c/exp_huge.py ROUNDS [CTX]"""
import os, sys, time, numpy as np, torch
from engine import huge_pages
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.model import load_model
from engine.verify import tree_forward_greedy
from engine.steps import decode_one_token_greedy
from engine.lean_forward import weights_pinned
torch.set_num_threads(1)
ctx = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
SIZES = (0, 3, 7, 15)
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, 8192, (1, ctx), generator=gen)
runs = {}
for v in ("4k", "huge"):
    os.environ[huge_pages.ENV] = "1" if v == "huge" else "0"
    model = load_model("../shared/models/tiny-py-coder").model
    cache = new_kv_cache(model, ctx + 2000)
    with torch.inference_mode():
        model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    lin = model.model.layers[0].mlp.up_proj
    print(v, "panels on huge pages:", huge_pages.huge_bytes(lin._panels_ptr) >> 20, "MB; KV buffer:",
          huge_pages.huge_bytes(cache.layers[0]._kbuf.data_ptr()) >> 20, "MB; capacity", cache.layers[0].capacity)
    runs[v] = (model, cache)
sweep = np.ones(3 * 1024 * 1024)
times = {(v, n): [] for v in runs for n in SIZES}
with torch.inference_mode(), weights_pinned(runs["4k"][0]), weights_pinned(runs["huge"][0]):
    for rnd in range(int(sys.argv[1])):
        for n in SIZES:
            ids = torch.randint(0, 8192, (n + 1,), generator=gen).tolist()
            tree = DraftTree.from_chain(ids[1:], 0)
            outs = []
            for v in (("4k", "huge") if rnd % 2 else ("huge", "4k")):
                model, cache = runs[v]
                sweep += 1.0
                t = time.perf_counter()
                out = [decode_one_token_greedy(model, cache, ids[0], ctx)] if n == 0 else tree_forward_greedy(model, cache, ids[0], tree, ctx)
                times[(v, n)].append(time.perf_counter() - t)
                cache.crop(ctx - cache.get_seq_length())
                outs.append(out)
            assert outs[0] == outs[1]
for n in SIZES:
    o, w = np.array(times[("4k", n)]) * 1e3, np.array(times[("huge", n)]) * 1e3
    r = w / o
    print(f"{n:2d} draft tokens: 4 KB pages {np.median(o):.3f} ms, huge pages {np.median(w):.3f} ms, paired ratio median {np.median(r):.3f} (p10 {np.percentile(r,10):.3f}, p90 {np.percentile(r,90):.3f})")
