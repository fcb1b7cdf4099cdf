# Experiment (benchmarks/README.md, "Update 2026-11-25 (night, 18:40-21:40)"): the native step against the Python path
# with a full completion history (32K tokens of random ids) and the caches evicted before each call.
import time, numpy as np, sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
from engine.acceptance import AcceptanceEstimator
from engine.cost_model import VerifyCost
from engine.drafters import FastCoderDrafter, FastCoderOptions, RetrievalOptions
from engine.history import CompletionHistory
COST = VerifyCost([1, 2, 4, 8, 16], [1.1, 1.2, 1.35, 1.6, 2.1], 3.1, 512)
rng = np.random.default_rng(0)
hist = CompletionHistory()
while hist.num_tokens < (1 << 15) - 200:
    hist.add(rng.integers(0, 8192, 16).tolist(), rng.integers(0, 8192, 128).tolist())
print("history tokens", hist.num_tokens)
junk = np.ones(12_000_000)
for native in (True, False):
    d = FastCoderDrafter(None, None, None, options=FastCoderOptions(), retrieval=RetrievalOptions(draft_len=24),
                         estimator=AcceptanceEstimator(), cost=COST, history=hist)
    d._native = d._native and native
    half = rng.integers(0, 8192, 500); ctx = np.concatenate([half, half]).astype(np.int64)

    d.reset(ctx[:-1])
    ts = []
    for i in range(40):
        junk += 1  # caches cold, as after a forward
        t = time.perf_counter(); d.propose(ctx); ts.append(time.perf_counter() - t)
    ts.sort(); print("native" if native else "python", "median %.1f us" % (ts[len(ts)//2] * 1e6))
