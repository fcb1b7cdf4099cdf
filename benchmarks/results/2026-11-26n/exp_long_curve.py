"""c(n) at 1,024 cached tokens (the long curve's point) and at 1,152 (where the bench's steps run: prompts of 1,024
plus up to 128 new tokens), alternating, each measurement 15 shuffled rounds."""
import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone
sys.path.insert(0, str(ROOT))
import torch; torch.set_num_threads(1)
from engine.model import load_model
from engine.cost_model import measure_verify_cost
loaded = load_model(str(ROOT.parent / "shared/models/tiny-py-coder"), device="cpu")
sizes = (1, 2, 4, 8, 16)
for rep in range(3):
    for ctx in (1024, 1152):
        c = measure_verify_cost(loaded, context=ctx, sizes=sizes, repeats=15)
        print(f"run {rep} context {c.context}: plain step {c.decode_ms:.3f} ms, c(n) n={list(sizes)}: {c.ratios}", flush=True)
