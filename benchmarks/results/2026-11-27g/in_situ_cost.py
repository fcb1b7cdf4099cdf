"""c(n) in situ: the wall time of each greedy step's native call (fc_verify_propose less the drafting it timed, and
ar's fc_greedy_tree_verify(_learn) plain steps) grouped by tree size n and context bucket, against the load-time curve
the drafter sizes trees with; printed at exit with the native attention's row limit of this process.
Usage: as `python -m engine bench ...` (methods: ar,fastcoder)."""
import atexit
import sys
import time
from collections import defaultdict

import numpy as np

from engine.native import draft_ahead as da
from engine.native import library

lib = library()
T = defaultdict(list)  # (n, context bucket) -> seconds
held = {}
for name in ("fc_verify_propose", "fc_greedy_tree_verify_learn", "fc_greedy_tree_verify"):
    real = getattr(lib, name)

    def timed(*a, _real=real, _name=name):
        t = time.perf_counter()
        got = _real(*a)
        dt = time.perf_counter() - t
        if _name == "fc_verify_propose":
            vp = held.get(a[-1])
            if vp is None:
                return got
            dt -= int(vp[da.VP_PROPOSE_NS]) * 1e-9
            n, past = a[3], a[4]
        else:
            n, past = a[5], a[6]
        T[(int(n), int(past) // 256)].append(dt)
        if _name == "fc_verify_propose" and int(n) == 0:
            T[(-1, int(past) // 256)].append(dt)  # fastcoder's own empty-tree steps
        return got
    setattr(lib, name, timed)

real_init = da.DraftAhead.__init__


def init(self):
    real_init(self)
    held[self.vp_ptr] = self.vp


da.DraftAhead.__init__ = init


@atexit.register
def report():
    import engine.cost_model as cm  # noqa: F401
    buckets = sorted({b for _, b in T})
    for b in buckets:
        base = np.median(T.get((0, b), [np.nan]))
        row = []
        v = T.get((-1, b))
        if v and len(v) >= 3:
            row.append(f"fastcoder-empty:{np.median(v) * 1e3:.2f}ms(x{len(v)})")
        for n in range(0, 17):
            v = T.get((n, b))
            if v and len(v) >= 5:
                row.append(f"{n}:{np.median(v) * 1e3:.2f}ms/{np.median(v) / base:.2f}(x{len(v)})")
        print(f"context {b * 256}-{b * 256 + 255}: " + " ".join(row), file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
