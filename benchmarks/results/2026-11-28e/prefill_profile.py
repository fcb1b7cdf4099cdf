"""A 1,000-token cold prefill of tiny-py-coder (jinja2/compiler.py) through the engine's prefill, 1 thread:
median time, and a torch profile by operator with a second argument. Usage:
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-28e/prefill_profile.py 1 prof"""
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone; ../shared beside it
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
import time, torch, sys, glob
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
from engine.model import load_model
from engine.kv_cache import new_kv_cache
from engine.steps import prefill
loaded = load_model(MODEL)
model = loaded.model
tok = loaded.tokenizer
src = open(SITE / "jinja2" / "compiler.py").read()
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
