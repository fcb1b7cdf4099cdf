"""Replay of tree *selection* on token_feature_probe.py's widest trees: per step, the engine's rule (admit nodes
best-first by path probability, keep the prefix with the highest (1 + sum P) / c(n), at most BUDGET nodes) with the
engine's estimates q, or with q shifted by an odds multiplier from whether the node's token occurred in the last W
context tokens: q' = sigmoid(logit(q) + w_r [recent] + w_0), (w_r, w_0) fitted on the other repositories' tried nodes
(logistic, logit(q) as an offset). Scored with the oracle: the chosen nodes on the accepted path, c(n) of the machine.
Prints per cell tokens per unit of verify cost (q', q and their ratio). Usage: python sim_select.py KIND [KIND ...]
(DIR: the .npz files, default /tmp/s15; WINDOWS, default 16,32,64,128,256; BUDGET default 32)"""
import glob
import os
import sys

import numpy as np

BUDGET = int(os.environ.get("BUDGET", 32))


def load(kind):
    out = {}
    for f in sorted(glob.glob(os.path.join(os.environ.get("DIR", "/tmp/s15"), f"tokfeat_{kind}_*.npz"))):
        d = dict(np.load(f))
        # tried: a node below the pending token or below an accepted node of the same step
        key = d["step"] * 1000 + d["index"]
        hit_keys = set(key[d["hit"] == 1].tolist())
        pk = d["step"] * 1000 + d["parent"]
        d["tried"] = (d["parent"] < 0) | np.isin(pk, list(hit_keys))
        out[f.split("_")[-1][:-4]] = d
    return out


def logit(q):
    q = np.clip(q, 1e-4, 1 - 1e-4)
    return np.log(q / (1 - q))


def fit_offset(X, off, y, l2=1e-2):
    w = np.zeros(X.shape[1])
    for _ in range(60):
        p = 1 / (1 + np.exp(-(off + X @ w)))
        g = X.T @ (p - y) + l2 * w
        H = X.T @ (X * (p * (1 - p))[:, None]) + l2 * np.eye(len(w))
        w -= np.linalg.solve(H, g)
    return w


def features(d, window):
    r = (d["distance"] <= window).astype(float)
    return np.stack([r, np.ones(len(r))], 1)


def score(d, q, ctable):
    tokens = cost = 0.0
    steps = d["step"]
    bounds = np.flatnonzero(np.diff(steps)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(steps)]):
        idx, par, hit = d["index"][lo:hi].astype(int), d["parent"][lo:hi].astype(int), d["hit"][lo:hi]
        qq = q[lo:hi]
        pos = {i: j for j, i in enumerate(idx.tolist())}
        P = np.zeros(len(idx))
        for j in range(len(idx)):
            P[j] = qq[j] * (P[pos[par[j]]] if par[j] >= 0 else 1.0)
        order = np.lexsort((idx, -P))[:BUDGET]
        value = (1 + np.r_[0, np.cumsum(P[order])]) / ctable[:len(order) + 1]
        n = int(np.argmax(value))
        chosen = order[:n]
        tokens += 1 + hit[chosen].sum()
        cost += ctable[n]
    return tokens / cost


if __name__ == "__main__":
    for kind in sys.argv[1:]:
        data = load(kind)
        print(kind, {k: int(v["step"].max()) + 1 for k, v in data.items()})
        for window in [int(x) for x in os.environ.get("WINDOWS", "16,32,64,128,256").split(",")]:
            res = []
            ratios = []
            for test in data:
                tr = [data[k] for k in data if k != test]
                X = np.concatenate([features(d, window)[d["tried"]] for d in tr])
                off = np.concatenate([logit(d["est"][d["tried"]]) for d in tr])
                y = np.concatenate([d["hit"][d["tried"]] for d in tr])
                w = fit_offset(X, off, y)
                d = data[test]
                q2 = 1 / (1 + np.exp(-(logit(d["est"]) + features(d, window) @ w)))
                ct = d["ctable"]
                a, b = score(d, q2, ct), score(d, d["est"], ct)
                ratios.append(a / b)
                res.append(f"{test}: {a:.3f} / {b:.3f} = {a / b:.3f} w {np.round(w, 2).tolist()}")
            print(f"  W={window:3d} gm {np.exp(np.mean(np.log(ratios))):.3f} |", " | ".join(res))
