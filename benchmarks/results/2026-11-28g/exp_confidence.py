"""Does the model's own confidence in the pending token tell which depth-1 candidates it accepts? An offline check.

A step's depth-1 draft nodes are its most uncertain ones (benchmarks/README.md: knowing which the model accepts would
raise the predicted speedup 13-19% on this CPU). The engine judges them by its estimate q and the packaged draft head
(Medusa's block on the final hidden state h of the row that chose the pending token). Not used yet: how sure the model
was of the pending token itself, log p(pending) and the entropy of that row's distribution (in an engine: the row's
exact top logit, which the screened LM head already has, minus the head's linear log-normaliser). Here, exactly:
logistic calibrations fitted on the candidates of click / rich / markdown_it and scored on jinja2 / pluggy / pygls.

Usage: OMP_NUM_THREADS=2 .venv/bin/python benchmarks/results/2026-11-28g/exp_confidence.py"""
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE.parent / "2026-11-28f"), str(HERE)]
import numpy as np  # noqa: E402
import torch  # noqa: E402

from depth_one_replay import cell_candidates  # noqa: E402
from head_probe import SITE, Probe  # noqa: E402

t0 = time.time()
probe = Probe()
loaded, E, common = probe.loaded, probe.E, probe.common
REPOS = ("click", "rich", "markdown_it", "jinja2", "pluggy", "pygls")
KINDS = ("function", "fim-block", "fim-line")
rows = []  # repo, kind, q, medusa log p(candidate), log p(pending), entropy, top-2 margin (nats), accepted
for ri, repo in enumerate(REPOS):
    for ki, kind in enumerate(KINDS):
        n0 = len(rows)
        for h, pending, cands, qs, accepted in cell_candidates(loaded, common, SITE / repo, kind):
            with torch.inference_mode():
                z = h @ E.T
                logp = z - torch.logsumexp(z, -1)
                ent = float(-(logp.exp() * logp).sum())
                top2 = torch.topk(z, 2).values
                zm = probe.head_logits(h)
                fm = (zm - torch.logsumexp(zm, -1))[cands].tolist()
            rows += [(ri, ki, q, f, float(logp[pending]), ent, float(top2[0] - top2[1]), y)
                     for q, f, y in zip(qs, fm, accepted)]
        print(f"{repo} {kind}: {len(rows) - n0} depth-1 candidates ({time.time() - t0:.0f} s)", flush=True)
A = np.array(rows, dtype=np.float64)


def auc(s, y):
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    pos = y.sum()
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * (len(y) - pos)))


def design(B, cols):
    q = np.clip(B[:, 2], 1e-4, 1 - 1e-4)
    return np.stack([np.log(q / (1 - q))] + [B[:, c] for c in cols] + [np.ones(len(B))], 1)


def fit(X, y, l2=1e-3):
    w = np.zeros(X.shape[1])
    pen = l2 * len(y) * np.ones(X.shape[1])
    pen[-1] = 0
    for _ in range(60):
        p = 1 / (1 + np.exp(-X @ w))
        H = (X * (p * (1 - p))[:, None]).T @ X + np.diag(pen) + 1e-9 * np.eye(len(w))
        w += np.linalg.solve(H, X.T @ (y - p) - pen * w)
    return w


MODELS = {"q": [], "q+medusa": [3], "q+medusa+log p(pending)": [3, 4], "q+medusa+entropy": [3, 5],
          "q+medusa+margin": [3, 6], "q+medusa+all three": [3, 4, 5, 6], "q+log p(pending)": [4]}
train, test = A[A[:, 0] < 3], A[A[:, 0] >= 3]
for ki, kind in enumerate(KINDS + ("all",)):
    tr = train if kind == "all" else train[train[:, 1] == ki]
    te = test if kind == "all" else test[test[:, 1] == ki]
    y = te[:, 7]
    print(f"{kind}: {len(te)} test candidates, {y.mean():.3f} accepted; feature AUC log p(pending) "
          f"{auc(te[:, 4], y):.3f}, -entropy {auc(-te[:, 5], y):.3f}, margin {auc(te[:, 6], y):.3f}")
    for name, cols in MODELS.items():
        w = fit(design(tr, cols), tr[:, 7])
        p = np.clip(1 / (1 + np.exp(-design(te, cols) @ w)), 1e-6, 1 - 1e-6)
        y = te[:, 7]
        ll = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        print(f"  {name:26s} log loss {ll:.4f} AUC {auc(p, y):.3f}", flush=True)
print(f"done ({time.time() - t0:.0f} s)")
