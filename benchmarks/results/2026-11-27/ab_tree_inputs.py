"""A tree forward with its inputs made per call (the previous engine.verify._tree_inputs) against this thread's reused
buffers (_cpu_step_tree_inputs), alternating per round in one process: greedy chains of 2, 6 and 12 draft tokens at
1,000 cached tokens, each forward after the previous one (caches as cold as in a decode loop). Prints the median
forward ms and the paired median ratio new / old. Usage:
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-27/ab_tree_inputs.py ROUNDS"""
import sys
import time

import numpy as np
import torch

from engine import verify
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.lean_forward import weights_pinned
from engine.model import load_model
from engine.native import library
from engine.verify import model_device, model_dtype, tree_forward_greedy

torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder")
model = loaded.model
new = verify._tree_inputs


def old(model, pending, tree, past_len, prefix=()):
    """The previous _tree_inputs with the previous DraftTree.forward_inputs inlined: fresh tensors each call."""
    device = model_device(model)
    ids = torch.tensor([[*prefix, pending, *tree.tokens.tolist()]], dtype=torch.long, device=device)
    if not prefix and len(tree) == 0:
        return ids, None, None
    n = len(tree)
    if not prefix and model_dtype(model) == torch.float32 and device.type == "cpu":
        parents = np.ascontiguousarray(tree.parents)
        mask = torch.empty((1 + n, past_len + 1 + n), dtype=torch.float32)
        positions = torch.empty(1 + n, dtype=torch.int64)
        if library().fc_tree_inputs(parents.ctypes.data, n, int(past_len), torch.finfo(torch.float32).min,
                                    mask.data_ptr(), positions.data_ptr()) == 0:
            return ids, positions[None], mask[None, None]
    positions, mask = tree.forward_inputs(past_len, model_dtype(model), device, len(prefix))
    return ids, positions, mask


SIZES, ctx = (2, 6, 12), 1000
gen = torch.Generator().manual_seed(0)
times = {(v, n): [] for v in ("old", "new") for n in SIZES}
with torch.inference_mode(), weights_pinned(model):
    cache = new_kv_cache(model, ctx + 64)
    model(input_ids=torch.randint(0, loaded.vocab_size, (1, ctx), generator=gen), past_key_values=cache,
          use_cache=True, logits_to_keep=1)
    for rnd in range(int(sys.argv[1])):
        for n in SIZES:
            ids = torch.randint(0, loaded.vocab_size, (n + 1,), generator=gen).tolist()
            tree = DraftTree.from_chain(ids[1:], 0)
            outs = []
            for v in (("old", "new") if rnd % 2 else ("new", "old")):
                verify._tree_inputs = old if v == "old" else new
                t = time.perf_counter()
                outs.append(tree_forward_greedy(model, cache, ids[0], tree, ctx))
                times[(v, n)].append(time.perf_counter() - t)
                cache.crop(ctx - cache.get_seq_length())
            assert outs[0] == outs[1]
for n in SIZES:
    o, w = np.array(times[("old", n)]) * 1e3, np.array(times[("new", n)]) * 1e3
    print(f"{n:2d} draft tokens: old {np.median(o):.3f} ms, new {np.median(w):.3f} ms, paired median ratio "
          f"{np.median(w / o):.3f}")
