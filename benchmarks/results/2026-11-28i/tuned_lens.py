"""Tuned lens (a ridge map from layer k's hidden state to the last layer's normed one, fitted on 40,960 plain positions
of click's files), then a logistic score of (tuned-lens log-prob, gap, the engine estimate's logit) fitted on click's
tree nodes (exp_lens.py's pickles); AUC, log loss and the pruning simulation (analyze_lens.py's cost model) on pluggy
and jinja2. Usage: PYTHONPATH=$PWD .venv/bin/python benchmarks/results/2026-11-28i/tuned_lens.py"""
import pickle
import sys

import numpy as np
import torch

sys.path.insert(0, "benchmarks/results/2026-11-28i")
from analyze_lens import accepted, closure, load_cost  # noqa: E402

from transformers import AutoModelForCausalLM  # noqa: E402

hf = AutoModelForCausalLM.from_pretrained("../shared/models/tiny-py-coder", dtype=torch.float32).eval()
W = hf.lm_head.weight.detach().numpy().astype(np.float64)  # (V, H)
cost = load_cost()


def auc(y, s):
    y = np.asarray(y, bool); o = np.argsort(s, kind="mergesort"); r = np.empty(len(s)); r[o] = np.arange(1, len(s) + 1)
    n1 = y.sum(); n0 = len(y) - n1
    return (r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)


def load(names):
    S = []
    for nm in names:
        S += [s for s in pickle.load(open(f"/tmp/lens_{nm}.pkl", "rb"))["steps"]]
    return S


def rows(S, key):
    return np.concatenate([s[key] if key != "hidden" else s["hidden"].transpose(1, 0, 2) for s in S if s["n"]])


def lens_feats(H, k, A, tok):
    z = H[:, k - 1].astype(np.float64) @ A  # (N, H+1 -> H)
    lg = z @ W.T
    lg -= lg.max(1, keepdims=True)
    lse = np.log(np.exp(lg).sum(1))
    lp = lg[np.arange(len(tok)), tok] - lse
    gap = -lg[np.arange(len(tok)), tok]
    return lp, gap


train, tests = load(["click_function", "click_fim-block"]), {"pluggy_function": None, "jinja2_function": None,
                                                            "pluggy_fim-block": None}
ytr = rows(train, "label")
L = hf.config.num_hidden_layers
maps = {}


def lens_training_states(repo="click", chunks=80, length=512):
    """(positions, L, hidden) float64 hidden states of every layer over ``chunks`` windows of ``repo``'s files: the
    tuned lens is fitted on plain text positions, not on the tree rows it is scored on."""
    from pathlib import Path
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained("../shared/models/tiny-py-coder")
    ids = []
    for f in sorted(Path(f".venv/lib/python3.11/site-packages/{repo}").rglob("*.py")):
        ids += tok(f.read_text(errors="ignore"))["input_ids"]
    out = []
    with torch.no_grad():
        for c in range(min(chunks, len(ids) // length)):
            o = hf(input_ids=torch.tensor([ids[c * length:(c + 1) * length]]), output_hidden_states=True)
            out.append(torch.stack(o.hidden_states[1:], 2)[0].double().numpy())
    return np.concatenate(out)


Hs = lens_training_states()
print("lens positions", len(Hs))
for k in range(1, L):
    X = np.c_[Hs[:, k - 1], np.ones(len(Hs))]
    maps[k] = np.linalg.solve(X.T @ X + 1.0 * np.eye(X.shape[1]), X.T @ Hs[:, L - 1])


def feats(S, k):
    H = rows(S, "hidden"); H1 = np.concatenate([H, np.ones((*H.shape[:2], 1), H.dtype)], 2)
    tok = np.concatenate([s["tok"] for s in S if s["n"]])
    lp, gap = lens_feats(H1, k, maps[k], tok)
    p = np.clip(rows(S, "probs"), 1e-4, 1 - 1e-4)
    return np.c_[lp, gap, np.log(p / (1 - p)), np.ones(len(p))]


def fit_logistic(X, y, iters=50):
    """Newton's method on standardized features (returns weights for the raw ones)."""
    mu, sd = X[:, :-1].mean(0), X[:, :-1].std(0) + 1e-9
    Z = np.c_[(X[:, :-1] - mu) / sd, np.ones(len(X))]
    w = _newton(Z, y, iters)
    raw = np.r_[w[:-1] / sd, w[-1] - (w[:-1] * mu / sd).sum()]
    return raw


def _newton(X, y, iters):
    w = np.zeros(X.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-X @ w))
        g = X.T @ (p - y) / len(y); Hs = (X * (p * (1 - p))[:, None]).T @ X / len(y) + 1e-4 * np.eye(len(w))
        w -= np.linalg.solve(Hs, g)
    return w


print("train nodes", len(ytr))
for k in (2, 3, 4):
    w = fit_logistic(feats(train, k), ytr.astype(float))
    for nm in tests:
        S = load([nm]); X = feats(S, k); y = rows(S, "label")
        sc = X @ w
        p = 1 / (1 + np.exp(-sc)); pe = 1 / (1 + np.exp(-X[:, 2]))
        ll = lambda q: -np.mean(y * np.log(np.clip(q, 1e-6, 1)) + (1 - y) * np.log(np.clip(1 - q, 1e-6, 1)))
        print(f"k={k} {nm}: AUC estimator {auc(y, X[:, 2]):.3f} tuned-lens lp {auc(y, X[:, 0]):.3f} "
              f"combined {auc(y, sc):.3f}; log loss estimator {ll(pe):.4f} combined {ll(p):.4f}")
        # pruning simulation with the combined score (logit) thresholds
        f = k / (L + 0.5)
        bt = bc = 0.0
        for s in S:
            c = cost.at(s["ctx"])
            bt += 1 + (accepted(s["parents"], s["label"], np.ones(s["n"], bool)) if s["n"] else 0)
            bc += float(c.c(s["n"])) if s["n"] else 1.0
        out = []
        for thr in (-3, -2, -1.5, -1, -0.5, 0):
            t = cc = 0.0; i0 = 0
            for s in S:
                c = cost.at(s["ctx"]); n = s["n"]
                if not n:
                    t += 1; cc += 1; continue
                keep = closure(s["parents"], sc[i0:i0 + n] >= thr); i0 += n
                m = int(keep.sum())
                t += 1 + accepted(s["parents"], s["label"], keep)
                cc += f * float(c.c(n)) + (1 - f) * (float(c.c(m)) if m else 1.0)
            out.append(f"[{thr}: x{(t / cc) / (bt / bc):.3f} tok {t / bt:.3f}]")
        print("    ", " ".join(out))
