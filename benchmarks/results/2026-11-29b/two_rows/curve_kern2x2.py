"""c(n) with two-row products on kern2x2 (fc_gemm_two_rows(0)) on this machine, for ab_two_rows.py's OLD_CURVE.
Run from the repository root: PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python <this> OUT.json"""
import json
import sys
from dataclasses import asdict

import torch

torch.set_num_threads(1)
from engine import load_model, native  # noqa: E402
from engine.cost_model import measure_curves, plausible  # noqa: E402
from engine.decoder import SpeculativeDecoder  # noqa: E402

loaded = load_model("../shared/models/tiny-py-coder")
SpeculativeDecoder(loaded, "fastcoder")  # the bench's forward path
native.library().fc_gemm_two_rows(0)
cost = measure_curves(loaded)
for _ in range(2):
    if plausible(cost):
        break
    cost = measure_curves(loaded)
json.dump(asdict(cost), open(sys.argv[1], "w"))
print(cost.decode_ms, [round(float(cost.c(n)), 3) for n in (1, 2, 3, 4, 6, 8)])
