"""Does the engine's linear normaliser cost the heads their offline gain? exp_hydra_feature.py's scoring of the
depth-1 candidates, with the shipped heads (medusa-head.npz, hydra-head.npz here) and each head's feature computed
with the exact log-normaliser (logsumexp of the 8,192 logits) and with the linear estimate the engine uses
(lse_w . h' + b), calibrated on click / rich / markdown_it and scored on jinja2 / pluggy / pygls.

Usage: OMP_NUM_THREADS=2 .venv/bin/python benchmarks/results/2026-11-28f/exp_normaliser.py (~5 minutes)
"""
import os, sys, time
from pathlib import Path
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT), str(HERE)]
import numpy as np  # noqa: E402
import torch  # noqa: E402
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
from engine import load_model  # noqa: E402
from engine.bench.cli import _load_common  # noqa: E402
from engine.draft_head import DraftHead, output_embedding  # noqa: E402
from depth_one_replay import cell_candidates  # noqa: E402

t0 = time.time()
loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
model = loaded.model
E = model.get_output_embeddings().weight.detach().float()
emb = output_embedding(model)
SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
heads = {name: DraftHead.load(HERE / f"{name}-head.npz") for name in ("medusa", "hydra")}
tables = {name: (torch.from_numpy(h.pending_table(emb)) if h.w1e is not None else None) for name, h in heads.items()}
common = _load_common(loaded, "stdlib")


def head_out(name, h, pending):
    """(h', exact lse, linear lse) of one head on one hidden state."""
    hd = heads[name]
    a = torch.from_numpy(hd.w1) @ h + torch.from_numpy(hd.b1)
    if tables[name] is not None:
        a = a + tables[name][pending]
    hp = h + torch.from_numpy(hd.w2) @ torch.nn.functional.silu(a) + torch.from_numpy(hd.b2)
    return hp, float(torch.logsumexp(hp @ E.T, -1)), float(hp @ torch.from_numpy(hd.lse_w) + hd.lse_b)


rows = []  # repo index, q, then per head (exact feature, linear feature), accepted
REPOS = ("click", "rich", "markdown_it", "jinja2", "pluggy", "pygls")
for ri, repo in enumerate(REPOS):
    for kind in ("function", "fim-block", "fim-line"):
        for h, pending, cands, qs, accepted in cell_candidates(loaded, common, SITE / repo, kind):
            with torch.inference_mode():
                per = []
                for name in heads:
                    hp, lse, lse_hat = head_out(name, h, pending)
                    z = (E[cands] @ hp).tolist()
                    per.append([(min(zz - lse, 0.0), min(max(zz - lse_hat, -16.0), 0.0)) for zz in z])
            rows += [(ri, q, *m, *hy, y) for q, m, hy, y in zip(qs, per[0], per[1], accepted)]
    print(f"{repo}: {len(rows)} candidates so far ({time.time() - t0:.0f} s)", flush=True)
A = np.array(rows, dtype=np.float64)


def design(B, col):
    q = np.clip(B[:, 1], 1e-4, 1 - 1e-4)
    return np.stack([np.log(q / (1 - q))] + ([B[:, col]] if col else []) + [np.ones(len(B))], 1)


def fit(X, y, l2=1e-3):
    w = np.zeros(X.shape[1]); pen = l2 * len(y) * np.ones(X.shape[1]); pen[-1] = 0
    for _ in range(60):
        p = 1 / (1 + np.exp(-X @ w))
        w += np.linalg.solve((X * (p * (1 - p))[:, None]).T @ X + np.diag(pen) + 1e-9 * np.eye(len(w)),
                             X.T @ (y - p) - pen * w)
    return w


tr, te = A[A[:, 0] < 3], A[A[:, 0] >= 3]
print(f"test candidates {len(te)}, accepted {te[:, 6].mean():.3f}")
for label, col in (("q alone", 0), ("medusa exact", 2), ("medusa linear", 3), ("hydra exact", 4),
                   ("hydra linear", 5)):
    w = fit(design(tr, col), tr[:, 6])
    p = np.clip(1 / (1 + np.exp(-design(te, col) @ w)), 1e-6, 1 - 1e-6)
    ll = float(-np.mean(te[:, 6] * np.log(p) + (1 - te[:, 6]) * np.log(1 - p)))
    print(f"{label}: log loss {ll:.4f}")
print(f"done ({time.time() - t0:.0f} s)")
