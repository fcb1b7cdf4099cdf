"""How much of a tree forward is the LM head over rows the walk never reads? Times the decoder's tree
forward (every row's logits) against the same forward keeping only k rows' logits, interleaved."""
import sys, time, numpy as np, torch
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone
sys.path.insert(0, str(ROOT))
torch.set_num_threads(1)
from engine.model import load_model
from engine.kv_cache import new_kv_cache
from engine.draft_tree import DraftTree
from engine.verify import tree_forward, model_dtype
from engine.decoder import decode_one_token
from engine.lean_forward import LOGITS_ATTR
loaded = load_model(str(ROOT.parent / "shared/models/tiny-py-coder"), device="cpu")
model = loaded.model
ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 512
g = torch.Generator().manual_seed(0)
prompt = torch.randint(0, loaded.vocab_size, (1, ctx), generator=g)
cache = new_kv_cache(model, ctx + 80)
with torch.inference_mode():
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
logits_fn = getattr(model, LOGITS_ATTR)
def kept_forward(pending, tree, k):
    ids = torch.tensor([[pending, *tree.tokens.tolist()]])
    positions, mask = tree.forward_inputs(ctx, model_dtype(model), torch.device("cpu"), 0)
    return logits_fn(ids, cache, positions, mask, slice(0, k))
res = {}
rng = np.random.default_rng(0)
cases = [("plain", 0, 0)] + [(f"n{n}_all", n, n + 1) for n in (4, 8, 16, 32)] + [(f"n{n}_k{k}", n, k) for n in (4, 8, 16, 32) for k in (1, 3, 5)]
with torch.inference_mode():
    for r in range(40):
        order = list(cases); rng.shuffle(order)
        for name, n, k in order:
            ids = torch.randint(0, loaded.vocab_size, (1 + n,), generator=g).tolist()
            t0 = time.perf_counter()
            if n == 0:
                decode_one_token(model, cache, ids[0], ctx)
            elif k == n + 1:
                tree_forward(model, cache, ids[0], DraftTree.from_chain(ids[1:], 0), ctx)
            else:
                kept_forward(ids[0], DraftTree.from_chain(ids[1:], 0), k)
            res.setdefault(name, []).append(time.perf_counter() - t0)
            cache.crop(ctx - cache.get_seq_length())
base = np.array(res["plain"])
for name, n, k in cases:
    t = np.array(res[name]); r = t / base
    print(f"{name:10s} median {np.median(t)*1e3:6.3f} ms  ratio to plain {np.median(r):.3f} (p25 {np.percentile(r,25):.3f} p75 {np.percentile(r,75):.3f})")
