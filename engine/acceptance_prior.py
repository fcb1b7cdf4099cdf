"""A fitted prior for the acceptance estimates: where a fresh estimator starts before verification has taught it.

:class:`engine.acceptance.AcceptanceEstimator` learns P(node accepted | parent accepted) online, per bucket (draft
source, depth, share, matched length, alternative or first choice). A request sees ~50-250 verified trees, too few
for ~86K buckets, so until a bucket has data its estimate is a hand-set prior (0.85 x the node's share, x 0.3 for an
alternative, pooled across sources). This module replaces that starting point with a logistic model of the
buckets' features (:func:`bucket_features`: depth, share and matched length one-hot, alternative, the seven
source bits and their count), fitted offline on the verified draft trees of one model on code that is not the
user's: each bucket starts with ``strength`` pseudo-observations at the model's rate, and online learning then
moves it as before (Beta counts; the pooled level is unchanged).

The model's acceptance behaviour is its own, so a prior serves only the model it was fitted for
(:func:`model_identity`: parameter count and a hash of the output embedding); :func:`find_prior` looks in the
user cache (``acceptance_prior/``, where ``fastcoder fit-acceptance-prior`` writes) and in the priors shipped with
the package (``engine/data/acceptance_prior/``: tiny-py-coder's, fitted on click, rich and markdown-it, none of
them a benchmark repository). ``$FASTCODER_ACCEPTANCE_PRIOR`` names a prior file to use instead, or ``off``.

Measured (oracle replay, ``benchmarks/results/2026-11-26h/``): tiny-py-coder on this project's 2-core CPU, 9 cells
(function / fim-line / fim-block x pluggy / jinja2 / pygls, 10 tasks) on two task sets: predicted speedup +3.25%
(geometric mean of 18 cell-runs, 16 better, -2.1% to +8.9%; prior_replay.sh).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .acceptance import (ALTERNATIVE_STRIDE, DEPTH_BUCKETS, MATCH_EDGES, NUM_BUCKETS, SHARE_EDGES, SOURCE_SLOTS,
                         SOURCE_STRIDE)
from .cache_paths import cache_root

log = logging.getLogger(__name__)

#: Environment variable: a prior file to use whatever the model, or ``off`` for the hand-set prior.
PRIOR_ENV = "FASTCODER_ACCEPTANCE_PRIOR"
#: Priors shipped with the package (one JSON file per model).
PACKAGED_DIR = Path(__file__).resolve().parent / "data" / "acceptance_prior"
#: Pseudo-observations a bucket starts with at the prior's rate (replay: 4, 8 and 16 within 1% of each other).
DEFAULT_STRENGTH = 8.0
#: Version of :func:`bucket_features` and of the file layout; a file of another version is not used.
FORMAT = 1
_SOURCE_BITS = 7  # SOURCE_SLOTS = 2 ** 7
_N_SHARE, _N_MATCH = len(SHARE_EDGES) + 1, len(MATCH_EDGES) + 1
#: Columns of :func:`bucket_features`.
NUM_FEATURES = DEPTH_BUCKETS + _N_SHARE + _N_MATCH + 1 + _SOURCE_BITS + 1 + _N_SHARE


def bucket_features(keys: np.ndarray) -> np.ndarray:
    """(N, :data:`NUM_FEATURES`) float64 features of (N,) int64 bucket ids (:func:`engine.acceptance.bucket_keys`):
    depth bucket, share bucket and matched-length bucket one-hot; whether the node is an alternative; the seven
    source bits and how many are set; the share bucket one-hot again for alternatives only."""
    keys = np.asarray(keys, dtype=np.int64)
    alt = keys >= ALTERNATIVE_STRIDE
    k = keys % ALTERNATIVE_STRIDE
    match = k % _N_MATCH
    share = (k // _N_MATCH) % _N_SHARE
    depth = (k // (_N_MATCH * _N_SHARE)) % DEPTH_BUCKETS
    source = (k // SOURCE_STRIDE) % SOURCE_SLOTS
    bits = ((source[:, None] >> np.arange(_SOURCE_BITS)) & 1).astype(np.float64)
    eye_share = np.eye(_N_SHARE)[share]
    return np.concatenate([np.eye(DEPTH_BUCKETS)[depth], eye_share, np.eye(_N_MATCH)[match],
                           alt[:, None].astype(np.float64), bits, bits.sum(1, keepdims=True),
                           eye_share * alt[:, None]], axis=1)


def model_identity(model) -> dict:
    """What a prior is tied to: the parameter count and a SHA-256 (16 hex digits) of the first 16,384 values of
    the output embedding (the LM head) in float32. Raises nothing for a model without one (empty hash)."""
    params = int(sum(p.numel() for p in model.parameters()))
    digest = ""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        import torch  # noqa: PLC0415

        with torch.no_grad():
            sample = weight.detach().reshape(-1)[:16384].to("cpu", torch.float32).numpy()
        digest = hashlib.sha256(sample.tobytes()).hexdigest()[:16]
    return {"params": params, "head_sha256": digest}


@dataclass
class AcceptancePrior:
    """A logistic model of P(accepted | parent accepted) per estimate bucket (see the module docstring).

    Attributes:
        weights: (:data:`NUM_FEATURES`,) float64 coefficients of :func:`bucket_features`.
        bias: the intercept.
        strength: pseudo-observations per bucket (:meth:`engine.acceptance.AcceptanceEstimator.__init__`).
        model: :func:`model_identity` of the model it was fitted for.
        info: what it was fitted on (repositories, task kinds, nodes, acceptance rate): plain data.
        node_model: the learned per-node estimate fitted for the same model (:class:`engine.node_model.NodeModel`),
            or None; a decoder asked for it (``node_model=True``) gives it to its estimator
            (:attr:`engine.acceptance.AcceptanceEstimator.node_model`).
    """

    weights: np.ndarray
    bias: float
    strength: float = DEFAULT_STRENGTH
    model: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    node_model: object = None
    _rates: np.ndarray | None = field(default=None, repr=False, compare=False)

    def rates(self) -> np.ndarray:
        """(NUM_BUCKETS,) float64 prior P(accepted | parent accepted) of every bucket (computed once)."""
        if self._rates is None:  # in chunks of keys: ~45 ms once, 3 MB at a time instead of a (NUM_BUCKETS, F) matrix
            z = np.concatenate([bucket_features(np.arange(lo, min(lo + 16384, NUM_BUCKETS))) @ self.weights
                                for lo in range(0, NUM_BUCKETS, 16384)]) + self.bias
            self._rates = 1.0 / (1.0 + np.exp(-z))
        return self._rates

    def describe(self) -> dict:
        """Plain data for status and benchmark reports: the model it serves, strength and what it was fitted on."""
        nodes = self.node_model
        return {"model": self.model, "strength": self.strength, **self.info,
                "node_model": {"hidden": nodes.hidden, **(self.info.get("node_model_info") or {})}
                if nodes is not None else None}

    def to_dict(self) -> dict:
        out = {"format": FORMAT, "weights": [float(w) for w in self.weights], "bias": float(self.bias),
               "strength": float(self.strength), "model": self.model, "info": self.info}
        if self.node_model is not None:
            out["node_model"] = self.node_model.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "AcceptancePrior":
        """Raises ValueError for another format or malformed values."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not an acceptance prior of format {FORMAT}")
        weights = np.asarray(data["weights"], dtype=np.float64)
        strength = float(data.get("strength", DEFAULT_STRENGTH))
        if weights.shape != (NUM_FEATURES,) or not np.all(np.isfinite(weights)) or not strength >= 0.0:
            raise ValueError("acceptance prior: weights or strength malformed")
        nodes = None
        if data.get("node_model") is not None:
            from .node_model import NodeModel  # noqa: PLC0415

            nodes = NodeModel.from_dict(data["node_model"])
        return cls(weights, float(data["bias"]), strength, dict(data.get("model") or {}), dict(data.get("info") or {}),
                   nodes)

    def save(self, path: str | os.PathLike) -> Path:
        """Write as JSON (to a temporary, then renamed into place); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "AcceptancePrior":
        """Raises OSError (unreadable) or ValueError (not a prior)."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError) as err:
            raise ValueError(f"{path}: not an acceptance prior ({err})") from None


def fit_prior(keys: np.ndarray, accepted: np.ndarray, l2: float = 1e-3, iterations: int = 30,
              strength: float = DEFAULT_STRENGTH) -> AcceptancePrior:
    """Fit the logistic model by Newton's method (L2 penalty ``l2`` per node on the weights, not the bias).

    Args:
        keys: (N,) int64 bucket ids of tried nodes (nodes whose parent was accepted).
        accepted: (N,) bool, whether each was accepted.
    Returns:
        An :class:`AcceptancePrior` (``model`` and ``info`` empty: the caller fills them).
    Raises:
        ValueError: no nodes, or ``keys`` and ``accepted`` of different lengths.
    """
    keys = np.asarray(keys, dtype=np.int64)
    y = np.asarray(accepted, dtype=np.float64)
    if len(keys) == 0 or len(keys) != len(y):
        raise ValueError("fit_prior needs as many accepted flags as keys, and at least one node")
    # one row per distinct bucket with its counts: the same likelihood, far fewer rows
    uniq, inverse = np.unique(keys, return_inverse=True)
    tried = np.bincount(inverse).astype(np.float64)
    hits = np.bincount(inverse, weights=y)
    x = np.concatenate([bucket_features(uniq), np.ones((len(uniq), 1))], axis=1)
    n = float(len(keys))
    penalty = np.full(x.shape[1], l2 * n)
    penalty[-1] = 0.0
    beta = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (hits - tried * p) - penalty * beta
        hess = (x * (tried * p * (1 - p))[:, None]).T @ x + np.diag(penalty) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.max(np.abs(step)) < 1e-8:
            break
    return AcceptancePrior(beta[:-1].copy(), float(beta[-1]), float(strength))


def default_prior_folder() -> Path:
    """Where ``fastcoder fit-acceptance-prior`` writes and :func:`find_prior` looks first:
    ``<user cache>/acceptance_prior`` (:func:`engine.cache_paths.cache_root`)."""
    return cache_root() / "acceptance_prior"


def fitted_file_name(identity: dict, suffix: str) -> str:
    """The file name a file fitted for a model of ``identity`` (:func:`model_identity`) gets in its cache folder."""
    return f"{identity.get('params', 0)}-{identity.get('head_sha256', '') or 'nohash'}{suffix}"


def prior_file_name(identity: dict) -> str:
    """The file name a prior for a model of ``identity`` (:func:`model_identity`) gets in the cache folder."""
    return fitted_file_name(identity, ".json")


#: Set on a model object: its prior (or False), found once.
_MODEL_ATTR = "_fastcoder_acceptance_prior"


def find_fitted(model, env: str, load, pattern: str, folders: list[Path], attr: str | None, what: str):
    """The first file fitted for ``model`` (a transformers model): shared by the acceptance prior and the draft head.

    ``$env``: ``off`` gives None; a file path gives that file whatever the model (one that cannot be read is logged,
    then the search below). Otherwise the first file matching ``pattern`` in ``folders`` whose ``load(path)``
    (raising OSError or ValueError for a file that is not one) has ``.model`` equal to :func:`model_identity`.
    Found once per model object (kept as its attribute ``attr``; ``attr`` None: searched every call). Never raises."""
    value = os.environ.get(env, "").strip()
    if value.lower() == "off":
        return None
    if value:
        try:
            return load(value)
        except (OSError, ValueError) as err:
            log.warning("%s=%s unusable (%s); looking for a fitted %s instead", env, value, err, what)
    if attr is not None:
        cached = getattr(model, attr, None)
        if cached is not None:
            return cached or None
    found = None
    try:
        identity = model_identity(model)
        for folder in folders:
            for path in sorted(Path(folder).glob(pattern)) if Path(folder).is_dir() else ():
                try:
                    fitted = load(path)
                except (OSError, ValueError) as err:
                    log.debug("%s %s skipped: %s", what, path, err)
                    continue
                if fitted.model == identity:
                    found = fitted
                    break
            if found is not None:
                break
    except Exception as err:  # noqa: BLE001 - an optimisation: never fail a load for it
        log.warning("no %s (%s)", what, err)
    if attr is not None:
        try:
            setattr(model, attr, found or False)
        except AttributeError:
            pass
    return found


def find_prior(model, folders: list[Path] | None = None) -> AcceptancePrior | None:
    """The prior for ``model`` (a transformers model), or None (then estimators keep the hand-set prior).

    ``$FASTCODER_ACCEPTANCE_PRIOR``: ``off`` gives None; a file path gives that prior whatever the model (a
    file that cannot be read is logged and ignored). Otherwise the first prior fitted for this model
    (:func:`model_identity`) in ``folders`` (default: :func:`default_prior_folder`, then :data:`PACKAGED_DIR`).
    Found once per model object; never raises."""
    return find_fitted(model, PRIOR_ENV, AcceptancePrior.load, "*.json",
                       folders if folders is not None else [default_prior_folder(), PACKAGED_DIR],
                       None if folders is not None else _MODEL_ATTR, "acceptance prior")
