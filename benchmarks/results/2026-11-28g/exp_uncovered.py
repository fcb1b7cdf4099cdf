"""What the model writes where no source has its next token at depth 1 (exp_head_candidates.py's steps), on
`function` tasks: whether that token occurs anywhere in the context, whether it follows the pending token anywhere in
the context (a bigram copy's chance), and the first few such steps.

Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
    .venv/bin/python benchmarks/results/2026-11-28g/exp_uncovered.py"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE)]
import numpy as np  # noqa: E402

from engine.acceptance import AcceptanceEstimator  # noqa: E402
from engine.bench.fit_prior import replay_drafts  # noqa: E402
from head_probe import SITE, Probe, depth_one_tokens  # noqa: E402

probe = Probe()
loaded, common = probe.loaded, probe.common
tok = loaded.tokenizer
kind = "function"
for repo in ("jinja2", "pluggy", "pygls"):
    steps = covered = in_ctx = after_pending = 0
    samples = []
    for step in replay_drafts(loaded, SITE / repo, kind, 10, 0, 128, AcceptanceEstimator(), common):
        steps += 1
        depth1 = depth_one_tokens(step.tree)
        t = int(step.target[0])
        if t in depth1:
            covered += 1
            continue
        ctx = np.asarray(step.context)
        in_ctx += bool((ctx == t).any())
        after_pending += bool(((ctx[:-1] == ctx[-1]) & (ctx[1:] == t)).any())  # the bigram (pending, t)
        if len(samples) < 12:
            samples.append((tok.decode(ctx[-6:].tolist()), tok.decode([t]), len(depth1)))
    u = steps - covered
    print(f"{kind} {repo}: steps {steps}, uncovered {u}; next token anywhere in the context {in_ctx / u:.2f}, "
          f"after the pending token somewhere in the context {after_pending / u:.2f}", flush=True)
    for before, after, n in samples:
        print("   ", repr(before), "->", repr(after), "depth-1 candidates", n)
