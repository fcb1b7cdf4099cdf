# Experiment script (2026-11-25 night, benchmarks/README.md "Update 2026-11-25 (night)"): run from the repository root.
import time, numpy as np, torch
torch.set_num_threads(1)
from engine.model import load_model
from engine.kv_cache import new_kv_cache
from engine.decoder import decode_one_token, prefill
import importlib.util, pathlib, subprocess, tempfile
from lsp_server.demo import default_model
HERE = pathlib.Path(__file__).resolve().parent
loaded = load_model(default_model(HERE.parents[2]), device="cpu")  # ../shared/models/tiny-py-coder beside the clone
model=loaded.model
src = (pathlib.Path(importlib.util.find_spec("jinja2").origin).parent / "compiler.py").read_text()
ids = loaded.tokenizer(src)["input_ids"][:900]
cache = new_kv_cache(model, 1200)
a = np.zeros((4, 16), np.int64); b = np.zeros(200, np.int64)
r = {"ctypes1": [], "ctypes2": [], "slice_assign1": [], "slice_assign2": []}
with torch.inference_mode():
    lg = prefill(model, cache, torch.tensor([ids])); tok=int(lg.argmax())
    for i in range(200):
        lg = decode_one_token(model, cache, tok); tok = int(lg.argmax())
        if i % 2:
            t0=time.perf_counter(); x=a.ctypes.data; t1=time.perf_counter(); y=a.ctypes.data; t2=time.perf_counter()
            r["ctypes1"].append(t1-t0); r["ctypes2"].append(t2-t1)
        else:
            t0=time.perf_counter(); b[:64].reshape(4,16)[...] = a; t1=time.perf_counter(); b[64:128].reshape(4,16)[...] = a; t2=time.perf_counter()
            r["slice_assign1"].append(t1-t0); r["slice_assign2"].append(t2-t1)
for k,v in r.items(): print(k, f"med {np.median(v)*1e6:.1f} us")
