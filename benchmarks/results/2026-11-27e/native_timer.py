"""What this folder's timing scripts share: the model's native step calls wrapped once to add their wall time to a
counter, so a script can subtract the native work from a Python-side call's wall time."""
import time

from engine import lean_forward

#: The native step's entry points the decoder calls (those missing from an older library are skipped).
STEP_CALLS = ("fc_greedy_step", "fc_greedy_tree_step", "fc_greedy_tree_verify", "fc_greedy_tree_verify_learn")


def time_native(model, seconds: list, names=STEP_CALLS) -> None:
    """Wrap ``names`` on ``model``'s native step library (once per library) to add each call's seconds to
    ``seconds[0]``; the bound verification takes its function at bind time, so call this before binding."""
    step = model.__dict__[lean_forward.STEP_ATTR][0][0]
    lib = getattr(step, "lib", None)
    if lib is None or getattr(lib, "_timed", False):
        return
    for name in names:
        real = getattr(lib, name, None)
        if real is None:
            continue

        def native(*args, real=real):
            t = time.perf_counter()
            got = real(*args)
            seconds[0] += time.perf_counter() - t
            return got
        setattr(lib, name, native)
    lib._timed = True
