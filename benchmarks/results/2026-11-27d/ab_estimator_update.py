"""AcceptanceEstimator.update at 4aa4cea (numpy scalar += per tried and accepted node) against this tree's (the same
+= through memoryviews of the same arrays), inside one bench run: method ``fastcoder-old`` runs the 4aa4cea method
(its source from git, executed in engine.acceptance's namespace), interleaved per task with fastcoder. Prints each
variant's update time per call at exit. Usage: as `python -m engine bench` with --methods fastcoder,fastcoder-old."""
import sys
import time
from pathlib import Path

import engine.acceptance as A

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_common import TIMES, old_function, run  # noqa: E402

old = old_function("4aa4cea", "engine/acceptance.py", "    def update(self, keys", "    def summary(self)", A)
variants = {"fastcoder": A.AcceptanceEstimator.update, "fastcoder-old": old}
current = ["fastcoder"]


def timed(self, keys, parents, path):
    t = time.perf_counter()
    variants[current[0]](self, keys, parents, path)
    TIMES[current[0]].append(time.perf_counter() - t)


A.AcceptanceEstimator.update = timed
run(["fastcoder-old"], lambda name: current.__setitem__(0, name), "update")
