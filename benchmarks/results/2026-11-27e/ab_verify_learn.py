"""A/B inside one bench run: the acceptance counts and per-source hits learned in the verification's native call
(engine.native.step.BoundVerify with `learn`; `fastcoder`) against the same bound verification learning in Python
afterwards (AcceptanceEstimator.update and the decoder's loop; `fastcoder-py-learn`), interleaved per task. Per step,
printed per variant at exit: the verify call's wall time less its native call's, plus the decoder's _learn (the
Python that the change moves into C or removes). Usage: as `python -m engine bench ...` with
`--methods fastcoder,fastcoder-py-learn`."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import TIMES, run  # noqa: E402

import engine.decoder as decoder_module  # noqa: E402
from engine import lean_forward  # noqa: E402
from engine.verify import greedy_verifier  # noqa: E402

current = ["fastcoder"]
in_c = [0.0]  # seconds inside the native call during the current step
step_s = [0.0]


def wrap_native(model):
    step = model.__dict__[lean_forward.STEP_ATTR][0][0]
    lib = getattr(step, "lib", None)
    if lib is None or getattr(lib, "_ab_wrapped", False):
        return
    for name in ("fc_greedy_tree_verify", "fc_greedy_tree_verify_learn"):
        real = getattr(lib, name)

        def native(*args, real=real):
            t = time.perf_counter()
            got = real(*args)
            in_c[0] += time.perf_counter() - t
            return got
        setattr(lib, name, native)
    lib._ab_wrapped = True


def timed_verifier(model, cache, estimator=None, hits=None):
    wrap_native(model)
    verify = greedy_verifier(model, cache, estimator, hits if current[0] == "fastcoder" else None)

    def timed(pending, tree, past):
        in_c[0] = 0.0
        t = time.perf_counter()
        got = verify(pending, tree, past)
        step_s[0] = time.perf_counter() - t - in_c[0]
        return got
    return timed


real_learn = decoder_module.SpeculativeDecoder._learn


def timed_learn(self, *args):
    t = time.perf_counter()
    got = real_learn(self, *args)
    if self.method == "fastcoder" and step_s[0]:
        TIMES[current[0]].append(step_s[0] + time.perf_counter() - t)
    step_s[0] = 0.0
    return got


decoder_module.greedy_verifier = timed_verifier
decoder_module.SpeculativeDecoder._learn = timed_learn


def switch(name):
    current[0] = name


run(["fastcoder-py-learn"], switch, "verify call less its native call, plus _learn")
