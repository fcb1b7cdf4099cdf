"""A cold prefill's time (ms, four runs each at 300 / 700 / 1,000 prompt tokens, 1 thread) and, at 1,000 tokens, torch's
profile of it. Run twice: as is (transformers' sdpa, torch's CPU flash attention, serves the prefill's causal rows) and
with FASTCODER_NATIVE_ATTENTION_ROWS=2048 (the native few-row attention takes them too).
PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 [FASTCODER_NATIVE_ATTENTION_ROWS=2048] .venv/bin/python \
    benchmarks/results/2026-11-28a/prefill_attention_rows.py"""
import time, torch, numpy as np
torch.set_num_threads(1)
from engine import load_model
from engine.kv_cache import new_kv_cache
from engine.steps import prefill
loaded = load_model("../shared/models/tiny-py-coder", device="cpu")
m = loaded.model
rng = np.random.default_rng(0)
for L in (300, 700, 1000):
    ids = torch.tensor([rng.integers(0, 8000, L).tolist()])
    ts = []
    with torch.inference_mode():
        for r in range(4):
            cache = new_kv_cache(m, L + 64)
            t = time.perf_counter(); prefill(m, cache, ids); ts.append(time.perf_counter() - t)
    print(L, "prefill ms", [round(x * 1e3, 1) for x in ts])
ids = torch.tensor([rng.integers(0, 8000, 1000).tolist()])
with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    cache = new_kv_cache(m, 1064); prefill(m, cache, ids)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
