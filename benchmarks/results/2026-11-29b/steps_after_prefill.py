"""Per-step time of ar's first decode steps after a cold prefill vs a long generation's later steps."""
import importlib.util, statistics, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
sys.path.insert(0, ".")
from engine import SpeculativeDecoder
from engine.model import load_model
from engine import generation as gen

loaded = load_model("../shared/models/tiny-py-coder", device="cpu")
tok = loaded.tokenizer
root = Path(importlib.util.find_spec("jinja2").submodule_search_locations[0])
prompts = []
for name in ("compiler.py", "environment.py", "parser.py", "lexer.py", "runtime.py", "nodes.py"):
    text = (root / name).read_text()
    for frac in (0.3, 0.5, 0.7):
        cut = text.find("\n", int(len(text) * frac)) + 1
        prompts.append(tok(text[:cut], add_special_tokens=False)["input_ids"][-1000:])
times = {}
real = gen.Generation.plain_step
def timed(self, pending):
    t = time.perf_counter(); r = real(self, pending); dt = time.perf_counter() - t
    times.setdefault(len(self.out), []).append(dt * 1e3)
    return r
gen.Generation.plain_step = timed
dec = SpeculativeDecoder(loaded, method="ar")
for rnd in range(2):
    for p in prompts:
        dec.generate(p, max_new_tokens=40)
for k in sorted(times):
    if k < 8 or k % 8 == 0:
        v = times[k]; print(k, "n=%d median %.2f ms  min %.2f" % (len(v), statistics.median(v), min(v)))
