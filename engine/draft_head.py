"""A draft head on the model's final hidden state: how likely the model is to accept each depth-1 draft node.

The acceptance estimates (:mod:`engine.acceptance`) see only where a draft came from (source, depth, share, matched
length); the model itself knows more. Medusa (Cai et al., ICML 2024, section 2.1.1) reads the token after next off
the last hidden state with one residual block: ``h' = h + W2 SiLU(W1 h + b1) + b2``, logits ``h' @ E^T`` through
the model's own output embedding E. Here that head is not a drafter: it scores the candidates the retrieval sources
already propose at depth 1 (the token after the pending one), and its log-probability enters the node's estimate
through a logistic calibration with the engine's own estimate q,

    P(accepted) = sigmoid(w_q logit(q) + w_f (E[token] . h' - lse_hat) + w_0),

learned online from what verification accepted (:meth:`DepthOneFeature.learn`). ``lse_hat = a . h' + b`` is a
linear fit of the head's log-normaliser (the exact one is an 8,192-row product per step; the linear one kept
nearly all of the gain offline). A step then costs two d x d products and one dot product per depth-1 candidate.

The head is trained per model on the standard library to predict the model's own greedy choice one position later
(:mod:`engine.bench.fit_head`, ``fastcoder fit-draft-head``); it is tied to the model by
:func:`engine.acceptance_prior.model_identity` and found like the acceptance prior (``$FASTCODER_DRAFT_HEAD``, the
user cache's ``draft_head/``, the packaged ``engine/data/draft_head/``).

Measured (tiny-py-coder, the project's 2-core CPU, 1 thread; ``benchmarks/results/2026-11-26k/``): offline, knowing
which depth-1 node the model accepts would raise the predicted speedup 13-19% and this head 3.3-5.3%
(``../2026-11-26j/exp_medusa_head.py``); in the engine's own replay of the nine cells +0.5-2.3% tokens per unit of
verify cost; in wall clock, two runs of the nine cells against ``fastcoder-no-head``: ``function`` +1.4 to +7.4% (5
of 6 cell-runs faster), ``fim-block`` -2 to +9%, ``fim-line`` -13 to +1% (5 of 6 slower). A step pays ~45 us for it
(rank 128, caches cold). One-line completions (the decoder's ``stop`` holds ``"\n"``) therefore draft without it.

A head may also read the pending token (``w1e``: Hydra, Ankner et al. 2024; ``fit-draft-head --pending-token``):
``a = W1 h + W1e E[pending] + b1``, the second term one row of a (V, r) table a step. On tiny-py-coder it lowered the
calibrated depth-1 log loss on three unseen repositories 0.2205 -> 0.2066 and raised the accepted length in 4 of 6
cells by 1-4%, but was no faster in wall clock (paired 0.984, 0.958-1.010; ``benchmarks/results/2026-11-28f``): the
packaged head does not read it.

Lossless: the head only changes which draft nodes are verified, never what is accepted.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .cache_paths import cache_root

log = logging.getLogger(__name__)

#: Environment variable: a head file to use whatever the model, or ``off`` for none.
HEAD_ENV = "FASTCODER_DRAFT_HEAD"
#: Heads shipped with the package (one ``.npz`` per model).
PACKAGED_DIR = Path(__file__).resolve().parent / "data" / "draft_head"
#: File layout version written; a file of another version is not used (format 1: a head without ``w1e``).
FORMAT = 2
READ_FORMATS = (1, 2)
#: Calibration weights (w_q, w_f, w_0) before any fit: the engine's estimate alone.
IDENTITY_CALIBRATION = (1.0, 0.0, 0.0)
#: Estimates are clipped to [EPS, 1 - EPS] before their logit.
EPS = 1e-4
#: Head log-probabilities are clipped to [-FEATURE_FLOOR, 0] (a linear normaliser can overshoot).
FEATURE_FLOOR = 16.0
#: Depth-1 nodes one tree build records for :meth:`DepthOneFeature.learn` (more are adjusted, not recorded).
SEEN_CAP = 64
#: Online calibration: SGD step on the logistic loss per recorded depth-1 candidate.
LEARNING_RATE = 0.005


@dataclass
class DraftHead:
    """One residual block on the final hidden state, a linear log-normaliser and the calibration's starting weights.

    Attributes:
        w1: (r, d), w2: (d, r) float32, ``nn.Linear`` layout (out, in); r, the block's width, may be below d (a
            low-rank block streams fewer bytes a step). b1: (r,), b2: (d,) float32.
        w1e: (r, d) float32 or None: the pending token's embedding into the block (Hydra, Ankner et al. 2024,
            section 3: a head that also reads the token it drafts after), ``a = w1 h + w1e E[pending] + b1``;
            None: Medusa's head on h alone.
        lse_w: (d,) float32, lse_b: float: ``lse_hat = lse_w . h' + lse_b`` (nats).
        calibration: (3,) float64 (w_q, w_f, w_0), see the module docstring.
        model: :func:`engine.acceptance_prior.model_identity` of the model it was trained for.
        info: what it was trained and calibrated on (plain data).
    """

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    lse_w: np.ndarray
    lse_b: float
    calibration: np.ndarray = field(default_factory=lambda: np.array(IDENTITY_CALIBRATION))
    w1e: np.ndarray | None = None
    model: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.w1, self.w2 = (np.ascontiguousarray(w, dtype=np.float32) for w in (self.w1, self.w2))
        self.b1, self.b2, self.lse_w = (np.ascontiguousarray(v, dtype=np.float32) for v in (self.b1, self.b2, self.lse_w))
        self.calibration = np.asarray(self.calibration, dtype=np.float64).reshape(3)
        if self.w1e is not None:
            self.w1e = np.ascontiguousarray(self.w1e, dtype=np.float32)
        r, d = self.w1.shape if self.w1.ndim == 2 else (0, 0)
        if (r < 1 or self.w2.shape != (d, r) or self.b1.shape != (r,) or self.b2.shape != (d,)
                or self.lse_w.shape != (d,) or (self.w1e is not None and self.w1e.shape != (r, d))):
            raise ValueError(f"draft head: inconsistent shapes {self.w1.shape}, {self.w2.shape}, {self.b1.shape}, "
                             f"{self.b2.shape}, {self.lse_w.shape}"
                             f"{'' if self.w1e is None else f', {self.w1e.shape}'}")
        weights = (self.w1, self.w2, self.b1, self.b2, self.lse_w, self.calibration)
        if self.w1e is not None:
            weights += (self.w1e,)
        if not all(np.all(np.isfinite(a)) for a in weights) or not math.isfinite(self.lse_b):
            raise ValueError("draft head: non-finite weights")

    @property
    def dim(self) -> int:
        """d, the model's hidden size."""
        return int(self.w1.shape[1])

    @property
    def rank(self) -> int:
        """r, the residual block's width."""
        return int(self.w1.shape[0])

    def hidden(self, h: np.ndarray, out: np.ndarray | None = None, pending_row: np.ndarray | None = None) -> np.ndarray:
        """h' (d,) float32 from the final hidden state ``h`` ((d,) float32, after the model's last norm) and, for a
        head with ``w1e``, ``pending_row`` ((r,) float32: ``w1e @ E[pending]``, a row of
        :meth:`pending_table`; None: left out)."""
        a = self.w1 @ h
        if pending_row is not None:
            a += pending_row
        a += self.b1
        a *= 1.0 / (1.0 + np.exp(-a))  # SiLU
        y = self.w2 @ a
        y += self.b2
        return np.add(h, y, out=out)

    def pending_table(self, embedding: np.ndarray) -> np.ndarray | None:
        """(V, r) float32 C-contiguous ``embedding @ w1e.T``: each token's term in the block when it is the pending
        one (a row read a step instead of an r x d product), or None for a head without ``w1e``. ``embedding``:
        (V, d) float32, the model's (tied) token embedding."""
        if self.w1e is None:
            return None
        return np.ascontiguousarray(embedding @ self.w1e.T, dtype=np.float32)

    def log_normaliser(self, h_prime: np.ndarray) -> float:
        """lse_hat (nats), the linear estimate of ``logsumexp(h' @ E^T)``."""
        return float(self.lse_w @ h_prime) + self.lse_b

    def save(self, path: str | os.PathLike) -> Path:
        """Write as ``.npz`` (weights, and the metadata as JSON) to a temporary file renamed into place."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({"format": FORMAT, "lse_b": float(self.lse_b), "model": self.model, "info": self.info})
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            extra = {} if self.w1e is None else {"w1e": self.w1e}
            np.savez_compressed(fh, w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2, lse_w=self.lse_w,
                                calibration=self.calibration, meta=np.frombuffer(meta.encode(), dtype=np.uint8),
                                **extra)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shipped head from other users
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DraftHead":
        """Raises OSError (unreadable) or ValueError (not a draft head of this format)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                if meta.get("format") not in READ_FORMATS:
                    raise ValueError(f"{path}: not a draft head of format {' or '.join(map(str, READ_FORMATS))}")
                return cls(z["w1"], z["b1"], z["w2"], z["b2"], z["lse_w"], float(meta["lse_b"]), z["calibration"],
                           z["w1e"] if "w1e" in z.files else None, dict(meta.get("model") or {}),
                           dict(meta.get("info") or {}))
        except (KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not a draft head ({err})") from None
        except (ValueError, OSError):
            raise
        except Exception as err:  # noqa: BLE001 - zipfile / numpy errors of a corrupt file
            raise ValueError(f"{path}: not a draft head ({err})") from None

    def describe(self) -> dict:
        """Plain data for status and benchmark reports."""
        return {"model": self.model, "calibration": [round(float(w), 4) for w in self.calibration],
                "pending_token": self.w1e is not None, **self.info}


def logit(q: float) -> float:
    """log(q / (1 - q)) of ``q`` clipped to [EPS, 1 - EPS] (``head_logit`` in draft_head.h, the same operations)."""
    qc = EPS if q < EPS else (1.0 - EPS if q > 1.0 - EPS else q)
    return math.log(qc / (1.0 - qc))


def sigmoid(z: float) -> float:
    """1 / (1 + e^-z) for a Python float, without overflow."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class DepthOneFeature:
    """The draft head's state for the next draft tree, and its calibration learned online.

    Shared by the tree builders through :attr:`engine.acceptance.AcceptanceEstimator.depth_one`. The builders adjust
    every depth-1 node's estimate (:meth:`adjust`, and the same arithmetic in ``draft_tree.c``) and record it;
    after each verification the decoder calls :meth:`step` with the token the model committed after the pending
    one (the calibration learns whether each recorded candidate was it: :meth:`learn`), the final hidden state
    of the row whose choice was the new pending token and that token (:meth:`set_hidden`): on the CPU one C call
    does both.

    Buffers the C builder reads (fixed addresses): ``hidden`` (d,) float32 h'; ``params`` (5,) float64
    (enabled, lse_hat, w_q, w_f, w_0); ``seen_tokens`` (SEEN_CAP + 1,) int64, the count first;
    ``seen_values`` (2 * SEEN_CAP,) float64, each recorded node's (q, feature). A head with ``w1e`` also keeps
    ``pending_table`` ((V, r) float32, :meth:`DraftHead.pending_table`; 4 MB for tiny-py-coder at r = 128).

    Args:
        head: a :class:`DraftHead`.
        embedding: (V, d) float32 C-contiguous output embedding of the model (kept referenced).
        learning_rate: the calibration's SGD step (0 freezes it).
    Raises:
        ValueError: ``embedding`` is not (V, head.dim) float32.
    """

    def __init__(self, head: DraftHead, embedding: np.ndarray, learning_rate: float = LEARNING_RATE):
        if embedding.dtype != np.float32 or embedding.ndim != 2 or embedding.shape[1] != head.dim \
                or not embedding.flags.c_contiguous:
            raise ValueError(f"draft head: output embedding {embedding.dtype} {embedding.shape} is not "
                             f"(V, {head.dim}) float32 C-contiguous")
        self.head = head
        self.embedding = embedding
        self.learning_rate = float(learning_rate)
        self.hidden = np.zeros(head.dim, dtype=np.float32)
        self.params = np.zeros(5, dtype=np.float64)
        self.params[2:5] = head.calibration
        self.seen_tokens = np.zeros(SEEN_CAP + 1, dtype=np.int64)
        self.seen_values = np.zeros(2 * SEEN_CAP, dtype=np.float64)
        self.pending_table = head.pending_table(embedding)
        self.learned = 0  # depth-1 nodes learned from
        self._native = self._native_args()
        # hidden-state blocks already checked for the C call -> (address, rows, row stride): the native step hands
        # out the same few views every step, and their eight tensor attribute reads cost ~10-20 us a step with the
        # caches cold after a verify forward (the tensors are held, so an address is never another tensor's)
        self._blocks: dict = {}

    def _native_args(self):
        """(``fc_head_hidden``, ``fc_head_step``, their packed int64 and float64 arguments' addresses, the buffers
        kept alive), or None where the native library or its AVX2 kernels are not available (then :meth:`step` and
        :meth:`set_hidden` use Python and numpy)."""
        from . import native  # noqa: PLC0415

        lib = native.library()
        if lib is None or not lib.fc_gemm_supported():
            return None
        d, r = self.head.dim, self.head.rank
        panels = [np.zeros(((n + 15) // 16) * 16 * k, dtype=np.float32) for n, k in ((r, d), (d, r))]
        for (n, k), w, p in zip(((r, d), (d, r)), (self.head.w1, self.head.w2), panels):
            lib.fc_gemm_pack(w.ctypes.data, n, k, p.ctypes.data)
        scratch = np.zeros(r, dtype=np.float32)
        keep = (panels, scratch)
        da = np.array([self.head.lse_b], dtype=np.float64)
        table = self.pending_table
        ia = np.array([panels[0].ctypes.data, self.head.b1.ctypes.data, panels[1].ctypes.data, self.head.b2.ctypes.data,
                       self.head.lse_w.ctypes.data, scratch.ctypes.data, self.hidden.ctypes.data, d,
                       self.params.ctypes.data, r, self.seen_tokens.ctypes.data, self.seen_values.ctypes.data,
                       0 if table is None else table.ctypes.data, 0 if table is None else len(table)],
                      dtype=np.int64)
        return lib.fc_head_hidden, lib.fc_head_step, ia.ctypes.data, da.ctypes.data, (ia, da, keep)

    def step(self, holder: list, row: int, first: int, pending: int = -1) -> None:
        """After a verification: :meth:`learn` from ``first`` (the token committed after the pending one; < 0:
        nothing to learn from), then :meth:`set_hidden` from row ``row`` of the block of final hidden states
        ``holder[0]`` ((1, R, d) tensor, :func:`engine.lean_forward.hidden_rows`' holder) and ``pending``, the new
        pending token (that row's choice; < 0 or outside the vocabulary: the head's pending term left out), the head
        disabled when there is none or ``row`` is outside it. On the CPU in float32 one C call (``fc_head_step``) does
        both, reading the row in place (the Python calls and tensor indexing cost ~100 us a step with the caches
        cold)."""
        rows = holder[0]
        native = self._native
        if native is not None and rows is not None:
            block = self._blocks.get(rows)
            if block is None and rows.dtype == torch.float32 and rows.is_cpu and rows.dim() == 3 \
                    and rows.shape[2] == self.hidden.shape[0] and rows.stride(2) == 1:
                if len(self._blocks) >= 256:  # a new scratch's views: the old ones are let go
                    self._blocks.clear()
                block = self._blocks[rows] = (rows.data_ptr(), rows.shape[1], rows.stride(1))
            if block is not None:
                self.learned += native[1](native[2], native[3], block[0], block[1], block[2], row, first, pending,
                                          self.learning_rate)
                return
        self.learn(first)
        if rows is None or not 0 <= row < rows.shape[1]:
            self.params[0] = 0.0
            return
        self.set_hidden(rows[0, row], pending)

    @property
    def enabled(self) -> bool:
        """Whether the next tree build adjusts depth-1 estimates (a hidden state was given since the last reset)."""
        return self.params[0] != 0.0

    def disable(self) -> None:
        """No adjustment until the next :meth:`set_hidden` (e.g. the prefill's draft, before any forward)."""
        self.params[0] = 0.0

    def set_hidden(self, h, pending: int = -1) -> None:
        """Take ``h``, the (d,) final hidden state (torch tensor or numpy, any float dtype) of the row whose choice
        is the pending token, and ``pending``, that token (< 0 or outside the vocabulary: the head's pending term
        left out): h' and lse_hat for the next tree. A row of another size disables the head."""
        native = self._native
        if native is not None and isinstance(h, torch.Tensor) and h.dtype == torch.float32 \
                and h.is_cpu and h.dim() == 1 and h.shape[0] == self.hidden.shape[0] and h.is_contiguous():
            native[0](native[2], native[3], h.data_ptr(), pending)
            return
        if hasattr(h, "detach"):
            h = h.detach()
            if h.dtype.is_floating_point and h.dtype != torch.float32:
                h = h.float()
            h = h.cpu().numpy()
        h = np.asarray(h, dtype=np.float32).reshape(-1)
        if h.shape[0] != self.hidden.shape[0]:
            self.params[0] = 0.0
            return
        table = self.pending_table
        row = table[pending] if table is not None and 0 <= pending < len(table) else None
        self.head.hidden(h, out=self.hidden, pending_row=row)
        self.params[1] = self.head.log_normaliser(self.hidden)
        self.params[0] = 1.0 if math.isfinite(self.params[1]) else 0.0

    def feature(self, token: int) -> float:
        """The head's (approximate) log-probability of ``token``: ``E[token] . h' - lse_hat`` clipped to
        [-FEATURE_FLOOR, 0], accumulated in float64 in index order (the C builder's arithmetic, bit for bit)."""
        acc = 0.0
        for e, x in zip(self.embedding[token].tolist(), self.hidden.tolist()):
            acc += e * x
        f = acc - float(self.params[1])
        return 0.0 if f > 0.0 else (-FEATURE_FLOOR if f < -FEATURE_FLOOR else f)

    def calibrated(self, q: float, f: float) -> float:
        """``sigmoid(w_q logit(q) + w_f f + w_0)``, q clipped to [EPS, 1 - EPS] (the C builder's arithmetic)."""
        w = self.params
        return sigmoid(float(w[2]) * logit(q) + float(w[3]) * f + float(w[4]))

    def adjust(self, tokens: list[int], parents: list[int], probs: list[float]) -> list[float]:
        """``probs`` with each depth-1 node's (parent -1, estimate > 0, token in the vocabulary) replaced by its
        calibrated estimate, recorded for :meth:`learn` (the first SEEN_CAP); other nodes unchanged. Python lists
        in and out; the recording is reset first. Does nothing when disabled."""
        self.seen_tokens[0] = 0
        if not self.enabled:
            return probs
        vocab = self.embedding.shape[0]
        out = list(probs)
        seen = 0
        for i, (tok, up, q) in enumerate(zip(tokens, parents, probs)):
            if up >= 0 or not q > 0.0 or not 0 <= tok < vocab:
                continue
            f = self.feature(tok)
            out[i] = self.calibrated(q, f)
            if seen < SEEN_CAP:
                self.seen_tokens[1 + seen] = tok
                self.seen_values[2 * seen], self.seen_values[2 * seen + 1] = q, f
                seen += 1
        self.seen_tokens[0] = seen
        return out

    def learn(self, first: int) -> None:
        """One SGD step of the calibration's logistic loss per depth-1 node the last tree build recorded, towards 1
        where its token is ``first`` (the token the model committed after the pending one; whether or not the node
        was verified, the model's choice there is known), else 0; then the record is dropped (``fc_head_step``'s
        arithmetic in the same order). ``first`` < 0 or a learning rate of 0: nothing learned."""
        seen = int(self.seen_tokens[0])
        self.seen_tokens[0] = 0
        if seen == 0 or first < 0 or self.learning_rate == 0.0:
            return
        values = self.seen_values[:2 * seen].tolist()
        wq, wf, w0 = self.params[2:5].tolist()
        lr = self.learning_rate
        for j, tok in enumerate(self.seen_tokens[1:1 + seen].tolist()):
            x, f = logit(values[2 * j]), values[2 * j + 1]
            step = lr * ((1.0 if tok == first else 0.0) - sigmoid(wq * x + wf * f + w0))
            wq, wf, w0 = wq + step * x, wf + step * f, w0 + step
        self.params[2:5] = (wq, wf, w0)
        self.learned += seen

    def summary(self) -> dict:
        """Plain data: the calibration now, how many depth-1 nodes it learned from, the head's description."""
        return {"calibration": [round(float(x), 4) for x in self.params[2:5]], "learned": self.learned,
                "head": self.head.describe()}


def output_embedding(model) -> np.ndarray | None:
    """The model's output embedding as a (V, d) float32 C-contiguous numpy view (CPU float32 weights), else None."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    weight = getattr(head, "weight", None)
    if weight is None or not weight.is_cpu or weight.dtype != torch.float32 \
            or weight.dim() != 2 or not weight.is_contiguous():
        return None
    return weight.detach().numpy()


def default_head_folder() -> Path:
    """Where ``fastcoder fit-draft-head`` writes and :func:`find_draft_head` looks first."""
    return cache_root() / "draft_head"


def head_file_name(identity: dict) -> str:
    """The file name of the head for a model of ``identity`` (:func:`engine.acceptance_prior.model_identity`)."""
    from .acceptance_prior import fitted_file_name  # noqa: PLC0415

    return fitted_file_name(identity, ".npz")


_MODEL_ATTR = "_fastcoder_draft_head"


def find_draft_head(model, folders: list[Path] | None = None) -> DraftHead | None:
    """The draft head for ``model``, or None. ``$FASTCODER_DRAFT_HEAD``: ``off`` gives None, a path that head
    whatever the model (unreadable: logged, then the search below). Otherwise the first head trained for this
    model in ``folders`` (default: :func:`default_head_folder`, then :data:`PACKAGED_DIR`). Found once per model
    object; never raises (:func:`engine.acceptance_prior.find_fitted`)."""
    from .acceptance_prior import find_fitted  # noqa: PLC0415

    return find_fitted(model, HEAD_ENV, DraftHead.load, "*.npz",
                       folders if folders is not None else [default_head_folder(), PACKAGED_DIR],
                       None if folders is not None else _MODEL_ATTR, "draft head")


def depth_one_feature(loaded, head: DraftHead | None) -> DepthOneFeature | None:
    """A :class:`DepthOneFeature` for ``loaded``'s model, or None where it cannot serve: no head, an output
    embedding that is not CPU float32 of the head's width, or no lean forward to read the hidden state from."""
    from .lean_forward import hidden_rows  # noqa: PLC0415

    if head is None or hidden_rows(loaded.model) is None:
        return None
    emb = output_embedding(loaded.model)
    if emb is None or emb.shape[1] != head.dim:
        return None
    return DepthOneFeature(head, emb)
