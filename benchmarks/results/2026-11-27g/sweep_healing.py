"""token healing (a prompt cut inside an identifier, the partial word as the constraint): copyspec, suffix, fastcoder and rest against ar, with and without a line stop.
Usage (from the repository root): python benchmarks/results/2026-11-27g/sweep_healing.py"""
import sys
sys.path.insert(0, 'tests')
from conftest import TINY_CODER, third_party_sources
from engine import load_model
from engine.decoder import SpeculativeDecoder
m = load_model(str(TINY_CODER), device="cpu")
cases = []
for path in third_party_sources(4):
    text = path.read_text(encoding="utf-8")
    for frac in (0.2, 0.5, 0.8):
        pos = int(len(text) * frac)
        # cut mid-identifier: back up to a word character run and cut 2 chars into it
        while pos < len(text) and not text[pos].isalpha(): pos += 1
        cut = pos + 2
        line_start = text.rfind("\n", 0, cut) + 1
        prefix = text[:line_start]; partial = text[line_start:cut]
        ids = m.tokenizer(prefix, add_special_tokens=False)["input_ids"][-500:]
        cases.append((ids, partial))
methods = ["copyspec", "suffix", "fastcoder", "rest"]
ar = SpeculativeDecoder(m, "ar"); decs = {k: SpeculativeDecoder(m, k) for k in methods}
bad = {k: 0 for k in methods}; n = 0
for ids, partial in cases:
    for max_new in (3, 20):
        for stop in (None, ["\n"]):
            a = ar.generate(ids, max_new_tokens=max_new, stop=stop, constraint=partial)
            n += 1
            for k, d in decs.items():
                f = d.generate(ids, max_new_tokens=max_new, stop=stop, constraint=partial)
                if (a.text, a.token_ids, a.finish_reason) != (f.text, f.token_ids, f.finish_reason):
                    bad[k] += 1
                    if bad[k] <= 2: print("MISMATCH", k, repr(partial), max_new, stop, repr(a.text), repr(f.text), a.token_ids, f.token_ids, a.finish_reason, f.finish_reason)
print("generations", n, "mismatches", bad)
