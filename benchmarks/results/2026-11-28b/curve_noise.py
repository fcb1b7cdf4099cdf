"""How much the load-time verify-cost curve moves between measurements: engine.cost_model.measure_curves (the curve
load_or_measure_verify_cost caches) REPEATS times in this process; c(n) at 512 and 1,024 cached tokens for the sizes
a CPU's trees use. Run it in several processes to separate the within- and between-process spread.
PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-28b/curve_noise.py"""
import os

import torch

from engine import load_model
from engine.cost_model import measure_curves

torch.set_num_threads(1)
loaded = load_model("../shared/models/tiny-py-coder", device="cpu")
SHOW = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
for _ in range(int(os.environ.get("REPEATS", "3"))):
    cost = measure_curves(loaded)
    short = dict(zip(cost.sizes, cost.ratios))
    long = dict(zip(cost.sizes, cost.long_ratios))
    print(f"pid {os.getpid()} rounds {cost.rounds} decode {cost.decode_ms:.3f} ms  512: "
          + " ".join(f"{short[n]:.2f}" for n in SHOW) + "  | 1024: " + " ".join(f"{long[n]:.2f}" for n in SHOW),
          flush=True)
