"""Multi-row scores' key prefetch distance (fc_attention_kv_pf: blocks of 8 keys ahead, 0 off), alternating per
forward in one process at 1,000 cached tokens with a 24 MB sweep between forwards; asserts the same tokens.
Usage: OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/results/2026-11-27c/ab_prefetch.py ROUNDS 0,1,2"""
import sys, time, numpy as np, torch
from engine import native
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.model import load_model
from engine.verify import tree_forward_greedy
from engine.lean_forward import weights_pinned
torch.set_num_threads(1)
lib = native.library()
model = load_model("../shared/models/tiny-py-coder").model
gen = torch.Generator().manual_seed(0)
sweep = np.ones(3 * 1024 * 1024)
modes = [int(x) for x in sys.argv[2].split(",")]
SIZES = (1, 2, 3, 5, 7, 12)
ctx = 1000
times = {(m, n): [] for m in modes for n in SIZES}
with torch.inference_mode(), weights_pinned(model):
    cache = new_kv_cache(model, ctx + 2000)
    model(input_ids=torch.randint(0, 8192, (1, ctx), generator=gen), past_key_values=cache, use_cache=True, logits_to_keep=1)
    for rnd in range(int(sys.argv[1])):
        for n in SIZES:
            ids = torch.randint(0, 8192, (n + 1,), generator=gen).tolist()
            tree = DraftTree.from_chain(ids[1:], 0)
            outs = []
            order = modes if rnd % 2 else modes[::-1]
            for m in order:
                lib.fc_attention_kv_pf(m)
                sweep += 1.0
                t = time.perf_counter()
                out = tree_forward_greedy(model, cache, ids[0], tree, ctx)
                times[(m, n)].append(time.perf_counter() - t)
                cache.crop(ctx - cache.get_seq_length())
                outs.append(out)
            assert all(o == outs[0] for o in outs)
for n in SIZES:
    b = np.array(times[(modes[0], n)])
    print(f"{n} drafts: " + " | ".join(f"pf={m} {np.median(times[(m, n)])*1e3:.3f} ms ({np.median(np.array(times[(m, n)]) / b):.3f})" for m in modes))
