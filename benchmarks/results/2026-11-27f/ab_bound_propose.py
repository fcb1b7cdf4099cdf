"""A/B inside one bench run: a step's drafting arguments bound once per drafter and re-checked by identity
(engine.native.propose._bind, `fastcoder`) against the checks and writes made at every step (propose_native at
55e1ac4, `fastcoder-unbound`), interleaved per task. Printed per variant at exit: the drafter's propose wall time
less its native calls (fc_propose, fc_propose_retrieve), per step.
Usage: as `python -m engine bench ...` with `--methods fastcoder,fastcoder-unbound`."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import TIMES, old_function, run  # noqa: E402

import engine.drafters as drafters_module  # noqa: E402
import engine.native.propose as P  # noqa: E402
from engine.native import library  # noqa: E402

new = P.propose_native
old = old_function("55e1ac4", "engine/native/propose.py", "def propose_native(", "def _python_tree(", P)
current = ["fastcoder"]
in_c = [0.0]


def switch(name):
    current[0] = name
    P.propose_native = old if name == "fastcoder-unbound" else new


lib = library()
for fn_name in ("fc_propose", "fc_propose_retrieve"):
    real = getattr(lib, fn_name)

    def native(*args, real=real):
        t = time.perf_counter()
        got = real(*args)
        in_c[0] += time.perf_counter() - t
        return got
    setattr(lib, fn_name, native)
real_propose = drafters_module.FastCoderDrafter.propose


def propose(self, context):
    in_c[0] = 0.0
    t = time.perf_counter()
    got = real_propose(self, context)
    TIMES[current[0]].append(time.perf_counter() - t - in_c[0])
    return got


drafters_module.FastCoderDrafter.propose = propose
run(["fastcoder-unbound"], switch, "propose's Python")
