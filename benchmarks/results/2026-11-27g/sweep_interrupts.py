"""Interrupted generations (a deadline, or a cancel event set after 0-40 ms) of fastcoder, copyspec and suffix: the
output must be a prefix of ar's full answer (token ids and text), the finish reason the deadline's, the cancel's or
ar's, and the whole answer where the finish reason is ar's. Usage (from the repository root):
PYTHONPATH=$PWD python benchmarks/results/2026-11-27g/sweep_interrupts.py"""
import sys, time, threading, random
sys.path.insert(0, 'tests')
from conftest import TINY_CODER, third_party_sources
from engine import load_model
from engine.decoder import SpeculativeDecoder
m = load_model(str(TINY_CODER), device="cpu")
ar = SpeculativeDecoder(m, "ar")
decs = {k: SpeculativeDecoder(m, k) for k in ("fastcoder", "copyspec", "suffix")}
rnd = random.Random(3); bad = 0; n = 0
for path in third_party_sources(3):
    text = path.read_text(encoding="utf-8")
    for trial in range(5):
        pos = rnd.randrange(len(text) // 4, len(text))
        ids = m.tokenizer(text[:pos], add_special_tokens=False)["input_ids"][-500:]
        stop = rnd.choice([None, ["\n"]])
        full = ar.generate(ids, max_new_tokens=40, stop=stop)
        for k, d in decs.items():
            for kind in ("deadline", "cancel"):
                for delay in (0.0, 0.004, 0.015, 0.04):
                    n += 1
                    if kind == "deadline":
                        r = d.generate(ids, max_new_tokens=40, stop=stop, deadline=time.monotonic() + delay)
                    else:
                        ev = threading.Event()
                        if delay == 0.0: ev.set()
                        else: threading.Timer(delay, ev.set).start()
                        r = d.generate(ids, max_new_tokens=40, stop=stop, cancel=ev)
                    ok = full.token_ids[:len(r.token_ids)] == r.token_ids and full.text.startswith(r.text)
                    ok = ok and r.finish_reason in ("deadline", "cancelled", full.finish_reason)
                    if r.finish_reason == full.finish_reason:
                        ok = ok and r.token_ids == full.token_ids
                    if not ok:
                        bad += 1; print("BAD", k, kind, delay, r.finish_reason, full.finish_reason, len(r.token_ids), len(full.token_ids))
print("interrupted generations", n, "bad", bad)
