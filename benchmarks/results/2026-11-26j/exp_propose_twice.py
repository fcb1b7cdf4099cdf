"""exp_reset_parts.py with each fc_propose call (propose.py's _call) made three times in a row: the first call
with the caches as the forward left them, the next two warm. Usage (repository root):
.venv/bin/python benchmarks/results/2026-11-26j/exp_propose_twice.py"""
import sys, runpy, time
sys.argv = ["x", ".venv/lib/python3.11/site-packages/pluggy", "fim-line", "3"]
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import inplace  # noqa: F401  (the repository on sys.path)
from engine.native import propose as nprop
real = nprop._call
import collections
W = collections.defaultdict(list)
def call(fn, args, hist, n_ctx, cache_len, last):
    t = time.perf_counter(); r = real(fn, args, hist, n_ctx, cache_len, last); t1 = time.perf_counter()
    r2 = real(fn, args, hist, n_ctx, cache_len, last); t2 = time.perf_counter()
    r3 = real(fn, args, hist, n_ctx, cache_len, last); t3 = time.perf_counter()
    W["cold"].append((t1-t)*1e6); W["warm"].append((t2-t1)*1e6); W["warm2"].append((t3-t2)*1e6)
    return r
nprop._call = call
import atexit, numpy as np
atexit.register(lambda: [print(k, np.median(v), np.mean(v)) for k, v in W.items()])
runpy.run_path(str(__import__("pathlib").Path(__file__).with_name("exp_reset_parts.py")), run_name="__main__")
