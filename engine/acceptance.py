"""Acceptance estimates of draft-tree nodes, learned online from verification (DESIGN.md: "acceptance
estimate"), and the choice of the draft tree that maximises expected tokens per unit of time.

A node's estimate is P(node accepted | its parent accepted), kept as Beta counts per feature bucket:
whether the node is an *alternative* (a sibling of its parent's first choice, the child with the largest
share), draft source, depth, the node's share of its source's continuations and the length of the context
suffix that retrieval matched (vLLM adaptive verification learns per source, match length and
position; the raw share alone over-estimates acceptance ~4x on this project's benchmarks).

A bucket's prior is the *pooled* estimate of every source's nodes with the same other features
(strength :data:`PRIOR_STRENGTH` observations), and the pooled estimate's own prior mean is
:data:`PRIOR_SCALE` times the raw share, times :data:`ALTERNATIVE_PRIOR` for alternatives (strength
:data:`POOL_STRENGTH`). A request sees ~50-250 verified trees, too few to fill 100K buckets, so what one
source learns (say, that a unanimous continuation 6 tokens deep is accepted 96% of the time) carries to
the others at once. Alternatives get their own buckets because the children of one parent are
exclusive: two sources that each agree with themselves but propose different tokens both carry a share
of 1, and on the benchmarks here the first choice was accepted 80-87% of the time, the other 5-15%.

Tree choice (Sequoia / EAGLE-2 / vLLM adaptive verification): with path probability P(v) = product
of the estimates along v's path, a set S of nodes commits ``1 + sum_{v in S} P(v)`` tokens in
expectation for a forward that costs ``c(|S|)`` plain decode steps (:mod:`engine.cost_model`).
Nodes are admitted best-first by P(v) (a child never beats its parent, so every prefix of that order
is a prefix-closed tree) and the prefix with the highest ``(1 + sum P) / c(n)`` is kept; zero draft
tokens is a valid answer.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache

import numpy as np

#: Prior observations behind each bucket's estimate (its prior mean: the pooled estimate).
PRIOR_STRENGTH = 2.0
#: Prior observations behind each pooled estimate (its prior mean: PRIOR_SCALE x share).
POOL_STRENGTH = 4.0
PRIOR_SCALE = 0.85           # pooled prior mean = this x the node's raw share
ALTERNATIVE_PRIOR = 0.3      # ... times this for an alternative (not its parent's first choice)
DEPTH_BUCKETS = 8            # depths 1..7, then 8+
SHARE_EDGES = (0.1, 0.25, 0.5, 0.75, 0.99)   # share buckets: <0.1, <0.25, <0.5, <0.75, <0.99, ~1
MATCH_EDGES = (2, 3, 4, 6, 9, 13)            # matched suffix length buckets (tokens)
SOURCE_SLOTS = 128                           # SOURCE_* bitmask values 0..127
#: Trees of at most this many nodes are learned from in a Python loop (the decoder's trees: ~5 on a CPU).
UPDATE_PYTHON_NODES = 64
_SHARE_EDGES = np.asarray(SHARE_EDGES, dtype=np.float64)  # as arrays: searchsorted converts a tuple per call
_MATCH_EDGES = np.asarray(MATCH_EDGES, dtype=np.int64)


#: Buckets of one source (depth x share x match length): a bucket id modulo this drops the source.
SOURCE_STRIDE = DEPTH_BUCKETS * (len(SHARE_EDGES) + 1) * (len(MATCH_EDGES) + 1)
#: Added to a bucket id for an alternative (a node that is not its parent's first choice).
ALTERNATIVE_STRIDE = SOURCE_SLOTS * SOURCE_STRIDE


def bucket_keys(sources: np.ndarray, depths: np.ndarray, shares: np.ndarray, match_lengths: np.ndarray,
                alternatives: np.ndarray | None = None) -> np.ndarray:
    """(N,) int64 bucket id of each node from (N,) source bitmasks, depths (>= 1), shares in [0, 1],
    matched suffix lengths (tokens; 0 when unknown) and (optional, (N,) bool) whether each node is an
    alternative (:func:`alternatives`; none when omitted)."""
    d = np.minimum(np.asarray(depths, dtype=np.int64), DEPTH_BUCKETS) - 1
    s = np.searchsorted(_SHARE_EDGES, np.asarray(shares, dtype=np.float64), side="right")
    m = np.searchsorted(_MATCH_EDGES, np.asarray(match_lengths, dtype=np.int64), side="right")
    src = np.asarray(sources, dtype=np.int64) % SOURCE_SLOTS
    keys = ((src * DEPTH_BUCKETS + d) * (len(SHARE_EDGES) + 1) + s) * (len(MATCH_EDGES) + 1) + m
    if alternatives is not None:
        keys = keys + ALTERNATIVE_STRIDE * np.asarray(alternatives, dtype=np.int64)
    return keys


def alternatives(parents: list[int], shares: list[float]) -> list[bool]:
    """Whether each node of a trie is an alternative: not the first choice among its siblings, the child
    of its parent with the largest share (ties: the lowest index). ``parents``: (N,) parent index, -1 at
    the root, parents before children; ``shares``: (N,) the node's share (the builders' best share)."""
    first: dict[int, int] = {}
    for i, (up, sh) in enumerate(zip(parents, shares)):
        j = first.get(up)
        if j is None or sh > shares[j]:
            first[up] = i
    chosen = set(first.values())
    return [i not in chosen for i in range(len(parents))]


def pooled_keys(keys: np.ndarray) -> np.ndarray:
    """(N,) int64 pooled bucket id (the bucket without its source) of (N,) int64 bucket ids."""
    keys = np.asarray(keys, dtype=np.int64)
    return (keys // ALTERNATIVE_STRIDE) * SOURCE_STRIDE + keys % SOURCE_STRIDE


def pooled_key(key: int) -> int:
    """:func:`pooled_keys` of one Python int (the per-node loops of a small tree)."""
    return (key // ALTERNATIVE_STRIDE) * SOURCE_STRIDE + key % SOURCE_STRIDE


#: Step between the bucket ids of adjacent share buckets (all else equal).
SHARE_STRIDE = len(MATCH_EDGES) + 1


@lru_cache(maxsize=1024)
def bucket_bases(source: int, match_length: int, max_depth: int) -> tuple[int, ...]:
    """(max_depth + 1,) bucket ids of nodes of one ``source`` bitmask and matched suffix length at depths
    0..max_depth (entry 0, no node's, repeats depth 1's) with share bucket 0: a node's
    :func:`bucket_keys` id is ``bases[depth] + SHARE_STRIDE * share bucket`` (:func:`keys_from_bases`).
    A draft-tree builder looks these up once per source instead of computing every node's key."""
    m = bisect_right(MATCH_EDGES, match_length)
    src = source % SOURCE_SLOTS
    return tuple((src * DEPTH_BUCKETS + min(max(d, 1), DEPTH_BUCKETS) - 1) * (len(SHARE_EDGES) + 1) * SHARE_STRIDE + m
                 for d in range(max_depth + 1))


def keys_from_bases(bases: list[int], shares: list[float]) -> list[int]:
    """(N,) :func:`bucket_keys` ids from each node's :func:`bucket_bases` entry and its share (Python
    lists; ``bisect_right`` is ``searchsorted(side="right")``, NaN shares included): for the few nodes of
    a typical draft tree this loop beats the array calls' fixed cost."""
    return [b + SHARE_STRIDE * bisect_right(SHARE_EDGES, sh) for b, sh in zip(bases, shares)]


def keys_from_bases_array(bases: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """:func:`keys_from_bases` for (N,) int64 ``bases`` and (N,) float64 ``shares``: (N,) int64."""
    return bases + SHARE_STRIDE * np.searchsorted(_SHARE_EDGES, shares, side="right")


def tried_nodes(parents: np.ndarray, path: list[int]) -> np.ndarray:
    """(N,) bool: which nodes of a verified tree were tried, i.e. had their parent accepted (or hang below the
    pending token), from (N,) int64 ``parents`` (-1 at the root) and the accepted ``path`` (node indices)."""
    parents = np.asarray(parents, dtype=np.int64)
    on_path = np.zeros(len(parents) + 1, dtype=bool)  # index 0: the pending token (always "accepted")
    on_path[0] = True
    on_path[np.asarray(path, dtype=np.int64) + 1] = True
    return on_path[parents + 1]


NUM_BUCKETS = 2 * ALTERNATIVE_STRIDE
POOLED_BUCKETS = 2 * SOURCE_STRIDE


class AcceptanceEstimator:
    """Beta counts of accepted / tried draft nodes per bucket (see the module docstring).

    ``estimate(keys, shares)`` gives (N,) float64 probabilities; ``update(tree, path)`` learns from one
    verification. Shared by every request of a decoder, so it keeps learning across requests.

    ``prior``: an :class:`engine.acceptance_prior.AcceptancePrior` fitted for the model (or None): every bucket
    then starts with ``prior.strength`` pseudo-observations at the prior's rate instead of none (the arrays the
    tree builders read hold them; :meth:`summary` counts real observations only).
    """

    def __init__(self, prior_strength: float = PRIOR_STRENGTH, pool_strength: float = POOL_STRENGTH, prior=None):
        self.prior_strength = float(prior_strength)
        self.pool_strength = float(pool_strength)
        self.accepted = np.zeros(NUM_BUCKETS, dtype=np.float64)
        self.tried = np.zeros(NUM_BUCKETS, dtype=np.float64)
        self.pooled_accepted = np.zeros(POOLED_BUCKETS, dtype=np.float64)
        self.pooled_tried = np.zeros(POOLED_BUCKETS, dtype=np.float64)
        self.prior = prior
        #: The draft head's depth-1 adjustment (:class:`engine.draft_head.DepthOneFeature`), or None: the tree
        #: builders apply it to every depth-1 node's estimate; the decoder feeds and teaches it.
        self.depth_one = None
        #: The learned per-node estimate (:class:`engine.node_model.NodeModel`), or None: the tree builders apply it
        #: to every node's estimate before the draft head. Opt-in (the decoder's ``node_model`` option takes the one
        #: shipped with the model's prior): on this project's CPU it did not pay in wall-clock time.
        self.node_model = None
        self._pseudo = (0.0, 0.0)  # (accepted, tried) pseudo-observations in the arrays, summed
        self._views = None  # the four arrays and memoryviews of them (update's per-node loop)
        if prior is not None and prior.strength > 0.0:
            rates = prior.rates()
            self.accepted[:] = prior.strength * rates
            self.tried[:] = prior.strength
            self._pseudo = (float(self.accepted.sum()), float(self.tried.sum()))

    def estimate(self, keys: np.ndarray, shares: np.ndarray) -> np.ndarray:
        """(N,) P(node accepted | parent accepted) for nodes with bucket ``keys`` and raw ``shares``."""
        keys = np.asarray(keys, dtype=np.int64)
        prior = PRIOR_SCALE * np.clip(np.asarray(shares, dtype=np.float64), 0.0, 1.0)
        prior = np.where(keys >= ALTERNATIVE_STRIDE, prior * ALTERNATIVE_PRIOR, prior)
        pk = pooled_keys(keys)
        pooled = (self.pooled_accepted[pk] + self.pool_strength * prior) / (self.pooled_tried[pk] + self.pool_strength)
        a = self.accepted[keys] + self.prior_strength * pooled
        n = self.tried[keys] + self.prior_strength
        return a / n

    def estimate_list(self, keys: list[int], shares: list[float]) -> list[float] | None:
        """:meth:`estimate` with Python lists in and out: (N,) floats, the same values bit for bit
        (the same float operations in the same order), cheaper than the array calls for a few nodes.
        None where a denominator is zero (:meth:`estimate` gives inf or NaN there)."""
        strength, pool = self.prior_strength, self.pool_strength
        idx = np.asarray(keys, dtype=np.int64)
        pidx = [pooled_key(k) for k in keys]
        out = []
        try:
            for k, s, a, n, pa, pn in zip(keys, shares, self.accepted[idx].tolist(), self.tried[idx].tolist(),
                                          self.pooled_accepted[pidx].tolist(), self.pooled_tried[pidx].tolist()):
                prior = PRIOR_SCALE * (0.0 if s < 0.0 else 1.0 if s > 1.0 else s)
                if k >= ALTERNATIVE_STRIDE:
                    prior = prior * ALTERNATIVE_PRIOR
                out.append((a + strength * ((pa + pool * prior) / (pn + pool))) / (n + strength))
        except ZeroDivisionError:
            return None
        return out

    def update(self, keys: np.ndarray, parents: np.ndarray, path: list[int]) -> None:
        """Learn from one verification of a tree: every node whose parent was accepted (or is the pending
        token) was tried; the nodes of ``path`` were accepted. ``keys``/``parents``: (N,) int64."""
        if len(keys) == 0:
            return
        if len(keys) <= UPDATE_PYTHON_NODES:  # every step's tree: a Python loop beats eight array calls
            # through memoryviews of the same arrays: an item's += is a plain C path there, where numpy boxes a
            # scalar and runs its indexing (~5-10 us a step with the caches cold after a verify forward)
            views = self._views
            if views is None or views[0] is not self.accepted or views[1] is not self.tried \
                    or views[2] is not self.pooled_accepted or views[3] is not self.pooled_tried:
                views = self._views = (self.accepted, self.tried, self.pooled_accepted, self.pooled_tried,
                                       memoryview(self.accepted), memoryview(self.tried),
                                       memoryview(self.pooled_accepted), memoryview(self.pooled_tried))
            acc, tried, pooled_acc, pooled_tried = views[4:]
            accepted = {-1, *path}  # -1: the pending token (always "accepted")
            keys_list = np.asarray(keys).tolist()
            for key, parent in zip(keys_list, np.asarray(parents).tolist()):
                if parent in accepted:
                    tried[key] += 1.0
                    pooled_tried[pooled_key(key)] += 1.0
            for node in path:
                key = keys_list[node]
                acc[key] += 1.0
                pooled_acc[pooled_key(key)] += 1.0
            return
        keys = np.asarray(keys, dtype=np.int64)
        tried = keys[tried_nodes(parents, path)]
        np.add.at(self.tried, tried, 1.0)
        np.add.at(self.pooled_tried, pooled_keys(tried), 1.0)
        if path:
            hit = keys[np.asarray(path, dtype=np.int64)]
            np.add.at(self.accepted, hit, 1.0)
            np.add.at(self.pooled_accepted, pooled_keys(hit), 1.0)

    def summary(self) -> dict:
        """Plain data: observations (the prior's pseudo-observations left out), the overall acceptance rate of
        tried nodes, the prior (:meth:`engine.acceptance_prior.AcceptancePrior.describe`, or None) and the draft
        head's state (:meth:`engine.draft_head.DepthOneFeature.summary`, or None)."""
        tried = round(float(self.tried.sum()) - self._pseudo[1], 6)
        accepted = round(float(self.accepted.sum()) - self._pseudo[0], 6)
        return {"tried": int(round(tried)), "accepted": int(round(accepted)),
                "rate": round(accepted / tried, 4) if tried >= 0.5 else None,
                "prior": self.prior.describe() if self.prior is not None else None,
                "draft_head": self.depth_one.summary() if self.depth_one is not None else None}


def choose_by_cost(path_probs: np.ndarray, depths: np.ndarray, cost, budget: int) -> np.ndarray:
    """Indices of the nodes to verify: the best-first prefix maximising expected tokens per cost.

    Args:
        path_probs: (N,) P(v), the probability that v's whole path is accepted.
        depths: (N,) depths, to break ties so parents come first.
        cost: a :class:`engine.cost_model.VerifyCost` (``c(n)``).
        budget: at most this many nodes (a cap).
    Returns:
        (K,) int64 node indices (K may be 0), prefix-closed when P never exceeds a parent's.
    """
    n = len(path_probs)
    if n == 0 or budget <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), np.asarray(depths), -np.asarray(path_probs)))[:budget]
    gain = 1.0 + np.concatenate([[0.0], np.cumsum(np.asarray(path_probs)[order])])
    upto = getattr(cost, "upto", None)  # a cached table of c(0..n), or any object with c(n)
    ratio = gain / (upto(len(order)) if upto is not None else cost.c(np.arange(len(order) + 1)))
    best = int(np.argmax(ratio))
    return order[:best]
