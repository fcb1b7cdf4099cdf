"""How the decode forwards of the bench's runs compare with the verify-cost model c(n) (engine.cost_model).

For each task run of each method, in units of ``ar``'s own forward ms per step on the same task:
forward ms / ar's step = a * (steps without a draft) + b * (sum of c(n) over steps with n > 0 draft tokens, the
curve interpolated at the task's prompt length as the engine does), a and b by least squares over all task runs of
the given files. c(n)'s model is a = b = 1. Usage:
    python benchmarks/results/2026-11-26m/step_cost_fit.py benchmarks/results/2026-11-26m/cells*/*.json
"""
import bisect
import json
import sys

import numpy as np


def curve_value(sizes, curve, n):
    if n in sizes:
        return curve[sizes.index(n)]
    j = bisect.bisect_left(sizes, n)
    x0, x1, y0, y1 = sizes[j - 1], sizes[j], curve[j - 1], curve[j]
    return y0 + (y1 - y0) * (n - x0) / (x1 - x0)


rows = {}
for path in sys.argv[1:]:
    run = json.load(open(path))
    vc = run["verify_cost"]
    sizes, short, long = [0] + vc["sizes"], [1.0] + vc["ratios"], [1.0] + vc["long_ratios"]
    lo, hi = vc["context"], vc["long_context"]
    for method, m in run["methods"].items():
        if method == "ar":
            continue
        for ta, tm in zip(run["methods"]["ar"]["per_task"], m["per_task"]):
            if not ta["forward_passes"] or not tm["forward_passes"]:
                continue
            unit = ta["forward_ms"] / ta["forward_passes"]
            t = min(max((ta["prompt_tokens"] - lo) / (hi - lo), 0.0), 1.0)
            ns = tm["draft_sizes"]
            c = sum((1 - t) * curve_value(sizes, short, n) + t * curve_value(sizes, long, n) for n in ns if n > 0)
            rows.setdefault(method, []).append((sum(1 for n in ns if n == 0), c, tm["forward_ms"] / unit))
for method, r in rows.items():
    x = np.array([[e, c] for e, c, _ in r])
    y = np.array([v for _, _, v in r])
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    err = np.sqrt(np.mean(((y - x @ np.array([a, b])) / y) ** 2))
    print(f"{method:18s} task runs {len(r):4d}  a (step without a draft) {a:.3f}  b (x c(n)) {b:.3f}  rms relative error {err:.3f}")
