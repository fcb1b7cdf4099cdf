"""A/B inside one bench run: a greedy step's verification through engine.native.step.BoundVerify (its checks made
once a generation; `fastcoder`) against engine.verify.verify_greedy at every step (the checks each call;
`fastcoder-unbound`), interleaved per task. Per call, the decoder's verify call's wall time less its native call's (fc_greedy_tree_verify):
the Python around the forward, printed per variant at exit. Usage: as `python -m engine bench ...` with
`--methods fastcoder,fastcoder-unbound`."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import TIMES, run  # noqa: E402

import engine.decoder as decoder_module  # noqa: E402
from engine import lean_forward  # noqa: E402
from engine.verify import greedy_verifier, verify_greedy  # noqa: E402

current = ["fastcoder"]
in_c = [0.0]  # seconds inside the native call during the current verify call


def wrap_native(model):
    """Time the native call: the step's library attribute replaced once (BoundVerify takes it at bind time)."""
    step = model.__dict__[lean_forward.STEP_ATTR][0][0]
    lib = getattr(step, "lib", None)
    if lib is None or getattr(lib, "_ab_wrapped", False):
        return
    real = lib.fc_greedy_tree_verify

    def native(*args):
        t = time.perf_counter()
        got = real(*args)
        in_c[0] += time.perf_counter() - t
        return got
    lib.fc_greedy_tree_verify, lib._ab_wrapped = native, True


def timed_verifier(model, cache):
    wrap_native(model)
    verify = greedy_verifier(model, cache) if current[0] == "fastcoder" else \
        (lambda pending, tree, past: verify_greedy(model, cache, pending, tree, past))
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
