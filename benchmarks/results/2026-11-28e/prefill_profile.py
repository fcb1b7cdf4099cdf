"""A 1,000-token cold prefill of tiny-py-coder (jinja2/compiler.py) through the engine's prefill, 1 thread:
median time, and a torch profile by operator with a second argument. Usage:
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-28e/prefill_profile.py 1 prof"""
import time, torch, sys, glob
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
from engine.model import load_model
from engine.kv_cache import new_kv_cache
from engine.steps import prefill
loaded = load_model("/work/shared/models/tiny-py-coder")
model = loaded.model
tok = loaded.tokenizer
src = open(sorted(glob.glob("/work/main/.venv/lib/python3.11/site-packages/jinja2/compiler.py"))[0]).read()
ids = tok(src)["input_ids"][:1000]
x = torch.tensor([ids])
def run():
    c = new_kv_cache(model, 1200)
    t = time.perf_counter(); prefill(model, c, x); return (time.perf_counter() - t) * 1e3
with torch.inference_mode():
    for _ in range(3): run()
    ts = sorted(run() for _ in range(10))
    print("prefill 1000 tokens ms: min %.1f median %.1f" % (ts[0], ts[5]))
    if len(sys.argv) > 2:
        from torch.profiler import profile
        with profile() as p:
            run()
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
