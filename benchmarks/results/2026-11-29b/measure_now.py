import sys, json, torch
torch.set_num_threads(1)
sys.path.insert(0, ".")
from engine import load_model
from engine.cost_model import measure_curves, load_or_measure_verify_cost
from engine.decoder import SpeculativeDecoder
loaded = load_model("../shared/models/tiny-py-coder")
SpeculativeDecoder(loaded, "fastcoder")  # installs the same forward path as the bench
cached = load_or_measure_verify_cost(loaded)
for r in range(2):
    now = measure_curves(loaded)
    print("now   ", round(now.decode_ms, 3), [round(float(now.c(n)), 3) for n in (1, 2, 3, 4, 6, 8, 12, 16)], round(now.long_decode_ms, 3))
print("cached", round(cached.decode_ms, 3), [round(float(cached.c(n)), 3) for n in (1, 2, 3, 4, 6, 8, 12, 16)], round(cached.long_decode_ms, 3))
