"""fc_fused_forward reading the mask once per forward (this commit's library) against once per layer (the previous commit's,
built into /tmp/oldnative/libold.so: its engine/native/*.c and *.h compiled with engine.native.CFLAGS and -fopenmp),
the two alternating per round in one process at 1,000 cached tokens; greedy chains of 0-12 draft tokens. Usage:
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-27/ab_row_plan.py ROUNDS"""
import ctypes, sys, time, numpy as np, torch
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.model import load_model
from engine.native import library, _configure
from engine.lean_forward import _plan
from engine.verify import tree_forward_greedy, compact_cache
from engine.steps import decode_one_token_greedy
torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder"); model = loaded.model
new = library(); old = ctypes.CDLL("/tmp/oldnative/libold.so"); _configure(old)
plan = _plan(model.model)
SIZES = (0, 2, 6, 8, 12)
ctx = 1000
gen = torch.Generator().manual_seed(0)
times = {(v, n): [] for v in ("old", "new") for n in SIZES}
with torch.inference_mode():
    cache = new_kv_cache(model, ctx + 2000)
    model(input_ids=torch.randint(0, loaded.vocab_size, (1, ctx), generator=gen), past_key_values=cache, use_cache=True, logits_to_keep=1)
    past = ctx
    for rnd in range(int(sys.argv[1])):
        for n in SIZES:
            ids = torch.randint(0, loaded.vocab_size, (n + 1,), generator=gen).tolist()
            tree = DraftTree.from_chain(ids[1:], 0)
            outs = []
            for v in (("old", "new") if rnd % 2 else ("new", "old")):
                plan.lib = old if v == "old" else new
                t = time.perf_counter()
                out = decode_one_token_greedy(model, cache, ids[0], past) if n == 0 else tree_forward_greedy(model, cache, ids[0], tree, past)
                times[(v, n)].append(time.perf_counter() - t)
                cache.crop(past - cache.get_seq_length())
                outs.append(out)
            assert outs[0] == outs[1]
for n in SIZES:
    o, w = np.array(times[("old", n)]) * 1e3, np.array(times[("new", n)]) * 1e3
    print(f"{n:2d} draft tokens: old {np.median(o):.3f} ms, new {np.median(w):.3f} ms, new/old median {np.median(w)/np.median(o):.3f}, paired median ratio {np.median(w/o):.3f}")
