"""a typing simulation: one document cache per method, the cursor moving forward and back over a file, random stops and max_new; fastcoder against ar.
Usage (from the repository root): python benchmarks/results/2026-11-27g/sweep_typing.py"""
import sys, random
sys.path.insert(0, 'tests')
from conftest import TINY_CODER, third_party_sources
from engine import load_model
from engine.decoder import SpeculativeDecoder
m = load_model(str(TINY_CODER), device="cpu")
ar = SpeculativeDecoder(m, "ar"); fast = SpeculativeDecoder(m, "fastcoder")
rnd = random.Random(0); n = bad = 0
for path in third_party_sources(3):
    text = path.read_text(encoding="utf-8")
    pos = text.rfind("\n", 0, len(text) // 2) + 1
    doc_a, doc_f = ar.new_cache(), fast.new_cache()
    for step in range(40):
        pos = max(10, pos + (rnd.choice([1, 1, 1, 2, 5, -1, -3])))
        ids = m.tokenizer(text[:pos], add_special_tokens=False)["input_ids"][-400:]
        stop = rnd.choice([None, ["\n"], ["\n\n"]]); max_new = rnd.choice([4, 16, 32])
        a = ar.generate(ids, max_new_tokens=max_new, stop=stop, cache=doc_a)
        f = fast.generate(ids, max_new_tokens=max_new, stop=stop, cache=doc_f)
        n += 1
        if (a.text, a.token_ids, a.finish_reason) != (f.text, f.token_ids, f.finish_reason):
            bad += 1; print("MISMATCH", step, stop, max_new, repr(a.text), repr(f.text), a.token_ids, f.token_ids, a.finish_reason, f.finish_reason, f.stats.get("prefill_draft_accepted"), f.stats.get("reused_prompt_tokens"), len(ids))
print("generations", n, "mismatches", bad)
