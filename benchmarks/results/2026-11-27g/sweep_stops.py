"""fastcoder against ar: third-party prompts x max_new 1-40 x stop strings x cold and warm (document cache) prefills, and two sampled seeds: text, token_ids (and for sampling the tokens) compared; prints each mismatch and the count.
Usage (from the repository root): python benchmarks/results/2026-11-27g/sweep_stops.py"""
import sys
sys.path.insert(0, 'tests')
from conftest import TINY_CODER, third_party_sources
from engine import load_model
from engine.decoder import SpeculativeDecoder
m = load_model(str(TINY_CODER), device="cpu")
prompts = []
for path in third_party_sources(3):
    text = path.read_text(encoding="utf-8")
    for frac in (0.2, 0.5, 0.8):
        cut = text.rfind("\n", 0, int(len(text) * frac)) + 1
        prompts.append(m.tokenizer(text[:cut], add_special_tokens=False)["input_ids"][-600:])
ar = SpeculativeDecoder(m, "ar"); fast = SpeculativeDecoder(m, "fastcoder")
bad = 0; n = 0
for ids in prompts:
    doc_a, doc_f = ar.new_cache(), fast.new_cache()
    for max_new in (1, 2, 3, 7, 40):
        for stop in (None, ["\n"], ["):"]):
            for warm in (False, True):
                p = ids if not warm else ids[:-3]  # a shorter prompt of the same document: warm prefill next time
                a = ar.generate(p, max_new_tokens=max_new, stop=stop, cache=doc_a if warm else None)
                f = fast.generate(p, max_new_tokens=max_new, stop=stop, cache=doc_f if warm else None)
                n += 1
                if (a.text, a.token_ids) != (f.text, f.token_ids):
                    bad += 1; print("MISMATCH", max_new, stop, warm)
    for seed in (1, 2):
        a = ar.generate(ids, max_new_tokens=30, temperature=0.8, seed=seed)
        f = fast.generate(ids, max_new_tokens=30, temperature=0.8, seed=seed)
        n += 1
        if a.token_ids != f.token_ids:
            bad += 1; print("MISMATCH sampled", seed)
print("generations", n, "mismatches", bad)
