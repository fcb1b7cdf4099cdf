"""every tree method and hf-prompt-lookup against ar: third-party prompts x max_new x stop strings x cold and warm prefills: text, token_ids and finish reason compared.
Usage (from the repository root): python benchmarks/results/2026-11-27g/sweep_methods.py"""
import sys
sys.path.insert(0, 'tests')
from conftest import TINY_CODER, third_party_sources
from engine import load_model
from engine.decoder import SpeculativeDecoder
m = load_model(str(TINY_CODER), device="cpu")
prompts = []
for path in third_party_sources(4):
    text = path.read_text(encoding="utf-8")
    for frac in (0.15, 0.45, 0.85):
        cut = text.rfind("\n", 0, int(len(text) * frac)) + 1
        prompts.append(m.tokenizer(text[:cut], add_special_tokens=False)["input_ids"][-500:])
methods = ["hf-prompt-lookup", "rest", "copyspec", "suffix", "fastcoder"]
ar = SpeculativeDecoder(m, "ar")
decs = {}
for meth in methods:
    try:
        decs[meth] = SpeculativeDecoder(m, meth)
    except Exception as e:
        print("skip", meth, type(e).__name__, e)
bad = {k: 0 for k in decs}; n = 0
for ids in prompts:
    docs = {k: d.new_cache() for k, d in decs.items()}; doc_a = ar.new_cache()
    for max_new in (2, 5, 24):
        for stop in (None, ["\n"], ["\n\n", ":"]):
            for warm in (False, True):
                p = ids if not warm else ids[:-2]
                a = ar.generate(p, max_new_tokens=max_new, stop=stop, cache=doc_a if warm else None)
                n += 1
                for k, d in decs.items():
                    f = d.generate(p, max_new_tokens=max_new, stop=stop, cache=docs[k] if warm else None)
                    if (a.text, a.token_ids, a.finish_reason) != (f.text, f.token_ids, f.finish_reason):
                        bad[k] += 1
                        if bad[k] <= 2: print("MISMATCH", k, max_new, stop, warm, repr(a.text[-20:]), repr(f.text[-20:]), a.token_ids[-4:], f.token_ids[-4:], a.finish_reason, f.finish_reason)
print("generations per method", n, "mismatches", bad)
