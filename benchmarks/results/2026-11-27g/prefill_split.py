"""A cold prefill of 700 tokens (tiny-py-coder, ar, 1 thread) and the part of it in the attention (transformers' sdpa
function timed inside it), three generations of one token. Usage: python benchmarks/results/2026-11-27g/prefill_split.py"""
import time, torch, sys
sys.path.insert(0, "tests")
from conftest import TINY_CODER
from engine import load_model
from engine.decoder import SpeculativeDecoder
import transformers.integrations.sdpa_attention as sa
torch.set_num_threads(1)
m = load_model(str(TINY_CODER), device="cpu")
real = sa.sdpa_attention_forward
T = []
def probe(module, q, k, v, mask, **kw):
    t = time.perf_counter(); out = real(module, q, k, v, mask, **kw); T.append((time.perf_counter() - t, tuple(q.shape), tuple(k.shape), None if mask is None else (tuple(mask.shape), mask.dtype), kw.get('is_causal')))
    return out
sa.sdpa_attention_forward = probe
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
ALL_ATTENTION_FUNCTIONS["sdpa"] = probe
print("attn impl", m.model.config._attn_implementation)
dec = SpeculativeDecoder(m, "ar")
ids = list(range(100, 800))
for _ in range(3):
    T.clear()
    t = time.perf_counter(); r = dec.generate(ids, max_new_tokens=1); 
    print("gen ms", (time.perf_counter() - t) * 1e3, "prefill", r.stats.get("prefill_ms"))
for x in T[:2]: print(x)
print("sdpa total ms", sum(x[0] for x in T) * 1e3)
