"""``fastcoder fit-draft-head``: train a model's draft head (:mod:`engine.draft_head`) and calibrate it on repositories
that are not the user's.

1. **Head.** One residual block on the final hidden state, trained (Adam, cross-entropy through the model's frozen
   output embedding) to predict, at every position i of standard-library files (the model's training text), the
   model's own greedy choice at position i + 1: the token after the one it is about to write (Medusa, Cai et al.
   2024, section 2.1.1), and on a fill-in-the-middle sample cut from each window (the editor's prompts: the model
   writing a middle after ``<fim_middle>``). With ``--pending-token`` the block also reads the embedding of the
   token after i (Hydra, Ankner et al. 2024: at a step, the pending token). Then a least-squares fit of the head's
   log-normaliser as a linear function of h'.
2. **Calibration.** On the benchmark's tasks of ``--repo`` repositories, fastcoder drafts along the model's own
   greedy output (as ``fit-acceptance-prior`` does, a flat verify cost so every candidate is in the tree) with the
   head fed the hidden state a real step would have; every depth-1 candidate whose estimate the head adjusted is
   one observation (the engine's estimate, the head's log-probability, whether the model's next token was it); a
   logistic fit gives the starting weights that :class:`engine.draft_head.DepthOneFeature` keeps learning online.

Written where :func:`engine.draft_head.find_draft_head` looks (the user cache), so the server and the benchmark use
it from then on. Cost (tiny-py-coder, one core of the project's 2-core CPU): ~7 minutes for the 520K training pairs
of the standard library's 168 top-level files, ~2.5 minutes per epoch, ~3 minutes of calibration on three
repositories: ~17 minutes with the defaults. The packaged head (``engine/data/draft_head/``) is rank 128: at rank
256 (full) its top-1 was 34.4% against 31.0% but a step's head work streams twice the bytes (~65 us against ~45 us
a step with the caches cold, ``benchmarks/results/2026-11-26k/exp_head_parts.py``), and the oracle replay gave the
two the same gain.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from .tasks import BenchError


def standard_library_files() -> list[str]:
    """The standard library's top-level ``.py`` files (sorted; :func:`engine.common_datastore.stdlib_root`)."""
    from ..common_datastore import stdlib_root  # noqa: PLC0415

    return sorted(str(p) for p in stdlib_root().glob("*.py"))


def _hidden_and_choice(model, ids: list[int]):
    """(T, d) float32 final hidden states (after the last norm) and (T,) int64 greedy choices of ``ids``."""
    import torch  # noqa: PLC0415

    x = torch.tensor([ids], device=model.device)
    h = model.base_model(input_ids=x).last_hidden_state[0].float()
    emb = model.get_output_embeddings().weight.float()
    return h.cpu(), (h @ emb.T).argmax(-1).cpu()


def fim_sample(ids: list[int], fim_ids: tuple[int, int, int], rng: random.Random) -> tuple[list[int], int]:
    """A prefix-suffix-middle sample cut from ``ids`` (>= 96 tokens): a middle of 4-48 tokens at a random place,
    up to 512 tokens of prefix and 128 of suffix around it. Returns (sample, index of the FIM middle token): the
    positions from there on are where the model writes the middle, as in a completion the editor asks for."""
    prefix_id, suffix_id, middle_id = fim_ids
    length = rng.randint(4, 48)
    at = rng.randint(16, len(ids) - length - 16)
    prefix, middle, suffix = ids[max(0, at - 512):at], ids[at:at + length], ids[at + length:at + length + 128]
    sample = [prefix_id, *prefix, suffix_id, *suffix, middle_id, *middle]
    return sample, len(prefix) + len(suffix) + 2


def training_pairs(loaded, files: list[str], window: int = 1024, seed: int = 0):
    """(H, X, Y): (P, d) float32 final hidden states h_i, (P,) int64 the text's token i + 1 (the pending token's
    stand-in: where the model is right, its own choice at i) and (P,) int64 the model's greedy choice at i + 1, from
    windows of ``window`` tokens (the model's context) of the first 4,096 tokens of each of ``files`` and, where the
    tokenizer has FIM tokens, one fill-in-the-middle sample from each window (:func:`fim_sample`).

    Raises:
        ValueError: no file gave a training pair.
    """
    import torch  # noqa: PLC0415

    from ..fim import detect_fim_template  # noqa: PLC0415

    model, tok = loaded.model, loaded.tokenizer
    rng = random.Random(seed)
    fim = detect_fim_template(tok)
    hs, xs, ys = [], [], []
    with torch.inference_mode():
        for f in files:
            try:
                text = Path(f).read_text(encoding="utf-8", errors="ignore")
            except OSError:
                continue
            ids = tok(text, add_special_tokens=False)["input_ids"]
            for s in range(0, max(min(len(ids), 4096) - 64, 0), window):
                piece = ids[s:s + window]
                samples = [(piece, 0)]
                if fim is not None and len(piece) >= 96:  # the editor's prompts: a middle after a FIM prompt
                    samples.append(fim_sample(piece, fim[1], rng))
                for sample, start in samples:
                    h, choice = _hidden_and_choice(model, sample)
                    hs.append(h[start:-1].clone())  # h_i, token i + 1 -> the model's choice at i + 1
                    xs.append(torch.tensor(sample[start + 1:], dtype=torch.long))
                    ys.append(choice[start + 1:].clone())
    if not hs:
        raise ValueError("no training text (the files are empty or unreadable)")
    return torch.cat(hs), torch.cat(xs), torch.cat(ys)


def train_head(H, X, Y, embedding, rank: int = 256, epochs: int = 4, lr: float = 1e-3, seed: int = 0,
               progress: bool = True, pending_token: bool = False):
    """A :class:`engine.draft_head.DraftHead` of width ``rank`` trained on :func:`training_pairs`' ``(H, X, Y)``
    through the model's frozen output ``embedding`` ((V, d) float tensor, tied with the input embedding) (Adam,
    cross-entropy, batches of 1,024; the block starts as the identity), with its linear log-normaliser fitted by
    least squares on 50,000 of the states. ``pending_token``: the block also reads ``embedding[X]`` (Hydra's head,
    ``w1e``), else h alone (Medusa's). Calibration left at the identity.

    Measured (tiny-py-coder, ``benchmarks/results/2026-11-28f``): the pending token's term lowers the calibrated
    depth-1 estimate's log loss on three unseen repositories 0.2205 -> 0.2066 (the engine's estimate alone: 0.2738),
    AUC 0.930 -> 0.940, and raised the accepted length in 4 of 6 cells by 1-4%, but in wall clock it was no faster on
    the project's CPU (paired 0.984, 0.958-1.010), so the packaged head is Medusa's and the term is opt-in."""
    import torch  # noqa: PLC0415

    from ..draft_head import DraftHead  # noqa: PLC0415

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    emb = embedding.detach().float().cpu()
    d = H.shape[1]
    w1, w2 = torch.nn.Linear(d, rank), torch.nn.Linear(rank, d)
    w1e = torch.nn.Linear(d, rank, bias=False) if pending_token else None
    torch.nn.init.zeros_(w2.weight)
    torch.nn.init.zeros_(w2.bias)  # starts as the identity: h' = h
    params = list(w1.parameters()) + list(w2.parameters()) + (list(w1e.parameters()) if w1e is not None else [])
    opt = torch.optim.Adam(params, lr=lr)

    def head(x, pending):
        a = w1(x) if w1e is None else w1(x) + w1e(emb[pending])
        return x + w2(torch.nn.functional.silu(a))

    for epoch in range(epochs):
        perm = torch.randperm(len(Y), generator=gen)
        total = 0.0
        for b in range(0, len(Y), 1024):
            i = perm[b:b + 1024]
            loss = torch.nn.functional.cross_entropy(head(H[i], X[i]) @ emb.T, Y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(i)
        if progress:
            print(f"epoch {epoch + 1}/{epochs}: loss {total / len(Y):.3f} ({len(Y)} pairs)", file=sys.stderr)
    with torch.no_grad():
        pick = torch.randperm(len(H), generator=gen)[:50000]
        hp = head(H[pick], X[pick])
        lse = torch.logsumexp(hp @ emb.T, -1)
        design = torch.cat([hp, torch.ones(len(hp), 1)], 1).double()
        sol = torch.linalg.lstsq(design, lse[:, None].double()).solution[:, 0]
        rmse = float((design @ sol - lse.double()).pow(2).mean().sqrt())
        top1 = float(((head(H[:20000], X[:20000]) @ emb.T).argmax(-1) == Y[:20000]).float().mean())
    info = {"pairs": int(len(Y)), "rank": rank, "epochs": epochs, "top1": round(top1, 4), "lse_rmse": round(rmse, 4)}
    return DraftHead(w1.weight.detach().numpy(), w1.bias.detach().numpy(), w2.weight.detach().numpy(),
                     w2.bias.detach().numpy(), sol[:-1].float().numpy(), float(sol[-1]), info=info,
                     w1e=w1e.weight.detach().numpy() if w1e is not None else None)


def collect_depth_one(loaded, feature, repo: Path, kind: str, num_tasks: int, seed: int, max_new_tokens: int,
                      common=None) -> tuple[np.ndarray, np.ndarray]:
    """Depth-1 observations for the calibration from one repository and task kind (see the module docstring).

    Args:
        feature: a :class:`engine.draft_head.DepthOneFeature` (its calibration should be the identity and its
            learning rate 0: the trees are then the engine's own).
    Returns:
        ``(x, accepted)``: (N, 2) float64 (the engine's estimate q, the head's log-probability f) and (N,) bool.
    Raises:
        BenchError: no task of ``kind`` in ``repo``.
    """
    import torch  # noqa: PLC0415

    from ..acceptance import AcceptanceEstimator  # noqa: PLC0415
    from .fit_prior import replay_drafts  # noqa: PLC0415

    estimator = AcceptanceEstimator()
    estimator.depth_one = feature
    hidden = []

    def on_task(prompt: list[int], reference: list[int]) -> None:  # the whole output's hidden states, one forward
        with torch.inference_mode():
            hidden[:] = [_hidden_and_choice(loaded.model, prompt + reference)[0]]

    def before_step(context: np.ndarray) -> None:  # the row whose choice was the pending token (context[-1])
        feature.set_hidden(hidden[0][len(context) - 2], int(context[-1]))

    xs: list[tuple[float, float]] = []
    ys: list[bool] = []
    for step in replay_drafts(loaded, repo, kind, num_tasks, seed, max_new_tokens, estimator, common, on_task,
                              before_step):
        seen = int(feature.seen_tokens[0])
        for j, tok in enumerate(feature.seen_tokens[1:1 + seen].tolist()):  # every recorded depth-1 candidate
            xs.append((float(feature.seen_values[2 * j]), float(feature.seen_values[2 * j + 1])))
            ys.append(tok == step.target[0])  # what the decoder's calibration learns from (DepthOneFeature.learn)
        feature.seen_tokens[0] = 0
    feature.disable()
    return np.asarray(xs, dtype=np.float64).reshape(-1, 2), np.asarray(ys, dtype=bool)


def fit_calibration(x: np.ndarray, accepted: np.ndarray, l2: float = 1e-3, iterations: int = 50) -> np.ndarray:
    """(3,) float64 logistic weights (w_q, w_f, w_0) of ``accepted`` on (logit(q), f, 1) by Newton's method (L2
    ``l2`` per observation on w_q and w_f). ``x``: (N, 2) (q, f). Raises ValueError with fewer than 10 observations
    or a single outcome."""
    from ..draft_head import EPS  # noqa: PLC0415

    y = np.asarray(accepted, dtype=np.float64)
    if len(y) < 10 or y.min() == y.max():
        raise ValueError(f"calibration needs accepted and rejected depth-1 nodes, got {int(y.sum())} of {len(y)}")
    q = np.clip(x[:, 0], EPS, 1 - EPS)
    X = np.stack([np.log(q / (1 - q)), x[:, 1], np.ones(len(q))], axis=1)
    penalty = np.array([l2, l2, 0.0]) * len(y)
    w = np.array([1.0, 0.0, 0.0])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        grad = X.T @ (y - p) - penalty * (w - np.array([1.0, 0.0, 0.0]))
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.diag(penalty) + 1e-9 * np.eye(3)
        step = np.linalg.solve(hess, grad)
        w += step
        if np.max(np.abs(step)) < 1e-9:
            break
    return w


def add_command(sub) -> None:
    """Register ``fit-draft-head`` on an ``argparse`` subparsers object."""
    from .fit_prior import add_replay_arguments  # noqa: PLC0415

    p = sub.add_parser("fit-draft-head", help="train and calibrate the draft head for a model",
                       description=__doc__.split("\n\n")[0])
    add_replay_arguments(p, "head")
    p.add_argument("--train-files", type=int, default=250, help="standard-library files to train on")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--rank", type=int, default=128, help="width of the head's residual block (d: full rank)")
    p.add_argument("--pending-token", action="store_true",
                   help="Hydra's head, which also reads the pending token (default: Medusa's, on the hidden state "
                        "alone)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..acceptance_prior import model_identity  # noqa: PLC0415
    from ..draft_head import DepthOneFeature, default_head_folder, head_file_name, output_embedding  # noqa: PLC0415
    from .fit_prior import collect_all, load_for_replay  # noqa: PLC0415

    if args.train_files < 1 or args.epochs < 1 or args.rank < 1:
        print("fastcoder: error: --train-files, --epochs and --rank must be >= 1", file=sys.stderr)
        return 2
    ready = load_for_replay(args, "cpu", "float32")
    if ready is None:
        return 2
    loaded, common, kinds = ready
    emb = output_embedding(loaded.model)
    if emb is None:
        print("fastcoder: error: the model's output embedding is not a CPU float32 matrix", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    files = standard_library_files()
    random.Random(args.seed).shuffle(files)
    try:
        H, X, Y = training_pairs(loaded, files[:args.train_files], seed=args.seed)
    except ValueError as err:
        print(f"fastcoder: error: {err}", file=sys.stderr)
        return 2
    head = train_head(H, X, Y, loaded.model.get_output_embeddings().weight, rank=args.rank, epochs=args.epochs,
                      seed=args.seed, pending_token=args.pending_token)
    head.info["files"] = min(len(files), args.train_files)
    feature = DepthOneFeature(head, emb, learning_rate=0.0)
    xs, ys, sources = collect_all(
        args, kinds, lambda repo, kind: collect_depth_one(loaded, feature, repo, kind, args.tasks, args.seed,
                                                          args.max_new_tokens, common), "depth-1 nodes")
    x = np.concatenate(xs) if xs else np.zeros((0, 2))
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=bool)
    try:
        head.calibration = fit_calibration(x, y)
    except ValueError as err:
        print(f"fastcoder: error: {err}", file=sys.stderr)
        return 2
    head.model = model_identity(loaded.model)
    head.info.update({"model_name": Path(str(loaded.name)).name, "calibrated_on": sources, "nodes": int(len(y)),
                      "accepted_rate": round(float(y.mean()), 4), "task_seed": args.seed, "tasks": args.tasks,
                      "common": args.common, "seconds": round(time.perf_counter() - t0, 1)})
    out = args.out or default_head_folder() / head_file_name(head.model)
    path = head.save(out)
    print(json.dumps({"path": str(path), **head.describe()}))
    return 0
