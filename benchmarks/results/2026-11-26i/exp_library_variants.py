"""The native library's variants (other compile-time switches) in whole forwards: one model per variant, each
fused plan built on its library, interleaved forwards at one KV-cache length, outputs compared bit for bit."""
import sys, time, ctypes, collections
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import numpy as np, torch
torch.set_num_threads(1)
from engine import load_model, native, lean_forward
from engine.native import layer as native_layer
from engine.kv_cache import new_kv_cache
from engine.verify import tree_forward
from engine.decoder import decode_one_token
from engine.draft_tree import DraftTree
M = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
ctx = int(sys.argv[1]); variants = sys.argv[2:]
models = {"base": load_model(M)}
real = native_layer.fused_library
for v in variants:
    lib = ctypes.CDLL(v); native._configure(lib)
    L = load_model(M)
    native_layer.fused_library = lambda lib=lib: lib
    setattr(L.model.model, lean_forward.PLAN_ATTR, None)
    lean_forward._plan(L.model.model)
    native_layer.fused_library = real
    models[v.split("/")[-1]] = L
prompt = torch.randint(0, 8192, (1, ctx))
caches = {}
sizes = [0, 1, 5, 12]
with torch.inference_mode():
    for name, L in models.items():
        caches[name] = new_kv_cache(L.model, ctx + 80)
        L.model(input_ids=prompt, past_key_values=caches[name], use_cache=True, logits_to_keep=1)
    res = collections.defaultdict(list)
    for rnd in range(int(__import__("os").environ.get("ROUNDS", "60"))):
        for n in sizes:
            toks = torch.randint(0, 8192, (1 + n,)).tolist()
            tree = DraftTree.from_chain(toks[1:], 1)
            outs = {}
            for name in np.random.default_rng(rnd * 7 + n).permutation(list(models)):
                L, cache = models[name], caches[name]
                t = time.perf_counter()
                o = decode_one_token(L.model, cache, toks[0]) if n == 0 else tree_forward(L.model, cache, toks[0], tree, ctx)
                res[(name, n)].append(time.perf_counter() - t)
                outs[name] = o.clone()
                cache.crop(ctx - cache.get_seq_length())
            for name in outs: assert torch.equal(outs[name], outs["base"]), name
for n in sizes:
    a = np.array(res[("base", n)][5:])
    print(f"n={n:2d} base {np.median(a)*1e3:.3f} ms | " + " | ".join(
        f"{name} {np.median(res[(name, n)][5:])*1e3:.3f} ({np.median(np.array(res[(name, n)][5:]) / a):.3f})" for name in models if name != "base"))
