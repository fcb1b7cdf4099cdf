"""A/B inside one bench run: the acceptance counts, per-source hits and the draft head's step learned in the
verification's native call (engine.native.step.BoundVerify with `learn`; `fastcoder`) against the same bound
verification learning in Python afterwards (AcceptanceEstimator.update, the decoder's loop, DepthOneFeature.step;
`fastcoder-py-learn`), interleaved per task. Per step, printed per variant at exit: the verify call's wall time plus
the decoder's _learn and _feed_head, less the native calls in them (the forward's, the head step's): the Python that
the change moves into C or removes.
Usage: as `python -m engine bench ...` with `--methods fastcoder,fastcoder-py-learn`."""
import atexit
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_common import TIMES, run  # noqa: E402

import engine.decoder as decoder_module  # noqa: E402
from native_timer import time_native  # noqa: E402
from engine.verify import greedy_verifier  # noqa: E402

current = ["fastcoder"]
in_c = [0.0]  # seconds inside the native call during the current step
step_s = [0.0, "fastcoder"]  # the current step's Python seconds so far, its variant


def flush():
    if step_s[0]:
        TIMES[step_s[1]].append(step_s[0] - in_c[0])  # the step's Python: less the native forward and head step
    step_s[0] = 0.0
    in_c[0] = 0.0


def wrap_head(head):
    """Time the draft head's own native step too (the Python variant calls it after the verification)."""
    native = getattr(head, "_native", None)
    if native is None or getattr(head, "_ab_wrapped", False):
        return
    real = native[1]

    def step(*args):
        t = time.perf_counter()
        got = real(*args)
        in_c[0] += time.perf_counter() - t
        return got
    head._native = (native[0], step, *native[2:])
    head._ab_wrapped = True


def timed_verifier(model, cache, estimator=None, hits=None, head=None):
    time_native(model, in_c)
    wrap_head(head)
    learn = current[0] == "fastcoder"
    verify = greedy_verifier(model, cache, estimator, hits if learn else None, head if learn else None)

    def timed(pending, tree, past):
        flush()
        t = time.perf_counter()
        got = verify(pending, tree, past)
        step_s[:] = [time.perf_counter() - t, current[0]]
        return got
    timed.head = verify.head if hasattr(verify, "head") else None
    return timed


def after_verify(real):
    def timed(self, *args):
        t = time.perf_counter()
        got = real(self, *args)
        if step_s[0]:
            step_s[0] += time.perf_counter() - t
        return got
    return timed


decoder_module.greedy_verifier = timed_verifier
decoder_module.SpeculativeDecoder._learn = after_verify(decoder_module.SpeculativeDecoder._learn)
decoder_module.SpeculativeDecoder._feed_head = after_verify(decoder_module.SpeculativeDecoder._feed_head)
atexit.register(flush)


def switch(name):
    current[0] = name


run(["fastcoder-py-learn"], switch, "verify call, _learn and _feed_head less their native calls")
