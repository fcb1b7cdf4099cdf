"""Today's c(n) beside the cached one: copies the user cache's curve for tiny-py-coder (1 thread, the bench's forward
path) to cost_cached.json and measures a fresh one, with the cache's own plausibility retries, into cost_now.json.
Run from the repository root: PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-29b/remeasure.py
(2026-11-29 it ran before ea5d690, whose key adds the processor: the cached file was then the 2026-11-28 curve)."""
import hashlib, json, shutil, sys, tempfile
from pathlib import Path

import torch

torch.set_num_threads(1)
sys.path.insert(0, ".")
from engine import load_model
from engine.cost_model import cost_key, default_cost_cache, load_or_measure_verify_cost
from engine.decoder import SpeculativeDecoder

HERE = Path(__file__).resolve().parent
loaded = load_model("../shared/models/tiny-py-coder")
SpeculativeDecoder(loaded, "fastcoder")  # the forward path the bench's decoders install
digest = hashlib.sha256(json.dumps(cost_key(loaded), sort_keys=True).encode()).hexdigest()[:16]
cached = default_cost_cache() / f"{digest}.json"
if cached.exists():
    shutil.copy(cached, HERE / "cost_cached.json")
with tempfile.TemporaryDirectory() as tmp:
    cost = load_or_measure_verify_cost(loaded, tmp)
    shutil.copy(next(Path(tmp).glob("*.json")), HERE / "cost_now.json")
print("now", cost.decode_ms, [round(float(cost.c(n)), 3) for n in (1, 2, 3, 4, 6, 8, 12, 16)])
