"""Does the pending token make the draft head a better judge of depth-1 candidates? An offline check.

The packaged draft head (Medusa-style, rank 128) scores each depth-1 candidate from the final hidden state of the row
whose choice was the pending token. A Hydra-style head (Ankner et al. 2024) also reads the pending token's embedding:
h' = h + W2 SiLU(W1h h + W1e E[pending] + b1) + b2 (the E[pending] term is a (V, r) table lookup in an engine).
Both are trained the same way (fit_head's training text: standard-library windows and a FIM sample per window, the
target the model's own greedy choice one position later), then scored on the depth-1 candidates of fastcoder's trees
(fit_prior.replay_drafts: the model's greedy output, a flat verify cost, every candidate in the tree): AUC of the
feature alone, and of the calibrated estimate sigmoid(w_q logit(q) + w_f f + w_0) fitted on click / rich /
markdown_it and scored on jinja2 / pluggy / pygls (log loss and AUC against the engine's q alone).

Usage: OMP_NUM_THREADS=2 .venv/bin/python benchmarks/results/2026-11-28f/exp_hydra_feature.py ($TRAIN_FILES, $EPOCHS)
"""
import os, random, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import numpy as np  # noqa: E402
import torch  # noqa: E402
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
from engine.bench import fit_head  # noqa: E402
from engine.bench.cli import _load_common  # noqa: E402
from engine.fim import detect_fim_template  # noqa: E402
from engine import load_model  # noqa: E402
from depth_one_replay import cell_candidates  # noqa: E402

loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
model, tok = loaded.model, loaded.tokenizer
E = model.get_output_embeddings().weight.detach().float()
SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
t0 = time.time()


@torch.inference_mode()
def training_triples(files, window=1024, seed=0):
    """fit_head.training_pairs, plus the token after each position (the pending token's stand-in)."""
    rng, fim = random.Random(seed), detect_fim_template(tok)
    hs, xs, ys = [], [], []
    for f in files:
        ids = tok(Path(f).read_text(encoding="utf-8", errors="ignore"), add_special_tokens=False)["input_ids"]
        for s in range(0, max(min(len(ids), 4096) - 64, 0), window):
            piece = ids[s:s + window]
            samples = [(piece, 0)]
            if fim is not None and len(piece) >= 96:
                samples.append(fit_head.fim_sample(piece, fim[1], rng))
            for sample, start in samples:
                h, choice = fit_head._hidden_and_choice(model, sample)
                hs.append(h[start:-1].clone()); ys.append(choice[start + 1:].clone())
                xs.append(torch.tensor(sample[start + 1:]))
    return torch.cat(hs), torch.cat(xs), torch.cat(ys)


class Head(torch.nn.Module):
    def __init__(self, hydra, d=256, r=128):
        super().__init__()
        self.hydra = hydra
        self.w1, self.w2 = torch.nn.Linear(d, r), torch.nn.Linear(r, d)
        self.w1e = torch.nn.Linear(d, r, bias=False) if hydra else None
        torch.nn.init.zeros_(self.w2.weight); torch.nn.init.zeros_(self.w2.bias)

    def hidden(self, h, x):
        a = self.w1(h) + (self.w1e(E[x]) if self.hydra else 0)
        return h + self.w2(torch.nn.functional.silu(a))


def train(head, H, X, Y, epochs):
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        perm = torch.randperm(len(Y), generator=gen)
        for b in range(0, len(Y), 1024):
            i = perm[b:b + 1024]
            loss = torch.nn.functional.cross_entropy(head.hidden(H[i], X[i]) @ E.T, Y[i])
            opt.zero_grad(); loss.backward(); opt.step()
    return head


files = fit_head.standard_library_files()
random.Random(0).shuffle(files)
H, X, Y = training_triples(files[:int(os.environ.get("TRAIN_FILES", "250"))])
print(f"training pairs {len(Y)} ({time.time() - t0:.0f} s)", flush=True)
heads = {}
for name, hydra in (("medusa", False), ("hydra", True)):
    torch.manual_seed(0)
    heads[name] = train(Head(hydra), H, X, Y, int(os.environ.get("EPOCHS", "4")))
    with torch.no_grad():
        top1 = float((heads[name].hidden(H[:20000], X[:20000]) @ E.T).argmax(-1).eq(Y[:20000]).float().mean())
    print(f"{name}: trained, top-1 on 20,000 training pairs {top1:.3f} ({time.time() - t0:.0f} s)", flush=True)
del H, X, Y

common = _load_common(loaded, "stdlib")
rows = []  # (repo index, kind index, q, f_medusa, f_hydra, accepted)
REPOS = ("click", "rich", "markdown_it", "jinja2", "pluggy", "pygls")
KINDS = ("function", "fim-block", "fim-line")
for ri, repo in enumerate(REPOS):
    for ki, kind in enumerate(KINDS):
        n0 = len(rows)
        for h, pending, cands, qs, accepted in cell_candidates(loaded, common, SITE / repo, kind):
            with torch.inference_mode():
                feats = []
                for name in ("medusa", "hydra"):
                    z = heads[name].hidden(h[None], torch.tensor([pending])) @ E.T
                    feats.append((z[0] - torch.logsumexp(z[0], -1))[cands].tolist())
            rows += [(ri, ki, q, f0, f1, y) for q, f0, f1, y in zip(qs, feats[0], feats[1], accepted)]
        print(f"{repo} {kind}: {len(rows) - n0} depth-1 candidates ({time.time() - t0:.0f} s)", flush=True)
A = np.array(rows, dtype=np.float64)
np.save(os.environ.get("OUT", "/tmp/hydra_rows.npy"), A)


def auc(s, y):
    order = np.argsort(s, kind="mergesort"); ranks = np.empty(len(s)); ranks[order] = np.arange(1, len(s) + 1)
    pos = y.sum(); return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * (len(y) - pos)))


def design(B, col):
    q = np.clip(B[:, 2], 1e-4, 1 - 1e-4)
    cols = [np.log(q / (1 - q))] + ([B[:, col]] if col else []) + [np.ones(len(B))]
    return np.stack(cols, 1)


def fit(X, y, l2=1e-3):
    w = np.zeros(X.shape[1]); pen = l2 * len(y) * np.ones(X.shape[1]); pen[-1] = 0
    for _ in range(60):
        p = 1 / (1 + np.exp(-X @ w))
        g = X.T @ (y - p) - pen * w
        Hs = (X * (p * (1 - p))[:, None]).T @ X + np.diag(pen) + 1e-9 * np.eye(len(w))
        w += np.linalg.solve(Hs, g)
    return w


train_rows, test_rows = A[A[:, 0] < 3], A[A[:, 0] >= 3]
for label, sel in (("all kinds", slice(None)),):
    pass
for ki, kind in enumerate(KINDS + ("all",)):
    tr = train_rows if kind == "all" else train_rows[train_rows[:, 1] == ki]
    te = test_rows if kind == "all" else test_rows[test_rows[:, 1] == ki]
    if len(te) < 20 or len(tr) < 20:
        continue
    y_tr, y_te = tr[:, 5], te[:, 5]
    line = [f"{kind}: test candidates {len(te)} accepted {y_te.mean():.3f};",
            f"AUC q {auc(te[:, 2], y_te):.3f} medusa f {auc(te[:, 3], y_te):.3f} hydra f {auc(te[:, 4], y_te):.3f};"]
    for name, col in (("q", 0), ("q+medusa", 3), ("q+hydra", 4)):
        w = fit(design(tr, col), y_tr)
        p = np.clip(1 / (1 + np.exp(-design(te, col) @ w)), 1e-6, 1 - 1e-6)
        ll = float(-np.mean(y_te * np.log(p) + (1 - y_te) * np.log(1 - p)))
        line.append(f"{name}: logloss {ll:.4f} AUC {auc(p, y_te):.3f}")
    print(" ".join(line), flush=True)
print(f"done ({time.time() - t0:.0f} s)")
