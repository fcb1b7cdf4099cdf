"""Screen cost per step: every row vs a lazy walk that screens rows in batches along the likely path."""
import sys, json
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
import replay_methods, measure_drafting
P = {1: 73.0, 2: 94.5, 3: 158.2, 4: 158.2}  # us per screen pass of that many rows (min of 300, AVX2)
stats = {}


def full_cost(rows):
    c = 0.0
    while rows > 0:
        r = 4 if rows >= 4 else (2 if rows >= 2 else 1)
        c += P[r]; rows -= r
    return c


def lazy_cost(tree, path, tau, cap=4):
    n = tree.n_draft
    parents = tree.parents[:n].tolist(); tokens = tree.tokens[:n].tolist()
    cond = tree.probs[:n].tolist() if tree.probs is not None else [0.5] * n
    children = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    screened = set(); cost = 0.0; passes = 0
    need = [-1] + list(path)  # rows the walk reads: the pending token's, then each accepted node's
    for node in need:
        if node in screened:
            continue
        batch = [node]; cur = node; reach = 1.0
        while len(batch) < cap:
            kids = children.get(cur, [])
            if not kids: break
            best = kids[0] if tau < 0 else max(kids, key=lambda k: cond[k])
            reach *= cond[best]
            if (tau >= 0 and reach < tau) or best in screened: break
            batch.append(best); cur = best
        screened.update(batch); cost += P[len(batch)]; passes += 1
    return cost, passes, len(screened)


def on_step(tree, path):
    n = tree.n_draft
    s = stats.setdefault("full", [0.0, 0, 0]); s[0] += full_cost(n + 1); s[1] += 1; s[2] += n + 1
    for tau in (-1.0, 0.0, 0.4):
        c, p, r = lazy_cost(tree, path, tau)
        s = stats.setdefault(f"lazy tau={tau}", [0.0, 0, 0]); s[0] += c; s[1] += p; s[2] += r


orig = replay_methods.replay


def patched(*a, **k):
    k["on_step"] = on_step
    return orig(*a, **k)


replay_methods.replay = patched
orig_rm = replay_methods.replay_method


def rm(loaded, method, *a, **k):
    stats.clear()
    res = orig_rm(loaded, method, *a, **k)
    steps = stats["full"][1]
    for name, (c, p, r) in stats.items():
        print(f"{method:10s} {name:14s} us/step {c/steps:7.1f}  passes/step {p/steps if name!='full' else 0:5.2f}  rows/step {r/steps:5.2f}")
    return res


replay_methods.replay_method = rm
replay_methods.main(sys.argv[1:])
