"""A/B: greedy forwards through the one native call (new) against the three native calls (old: GreedyStep.tree and
.run declined, so tree_forward_greedy / decode_one_token_greedy take their previous path), alternating per round in one
process, 1,000 cached tokens, a 24 MB sweep between forwards (caches cold as after drafting); asserts the same tokens.
Usage: OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/results/2026-11-27b/ab_step.py ROUNDS"""
import sys, time, numpy as np, torch
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.model import load_model
from engine.native import step as native_step
from engine.verify import tree_forward_greedy
from engine.steps import decode_one_token_greedy
from engine.lean_forward import weights_pinned
torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder"); model = loaded.model
run, tree_ = native_step.GreedyStep.run, native_step.GreedyStep.tree
def declined(self, *a):
    return None
gen = torch.Generator().manual_seed(0)
sweep = np.ones(3 * 1024 * 1024)
SIZES = (0, 2, 6, 12)
ctx = 1000
times = {(v, n): [] for v in ("old", "new") for n in SIZES}
with torch.inference_mode(), weights_pinned(model):
    cache = new_kv_cache(model, ctx + 2000)
    model(input_ids=torch.randint(0, loaded.vocab_size, (1, ctx), generator=gen), past_key_values=cache, use_cache=True, logits_to_keep=1)
    past = ctx
    for rnd in range(int(sys.argv[1])):
        for n in SIZES:
            ids = torch.randint(0, loaded.vocab_size, (n + 1,), generator=gen).tolist()
            tree = DraftTree.from_chain(ids[1:], 0)
            outs = []
            for v in (("old", "new") if rnd % 2 else ("new", "old")):
                native_step.GreedyStep.run = run if v == "new" else declined
                native_step.GreedyStep.tree = tree_ if v == "new" else declined
                sweep += 1.0
                t = time.perf_counter()
                out = [decode_one_token_greedy(model, cache, ids[0], past)] if n == 0 else tree_forward_greedy(model, cache, ids[0], tree, past)
                times[(v, n)].append(time.perf_counter() - t)
                cache.crop(past - cache.get_seq_length())
                outs.append(out)
            assert outs[0] == outs[1]
for n in SIZES:
    o, w = np.array(times[("old", n)]) * 1e3, np.array(times[("new", n)]) * 1e3
    r = w / o
    print(f"{n:2d} draft tokens: old {np.median(o):.3f} ms, new {np.median(w):.3f} ms (-{np.median(o)-np.median(w):.3f}), paired ratio median {np.median(r):.3f} (p10 {np.percentile(r,10):.3f}, p90 {np.percentile(r,90):.3f})")
