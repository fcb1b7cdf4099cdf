"""Score exp_lens.py's pickles: predicted speedup of pruning each tree at layer k by the lens, against the same
trees unpruned (both on this machine's measured c(n) at each step's context length).

Usage: PYTHONPATH=$PWD .venv/bin/python benchmarks/results/2026-11-28i/analyze_lens.py A.pkl [B.pkl ...]
"""
from __future__ import annotations

import pickle
import sys

import numpy as np

from engine.cost_model import VerifyCost


def load_cost():
    """This machine's curve as the bench measured it last session (the engine's current kernels)."""
    import json
    d = json.load(open("benchmarks/results/2026-11-28h/ab2/fim-block_jinja2.json"))["verify_cost"]
    return VerifyCost.from_dict(d)


def accepted(parents, label, keep):
    """Draft tokens accepted: the longest chain of labelled (argmax) kept nodes from the root."""
    n = len(parents)
    ok = np.zeros(n, bool)
    depth = 0
    d = np.zeros(n, int)
    for i in range(n):
        p = parents[i]
        if keep[i] and label[i] and (p < 0 or ok[p]):
            ok[i] = True
            d[i] = 1 + (d[p] if p >= 0 else 0)
            depth = max(depth, d[i])
    return depth


def closure(parents, keep):
    keep = keep.copy()
    for i in range(len(parents)):
        if parents[i] >= 0 and not keep[parents[i]]:
            keep[i] = False
    return keep


def auc(y, s) -> float:
    """Area under the ROC curve of score ``s`` for boolean labels ``y`` (ranks; ties broken by order)."""
    y = np.asarray(y, bool)
    r = np.empty(len(s))
    r[np.argsort(s, kind="mergesort")] = np.arange(1, len(s) + 1)
    n1 = y.sum()
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(y) - n1)))


def main(paths):
    cost = load_cost()
    for path in paths:
        data = pickle.load(open(path, "rb"))
        steps, L = data["steps"], data["L"]
        print(f"== {data['repo'].rsplit('/', 1)[-1]} {data['kind']}: {len(steps)} steps")
        base_t = base_c = 0.0
        for s in steps:
            c = cost.at(s["ctx"])
            base_c += float(c.c(s["n"])) if s["n"] else 1.0
            base_t += 1 + (accepted(s["parents"], s["label"], np.ones(s["n"], bool)) if s["n"] else 0)
        print(f"  unpruned: tokens/step {base_t / len(steps):.3f}, cost/step {base_c / len(steps):.3f}")
        drafted = [s for s in steps if s["n"]]
        lab = np.concatenate([s["label"] for s in drafted])
        estimate = auc(lab, np.concatenate([s["probs"] for s in drafted]))
        print(f"  AUC for the label: the engine's estimate {estimate:.3f}, "
              + ", ".join(f"lens k={k} {auc(lab, np.concatenate([s['lens'][k][0] for s in drafted])):.3f}"
                          for k in range(1, L)))
        for k in range(1, L):
            f = k / (L + 0.5)
            best = None
            rows = []
            for thr in (-0.5, -1, -2, -3, -4, -6, -8):
                for over in (0.0, 0.02):
                    t = cc = kept = tot = 0.0
                    for s in steps:
                        c = cost.at(s["ctx"])
                        n = s["n"]
                        if not n:
                            t += 1; cc += 1.0
                            continue
                        keep = closure(s["parents"], s["lens"][k][0] >= thr)
                        m = int(keep.sum())
                        kept += m; tot += n
                        t += 1 + accepted(s["parents"], s["label"], keep)
                        cc += f * float(c.c(n)) + (1 - f) * (float(c.c(m)) if m else 1.0) + over * n
                    gain = (t / cc) / (base_t / base_c)
                    rows.append((thr, over, kept / max(tot, 1), t / base_t, gain))
            txt = " ".join(f"[{thr:g}{'+o' if over else ''}: keep {kf:.2f} tok {tr:.3f} x{g:.3f}]"
                           for thr, over, kf, tr, g in rows if not over)
            bo = max((r for r in rows if r[1]), key=lambda r: r[4])
            print(f"  k={k} {txt}\n        best with 0.02/row overhead: thr {bo[0]} x{bo[4]:.3f}")



def oracle(paths):
    """Perfect pruning at layer k: every node off the accepted path dropped after layer k (the most any lens gives on
    these trees)."""
    cost = load_cost()
    for path in paths:
        data = pickle.load(open(path, "rb"))
        steps, L = data["steps"], data["L"]
        bc = 0.0
        for s in steps:
            bc += float(cost.at(s["ctx"]).c(s["n"])) if s["n"] else 1.0
        gains = []
        for k in range(1, L):
            f, cc = k / (L + 0.5), 0.0
            for s in steps:
                c, n = cost.at(s["ctx"]), s["n"]
                if not n:
                    cc += 1.0
                    continue
                m = accepted(s["parents"], s["label"], np.ones(n, bool))  # the accepted chain's nodes
                cc += f * float(c.c(n)) + (1 - f) * (float(c.c(m)) if m else 1.0)
            gains.append(f"k={k} x{bc / cc:.3f}")
        mean_n = np.mean([s["n"] for s in steps])
        print(f"{data['repo'].rsplit('/', 1)[-1]} {data['kind']} (mean tree {mean_n:.2f}): oracle " + ", ".join(gains))


if __name__ == "__main__":
    (oracle if "--oracle" in sys.argv else main)([a for a in sys.argv[1:] if a != "--oracle"])
