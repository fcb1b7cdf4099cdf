"""Leave-one-repository-out logistic fits of "a node was accepted (its parent was)" on the engine's estimate alone and
with token features (token_feature_probe.py's $DIR/tokfeat_<kind>_<repo>.npz, DIR default /tmp/s15): log-loss and
AUC on the held-out repository, all nodes and depth-1 nodes. Usage: python token_feature_fit.py KIND [KIND ...]"""
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "2026-11-27h"))


def load(kind):
    out = {}
    for f in sorted(glob.glob(os.path.join(os.environ.get("DIR", "/tmp/s15"), f"tokfeat_{kind}_*.npz"))):
        out[f.split("_")[-1][:-4]] = dict(np.load(f))
    return out


def feats(d, extra):
    e = np.clip(d["est"], 1e-3, 1 - 1e-3)
    cols = [np.log(e / (1 - e)), np.ones(len(e))]
    if extra in ("tok", "all"):
        cols += [(d["cls"] == k).astype(float) for k in range(1, 6)]
        cols += [(d["cls_prev"] == k).astype(float) for k in range(1, 6)]
    if extra in ("ctx", "all"):
        cols += [d["recent"], d["logcount"]]
    return np.stack(cols, 1), d["hit"].astype(float)


def fit(X, y, l2=1e-2):
    w = np.zeros(X.shape[1])
    for _ in range(60):
        p = 1 / (1 + np.exp(-X @ w))
        g = X.T @ (p - y) + l2 * w
        H = X.T @ (X * (p * (1 - p))[:, None]) + l2 * np.eye(len(w))
        w -= np.linalg.solve(H, g)
    return w


def auc(s, y):
    o = np.argsort(s, kind="stable")
    r = np.empty(len(s))
    r[o] = np.arange(1, len(s) + 1)
    npos = y.sum()
    nneg = len(y) - npos
    return (r[y == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg)


def ll(p, y):
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))


for kind in sys.argv[1:]:
    data = load(kind)
    print(kind, {k: (len(v["est"]), round(float(v["hit"].mean()), 3)) for k, v in data.items()})
    for extra in ("none", "tok", "ctx", "all"):
        res = []
        for test in data:
            tr = [feats(data[k], extra) for k in data if k != test]
            w = fit(np.concatenate([x for x, _ in tr]), np.concatenate([y for _, y in tr]))
            X, y = feats(data[test], extra)
            p = 1 / (1 + np.exp(-X @ w))
            d1 = data[test]["depth"] == 1
            res.append(f"{test}: ll {ll(p, y):.3f} auc {auc(p, y):.3f} d1 {auc(p[d1], y[d1]):.3f}")
        print(f"  {extra:5s}", " | ".join(res))

if os.environ.get("WEIGHTS"):
    for kind in sys.argv[1:]:
        data = load(kind)
        X = np.concatenate([feats(d, "ctx")[0] for d in data.values()])
        y = np.concatenate([feats(d, "ctx")[1] for d in data.values()])
        print(kind, "ctx weights (logit est, 1, recent, log1p count):", np.round(fit(X, y), 3).tolist())
        rec = np.concatenate([d["recent"] for d in data.values()]).astype(bool)
        est = np.concatenate([d["est"] for d in data.values()])
        for r in (False, True):
            print(f"  recent={r}: n {np.sum(rec == r)} hit {y[rec == r].mean():.3f} est {est[rec == r].mean():.3f}")
