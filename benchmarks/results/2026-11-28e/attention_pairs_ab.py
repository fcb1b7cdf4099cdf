"""A/B of the AVX2 attention scoring two query rows per key load (fc_attention_pairs, a patch measured and not
kept: it no longer exists in tree_attention.c, so this script needs it applied) against one row at a time: 6 layers
of tiny-py-coder's attention shape over 500 and 900 cached keys, the caches evicted between calls."""
import torch, time, sys
torch.set_num_threads(1)
from engine.native.attention import attention, attention_library
lib = attention_library()
for L in (500, 900):
    ks = [torch.randn(1, 4, L + 16, 64) for _ in range(6)]; vs = [torch.randn(1, 4, L + 16, 64) for _ in range(6)]
    junk = torch.randn(6_000_000)
    res = {}
    for rep in range(5):
        for m in (1, 2, 4, 6, 8):
            for pairs in (0, 1):
                lib.fc_attention_pairs(pairs)
                q = torch.randn(1, 4, m, 64)
                mask = torch.ones(1, 1, m, L + m, dtype=torch.bool)
                ts = []
                for r in range(40):
                    junk.add_(1.0)
                    t = time.perf_counter()
                    for l in range(6):
                        attention(lib, q, ks[l][:, :, :L + m], vs[l][:, :, :L + m], mask, 0.125, False)
                    ts.append(time.perf_counter() - t)
                ts.sort(); res.setdefault((m, pairs), []).append(ts[len(ts)//2] * 1e3)
    for m in (1, 2, 4, 6, 8):
        a, b = sorted(res[(m, 0)])[2], sorted(res[(m, 1)])[2]
        print(f"L={L} m={m}: one row at a time {a:.3f} ms, pairs {b:.3f} ms (6 layers, median of 5)")
