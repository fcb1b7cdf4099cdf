# Experiment script (2026-11-25 session i): run from the repository root as
# `python benchmarks/results/2026-11-25i/exp_calibration.py bench ...` (the arguments of `fastcoder bench`).
# The acceptance estimates' calibration in the decode loop: per fastcoder step, the tree's expected accepted draft
# tokens (sum over nodes of the product of the estimates P(node | parent) along its path) against the draft tokens
# verification accepted; and per estimate bucket (0-0.1, ...), the estimate's mean against the measured rate of
# acceptance given the parent accepted.
import atexit, collections, runpy, sys
import numpy as np
import engine.decoder as dec

steps = []  # (expected, accepted, size)
buckets = collections.defaultdict(lambda: [0.0, 0, 0])  # estimate sum, accepted, tried
real_accept = dec.SpeculativeDecoder._accept


def accept(self, logits, tree, params, generator, remaining):
    path, bonus = real_accept(self, logits, tree, params, generator, remaining)
    probs = getattr(tree, "probs", None)
    n = tree.n_draft if hasattr(tree, "n_draft") else len(tree)
    if probs is not None and n and len(probs) >= n:
        reach = np.ones(n)
        for i in range(n):
            p = tree.parents[i]
            reach[i] = probs[i] * (reach[p] if p >= 0 else 1.0)
        on_path = set(int(i) for i in path)
        steps.append((reach.sum(), len([i for i in path if i < n]), n))
        for i in range(n):
            p = int(tree.parents[i])
            if p < 0 or p in on_path:  # the parent was accepted: this node was tried
                b = buckets[min(int(probs[i] * 10), 9)]
                b[0] += probs[i]; b[1] += int(i in on_path); b[2] += 1
    return path, bonus


dec.SpeculativeDecoder._accept = accept


@atexit.register
def report():
    if not steps:
        return
    e, a, s = map(np.array, zip(*steps))
    print(f"steps {len(steps)}: expected accepted draft tokens {e.mean():.3f}, accepted {a.mean():.3f}, "
          f"draft size {s.mean():.2f}")
    for k in sorted(buckets):
        est, acc, tried = buckets[k]
        print(f"estimate {k / 10:.1f}-{(k + 1) / 10:.1f}: tried {tried:5d}  mean estimate {est / tried:.3f}  "
              f"accepted {acc / tried:.3f}")


sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
