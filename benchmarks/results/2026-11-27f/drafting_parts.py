"""Where a fastcoder step's drafting time goes (the bench's `drafting` share): per decode step, the wall time of
the drafter's propose (and the native calls in it: fc_propose, fc_propose_retrieve), the decoder's _verifiable
(the tree cut to the stops and budget), _learn (the drafter's observe) and the drafter's finish, printed at exit.
Usage: as `python -m engine bench ...` (one method: fastcoder)."""
import atexit
import sys
import time
from collections import defaultdict

import numpy as np

import engine.decoder as decoder_module
import engine.drafters as drafters_module
from engine.native import library

T = defaultdict(list)
native = [0.0]


def timed(name, real, is_native=False):
    def f(*args, **kwargs):
        t = time.perf_counter()
        got = real(*args, **kwargs)
        dt = time.perf_counter() - t
        if is_native:
            native[0] += dt
        else:
            T[name].append(dt)
        return got
    return f


lib = library()
for name in ("fc_propose", "fc_propose_retrieve"):
    setattr(lib, name, timed(name, getattr(lib, name), True))

real_propose = drafters_module.FastCoderDrafter.propose


def propose(self, context):
    native[0] = 0.0
    t = time.perf_counter()
    got = real_propose(self, context)
    T["propose"].append(time.perf_counter() - t)
    T["propose_native"].append(native[0])
    T["propose_nodes"].append(len(got) * 1e-6)
    return got


drafters_module.FastCoderDrafter.propose = propose
D = decoder_module.SpeculativeDecoder
D._verifiable = timed("_verifiable", D._verifiable)
D._learn = timed("_learn", D._learn)
drafters_module.FastCoderDrafter.finish = timed("finish", drafters_module.FastCoderDrafter.finish)


@atexit.register
def report():
    for name, v in T.items():
        v = np.array(v) * 1e6
        print(f"{name}: n={len(v)} mean {v.mean():.1f} us p50 {np.median(v):.1f} p90 {np.percentile(v, 90):.1f} "
              f"sum {v.sum() / 1e3:.1f} ms", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
