"""Packed weights copied into one arena allocated by torch (2 MB pages when run with THP_MEM_ALLOC_ENABLE=1) vs as
loaded: interleaved forwards of two models, logits compared bit for bit."""
import sys, time, mmap, ctypes, collections
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import numpy as np, torch
torch.set_num_threads(1)
from engine import load_model
from engine.kv_cache import new_kv_cache
from engine.verify import tree_forward
from engine.decoder import decode_one_token
from engine.draft_tree import DraftTree
from engine import lean_forward
from engine.packed_linear import NativeLinear
M = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
A = load_model(M); B = load_model(M)
def arena_ize(loaded, huge=True):
    mods = [m for m in loaded.model.modules() if isinstance(m, NativeLinear)]
    total = sum(m._panels.numel() * 4 for m in mods)
    size = (total + (4 << 20)) // (2 << 20) * (2 << 20)
    mm = None
    arena = torch.empty(size // 4, dtype=torch.float32)  # THP_MEM_ALLOC_ENABLE=1: 2 MB-aligned, madvised
    pos = 0
    # order of use: per layer q k v o gate up down, then lm_head (module order is close to that)
    for m in mods:
        n = m._panels.numel()
        arena[pos:pos + n].copy_(m._panels)
        m._panels = arena[pos:pos + n]; m._panels_ptr = m._panels.data_ptr()
        pos += n + (16 - n % 16) % 16
    loaded._arena = (mm, arena)
    base = loaded.model.model
    setattr(base, lean_forward.PLAN_ATTR, None)
    return len(mods), total
print("arena", arena_ize(B, huge=len(sys.argv) < 3))
print([l for l in open("/proc/self/smaps_rollup") if "AnonHuge" in l])
ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
prompt = torch.randint(0, 8192, (1, ctx))
caches = {}
with torch.inference_mode():
    for name, L in (("A", A), ("B", B)):
        caches[name] = new_kv_cache(L.model, ctx + 80)
        L.model(input_ids=prompt, past_key_values=caches[name], use_cache=True, logits_to_keep=1)
    res = collections.defaultdict(list)
    sizes = [0, 1, 5, 12]
    for rnd in range(60):
        for n in sizes:
            toks = torch.randint(0, 8192, (1 + n,)).tolist()
            tree = DraftTree.from_chain(toks[1:], 1)
            outs = {}
            for name in np.random.default_rng(rnd * 7 + n).permutation(["A", "B"]):
                L, cache = (A, caches["A"]) if name == "A" else (B, caches["B"])
                t = time.perf_counter()
                o = decode_one_token(L.model, cache, toks[0]) if n == 0 else tree_forward(L.model, cache, toks[0], tree, ctx)
                res[(name, n)].append(time.perf_counter() - t)
                outs[name] = o.clone()
                cache.crop(ctx - cache.get_seq_length())
            assert torch.equal(outs["A"], outs["B"])
for n in sizes:
    a, b = np.array(res[("A", n)][5:]), np.array(res[("B", n)][5:])
    print(f"n={n:2d} as loaded {np.median(a)*1e3:.3f} ms  arena {np.median(b)*1e3:.3f} ms  paired median ratio {np.median(b / a):.3f}")
