"""The draft-tree builder before it was vectorised (commit 0c2314a), kept as the reference that
tests/test_incremental_retrieval.py compares the array version with (same trees, bit for bit)."""

from __future__ import annotations

import numpy as np

from engine.draft_tree import DraftTree
from engine.tree_builder import SIZED_MAX_DEPTH, SIZED_MAX_ROWS


def reference_build_draft_tree(candidates: Sequence[Candidates], budget: int = 64, min_prob: float = 0.0,
                     estimator=None, cost=None) -> DraftTree:
    """The node-by-node builder this module replaced (engine/draft_tree.py before the array version)."""
    parts = [c for c in candidates if c.tokens.size and len(c.counts)]
    if not parts or budget <= 0:
        return DraftTree.empty()
    # One trie over all sources; a node is (parent id, token). Plain dicts beat per-level numpy
    # calls here: a call sees ~10-100 continuations of <= 16 tokens (1.8 ms -> ~0.3 ms measured).
    node_of: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    token: list[int] = []
    depth: list[int] = []
    weight: list[float] = []
    source: list[int] = []
    share: list[list[float]] = []
    nparts = len(parts)
    match: list[int] = []
    sized = estimator is not None and cost is not None
    for pi, cand in enumerate(parts):
        counts = np.asarray(cand.counts, dtype=np.float64)
        total = max(float(counts.sum()), 1e-12)
        rows = cand.tokens
        if sized and len(counts) > SIZED_MAX_ROWS:  # the cost model keeps few nodes: skip rare rows
            top = np.argsort(-counts, kind="stable")[:SIZED_MAX_ROWS]
            rows, counts = rows[top], counts[top]
        if sized and rows.shape[1] > SIZED_MAX_DEPTH:
            rows = rows[:, :SIZED_MAX_DEPTH]
        for row, count in zip(rows.tolist(), counts.tolist()):
            w, sh, node = count * cand.weight, count / total, -1
            for tok in row:
                if tok < 0:
                    break
                nid = node_of.get((node, tok))
                if nid is None:
                    nid = node_of[(node, tok)] = len(parent)
                    parent.append(node)
                    token.append(tok)
                    depth.append(depth[node] + 1 if node >= 0 else 1)
                    weight.append(0.0)
                    source.append(0)
                    share.append([0.0] * nparts)
                    match.append(0)
                weight[nid] += w
                match[nid] = max(match[nid], int(cand.match_length))
                source[nid] |= cand.source
                share[nid][pi] += sh
                node = nid
    # Top `budget` by weight among likely nodes; ties -> shallower first (keeps the set
    # prefix-closed: a parent's weight and probability are never below its child's), then token,
    # then insertion order.
    keys = probs = None
    if estimator is not None and cost is not None:
        kept, keys, probs = _choose_by_estimate(parent, depth, source, share, match, budget, min_prob,
                                                estimator, cost)
    else:
        likely = [i for i in range(len(parent)) if max(share[i]) >= min_prob - 1e-12]
        likely.sort(key=lambda i: (-weight[i], depth[i], token[i], i))
        kept = set(likely[:budget])
    kept = {i for i in kept if all_ancestors_kept(i, parent, kept)}
    order = sorted(kept, key=lambda i: (depth[i], i))  # breadth-first: parents precede children
    new_index = {old: new for new, old in enumerate(order)}
    return DraftTree(
        np.array([token[i] for i in order], dtype=np.int64),
        np.array([new_index[parent[i]] if parent[i] >= 0 else -1 for i in order], dtype=np.int64),
        np.array([depth[i] for i in order], dtype=np.int64),
        np.array([source[i] for i in order], dtype=np.uint8),
        np.array([weight[i] for i in order], dtype=np.float64),
        keys[np.asarray(order, dtype=np.int64)] if keys is not None else None,
        probs=probs[np.asarray(order, dtype=np.int64)] if probs is not None else None)


def _choose_by_estimate(parent, depth, source, share, match, budget, min_prob, estimator, cost):
    """Kept node ids (a set), every node's estimate bucket ((M,) int64) and estimated probability ((M,)
    float64, P(accepted | parent accepted)), by expected tokens per cost."""
    from engine.acceptance import bucket_keys, choose_by_cost  # noqa: PLC0415

    par = np.asarray(parent, dtype=np.int64)
    dep = np.asarray(depth, dtype=np.int64)
    sh = np.asarray([max(row) for row in share], dtype=np.float64)
    # an alternative: not its parent's first choice, the first child in id order that no later sibling
    # beats by a larger share (NaN beats nothing and is beaten by nothing)
    alt = [True] * len(par)
    for up in set(par.tolist()):
        siblings = [i for i in range(len(par)) if par[i] == up]
        first = siblings[0]
        for j in siblings[1:]:
            if sh[j] > sh[first]:
                first = j
        alt[first] = False
    keys = bucket_keys(np.asarray(source, dtype=np.int64), dep, sh, np.asarray(match, dtype=np.int64), np.asarray(alt))
    p = estimator.estimate(keys, sh)
    p[sh < min_prob - 1e-12] = 0.0
    path = np.empty(len(par), dtype=np.float64)
    for i in range(len(par)):  # insertion order: a parent always precedes its children
        path[i] = p[i] * (path[par[i]] if par[i] >= 0 else 1.0)
    chosen = choose_by_cost(path, dep, cost, budget)
    return set(chosen[path[chosen] > 0].tolist()), keys, p


def all_ancestors_kept(node: int, parent: list[int], kept: set[int]) -> bool:
    """Whether every ancestor of ``node`` is in ``kept`` (guards against float-rounding ties)."""
    node = parent[node]
    while node >= 0:
        if node not in kept:
            return False
        node = parent[node]
    return True
