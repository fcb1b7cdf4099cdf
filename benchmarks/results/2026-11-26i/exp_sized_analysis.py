"""Over the engine's sized trees of `function` tasks (../2026-11-26h/exp_collect.py with SIZED=1, pickled as
$SIZED_DATA/sized-<repo>.pkl, default /tmp/fastcoder-sized): steps that accept their whole tree path to a leaf, part of
it, nothing; per previous step's outcome the hit rate, its estimate, accepted tokens and tree size; then per depth the
tried nodes' acceptance against their estimates."""
import os
DATA = os.environ.get("SIZED_DATA", "/tmp/fastcoder-sized")
import pickle, numpy as np, collections
def load(r):
    return [(s["task"], s["tokens"], s["parents"], s["depths"], s["sources"], s["probs"], s["ctx_len"], s["path"])
            for s in pickle.load(open(f"{DATA}/sized-{r}.pkl", "rb"))]
for r in ["pluggy", "jinja2", "pygls"]:
    S = load(r)
    full = [s for s in S if s[7] and not (s[2] == s[7][-1]).any()]
    print(r, len(S), "steps; whole tree accepted", len(full), "steps,", sum(len(s[7]) for s in full), "of",
          sum(len(s[7]) for s in S), "accepted tokens | drafted, none accepted", sum(1 for s in S if len(s[1]) and not s[7]))
    T = collections.defaultdict(lambda: [0, 0, 0.0, 0, 0])
    prev_state = None; prev_task = None
    for task, tok, par, dep, src, probs, ctx, path in S:
        if task != prev_task: prev_state = "start"
        full = bool(path) and not (par == path[-1]).any()
        state = "full" if full else ("zero" if not path else "partial")
        if len(tok) and probs is not None:
            t = T[prev_state]; t[0] += 1; t[1] += bool(path)
            first = [i for i in range(len(tok)) if par[i] == -1]
            t[2] += 1 - np.prod([1 - probs[i] for i in first]); t[3] += len(path); t[4] += len(tok)
        prev_state, prev_task = state, task
    print(r, " | ".join(f"after {k}: steps {v[0]} hit {v[1]/v[0]:.2f} est {v[2]/v[0]:.2f} acc {v[3]/v[0]:.2f} tree {v[4]/v[0]:.1f}" for k, v in T.items()))
import pickle, numpy as np, collections
for r in ["pluggy", "jinja2", "pygls"]:
    S = load(r)
    T = collections.defaultdict(lambda: [0, 0, 0.0])
    for task, tok, par, dep, src, probs, ctx, path in S:
        if probs is None: continue
        reached = {-1, *path}
        for i in range(len(tok)):
            if int(par[i]) in reached:
                d = min(int(dep[i]), 10); t = T[d]; t[0] += 1; t[1] += i in path; t[2] += probs[i]
    print(r, " ".join(f"d{d}:{T[d][0]} {T[d][1]/T[d][0]:.2f}/{T[d][2]/T[d][0]:.2f}" for d in sorted(T)))
