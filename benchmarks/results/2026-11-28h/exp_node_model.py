"""A learned per-node acceptance estimate, judged in the oracle replay (benchmarks/replay_methods.py).

The engine's estimate of P(node accepted | parent accepted) is a Beta bucket (source, depth, share, match length,
role) learned online over a fitted prior. This script tries a model over richer per-node features -- the bucket
estimate itself, the trie's shape around the node (siblings, children, descendants), the node's and its parent's
token class, its weight, the context length -- fitted on the engine's own candidate tries of other packages
(click, rich, markdown_it), then used in place of the bucket estimate when the tree is sized.

Experiment only: the features are read from the Python builder's locals (engine.tree_builder._build_sized) through
the draft head's hook (``AcceptanceEstimator.depth_one.adjust``); the C builder and the native propose are switched
off (the Python path builds the same trees, bit for bit).

Usage (repository root):
    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python exp_node_model.py collect OUT.pkl REPO KIND...
    ... exp_node_model.py fit MODEL.pt DATA.pkl... [--hidden 16]
    ... exp_node_model.py replay MODEL.pt REPO KIND [variants: base,model,blend]
"""
import contextlib
import io
import json
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import engine.drafters as dr  # noqa: E402
import engine.tree_builder as tb  # noqa: E402
import measure_drafting as md  # noqa: E402
import replay_methods as rm  # noqa: E402
from engine.acceptance import ALTERNATIVE_STRIDE, alternatives  # noqa: E402
from engine.bench import runner  # noqa: E402

tb.native = types.SimpleNamespace(library=lambda: None)
dr.native_propose.supported = lambda self: False
torch.set_num_threads(1)

SITE = ROOT / ".venv/lib/python3.11/site-packages"
NO_CONTEXT = bool(int(__import__("os").environ.get("NO_CONTEXT", "0")))
CUR = {"target": None, "ctx_len": 0, "last": 0}
TOKEN_CLASS = {}


def token_classes(tokenizer) -> np.ndarray:
    """(V, 6) float32: newline, whitespace only, identifier, punctuation only, leading space, digit."""
    key = id(tokenizer)
    if key not in TOKEN_CLASS:
        rows = []
        for t in range(len(tokenizer)):
            s = tokenizer.decode([t])
            rows.append(["\n" in s, s.strip() == "" and "\n" not in s, s.strip().isidentifier(),
                         s.strip() != "" and not any(c.isalnum() for c in s), s.startswith(" "),
                         any(c.isdigit() for c in s)])
        TOKEN_CLASS[key] = np.asarray(rows, dtype=np.float32)
    return TOKEN_CLASS[key]


def features(token, parent, depth, source, best, match, weight, probs, classes, ctx_len, last) -> np.ndarray:
    """(N, F) float32 per-node features of one trie (lists from the Python builder)."""
    n = len(token)
    tok = np.asarray(token, dtype=np.int64)
    par = np.asarray(parent, dtype=np.int64)
    dep = np.asarray(depth, dtype=np.float32)
    q = np.clip(np.asarray(probs, dtype=np.float64), 1e-4, 1 - 1e-4)
    alt = np.asarray(alternatives(list(parent), list(best)), dtype=np.float32)
    nchild = np.bincount(par + 1, minlength=n + 1).astype(np.float32)
    sib = nchild[par + 1]
    kids = nchild[1:]
    desc = np.zeros(n, dtype=np.float32)
    for i in range(n - 1, -1, -1):
        if par[i] >= 0:
            desc[par[i]] += 1 + desc[i]
    src = np.asarray(source, dtype=np.int64)
    bits = np.stack([(src >> b) & 1 for b in (0, 1, 2, 3, 6)], 1).astype(np.float32)
    parent_tok = np.where(par >= 0, tok[np.maximum(par, 0)], last)
    parent_cls = classes[parent_tok]
    if NO_CONTEXT:  # without the step's context: no context length, a root's "parent" class all zeros
        parent_cls = parent_cls * (par >= 0)[:, None]
    cols = [np.log(q / (1 - q)), np.minimum(dep, 12) / 12, dep == 1, dep == 2, alt,
            np.asarray(best, dtype=np.float32), np.log1p(np.asarray(match, dtype=np.float32)) / 3,
            np.log1p(sib), np.log1p(kids), np.log1p(desc) / 3, bits.sum(1),
            np.log1p(np.asarray(weight, dtype=np.float32)) / 5]
    if not NO_CONTEXT:
        cols.append(np.full(n, np.log(max(ctx_len, 1)) / 7))
    base = np.stack([np.asarray(c, dtype=np.float32) for c in cols], 1)
    return np.concatenate([base, bits, classes[tok], parent_cls], 1)


class Hook:
    """Stands in the estimator's ``depth_one`` slot: applies the draft head (``inner``) if any, then records the
    trie's nodes (``rec``) and/or replaces their estimates by ``model``'s."""

    def __init__(self, inner, classes, model=None, rec=None, mode="model"):
        self.inner, self.classes, self.model, self.rec, self.mode = inner, classes, model, rec, mode

    def adjust(self, token, parent, probs):
        if self.inner is not None:
            probs = self.inner.adjust(token, parent, probs)
        f = sys._getframe(1).f_locals
        if "best" not in f or not token:
            return probs
        F = features(token, parent, f["depth"], f["source"], f["best"], f["match"], f["weight"], probs,
                     self.classes, CUR["ctx_len"], CUR["last"])
        if self.rec is not None and CUR["target"] is not None:
            target = CUR["target"]
            ok = np.zeros(len(token), dtype=bool)
            reached = np.zeros(len(token), dtype=bool)
            for i, (t, up, d) in enumerate(zip(token, parent, f["depth"])):
                reached[i] = up < 0 or ok[up]
                ok[i] = reached[i] and d <= len(target) and target[d - 1] == t
            self.rec.append((F[reached], ok[reached]))
        if self.model is not None:
            with torch.no_grad():
                p = self.model(torch.from_numpy(F)).numpy().astype(np.float64)
            if self.mode == "blend":
                p = 0.5 * (p + np.asarray(probs))
            probs = [0.0 if q0 == 0.0 else float(x) for q0, x in zip(probs, p)]
        return probs

    def __getattr__(self, name):
        return getattr(self.inner, name)


def install(classes, model=None, rec=None, mode="model"):
    """Patch the bench's decoders (their estimators get a Hook) and the replay (it sets CUR per step)."""
    make = runner.make_decoder.__wrapped__ if hasattr(runner.make_decoder, "__wrapped__") else runner.make_decoder

    def make_decoder(*a, **k):
        dec = make(*a, **k)
        est = getattr(dec, "estimator", None)
        if est is not None and not isinstance(est.depth_one, Hook):
            est.depth_one = Hook(est.depth_one, classes, model, rec, mode)
            est.node_model = None  # the engine's own node model (landed after this prototype) off: buckets only
        return dec

    make_decoder.__wrapped__ = make
    runner.make_decoder = make_decoder
    replay = md.replay

    def wrapped(drafter, estimator, prompt_ids, reference, *a, **k):
        propose = drafter.propose
        full = list(prompt_ids) + list(reference)

        def recording(ctx):
            CUR["ctx_len"], CUR["last"] = len(ctx), int(ctx[-1])
            CUR["target"] = full[len(ctx):]
            return propose(ctx)

        drafter.propose = recording
        return replay(drafter, estimator, prompt_ids, reference, *a, **k)

    rm.replay = wrapped


def run_replay(repo, kind, tasks=10, seed=int(__import__("os").environ.get("SEED", "0"))):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rm.main(["--repo", str(SITE / repo), "--task-kind", kind, "--tasks", str(tasks), "--seed", str(seed),
                 "--score-measured", "--methods", "fastcoder"])
    return [json.loads(x) for x in buf.getvalue().splitlines() if x.startswith("{") and '"method"' in x][0]


class Net(torch.nn.Module):
    def __init__(self, n_in, hidden, mu, sd):
        super().__init__()
        self.register_buffer("mu", mu)
        self.register_buffer("sd", sd)
        self.body = (torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
                     if hidden else torch.nn.Linear(n_in, 1))

    def forward(self, x):
        return torch.sigmoid(self.body(((x - self.mu) / self.sd).clamp(-5, 5))[:, 0])


def fit(X, y, hidden, epochs=400, l2=1e-4):
    X, y = torch.from_numpy(X), torch.from_numpy(y.astype(np.float32))
    torch.manual_seed(0)
    net = Net(X.shape[1], hidden, X.mean(0), X.std(0) + 1e-6)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=l2)
    for _ in range(epochs):
        opt.zero_grad()
        p = net(X).clamp(1e-5, 1 - 1e-5)
        loss = torch.nn.functional.binary_cross_entropy(p, y)
        loss.backward()
        opt.step()
    return net


def strip_context(X):
    """Features collected with the context, as NO_CONTEXT computes them (column 2 is depth == 1: a root)."""
    X = np.delete(X, 12, axis=1)
    X[:, -6:] *= (X[:, 2] == 0)[:, None]
    return X


def log_loss(p, y):
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def main(argv):
    cmd = argv[0]
    if cmd == "collect":
        out, repo, kinds = argv[1], argv[2], argv[3:]
        from engine import load_model  # noqa: PLC0415
        classes = token_classes(load_model(str(md.DEFAULT_MODEL)).tokenizer)
        data = []
        for kind in kinds:
            rec = []
            install(classes, rec=rec)
            res = run_replay(repo, kind)
            X = np.concatenate([r[0] for r in rec]) if rec else np.zeros((0, 1), np.float32)
            y = np.concatenate([r[1] for r in rec]) if rec else np.zeros(0, bool)
            data.append((repo, kind, X, y))
            print(repo, kind, "nodes", len(y), "rate %.3f" % y.mean(), "speedup",
                  res["predicted_speedup_without_drafting"], flush=True)
        with open(out, "wb") as fh:
            pickle.dump(data, fh)
    elif cmd == "fit":
        out, hidden = argv[1], int(argv[2])
        data = [d for path in argv[3:] for d in pickle.load(open(path, "rb"))]
        X = np.concatenate([d[2] for d in data])
        X = strip_context(X) if NO_CONTEXT else X
        y = np.concatenate([d[3] for d in data])
        net = fit(X, y, hidden)
        with torch.no_grad():
            p = net(torch.from_numpy(X)).numpy()
        q = 1 / (1 + np.exp(-X[:, 0]))
        print("train nodes", len(y), "rate %.3f" % y.mean(), "log loss bucket %.4f model %.4f"
              % (log_loss(q, y), log_loss(p, y)), flush=True)
        torch.save(net, out)
    elif cmd == "eval":  # held-out log loss
        net = torch.load(argv[1], weights_only=False)
        for path in argv[2:]:
            for repo, kind, X, y in pickle.load(open(path, "rb")):
                X = strip_context(X) if NO_CONTEXT else X
                with torch.no_grad():
                    p = net(torch.from_numpy(X)).numpy()
                q = 1 / (1 + np.exp(-X[:, 0]))
                print(repo, kind, "nodes", len(y), "log loss bucket %.4f model %.4f" % (log_loss(q, y), log_loss(p, y)))
    elif cmd == "replay":
        net = torch.load(argv[1], weights_only=False)
        repo, kind, variants = argv[2], argv[3], argv[4].split(",")
        from engine import load_model  # noqa: PLC0415
        classes = token_classes(load_model(str(md.DEFAULT_MODEL)).tokenizer)
        for v in variants:
            install(classes, model=None if v == "base" else net, mode=v)
            res = run_replay(repo, kind)
            print(kind, repo, v, "accepted", res["accepted_length"], "tree", res["mean_tree"], "predicted",
                  res["predicted_speedup_without_drafting"], "pruned", res["oracle_pruned_speedup"], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
