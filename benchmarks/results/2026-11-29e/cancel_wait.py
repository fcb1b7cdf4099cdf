"""How long a cancelled generation takes to return after the cancel is set (ms): one fastcoder decoder, a function
prompt of pluggy, 128 tokens, the cancel set from another thread at a random time during decoding. Interleaved:
the step loop with a cancel that calls back (CancelEvent), the loop with a plain threading.Event (seen between
calls only, as before), one call a step (FASTCODER_STEP_LOOP=0 read per generation)."""
import os, sys, threading, time, random, statistics
sys.path.insert(0, ".")  # run from the repository root
import torch
torch.set_num_threads(1)
from engine.model import load_model
from engine.decoder import SpeculativeDecoder
from lsp_server.backends import CancelEvent
from tests.conftest import TINY_CODER
m = load_model(str(TINY_CODER))
src = open(".venv/lib/python3.11/site-packages/pluggy/_manager.py").read()
ids_all = m.tokenizer(src)["input_ids"]
dec = SpeculativeDecoder(m, "fastcoder")
rng = random.Random(0)
prompts = [ids_all[s:s + 500] for s in range(0, len(ids_all) - 600, 300)][:8]
for p in prompts[:2]:
    dec.generate(p, max_new_tokens=32)
# decode time of a full run, to place cancels inside decoding
t = time.perf_counter(); r = dec.generate(prompts[0], max_new_tokens=128); full = time.perf_counter() - t
pre = r.stats["prefill_ms"] / 1e3
waits = {"loop+callback": [], "loop+plain Event": [], "one call a step": []}
for trial in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
    for kind in waits:
        os.environ["FASTCODER_STEP_LOOP"] = "0" if kind == "one call a step" else "1"
        cancel = CancelEvent() if kind == "loop+callback" else threading.Event()
        p = prompts[trial % len(prompts)]
        delay = pre + rng.uniform(0.01, 0.06)
        out = {}
        def run():
            out["r"] = dec.generate(p, max_new_tokens=128, cancel=cancel)
            out["t"] = time.perf_counter()
        th = threading.Thread(target=run); th.start()
        time.sleep(delay)
        t_set = time.perf_counter(); cancel.set(); th.join()
        if out["r"].finish_reason == "cancelled":
            waits[kind].append((out["t"] - t_set) * 1e3)
for kind, w in waits.items():
    w.sort()
    print(f"{kind:18s} n={len(w):3d} mean {statistics.fmean(w):6.2f} ms  p50 {w[len(w)//2]:6.2f}  p90 {w[int(len(w)*0.9)]:6.2f}  max {w[-1]:6.2f}")
