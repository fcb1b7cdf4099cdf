"""A/B inside one bench run: a greedy step's verification through engine.native.step.BoundVerify (its checks made
once a generation; `fastcoder`) against engine.verify.verify_greedy at every step (the checks each call;
`fastcoder-unbound`), interleaved per task. Per call, the decoder's verify call's wall time less its native call's (fc_greedy_tree_verify):
the Python around the forward, printed per variant at exit. Usage: as `python -m engine bench ...` with
`--methods fastcoder,fastcoder-unbound`. Measured at b9f7e21; after 1fa2316 the bound variant also learns in its
native call and, after the commit that follows it, `ar`'s plain steps take the bound verifier too (counted under
`fastcoder` here: run it without `ar`)."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_common import TIMES, run  # noqa: E402

import engine.decoder as decoder_module  # noqa: E402
from native_timer import time_native  # noqa: E402
from engine.verify import greedy_verifier, verify_greedy  # noqa: E402

current = ["fastcoder"]
in_c = [0.0]  # seconds inside the native call during the current verify call


def timed_verifier(model, cache, *learn):
    """Bound (with the decoder's learning arguments, as the decoder binds it) or checked at every step; the checked
    variant returns learned False, so the decoder learns in Python after it."""
    time_native(model, in_c)
    verify = greedy_verifier(model, cache, *learn) if current[0] == "fastcoder" else \
        (lambda pending, tree, past: (*verify_greedy(model, cache, pending, tree, past), False))
    times = TIMES[current[0]]

    def timed(pending, tree, past):
        in_c[0] = 0.0
        t = time.perf_counter()
        got = verify(pending, tree, past)
        times.append(time.perf_counter() - t - in_c[0])
        return got
    return timed


decoder_module.greedy_verifier = timed_verifier


def switch(name):
    current[0] = name


run(["fastcoder-unbound"], switch, "verify call less its native call")
