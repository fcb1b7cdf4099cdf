# Experiment script (2026-11-25 night, benchmarks/README.md "Update 2026-11-25 (night)"): run from the repository root.
import time, numpy as np, torch, ctypes
import importlib.util, pathlib, subprocess, tempfile
from lsp_server.demo import default_model
HERE = pathlib.Path(__file__).resolve().parent
torch.set_num_threads(1)
from engine.model import load_model
from engine.kv_cache import new_kv_cache
from engine.decoder import decode_one_token, prefill
so = pathlib.Path(tempfile.mkdtemp()) / "am.so"
subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(HERE / "exp_am.c")], check=True)
lib = ctypes.CDLL(str(so)); lib.fc_argmax_rows.argtypes=[ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]; lib.fc_argmax_rows.restype=None
out = np.zeros(64, np.int64); optr = out.ctypes.data
loaded = load_model(default_model(HERE.parents[2]), device="cpu")  # ../shared/models/tiny-py-coder beside the clone
model=loaded.model
src = (pathlib.Path(importlib.util.find_spec("jinja2").origin).parent / "compiler.py").read_text()
ids = loaded.tokenizer(src)["input_ids"][:900]
cache = new_kv_cache(model, 1200)
res={"cur":[], "c":[]}
with torch.inference_mode():
    lg = prefill(model, cache, torch.tensor([ids])); tok=int(lg.argmax())
    for i in range(300):
        lg = decode_one_token(model, cache, tok)
        if i % 2:
            t0=time.perf_counter(); tok = lg[None].numpy().argmax(-1).tolist()[0]; res["cur"].append(time.perf_counter()-t0)
        else:
            t0=time.perf_counter(); lib.fc_argmax_rows(lg.data_ptr(), 1, lg.shape[-1], optr); tok=int(out[0]); res["c"].append(time.perf_counter()-t0)
for k,v in res.items(): print(k, f"med {np.median(v)*1e6:.1f} us mean {np.mean(v)*1e6:.1f}")
