"""Acceptance estimates of draft-tree nodes, learned online from verification (DESIGN.md: "acceptance
estimate"), and the choice of the draft tree that maximises expected tokens per unit of time.

A node's estimate is P(node accepted | its parent accepted), kept as Beta counts per feature bucket:
draft source, depth, the node's share of its source's continuations and the length of the context
suffix that retrieval matched (vLLM adaptive verification learns per source, match length and
position; the raw share alone over-estimates acceptance ~4x on this project's benchmarks). The
prior mean is :data:`PRIOR_SCALE` times the raw share (strength :data:`PRIOR_STRENGTH` observations),
so a fresh estimator still ranks nodes sensibly.

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

#: Prior observations behind each bucket's initial estimate.
PRIOR_STRENGTH = 2.0
PRIOR_SCALE = 0.7            # prior mean = this x the node's raw share (shares over-estimate)
DEPTH_BUCKETS = 8            # depths 1..7, then 8+
SHARE_EDGES = (0.1, 0.25, 0.5, 0.75, 0.99)   # share buckets: <0.1, <0.25, <0.5, <0.75, <0.99, ~1
MATCH_EDGES = (2, 3, 4, 6, 9, 13)            # matched suffix length buckets (tokens)
SOURCE_SLOTS = 128                           # SOURCE_* bitmask values 0..127
#: Trees of at most this many nodes are learned from in a Python loop (the decoder's trees: ~5 on a CPU).
UPDATE_PYTHON_NODES = 64
_SHARE_EDGES = np.asarray(SHARE_EDGES, dtype=np.float64)  # as arrays: searchsorted converts a tuple per call
_MATCH_EDGES = np.asarray(MATCH_EDGES, dtype=np.int64)


def bucket_keys(sources: np.ndarray, depths: np.ndarray, shares: np.ndarray, match_lengths: np.ndarray) -> np.ndarray:
    """(N,) int64 bucket id of each node from (N,) source bitmasks, depths (>= 1), shares in [0, 1]
    and matched suffix lengths (tokens; 0 when unknown)."""
    d = np.minimum(np.asarray(depths, dtype=np.int64), DEPTH_BUCKETS) - 1
    s = np.searchsorted(_SHARE_EDGES, np.asarray(shares, dtype=np.float64), side="right")
    m = np.searchsorted(_MATCH_EDGES, np.asarray(match_lengths, dtype=np.int64), side="right")
    src = np.asarray(sources, dtype=np.int64) % SOURCE_SLOTS
    return ((src * DEPTH_BUCKETS + d) * (len(SHARE_EDGES) + 1) + s) * (len(MATCH_EDGES) + 1) + m


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


NUM_BUCKETS = SOURCE_SLOTS * DEPTH_BUCKETS * (len(SHARE_EDGES) + 1) * (len(MATCH_EDGES) + 1)


class AcceptanceEstimator:
    """Beta counts of accepted / tried draft nodes per bucket (see the module docstring).

    ``estimate(keys, shares)`` gives (N,) float64 probabilities; ``update(tree, path)`` learns from one
    verification. Shared by every request of a decoder, so it keeps learning across requests.
    """

    def __init__(self, prior_strength: float = PRIOR_STRENGTH):
        self.prior_strength = float(prior_strength)
        self.accepted = np.zeros(NUM_BUCKETS, dtype=np.float64)
        self.tried = np.zeros(NUM_BUCKETS, dtype=np.float64)

    def estimate(self, keys: np.ndarray, shares: np.ndarray) -> np.ndarray:
        """(N,) P(node accepted | parent accepted) for nodes with bucket ``keys`` and raw ``shares``."""
        keys = np.asarray(keys, dtype=np.int64)
        prior = PRIOR_SCALE * np.clip(np.asarray(shares, dtype=np.float64), 0.0, 1.0)
        a = self.accepted[keys] + self.prior_strength * prior
        n = self.tried[keys] + self.prior_strength
        return a / n

    def estimate_list(self, keys: list[int], shares: list[float]) -> list[float] | None:
        """:meth:`estimate` with Python lists in and out: (N,) floats, the same values bit for bit
        (the same float operations in the same order), cheaper than the array calls for a few nodes.
        None where a denominator is zero (:meth:`estimate` gives inf or NaN there)."""
        idx = np.asarray(keys, dtype=np.int64)
        strength = self.prior_strength
        try:
            return [(a + strength * (PRIOR_SCALE * (0.0 if s < 0.0 else 1.0 if s > 1.0 else s))) / (n + strength)
                    for a, n, s in zip(self.accepted[idx].tolist(), self.tried[idx].tolist(), shares)]
        except ZeroDivisionError:
            return None

    def update(self, keys: np.ndarray, parents: np.ndarray, path: list[int]) -> None:
        """Learn from one verification of a tree: every node whose parent was accepted (or is the pending
        token) was tried; the nodes of ``path`` were accepted. ``keys``/``parents``: (N,) int64."""
        if len(keys) == 0:
            return
        if len(keys) <= UPDATE_PYTHON_NODES:  # every step's tree: a Python loop beats four array calls
            accepted = {-1, *path}  # -1: the pending token (always "accepted")
            keys_list = np.asarray(keys).tolist()
            for key, parent in zip(keys_list, np.asarray(parents).tolist()):
                if parent in accepted:
                    self.tried[key] += 1.0
            for node in path:
                self.accepted[keys_list[node]] += 1.0
            return
        on_path = np.zeros(len(keys) + 1, dtype=bool)  # index 0: the pending token (always "accepted")
        on_path[0] = True
        on_path[np.asarray(path, dtype=np.int64) + 1] = True
        tried = on_path[np.asarray(parents, dtype=np.int64) + 1]
        np.add.at(self.tried, keys[tried], 1.0)
        if path:
            np.add.at(self.accepted, keys[np.asarray(path, dtype=np.int64)], 1.0)

    def summary(self) -> dict:
        """Plain data: observations and the overall acceptance rate of tried nodes."""
        tried = float(self.tried.sum())
        return {"tried": int(tried), "accepted": int(self.accepted.sum()),
                "rate": round(float(self.accepted.sum()) / tried, 4) if tried else None}


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
