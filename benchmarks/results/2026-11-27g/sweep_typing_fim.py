"""the typing simulation with FIM prompts (60%) and plain ones, every method against ar.
Usage (from the repository root): python benchmarks/results/2026-11-27g/sweep_typing_fim.py"""
import sys, random
sys.path.insert(0, 'tests')
from conftest import TINY_CODER, third_party_sources
from engine import load_model
from engine.decoder import SpeculativeDecoder
from engine.bench.tasks import build_fim_ids
m = load_model(str(TINY_CODER), device="cpu")
ar = SpeculativeDecoder(m, "ar")
decs = {k: SpeculativeDecoder(m, k) for k in ("fastcoder", "copyspec", "suffix", "rest", "hf-prompt-lookup")}
rnd = random.Random(1); n = 0; bad = {k: 0 for k in decs}
for path in third_party_sources(4):
    text = path.read_text(encoding="utf-8")
    pos = text.rfind("\n", 0, len(text) // 3) + 1
    docs = {k: d.new_cache() for k, d in decs.items()}; doc_a = ar.new_cache()
    for step in range(25):
        pos = max(10, pos + rnd.choice([1, 1, 2, 7, -1, -4, 30]))
        fim = rnd.random() < 0.6
        ids = build_fim_ids(m.tokenizer, text[:pos], text[pos:], 600)[0] if fim else \
            m.tokenizer(text[:pos], add_special_tokens=False)["input_ids"][-500:]
        stop = rnd.choice([None, ["\n"], ["\n\n"], ["\ndef ", "\nclass "]]); max_new = rnd.choice([1, 3, 9, 24, 40])
        a = ar.generate(ids, max_new_tokens=max_new, stop=stop, cache=doc_a)
        n += 1
        for k, d in decs.items():
            f = d.generate(ids, max_new_tokens=max_new, stop=stop, cache=docs[k])
            if (a.text, a.token_ids, a.finish_reason) != (f.text, f.token_ids, f.finish_reason):
                bad[k] += 1
                if bad[k] <= 3: print("MISMATCH", k, fim, stop, max_new, repr(a.text[-30:]), repr(f.text[-30:]), a.token_ids[-3:], f.token_ids[-3:], a.finish_reason, f.finish_reason)
print("generations", n, "mismatches", bad)
