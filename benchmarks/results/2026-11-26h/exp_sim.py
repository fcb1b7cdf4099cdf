import os as _os
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import pickle, sys, numpy as np
from engine.cost_model import load_or_measure_verify_cost, default_cost_cache, VerifyCost
import json
cost = VerifyCost.from_dict(json.load(open(_os.path.join(DATA, "bench.json")))["verify_cost"])
def pathprob(parents, q):
    P = np.empty(len(q))
    for i, up in enumerate(parents):
        P[i] = q[i] * (P[up] if up >= 0 else 1.0)
    return P
CACHE = {}
def cfun(ctx):
    b = ctx // 64
    if b not in CACHE:
        CACHE[b] = cost.at(ctx)
    return CACHE[b]
def select(parents, q, ctx, cap=64):
    P = pathprob(parents, q)
    order = np.lexsort((np.arange(len(P)), -P))[:cap]
    cs = np.cumsum(P[order])
    c = cfun(ctx)
    ns = np.arange(1, len(order) + 1)
    vals = np.concatenate([[1.0], (1 + cs) / np.asarray(c.c(ns))])
    n = int(np.argmax(vals))
    return order[:n]
def rate(steps, qfun):
    tok = cst = 0.0
    for s in steps:
        q = qfun(s)
        if q is None: q = np.zeros(len(s["tokens"]))
        S = select(s["parents"], q, s["ctx_len"])
        acc = len(set(S.tolist()) & set(s["path"]))
        tok += 1 + acc
        cst += float(cfun(s["ctx_len"]).c(len(S))) if len(S) else 1.0
    return tok / cst
if __name__ == "__main__":
    for r in ["pluggy", "jinja2", "pygls"]:
        steps = pickle.load(open(f"{DATA}/wide-{r}-function.pkl", "rb"))
        cur = rate(steps, lambda s: s["probs"])
        def orc(s):
            q = np.zeros(len(s["tokens"])); q[s["path"]] = 1.0; return q
        print(r, "current %.3f oracle %.3f" % (cur, rate(steps, orc)))
