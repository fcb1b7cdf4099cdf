"""A plain decode step three ways, interleaved, 200 rounds at one KV-cache length: (a) decode_one_token without a
position (the cache's length read, positions made by torch.arange), (b) ids and positions from torch.tensor,
(c) this thread's reused buffers written through numpy (what decode_one_token does given its position).
Usage: python benchmarks/results/2026-11-26i/exp_plain_step.py 512"""
import sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import numpy as np, torch
torch.set_num_threads(1)
from engine import load_model
from engine.kv_cache import new_kv_cache
from engine.lean_forward import forward_logits
from engine.decoder import decode_one_token
loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder")); model = loaded.model
ctx = int(sys.argv[1])
prompt = torch.randint(0, 8192, (1, ctx))
cache = new_kv_cache(model, ctx + 80)
ids_buf = torch.zeros((1, 1), dtype=torch.long); pos_buf = torch.zeros((1, 1), dtype=torch.long)
ids_np, pos_np = ids_buf.numpy(), pos_buf.numpy()
def a(tok): return decode_one_token(model, cache, tok)  # no position: read from the cache
def b(tok): return forward_logits(model, torch.tensor([[tok]]), cache, torch.tensor([[ctx]]))[0, -1]
def c(tok):
    ids_np[0, 0] = tok; pos_np[0, 0] = ctx
    return forward_logits(model, ids_buf, cache, pos_buf)[0, -1]
R = {k: [] for k in "abc"}
with torch.inference_mode():
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    outs = {}
    for r in range(200):
        for k in np.random.default_rng(r).permutation(list("abc")):
            f = {"a": a, "b": b, "c": c}[k]
            t = time.perf_counter(); o = f(5); R[k].append(time.perf_counter() - t); cache.crop(-1)
            if r == 0: outs[k] = o.clone()
    assert torch.equal(outs["a"], outs["b"]) and torch.equal(outs["a"], outs["c"])
base = np.array(R["a"])
for k in "abc":
    print(k, "%.3f ms, paired ratio %.3f" % (np.median(R[k]) * 1e3, np.median(np.array(R[k]) / base)))
