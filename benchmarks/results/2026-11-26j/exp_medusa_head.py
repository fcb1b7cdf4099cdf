"""Could the model's own hidden state tell which first draft token it will accept? An offline estimate.

A Medusa-style head (h' = h + W2 SiLU(W1 h), logits through the model's tied embedding) is trained on the standard
library (the model's training set) to predict, from the final hidden state h_i at position i, the model's own
greedy choice at position i + 1 (the token after the pending token). On the benchmark's widest fastcoder trees
(../2026-11-26h/exp_collect.py's wide-*.pkl, `function`, 10 tasks per repository) the head's probability of every
depth-1 candidate is combined with the engine's estimate by a logistic calibration fitted on the other two
repositories (leave-one-repository-out), and the trees are re-selected on the measured curve
(../2026-11-26h/exp_sim.py): predicted tokens per unit of verify cost, against the engine's estimates alone, the
depth-1 oracle and the full oracle.

Usage: CEILING_DATA=/tmp/fastcoder-ceiling .venv/bin/python benchmarks/results/2026-11-26j/exp_medusa_head.py
(train: ~4 min on one core, $TRAIN_FILES standard-library files, $EPOCHS epochs; the head and the features are cached
in $CEILING_DATA/medusa-*: delete them to retrain)."""
import glob, os, pickle, random, sys
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "2026-11-26h")]
import exp_sim  # noqa: E402  (sets sys.path: the repository, benchmarks/)
from exp_paths import DATA, MODEL  # noqa: E402
import numpy as np, torch  # noqa: E402
torch.set_num_threads(int(os.environ.get("THREADS", "1")))
from engine import load_model  # noqa: E402

loaded = load_model(MODEL)
model, tok = loaded.model, loaded.tokenizer
E = model.get_output_embeddings().weight.detach().float()  # (V, 256), tied with the input embedding


@torch.inference_mode()
def hidden_and_choice(ids: list[int]):
    """(T, 256) final hidden states (after the last norm) and (T,) the model's greedy next token at each position."""
    x = torch.tensor([ids])
    h = model.model(input_ids=x).last_hidden_state[0].float()
    return h, (h @ E.T).argmax(-1)


class Head(torch.nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.w1, self.w2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        torch.nn.init.zeros_(self.w2.weight); torch.nn.init.zeros_(self.w2.bias)

    def hidden(self, h):
        return h + self.w2(torch.nn.functional.silu(self.w1(h)))

    def forward(self, h):
        return self.hidden(h) @ E.T


def train_head(path: Path) -> Head:
    head = Head()
    if path.exists():
        head.load_state_dict(torch.load(path)); return head
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
    random.Random(0).shuffle(files)
    H, Y = [], []
    for f in files[:int(os.environ.get("TRAIN_FILES", "120"))]:
        ids = tok(open(f, encoding="utf-8", errors="ignore").read())["input_ids"]
        for s in range(0, min(len(ids), 4096) - 64, 1024):
            h, choice = hidden_and_choice(ids[s:s + 1024])
            H.append(h[:-1]); Y.append(choice[1:])  # h_i -> the model's choice at i + 1 (after token i + 1)
    H, Y = torch.cat(H), torch.cat(Y)
    print("train pairs", len(Y), flush=True)
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    for epoch in range(int(os.environ.get("EPOCHS", "3"))):
        perm = torch.randperm(len(Y))
        tot = 0.0
        for b in range(0, len(Y), 1024):
            i = perm[b:b + 1024]
            loss = torch.nn.functional.cross_entropy(head(H[i]), Y[i])
            opt.zero_grad(); loss.backward(); opt.step(); tot += float(loss) * len(i)
        with torch.no_grad():
            acc = float((head(H[:20000]).argmax(-1) == Y[:20000]).float().mean())
        print(f"epoch {epoch} loss {tot / len(Y):.3f} top-1 (train sample) {acc:.3f}", flush=True)
    torch.save(head.state_dict(), path)
    return head


def features(head: Head, repo: str) -> list:
    """Per step of wide-{repo}-function.pkl: the head's probability of each depth-1 node's token (None elsewhere)."""
    from measure_drafting import replay_setup
    out_path = Path(DATA) / f"medusa-{repo}.pkl"
    if out_path.exists():
        return pickle.load(open(out_path, "rb"))
    _, tasks, refs, _, _ = replay_setup(MODEL, f"{ROOT_SITE}/{repo}", "stdlib", 10, 0, 128, "function")
    steps = pickle.load(open(f"{DATA}/wide-{repo}-function.pkl", "rb"))
    probs = {}
    for t in tasks:
        full = list(t.prompt_ids) + list(refs[t.task_id])
        h, _ = hidden_and_choice(full)
        with torch.no_grad():
            hh = head.hidden(h)
            logits = hh @ E.T
            probs[t.task_id] = (logits, torch.logsumexp(logits, -1), hh, len(t.prompt_ids), full)
    feats = []
    for s in steps:
        logits, lse, hh, plen, full = probs[s["task"]]
        n = s["ctx_len"]
        z = logits[n - 2]  # the head at the position whose choice was the pending token: the token after it
        top = np.flatnonzero(s["parents"] == -1)
        feats.append(dict(top=top, logit=np.array([float(z[int(s["tokens"][i])]) for i in top]), lse=float(lse[n - 2]),
                          lse_hat=float(hh[n - 2] @ LSE_FIT[0] + LSE_FIT[1]), zmax=float(z.max())))
    pickle.dump(feats, open(out_path, "wb"))
    return feats


def fit_lse(head: Head):
    """The head's log-normaliser as a linear function of its hidden state (least squares on standard-library text):
    what a step could compute instead of the 8,192-row product."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
    random.Random(1).shuffle(files)
    H = []
    for f in files[:30]:
        ids = tok(open(f, encoding="utf-8", errors="ignore").read())["input_ids"][:1024]
        if len(ids) > 64:
            H.append(hidden_and_choice(ids)[0])
    with torch.no_grad():
        hh = head.hidden(torch.cat(H))
        lse = torch.logsumexp(hh @ E.T, -1)
        X = torch.cat([hh, torch.ones(len(hh), 1)], 1)
        sol = torch.linalg.lstsq(X, lse[:, None]).solution[:, 0]
        print(f"lse fit: rmse {float((X @ sol - lse).pow(2).mean().sqrt()):.3f} (lse std {float(lse.std()):.3f})", flush=True)
    return sol[:-1], sol[-1]


ROOT_SITE = str(exp_sim._HERE.parents[2] / ".venv" / "lib" / "python3.11" / "site-packages")
head = train_head(Path(DATA) / "medusa-head.pt")
LSE_FIT = fit_lse(head)
repos = ["pluggy", "jinja2", "pygls"]
data = {r: (pickle.load(open(f"{DATA}/wide-{r}-function.pkl", "rb")), features(head, r)) for r in repos}


def head_feature(f, j, approx):
    return f["logit"][j] - (f["lse_hat"] if approx else f["lse"])


def rows(r, approx=False):
    X, y = [], []
    for s, f in zip(*data[r]):
        if s["probs"] is None or not len(f["top"]):
            continue
        acc = set(s["path"][:1])
        for j, i in enumerate(f["top"]):
            q = min(max(float(s["probs"][i]), 1e-4), 1 - 1e-4)
            X.append([np.log(q / (1 - q)), head_feature(f, j, approx)]); y.append(i in acc)
    return np.array(X), np.array(y, dtype=float)


def fit(X, y, iters=3000, lr=0.1):
    Xb = np.hstack([X, np.ones((len(X), 1))]); w = np.zeros(Xb.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-Xb @ w)); w -= lr * Xb.T @ (p - y) / len(y)
    return w


def depth1_oracle(s):
    """The engine's estimates, the depth-1 nodes' replaced by what the model did (1 accepted, 0 not)."""
    if s["probs"] is None or not len(s["tokens"]):
        return None
    q = np.array(s["probs"], dtype=float).copy()
    for i in np.flatnonzero(s["parents"] == -1):
        q[i] = 1.0 if i in s["path"][:1] else 0.0
    return q


def full_oracle(s):
    q = np.zeros(len(s["tokens"]))
    q[s["path"]] = 1.0
    return q


for r in repos:
    steps = data[r][0]
    print(f"{r}: predicted speedup engine {exp_sim.rate(steps, lambda s: s['probs']):.3f}, depth-1 oracle "
          f"{exp_sim.rate(steps, depth1_oracle):.3f}, full oracle {exp_sim.rate(steps, full_oracle):.3f}", flush=True)

for approx in (False, True):
    print("normaliser:", "linear estimate from h'" if approx else "exact (8,192 logits)")
    for r in repos:
        X, y = rows(r, approx)
        auc_engine = float(np.mean([a > b for a in X[y == 1, 0] for b in X[y == 0, 0]]))
        auc_head = float(np.mean([a > b for a in X[y == 1, 1] for b in X[y == 0, 1]]))
        others = [rows(o, approx) for o in repos if o != r]
        w = fit(np.vstack([o[0] for o in others]), np.concatenate([o[1] for o in others]))
        steps, feats = data[r]

        def with_head(s, f):
            if s["probs"] is None or not len(s["tokens"]):
                return None
            q = np.array(s["probs"], dtype=float).copy()
            for j, i in enumerate(f["top"]):
                qi = min(max(q[i], 1e-4), 1 - 1e-4)
                x = np.array([np.log(qi / (1 - qi)), head_feature(f, j, approx), 1.0])
                q[i] = 1 / (1 + np.exp(-x @ w))
            return q
        fmap = {id(s): f for s, f in zip(steps, feats)}
        cur = exp_sim.rate(steps, lambda s: s["probs"])
        new = exp_sim.rate(steps, lambda s: with_head(s, fmap[id(s)]))
        print(f"  {r}: depth-1 nodes {len(y)} accepted {y.mean():.3f}; AUC engine {auc_engine:.3f} head {auc_head:.3f}; "
              f"predicted speedup engine {cur:.3f} -> with head {new:.3f} ({new / cur - 1:+.1%}); weights {np.round(w, 2)}",
              flush=True)

print("the head used only to skip drafting (linear normaliser): no tree when the calibrated P(a depth-1 node is "
      "accepted) summed over the candidates is below the threshold, else the engine's tree")
for r in repos:
    others = [rows(o, True) for o in repos if o != r]
    w = fit(np.vstack([o[0] for o in others]), np.concatenate([o[1] for o in others]))
    steps, feats = data[r]
    fmap = {id(s): f for s, f in zip(steps, feats)}
    cur = exp_sim.rate(steps, lambda s: s["probs"])
    out = []
    for th in (0.05, 0.1, 0.2, 0.3):
        def skip(s, th=th):
            if s["probs"] is None or not len(s["tokens"]):
                return None
            f = fmap[id(s)]
            pany = 0.0
            for j, i in enumerate(f["top"]):
                qi = min(max(float(s["probs"][i]), 1e-4), 1 - 1e-4)
                pany += 1 / (1 + np.exp(-np.array([np.log(qi / (1 - qi)), head_feature(f, j, True), 1.0]) @ w))
            return np.zeros(len(s["tokens"])) if pany < th else np.array(s["probs"], dtype=float)
        v = exp_sim.rate(steps, skip)
        out.append(f"below {th}: {v:.3f} ({v / cur - 1:+.1%})")
    print(f"  {r}: engine {cur:.3f}; " + "; ".join(out), flush=True)
