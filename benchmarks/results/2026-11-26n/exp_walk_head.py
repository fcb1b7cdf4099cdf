"""Needs walk_head.patch applied (git apply benchmarks/results/2026-11-26n/walk_head.patch; then git checkout engine).
Greedy generations of ar, fastcoder and fastcoder with walk_head=False on six pluggy prompts (must be equal), then the
rows the walk reads against the rows in the trees, and a simulation of each first-batch threshold: rows computed and
extra LM-head calls per step."""
import sys, time, glob
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone
sys.path.insert(0, str(ROOT))
import torch; torch.set_num_threads(1)
from engine.model import load_model
from engine.decoder import SpeculativeDecoder
import engine.verify as V
loaded = load_model(str(ROOT.parent / "shared/models/tiny-py-coder"), device="cpu")
files = sorted(glob.glob(str(ROOT / ".venv/lib/python3.11/site-packages/pluggy/*.py")))
prompts = []
for f in files[:6]:
    src = open(f).read()
    prompts.append(src[: len(src) // 2][-2500:])
rows = []; sizes = []
orig = V.verify_greedy_walk
def spy(*a, **k):
    r = orig(*a, **k)
    if r is not None:
        rows.append(r[2]); sizes.append(1 + len(a[4]))
    return r
import engine.decoder as D
D.verify_greedy_walk = spy
on = SpeculativeDecoder(loaded, "fastcoder")
off = SpeculativeDecoder(loaded, "fastcoder", walk_head=False)
ar = SpeculativeDecoder(loaded, "ar")
for p in prompts:
    a = ar.generate(p, max_new_tokens=96).token_ids
    b = on.generate(p, max_new_tokens=96).token_ids
    c = off.generate(p, max_new_tokens=96).token_ids
    print(a == b == c, len(a))
print("steps", len(rows), "rows with logits", sum(rows), "of", sum(sizes))
# offline: rows needed vs computed per threshold
recs = []
def spy2(model, head, cache, pending, tree, past_len, min_prob=0.2):
    r = orig(model, head, cache, pending, tree, past_len, min_prob)
    if r is not None:
        recs.append((V.path_probs(tree), tree.parents.tolist(), r[0]))
    return r
D.verify_greedy_walk = spy2
for p in prompts:
    on.generate(p, max_new_tokens=96)
import numpy as np
need = sum(len(pth) + 1 for _, _, pth in recs); tot = sum(1 + len(pp) for pp, _, _ in recs)
print("steps", len(recs), "rows needed", need, "rows in trees", tot)
allpp = np.concatenate([pp for pp, _, _ in recs]); print("path prob quantiles", np.percentile(allpp, [10, 25, 50, 75, 90]).round(2))
for tau in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
    comp = miss = 0
    for pp, par, pth in recs:
        first = {0} | {1 + i for i, p in enumerate(pp) if p >= tau}
        got = set(first); calls = 0
        for node in [-1] + pth:
            if node + 1 not in got:
                calls += 1; got.add(node + 1)
                below = {node}
                for j in range(node + 1, len(pp)):
                    if par[j] in below and pp[j] >= tau * pp[node]:
                        below.add(j); got.add(j + 1)
        comp += len(got); miss += calls
    print(f"tau {tau}: rows computed {comp} ({comp/len(recs):.2f}/step), extra head calls {miss} ({miss/len(recs):.3f}/step)")
