"""Offline (the oracle replay of benchmarks/replay_methods.py): how well fastcoder's node estimates match acceptance in
the step after one that took its whole draft branch ("streak") and in the others. For every tried first-choice node
(the parent accepted, not an alternative): the estimate (tree.probs) and whether verification accepted it, per regime
and depth. Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python <this> REPO KIND"""
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import measure_drafting  # noqa: E402
import replay_methods  # noqa: E402

from engine.acceptance import ALTERNATIVE_STRIDE  # noqa: E402
from engine.cost_model import load_or_measure_verify_cost  # noqa: E402

steps = []  # (tree, path) per step, tasks separated by None
real_replay = measure_drafting.replay


def recording_replay(drafter, estimator, prompt_ids, reference, counter, end_tokens=()):
    propose, observe = drafter.propose, drafter.observe
    def obs(ctx, tree, path, committed):
        steps.append((tree, list(path)))
        return observe(ctx, tree, path, committed)
    drafter.observe = obs
    steps.append(None)
    return real_replay(drafter, estimator, prompt_ids, reference, counter, end_tokens)


replay_methods.replay = recording_replay
repo, kind = sys.argv[1], sys.argv[2]
loaded, tasks, refs, common, repos = measure_drafting.replay_setup(
    str(measure_drafting.DEFAULT_MODEL), repo, "stdlib", 10, 0, 128, kind)
import torch  # noqa: E402

torch.set_num_threads(1)
cost = load_or_measure_verify_cost(loaded, None)
res = replay_methods.replay_method(loaded, "fastcoder", tasks, refs, repos, common, cost)
print({k: v for k, v in res.items() if not isinstance(v, dict)})
stats = defaultdict(lambda: [0, 0, 0.0])  # (regime, depth bucket) -> tried, accepted, sum of estimates
prev_full = False
for item in steps:
    if item is None:
        prev_full = False
        continue
    tree, path = item
    n = tree.n_draft
    if n and tree.probs is not None and tree.keys is not None:
        reached = {-1, *path}
        for i in range(n):
            up = int(tree.parents[i])
            if up in reached and int(tree.keys[i]) < ALTERNATIVE_STRIDE:
                d = int(tree.depths[i])
                key = ("streak" if prev_full else "other", min(d, 8))
                s = stats[key]
                s[0] += 1
                s[1] += i in path
                s[2] += float(tree.probs[i])
    leaf = bool(path) and not np.any(tree.parents[:n] == path[-1])
    prev_full = leaf and len(path) >= 2
for key in sorted(stats):
    n, a, e = stats[key]
    print(f"{key[0]:7s} depth {key[1]}{'+' if key[1] == 8 else ' '}: tried {n:5d}  accepted {a / n:.3f}  estimated {e / n:.3f}")
