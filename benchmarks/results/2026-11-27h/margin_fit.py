"""Leave-one-repository-out logistic fits of "a depth-1 node was accepted" on the estimates alone and on the estimates plus
log(1 + margin) (margin_probe.py's .npz files, $DIR/margin_<kind>_<repo>.npz, DIR default /tmp/s14): log-loss, AUC, and hit rate against
the estimates by margin quartile. Usage: python margin_fit.py KIND [KIND ...]"""
import glob
import os
import sys

import numpy as np
def load(kind):
    out = {}
    for f in sorted(glob.glob(os.path.join(os.environ.get("DIR", "/tmp/s14"), f"margin_{kind}_*.npz"))):
        d = np.load(f); out[f.split("_")[-1][:-4]] = d
    return out
def feats(d, extra):
    e = np.clip(d["est"], 1e-3, 1 - 1e-3)
    cols = [np.log(e / (1 - e)), np.ones(len(e))]
    if extra:
        cols.insert(1, np.log1p(d["margin"]))
    return np.stack(cols, 1), d["hit"].astype(float)
def fit(X, y, l2=1e-3):
    w = np.zeros(X.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-X @ w)); g = X.T @ (p - y) + l2 * w
        H = X.T @ (X * (p * (1 - p))[:, None]) + l2 * np.eye(len(w)); w -= np.linalg.solve(H, g)
    return w
def auc(s, y):
    o = np.argsort(s); r = np.empty(len(s)); r[o] = np.arange(1, len(s) + 1)
    npos = y.sum(); nneg = len(y) - npos
    return (r[y == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg)
def ll(p, y): p = np.clip(p, 1e-6, 1 - 1e-6); return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
for kind in sys.argv[1:]:
    data = load(kind)
    print(kind, {k: len(v["est"]) for k, v in data.items()})
    for extra in (False, True):
        res = []
        for test in data:
            Xtr = np.concatenate([feats(data[k], extra)[0] for k in data if k != test]); ytr = np.concatenate([feats(data[k], extra)[1] for k in data if k != test])
            w = fit(Xtr, ytr); X, y = feats(data[test], extra); p = 1 / (1 + np.exp(-X @ w))
            raw = ll(np.clip(data[test]["est"], 1e-3, 1 - 1e-3), y)
            res.append(f"{test}: ll {ll(p, y):.3f} (raw est {raw:.3f}) auc {auc(p, y):.3f} w {np.round(w, 2).tolist()}")
        print("  +margin" if extra else "  est only", "; ".join(res))
    allm = np.concatenate([v["margin"] for v in data.values()]); allh = np.concatenate([v["hit"] for v in data.values()])
    alle = np.concatenate([v["est"] for v in data.values()])
    q = np.quantile(allm, [0.25, 0.5, 0.75])
    for lo, hi, name in ((-1, q[0], "margin q1"), (q[0], q[1], "q2"), (q[1], q[2], "q3"), (q[2], 1e9, "q4")):
        s = (allm > lo) & (allm <= hi)
        print(f"  {name} (<= {hi:.2f}): n {s.sum()} hit {allh[s].mean():.2f} est {alle[s].mean():.2f}")
