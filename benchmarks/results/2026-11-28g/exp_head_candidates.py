"""Could the draft head propose depth-1 tokens where retrieval has none right? An offline bound.

Along the model's greedy output (fit_prior.replay_drafts: fastcoder's widest trees, every candidate its sources
offer), per step: whether the model's next token after the pending one is among the tree's depth-1 candidates, and,
where it is not, whether the packaged draft head's own top-1 token over the whole vocabulary is (and how sure the head
was). A head token drafted at such a step saves at most that one token (more only if a source continued it).

Usage: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-28g/exp_head_candidates.py"""
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.acceptance import AcceptanceEstimator  # noqa: E402
from engine.bench import fit_head  # noqa: E402
from engine.bench.fit_prior import replay_drafts  # noqa: E402
from head_probe import SITE, Probe, depth_one_tokens  # noqa: E402

t0 = time.time()
probe = Probe()
loaded, common = probe.loaded, probe.common
for kind in ("function", "fim-block", "fim-line"):
    for repo in ("jinja2", "pluggy", "pygls"):
        state = {}

        def on_task(prompt, reference):
            with torch.inference_mode():
                state["h"] = fit_head._hidden_and_choice(loaded.model, prompt + reference)[0]

        def before_step(context):
            state["at"] = len(context) - 2

        steps = covered = 0
        uncovered_head = []  # (head top-1 right, head's probability of it) at steps retrieval misses
        with torch.inference_mode():
            for step in replay_drafts(loaded, SITE / repo, kind, 10, 0, 128, AcceptanceEstimator(), common, on_task,
                                      before_step):
                steps += 1
                if int(step.target[0]) in depth_one_tokens(step.tree):
                    covered += 1
                    continue
                h = state["h"][state["at"]]
                p = torch.softmax(probe.head_logits(h), -1)
                top = int(p.argmax())
                uncovered_head.append((top == int(step.target[0]), float(p[top])))
        u = np.array(uncovered_head, dtype=np.float64).reshape(-1, 2)
        sure = u[:, 1] > 0.5
        print(f"{kind} {repo}: steps {steps}, next token among the depth-1 candidates {covered / steps:.3f}; "
              f"elsewhere ({len(u)}) the head's top-1 right {u[:, 0].mean():.3f}, "
              f"head > 50% sure at {sure.mean():.3f} of them, right there {u[sure, 0].mean() if sure.any() else 0:.3f} "
              f"({time.time() - t0:.0f} s)", flush=True)
