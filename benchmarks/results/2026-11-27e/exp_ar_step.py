"""An ar plain step's Python (wall time less its native forward) inside a bench run. Up to commit 1fa2316 the decoder
made a plain step with engine.steps.decode_one_token_greedy (the per-call checks); after it, as the generation's bound
verification of an empty tree (engine.verify.greedy_verifier). This script times whichever the decoder has. Usage:
as `python -m engine bench ... --methods ar`."""
import atexit
import runpy
import sys
import time
from pathlib import Path

import numpy as np

import engine.decoder as dec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from native_timer import time_native  # noqa: E402

acc, in_c = [], [0.0]  # per step: (wall s, native s); native seconds of the current step


def timed(call):
    in_c[0] = 0.0
    t = time.perf_counter()
    got = call()
    acc.append((time.perf_counter() - t, in_c[0]))
    return got


if hasattr(dec, "greedy_verifier"):
    real_verifier = dec.greedy_verifier

    def verifier(model, cache, *learn):
        time_native(model, in_c)
        verify = real_verifier(model, cache, *learn)
        return lambda pending, tree, past: timed(lambda: verify(pending, tree, past))
    dec.greedy_verifier = verifier
else:
    real_step = dec.decode_one_token_greedy

    def plain(model, *args):
        time_native(model, in_c)
        return timed(lambda: real_step(model, *args))
    dec.decode_one_token_greedy = plain


@atexit.register
def report():
    v = np.array(acc) * 1e6
    py = v[:, 0] - v[:, 1]
    print(f"ar plain step: n={len(v)} wall mean {v[:, 0].mean():.1f} us, native {v[:, 1].mean():.1f}, "
          f"Python mean {py.mean():.1f} p50 {np.median(py):.1f}", file=sys.stderr)


sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
