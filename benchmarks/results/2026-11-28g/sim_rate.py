"""Offline: trees re-selected from the widest fastcoder trees by the step's own ratio (1 + sum P) / c(n), the engine's
rule, or by Dinkelbach's 1 + sum P - lambda c(n) with lambda a fixed value or scale x the running tokens per cost
(decay gamma a step; the ratio until `warm` plain steps' cost is seen). Scored as ../2026-11-26h/exp_sim.py scores:
committed tokens over c(n) at each step's context, the curve of $CEILING_DATA/bench.json.

Needs the trees of ../2026-11-26h/exp_collect.py in $CEILING_DATA (wide-<repo>-<kind>.pkl) and a bench JSON there.
Usage: CEILING_DATA=/tmp/ceil PYTHONPATH=$PWD .venv/bin/python benchmarks/results/2026-11-28g/sim_rate.py"""
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-26h"))
from exp_sim import DATA, cfun, pathprob  # noqa: E402


def select(parents, q, ctx, lam=None, cap=64):
    """Node ids kept: the best-first prefix maximising the ratio (lam None) or 1 + sum P - lam c(n)."""
    P = pathprob(parents, q)
    order = np.lexsort((np.arange(len(P)), -P))[:cap]
    gain = 1.0 + np.concatenate([[0.0], np.cumsum(P[order])])
    c = np.concatenate([[1.0], np.asarray(cfun(ctx).c(np.arange(1, len(order) + 1)))])
    return order[:int(np.argmax(gain / c if lam is None else gain - lam * c))]


def rate(steps, fixed=None, running=None):
    """Committed tokens per unit of cost; fixed: a lambda; running: (gamma, scale, warm)."""
    tok = cst = T = C = 0.0
    for s in steps:
        q = s["probs"] if s["probs"] is not None else np.zeros(len(s["tokens"]))
        lam = fixed
        if running is not None:
            gamma, scale, warm = running
            lam = scale * T / C if C >= warm else None
        S = select(s["parents"], q, s["ctx_len"], lam)
        t = 1 + len(set(S.tolist()) & set(s["path"]))
        c = float(cfun(s["ctx_len"]).c(len(S))) if len(S) else 1.0
        tok, cst = tok + t, cst + c
        if running is not None:
            T, C = running[0] * T + t, running[0] * C + c
    return tok / cst


rules = {f"lambda {x}": {"fixed": x} for x in (1.0, 1.5, 2.0, 2.5, 3.0)}
rules.update({f"running gamma {g} scale {s} warm {w}": {"running": (g, s, w)}
              for g in (1.0, 0.99, 0.95) for s in (0.8, 0.9, 1.0) for w in (1.0, 4.0)})
res = {name: [] for name in rules}
cells = []
for kind in ("function", "fim-block"):
    for repo in ("pluggy", "jinja2", "pygls"):
        steps = pickle.load(open(f"{DATA}/wide-{repo}-{kind}.pkl", "rb"))
        base = rate(steps)
        cells.append(f"{kind} {repo} {base:.3f}")
        for name, kw in rules.items():
            res[name].append(rate(steps, **kw) / base)
print("cells (the step's own ratio: tokens per cost):", "; ".join(cells))
for name, v in sorted(res.items(), key=lambda kv: -np.exp(np.mean(np.log(kv[1])))):
    print(f"{name:40s} geo {np.exp(np.mean(np.log(v))):.3f}  " + " ".join(f"{x:.3f}" for x in v))
