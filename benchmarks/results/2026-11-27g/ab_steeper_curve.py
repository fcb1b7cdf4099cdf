"""Are trees sized on too cheap a curve? A/B inside one bench run: fastcoder sizing its trees on the verify-cost curve
made steeper, c'(n) = 1 + SCALE (c(n) - 1) (`fastcoder-steep`; SCALE from $SCALE, default 1.3), against the curve as
measured (`fastcoder`), interleaved per task. In-situ step costs ran 15-35% above the load-time curve
(in_situ_cost.py). Usage: as `python -m engine bench ...` with `--methods ar,fastcoder,fastcoder-steep`."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import run  # noqa: E402

from engine.cost_model import VerifyCost  # noqa: E402

SCALE = float(os.environ.get("SCALE", "1.3"))
real_at = VerifyCost.at
current = ["fastcoder"]
steep: dict = {}


def at(self, context):
    curve = real_at(self, context)
    if current[0] != "fastcoder-steep":
        return curve
    got = steep.get(id(curve))
    if got is None or got[0] is not curve:
        ratios = [round(1 + SCALE * (r - 1), 4) for r in curve.ratios]
        got = steep[id(curve)] = (curve, VerifyCost(list(curve.sizes), ratios, curve.decode_ms, curve.context,
                                                    curve.key, curve.rounds))
    return got[1]


def switch(name):
    current[0] = name


VerifyCost.at = at
run(["fastcoder-steep"], switch, "unused")
