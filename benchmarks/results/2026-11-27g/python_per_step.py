"""How much of a fused decode step (fastcoder, the native one-call step) is outside its native call: per step, the
wall time of fc_verify_propose (forward, walk, learning and the next tree's drafting, all in C) against the bench's
decode time per step; the rest is the decoder's Python (commit, stops, the drafter's bookkeeping, the call's
arguments). Printed at exit. Usage: as `python -m engine bench ...` (methods: fastcoder, and others to interleave)."""
import atexit
import sys
import time

import numpy as np

from engine.native import library
import engine.native.step as step_module

lib = library()
C = []
real = lib.fc_verify_propose


def timed(*a):
    t = time.perf_counter()
    got = real(*a)
    C.append(time.perf_counter() - t)
    return got


lib.fc_verify_propose = timed


@atexit.register
def report():
    v = np.array(C) * 1e6
    print(f"fc_verify_propose: n={len(v)} mean {v.mean():.1f} us p50 {np.median(v):.1f} sum {v.sum() / 1e3:.1f} ms",
          file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
