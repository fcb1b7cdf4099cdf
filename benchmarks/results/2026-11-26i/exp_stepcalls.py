"""The decoder's own step calls against the old c(n) measurement's calls, interleaved at one KV-cache length:
decode_one_token / tree_forward over a chain of n draft tokens (what the decode loop runs, and what c(n) times
from format 5) vs forward_logits over 1 + n tokens with explicit positions and no mask (before).
Usage: python benchmarks/results/2026-11-26i/exp_stepcalls.py [context tokens, default 512]"""
import sys, time, collections
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import numpy as np, torch
torch.set_num_threads(1)
from engine import load_model
from engine.kv_cache import new_kv_cache
from engine.lean_forward import forward_logits
from engine.verify import tree_forward, compact_cache
from engine.decoder import decode_one_token
from engine.draft_tree import DraftTree
loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
model = loaded.model
ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 512
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, 8192, (1, ctx), generator=gen)
cache = new_kv_cache(model, ctx + 80)
sizes = [0, 1, 2, 3, 5, 8, 12]
with torch.inference_mode():
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    res = collections.defaultdict(lambda: collections.defaultdict(list))
    for rnd in range(80):
        for n in np.random.default_rng(rnd).permutation(sizes):
            toks = torch.randint(0, 8192, (1 + n,), generator=gen).tolist()
            pos = torch.arange(ctx, ctx + 1 + n)[None]
            t0 = time.perf_counter()
            forward_logits(model, torch.tensor([toks]), cache, pos)
            t1 = time.perf_counter()
            cache.crop(ctx - cache.get_seq_length())
            tree = DraftTree.from_chain(toks[1:], 1)
            t2 = time.perf_counter()
            if n == 0:
                decode_one_token(model, cache, toks[0])
            else:
                tree_forward(model, cache, toks[0], tree, ctx)
            t3 = time.perf_counter()
            cache.crop(ctx - cache.get_seq_length())
            if rnd >= 5:
                res[n]["measure"].append(t1 - t0); res[n]["tree"].append(t3 - t2)
b1 = np.median(res[0]["measure"]); b2 = np.median(res[0]["tree"])
for n in sizes:
    a, b = np.median(res[n]["measure"]) * 1e3, np.median(res[n]["tree"]) * 1e3
    print(f"n={n:2d} measure-path {a:.3f} ms c={a/b1/1e3:.3f} | tree_forward {b:.3f} ms c={b/b2/1e3:.3f}")
