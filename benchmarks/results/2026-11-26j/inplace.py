"""Shared by this folder's experiments: the bench's tasks and stores for one repository and task kind (1 torch
thread, tiny-py-coder, D_c the standard library), and a wrapper that times a function in place."""
import collections
import functools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import torch  # noqa: E402

torch.set_num_threads(1)
from measure_drafting import replay_setup  # noqa: E402

#: label -> the microseconds of each timed call
TIMES: dict[str, list[float]] = collections.defaultdict(list)


def setup(repo: str, kind: str):
    """(loaded model, tasks, references, D_c, per-task D_r) as the bench makes them: 10 tasks, seed 0, 128 tokens."""
    return replay_setup(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"), repo, "stdlib", 10, 0, 128, kind)


def timed(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that appends each call's time (us) to ``TIMES[label]``."""
    real = getattr(owner, name)

    @functools.wraps(real)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            TIMES[label].append((time.perf_counter() - t) * 1e6)

    setattr(owner, name, wrapper)
