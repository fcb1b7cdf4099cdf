"""A learned per-node acceptance estimate: a small MLP over the draft trie's features, on top of the Beta buckets.

:class:`engine.acceptance.AcceptanceEstimator` estimates P(node accepted | parent accepted) per bucket (source,
depth, share, matched length, first choice or alternative), learned online over a fitted prior. What a bucket
cannot see is the trie around the node and the text of its tokens: whether the sources disagree below the parent
(siblings), how much of the trie hangs below the node (children, descendants), whether the node or its parent is a
newline, indentation, a name or punctuation. The node model reads those with the bucket's own estimate and gives
the estimate the tree builders size the tree by (Sequoia / EAGLE-2's best-first choice, issue #9): a 29 x 16 x 1
MLP fitted offline on the engine's own candidate tries of code that is not the user's (every trie node whose parent
was right, labelled by the model's greedy output), shipped inside the model's acceptance prior
(:class:`engine.acceptance_prior.AcceptancePrior`) and so tied to that model.

Features of a node (:data:`FEATURE_NAMES`, :meth:`NodeModel.features`): the bucket estimate's logit (after the draft
head's depth-1 adjustment), depth (capped at 12, and whether 1 or 2), alternative, best share, log1p of the matched
length / 3, log1p of the siblings (its parent's children, itself included), of its children and of its descendants
/ 3, the number of source bits, log1p of the weight / 5, five source bits (cache, repo, common, context, history),
then six token classes (:func:`token_classes`) of the node's token and six of its parent's (zeros for a root).

The C builder (``engine/native/draft_tree.c``, ``node_model_estimate``) computes the same floats in the same
order (doubles, no fused multiply-add), so both builders keep building the same tree, bit for bit.

Opt-in (the decoder's ``node_model=True``; the bench method ``fastcoder-node-model``). Measured with tiny-py-coder on
this project's 2-core CPU (``benchmarks/results/2026-11-28h/``): in the oracle replay of nine cells x two task seeds
the predicted speedup rose 2.15% without the drafting time (15 of 18 cell-runs better) and 1.33% with it; in the
wall-clock bench it did not pay (paired per task run: 0.978 and 0.992 against the bucket estimates, 95% intervals
0.957-1.000 and 0.964-1.023), the draft head being fed there and the drafting costing ~0.02-0.04 ms more a step.
"""

from __future__ import annotations

import math

import numpy as np

from .acceptance import alternatives

#: Token classes per vocabulary entry (:func:`token_classes`).
CLASS_NAMES = ("newline", "blank", "identifier", "punctuation", "leading_space", "digit")
#: The source bits a feature each (engine.draft_tree: cache, repo, common, context, history).
SOURCE_BITS = (0, 1, 2, 3, 6)
FEATURE_NAMES = (("logit_estimate", "depth", "depth_1", "depth_2", "alternative", "share", "match", "siblings",
                  "children", "descendants", "sources", "weight")
                 + tuple(f"source_bit_{b}" for b in SOURCE_BITS)
                 + tuple(f"token_{c}" for c in CLASS_NAMES) + tuple(f"parent_{c}" for c in CLASS_NAMES))
NUM_FEATURES = len(FEATURE_NAMES)
#: Clip of the bucket estimate before its logit, and of the standardised features.
EPS = 1e-4
CLAMP = 5.0


def token_classes(tokenizer) -> np.ndarray:
    """(V, 6) uint8 classes of every token's text (:data:`CLASS_NAMES`): holds a newline; only spaces or tabs;
    a Python identifier once stripped; only punctuation once stripped; starts with a space; holds a digit.
    ``tokenizer``: anything with ``decode(list[int]) -> str`` and ``len()``."""
    rows = []
    for t in range(len(tokenizer)):
        s = tokenizer.decode([t])
        core = s.strip()
        rows.append(("\n" in s, core == "" and "\n" not in s, core.isidentifier(),
                     core != "" and not any(c.isalnum() for c in s), s.startswith(" "), any(c.isdigit() for c in s)))
    return np.asarray(rows, dtype=np.uint8).reshape(-1, len(CLASS_NAMES))


def _sigmoid(z: float) -> float:
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


#: Feature columns read as numbers (in this order); the others are binary or depth codes, read through tables.
CONTINUOUS = (0, 5, 6, 7, 8, 9, 11)
#: Column groups whose values come from a small code (:meth:`NodeModel.tables`): depth (1..12), alternative, the
#: five source bits and their count, the token's and the parent's class bits.
DEPTH_COLUMNS, ALTERNATIVE_COLUMNS = (1, 2, 3), (4,)
SOURCE_COLUMNS = (10, 12, 13, 14, 15, 16)
TOKEN_COLUMNS, PARENT_COLUMNS = tuple(range(17, 23)), tuple(range(23, 29))
MAX_DEPTH_CODE = 12


def _group_values(group: tuple, code: int) -> list[float]:
    """The feature values of ``group`` (column indices) for ``code``."""
    if group == DEPTH_COLUMNS:
        return [code / 12.0, float(code == 1), float(code == 2)]
    if group == ALTERNATIVE_COLUMNS:
        return [float(code)]
    bits = [float((code >> b) & 1) for b in range(len(group) - (group == SOURCE_COLUMNS))]
    return [sum(bits), *bits] if group == SOURCE_COLUMNS else bits


def node_codes(codes: np.ndarray, token: list, parent: list, depth: list, source: list, best: list, match: list,
               weight: list, probs: list) -> list[tuple]:
    """Per trie node (the builder's lists, parents before children; ``codes``: (V,) token class codes, ``probs``:
    the bucket estimates, ``best``: the node's largest share of one source): (continuous values in
    :data:`CONTINUOUS` order, depth code, alternative, source code, token class code, parent class code)."""
    n = len(token)
    children = [0] * (n + 1)  # children[parent + 1]; the roots' count at 0
    for up in parent:
        children[up + 1] += 1
    below = [0] * n
    for i in range(n - 1, -1, -1):
        up = parent[i]
        if up >= 0:
            below[up] += 1 + below[i]
    alternative = alternatives(parent, best)
    vocab = len(codes)
    out = []
    for i in range(n):
        q = probs[i]
        q = EPS if q < EPS else (1.0 - EPS if q > 1.0 - EPS else q)
        src = source[i]
        up = parent[i]
        tok = token[i]
        ptok = token[up] if up >= 0 else -1
        values = (math.log(q / (1.0 - q)), float(best[i]), math.log1p(match[i]) / 3.0,
                  math.log1p(children[up + 1]), math.log1p(children[i + 1]), math.log1p(below[i]) / 3.0,
                  math.log1p(weight[i]) / 5.0)
        out.append((values, min(depth[i], MAX_DEPTH_CODE), int(alternative[i]),
                    sum(((src >> b) & 1) << k for k, b in enumerate(SOURCE_BITS)),
                    int(codes[tok]) if 0 <= tok < vocab else 0, int(codes[ptok]) if 0 <= ptok < vocab else 0))
    return out


def trie_features(codes: np.ndarray, token: list, parent: list, depth: list, source: list, best: list, match: list,
                  weight: list, probs: list) -> list[list[float]]:
    """Per trie node (see :func:`node_codes`), its :data:`FEATURE_NAMES` as floats: the rows a node model is
    fitted on."""
    out = []
    for values, d, alt, src, tok, par in node_codes(codes, token, parent, depth, source, best, match, weight, probs):
        row = [0.0] * NUM_FEATURES
        for j, v in zip(CONTINUOUS, values):
            row[j] = v
        for group, code in ((DEPTH_COLUMNS, d), (ALTERNATIVE_COLUMNS, alt), (SOURCE_COLUMNS, src),
                            (TOKEN_COLUMNS, tok), (PARENT_COLUMNS, par)):
            for j, v in zip(group, _group_values(group, code)):
                row[j] = v
        out.append(row)
    return out


def class_codes(classes: np.ndarray) -> np.ndarray:
    """(V,) uint8 class code of every token (bit c: class c) from (V, 6) classes."""
    classes = np.asarray(classes, dtype=np.int64)
    return np.ascontiguousarray((classes << np.arange(len(CLASS_NAMES))).sum(1), dtype=np.uint8)


class NodeModel:
    """The fitted MLP and the token classes it reads (see the module docstring).

    The hidden units' sums are evaluated as: the bias, then the continuous features (:data:`CONTINUOUS`) in order,
    then one precomputed partial sum per coded group (depth, alternative, sources, token class, parent class:
    :meth:`tables`), in that order. The C builder does the same float operations in the same order.

    Args:
        mean, scale: (F,) float64 standardisation of the features (F = :data:`NUM_FEATURES`; ``scale`` > 0).
        w1: (H, F) float64, b1: (H,), w2: (H,), b2: float: ``sigmoid(w2 . relu(w1 x + b1) + b2)``, x the standardised
            features clipped to +-5; H <= 64.
        classes: (V, 6) uint8 token classes of the model's vocabulary (:func:`token_classes`).
    Raises:
        ValueError: shapes that do not match, non-finite weights, a scale that is not positive, H > 64.
    """

    def __init__(self, mean, scale, w1, b1, w2, b2: float, classes):
        self.mean = np.ascontiguousarray(mean, dtype=np.float64)
        self.scale = np.ascontiguousarray(scale, dtype=np.float64)
        self.w1 = np.ascontiguousarray(w1, dtype=np.float64)
        self.b1 = np.ascontiguousarray(b1, dtype=np.float64)
        self.w2 = np.ascontiguousarray(w2, dtype=np.float64)
        self.b2 = float(b2)
        self.classes = np.ascontiguousarray(classes, dtype=np.uint8)
        f, h = NUM_FEATURES, len(self.b1)
        if (self.mean.shape != (f,) or self.scale.shape != (f,) or self.w1.shape != (h, f) or self.w2.shape != (h,)
                or self.classes.ndim != 2 or self.classes.shape[1] != len(CLASS_NAMES) or not 0 < h <= 64):
            raise ValueError(f"node model: expected {f} features, (H, {f}) w1 with 0 < H <= 64, (H,) b1 and w2, "
                             "(V, 6) classes")
        if not all(np.all(np.isfinite(a)) for a in (self.mean, self.scale, self.w1, self.b1, self.w2)) \
                or not math.isfinite(self.b2) or not np.all(self.scale > 0):
            raise ValueError("node model: weights must be finite and scales positive")
        #: (V,) uint8 class code of every token (bit c: class c).
        self.codes = class_codes(self.classes)
        self._w1 = self.w1.tolist()
        self._tables = self.tables()
        #: What the C builder reads (engine/native/draft_tree.c, node_model_args): F, H, mean, scale, w1 (row
        #: major), b1, w2, b2, then the depth (12 x H), alternative (2 x H), source (32 x H), token (64 x H) and
        #: parent (64 x H) tables, as one float64 array.
        self.packed = np.concatenate([[f, h], self.mean, self.scale, self.w1.reshape(-1), self.b1, self.w2,
                                      [self.b2], *(np.asarray(t).reshape(-1) for t in self._tables)]).astype(np.float64)

    @property
    def hidden(self) -> int:
        return len(self.b1)

    def _x(self, j: int, value: float) -> float:
        z = (value - float(self.mean[j])) / float(self.scale[j])
        return -CLAMP if z < -CLAMP else (CLAMP if z > CLAMP else z)

    def tables(self) -> tuple[list, ...]:
        """Per coded group, per code, the (H,) partial sums ``sum_j w1[k, j] x_j`` over the group's columns in order
        (from 0.0): depth codes 1..12 (rows 0..11), alternative 0/1, source bit patterns 0..31, token and parent
        class codes 0..63 (a root's parent: code 0)."""
        out = []
        for group, codes in ((DEPTH_COLUMNS, range(1, MAX_DEPTH_CODE + 1)), (ALTERNATIVE_COLUMNS, range(2)),
                             (SOURCE_COLUMNS, range(32)), (TOKEN_COLUMNS, range(64)), (PARENT_COLUMNS, range(64))):
            table = []
            for code in codes:
                xs = [self._x(j, v) for j, v in zip(group, _group_values(group, code))]
                row = []
                for wk in self._w1:
                    acc = 0.0
                    for j, x in zip(group, xs):
                        acc += wk[j] * x
                    row.append(acc)
                table.append(row)
            out.append(table)
        return tuple(out)

    def features(self, token: list, parent: list, depth: list, source: list, best: list, match: list,
                 weight: list, probs: list) -> list[list[float]]:
        """:func:`trie_features` with this model's token class codes."""
        return trie_features(self.codes, token, parent, depth, source, best, match, weight, probs)

    def _predict(self, values, d: int, alt: int, src: int, tok: int, par: int) -> float:
        xs = [self._x(j, v) for j, v in zip(CONTINUOUS, values)]
        depth_t, alt_t, src_t, tok_t, par_t = self._tables
        out = self.b2
        for k, (wk, bk) in enumerate(zip(self._w1, self.b1.tolist())):
            acc = bk
            for j, x in zip(CONTINUOUS, xs):
                acc += wk[j] * x
            acc += depth_t[d - 1][k]
            acc += alt_t[alt][k]
            acc += src_t[src][k]
            acc += tok_t[tok][k]
            acc += par_t[par][k]
            if acc > 0.0:
                out += float(self.w2[k]) * acc
        return _sigmoid(out)

    def predict(self, row: list[float]) -> float:
        """P(accepted | parent accepted) of one node's features (a row of :meth:`features`)."""
        d = int(round(row[1] * 12.0))
        src = sum(int(row[j] != 0.0) << k for k, j in enumerate(SOURCE_COLUMNS[1:]))
        tok = sum(int(row[j] != 0.0) << k for k, j in enumerate(TOKEN_COLUMNS))
        par = sum(int(row[j] != 0.0) << k for k, j in enumerate(PARENT_COLUMNS))
        return self._predict([row[j] for j in CONTINUOUS], max(1, min(d, MAX_DEPTH_CODE)), int(row[4] != 0.0), src,
                             tok, par)

    def adjust(self, token: list, parent: list, depth: list, source: list, best: list, match: list,
               weight: list, probs: list) -> list[float]:
        """The builders' hook: every node's estimate replaced by the model's, except those already 0 (below
        ``min_prob``), which stay 0. Lists in (see :meth:`features`), a list of floats out."""
        nodes = node_codes(self.codes, token, parent, depth, source, best, match, weight, probs)
        return [0.0 if q == 0.0 else self._predict(*node) for q, node in zip(probs, nodes)]

    def to_dict(self) -> dict:
        """Plain data (JSON): the weights as lists, the token classes as one character per token (48 + its code)."""
        return {"features": list(FEATURE_NAMES), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "w1": self.w1.tolist(), "b1": self.b1.tolist(), "w2": self.w2.tolist(), "b2": self.b2,
                "classes": "".join(chr(48 + int(v)) for v in self.codes)}

    @classmethod
    def from_dict(cls, data: dict) -> "NodeModel":
        """Raises ValueError for other features or malformed values."""
        try:
            if list(data["features"]) != list(FEATURE_NAMES):
                raise ValueError("node model: fitted on other features")
            codes = np.frombuffer(str(data["classes"]).encode("ascii"), dtype=np.uint8).astype(np.int64) - 48
            if codes.size == 0 or codes.min() < 0 or codes.max() >= 1 << len(CLASS_NAMES):
                raise ValueError("node model: malformed token classes")
            classes = ((codes[:, None] >> np.arange(len(CLASS_NAMES))) & 1).astype(np.uint8)
            return cls(data["mean"], data["scale"], data["w1"], data["b1"], data["w2"], float(data["b2"]), classes)
        except (KeyError, TypeError, UnicodeEncodeError) as err:
            raise ValueError(f"node model: malformed ({err})") from None


def fit_node_model(features: np.ndarray, accepted: np.ndarray, classes: np.ndarray, hidden: int = 16,
                   epochs: int = 400, weight_decay: float = 1e-4, seed: int = 0) -> NodeModel:
    """Fit the MLP by Adam on the log loss (full batch; torch's optimiser and autograd).

    Args:
        features: (N, F) float64 rows of :meth:`NodeModel.features` of trie nodes whose parent was right.
        accepted: (N,) bool, whether each node's token was the model's next one.
        classes: (V, 6) uint8 token classes stored with the model.
    Raises:
        ValueError: no rows, or shapes that do not match.
    """
    import torch  # noqa: PLC0415

    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(accepted, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != NUM_FEATURES or len(x) != len(y) or len(x) == 0:
        raise ValueError(f"fit_node_model needs (N, {NUM_FEATURES}) features and N labels, N > 0")
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-6, scale, 1.0)
    xs = torch.from_numpy(np.clip((x - mean) / scale, -CLAMP, CLAMP))
    ys = torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    l1 = torch.nn.Linear(NUM_FEATURES, hidden, dtype=torch.float64)
    l2 = torch.nn.Linear(hidden, 1, dtype=torch.float64)
    with torch.no_grad():
        for layer in (l1, l2):
            bound = 1.0 / math.sqrt(layer.in_features)
            layer.weight.uniform_(-bound, bound, generator=gen)
            layer.bias.uniform_(-bound, bound, generator=gen)
    opt = torch.optim.Adam([*l1.parameters(), *l2.parameters()], lr=0.01, weight_decay=weight_decay)
    for _ in range(epochs):
        opt.zero_grad()
        z = l2(torch.relu(l1(xs)))[:, 0]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z, ys)
        loss.backward()
        opt.step()
    with torch.no_grad():
        return NodeModel(mean, scale, l1.weight.numpy(), l1.bias.numpy(), l2.weight.numpy()[0],
                         float(l2.bias.numpy()[0]), classes)


class TrieRecorder:
    """The builders' hook for fitting: records every trie node whose parent matches the reference continuation
    (set per step with :meth:`set_target`) as a feature row and whether the node's token is the next reference
    token; estimates pass through unchanged (or through ``inner``, a :class:`NodeModel`, when given)."""

    def __init__(self, classes: np.ndarray, inner: NodeModel | None = None):
        self.codes = class_codes(classes)
        self.inner = inner
        self.target: list[int] | None = None
        self.rows: list[list[float]] = []
        self.labels: list[bool] = []

    def set_target(self, target) -> None:
        """The reference tokens after the context of the next tree built (None: record nothing)."""
        self.target = None if target is None else [int(t) for t in target]

    def adjust(self, token, parent, depth, source, best, match, weight, probs):
        if self.target is not None and token:
            target, n_target = self.target, len(self.target)
            right = [False] * len(token)
            rows = trie_features(self.codes, token, parent, depth, source, best, match, weight, probs)
            for i, (tok, up, d) in enumerate(zip(token, parent, depth)):
                if up < 0 or right[up]:
                    right[i] = d <= n_target and target[d - 1] == tok
                    self.rows.append(rows[i])
                    self.labels.append(right[i])
        return self.inner.adjust(token, parent, depth, source, best, match, weight, probs) if self.inner else probs
