"""Building a draft tree from the sources' candidates: the weighted trie, and which of its nodes to keep.

REST (He et al., 2024) Alg. 2 and FastCoder (Zhao et al., 2025) eq. 3: every retrieved continuation
is inserted into a trie with every prefix counted; a node's weight is
``alpha * count_in_D_r + beta * count_in_D_c`` (other sources add their counts with weight 1); the
kept nodes are the top ones by weight, prefix-closed, at most ``budget`` draft tokens. With an acceptance
estimator and a verify-cost curve the kept nodes are instead the best-first prefix by estimated path
probability that maximises expected committed tokens per unit of verify cost (Sequoia, EAGLE-2, vLLM's
adaptive verification; issue #9): :func:`_build_sized` in Python, :mod:`engine.native.tree` in C, the same
tree bit for bit.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import native
from .acceptance import (ALTERNATIVE_STRIDE, AcceptanceEstimator, alternatives, bucket_bases, choose_by_cost,
                         keys_from_bases, keys_from_bases_array)
from .draft_tree import Candidates, DraftTree

#: With cost sizing, continuations inserted per source (the most frequent) and their length cap
#: (tokens): a CPU keeps ~4-16 nodes, and inserting 128 x 16 tokens cost ~3.7 ms a step. The length cap
#: was 12: a long copy that verification accepts whole then took two forwards where one does (oracle
#: replay, pinned c(n), 10 function tasks: predicted speedup without drafting time pluggy 2.54 -> 2.59,
#: jinja2 2.92 -> 2.96, pygls 3.08 -> 3.18 at 24; 32 gave the same trees as 24).
SIZED_MAX_ROWS = 16
SIZED_MAX_DEPTH = 24


def cut_at_stop(part: Candidates, stop: np.ndarray) -> Candidates:
    """``part`` with each continuation cut at its first stop token, that token included (``stop``: (V,) uint8 or
    bool, nonzero for a token whose text holds one of the generation's stop strings). The generation ends at that
    token, so a draft below it could only be verified for nothing, and the stop token's own node buys nothing
    either: accepted, it commits the token that the bonus token at its parent (the model's choice there) would
    have committed in the same step. Cut here, the tree's budget goes to nodes that can count
    (:func:`engine.verify.prune_after_stop` removes the same nodes from a built tree). Rows (K, W) or (W,), padded
    with -1; ``part`` itself when no row holds a stop token. The C builder cuts the same way
    (``fc_build_sized_parts``, :func:`engine.native.tree.set_stop`)."""
    rows = np.asarray(part.tokens)
    valid = (rows >= 0) & (rows < len(stop))
    hit = np.zeros(rows.shape, dtype=bool)
    hit[valid] = np.asarray(stop)[rows[valid]] != 0
    cut = np.cumsum(hit, axis=-1) > 0  # the first stop token of its row and the positions past it
    if not cut.any():
        return part
    return Candidates(np.where(cut, -1, rows).astype(rows.dtype, copy=False), part.counts, part.weight,
                      part.source, part.match_length)


def build_draft_tree(candidates: Sequence[Candidates], budget: int = 64, min_prob: float = 0.0,
                     estimator=None, cost=None, max_depth: int = SIZED_MAX_DEPTH,
                     stop: np.ndarray | None = None) -> DraftTree:
    """Merge the candidates of several sources into one weighted trie and keep the best nodes.

    Args:
        candidates: per-source continuations; empty ones are ignored.
        budget: maximum number of draft tokens (nodes) kept (REST and FastCoder use 64).
        min_prob: drop nodes whose estimated acceptance probability is below this. A node's
            estimate is, per source, the share of that source's continuations passing through it
            (max over sources), as SuffixDecoding's ``min_token_prob``. Verifying a node costs
            compute (on a CPU a 64-node tree costs about 3 single-token forwards), so unlikely
            branches are pruned and trees stay small when retrieval is unsure.
        estimator, cost: an :class:`engine.acceptance.AcceptanceEstimator` and a
            :class:`engine.cost_model.VerifyCost`: when both are given, the kept nodes are the
            best-first prefix (by estimated path probability) that maximises expected committed
            tokens per unit of verify cost (:func:`engine.acceptance.choose_by_cost`), with ``budget``
            and ``min_prob`` as caps; the tree then carries each node's estimate bucket in ``keys``.
        max_depth: with ``estimator`` and ``cost``, continuations are cut to this many tokens (the tree's
            depth bound, :data:`SIZED_MAX_DEPTH` by default; ignored otherwise).
        stop: (V,) uint8 or bool, nonzero for the generation's stop tokens (a line completion's newlines):
            continuations are cut at their first one (:func:`cut_at_stop`); None: not cut.

    Returns:
        A :class:`DraftTree` with at most ``budget`` nodes, prefix-closed: a node's weight is the
        weighted count of continuations passing through it, so a parent never weighs less than its
        child, and ties are broken by depth, then token id, then insertion order (deterministic).
    """
    parts = [c for c in candidates if c.tokens.size and len(c.counts)]
    if not parts or budget <= 0:
        return DraftTree.empty()
    if stop is not None:
        parts = [cut_at_stop(c, stop) for c in parts]
    sized = estimator is not None and cost is not None
    if sized:
        lib = native.library()
        if lib is not None and type(estimator) is AcceptanceEstimator:
            tree = _native_tree_module().build_sized_parts(lib, parts, budget, min_prob, estimator, cost, max_depth)
            if tree is not None:
                return tree
        tree = _build_sized(parts, budget, min_prob, estimator, cost, max_depth)
        if tree is not None:
            return tree
    trie = _trie(parts, sized, max_depth)
    if trie is None:  # only empty rows
        tree = DraftTree.empty()
        if sized:
            tree.keys, tree.probs = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return tree
    parent, token, depth, weight, source, share, match, cells = trie
    n = len(parent)
    best_share = share.max(axis=0)
    # Top `budget` by weight among likely nodes; ties -> shallower first (keeps the set
    # prefix-closed: a parent's weight and probability are never below its child's), then token,
    # then insertion order.
    keys = probs = None
    if sized:
        keep, keys, probs = _choose_by_estimate(cells, parent, token, depth, source, best_share, match, weight,
                                                budget, min_prob, estimator, cost)
    else:
        order = np.lexsort((np.arange(n), token, depth, -weight))
        order = order[best_share[order] >= min_prob - 1e-12][:budget]
        keep = np.zeros(n, dtype=bool)
        keep[order] = True
    keep = _prefix_closed(keep, cells)
    order = np.flatnonzero(keep)
    order = order[np.argsort(depth[order], kind="stable")]  # breadth-first: parents precede children
    new_index = np.full(n + 1, -1, dtype=np.int64)  # new_index[-1] (a root's parent) stays -1
    new_index[order] = np.arange(len(order))
    return DraftTree(
        token[order], new_index[parent[order]], depth[order], source[order].astype(np.uint8), weight[order],
        keys[order] if keys is not None else None,
        probs=probs[order] if probs is not None else None)


_NATIVE_TREE: list = []


def _native_tree_module():
    """:mod:`engine.native.tree` (it imports this module, so it is imported on first use). Kept here: an
    ``import`` statement in the per-step builder ran importlib's Python code on every decode step, one more
    code path cold after each forward."""
    if not _NATIVE_TREE:
        from .native import tree  # noqa: PLC0415

        _NATIVE_TREE.append(tree)
    return _NATIVE_TREE[0]


def _trie(parts: Sequence[Candidates], sized: bool, max_depth: int = SIZED_MAX_DEPTH):
    """One trie over every source's continuations: the rows inserted one by one, source after source,
    token by token (a node is a distinct prefix; a row ends at its first negative token), then every
    per-node sum taken with array operations over the inserted cells.

    Node ids are in insertion order (a parent precedes its children), and per-node sums are accumulated
    in that order (the floats of a node-by-node accumulation, bit for bit). Plain dicts for the
    insertion: a call sees ~10-50 continuations of <= 16 tokens, too few for sort-based array tries
    (measured: 150 us for this loop with the sums in Python, 180 us sort-based, ~60 us this way).
    Serves trees not sized by cost, and sized ones outside :func:`_build_sized`'s shortcuts (that
    builder keeps these sums in Python, folded per source, and is ~2x faster on the sized path).

    Returns None for no nodes, else (parent, token, depth, weight, source, share, match, cells): (N,)
    int64 parent (-1 at the root), token, depth (>= 1); (N,) float64 weight (sum of count x source
    weight); (N,) int64 source bitmask; (P, N) float64 share of each source's continuations through the
    node; (N,) int64 longest matched suffix of the sources through it; cells: (K, L) int64 node of each
    row's token (-1 past the row's end), for row-wise scans (a row spells a root-to-node path).
    """
    node_of: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    token: list[int] = []
    seq: list[int] = []      # node of every inserted cell, in insertion order
    lengths: list[int] = []  # tokens of every row
    wts, shs, nrows = [], [], []
    width = 0
    for cand in parts:
        counts = np.asarray(cand.counts, dtype=np.float64).reshape(-1)
        total = max(float(counts.sum()), 1e-12)
        rows = np.asarray(cand.tokens)
        if rows.ndim == 1:
            rows = rows[None]
        k = min(len(rows), len(counts))
        rows, counts = rows[:k], counts[:k]
        if sized and k > SIZED_MAX_ROWS:  # the cost model keeps few nodes: skip rare rows
            top = np.argsort(-counts, kind="stable")[:SIZED_MAX_ROWS]
            rows, counts = rows[top], counts[top]
        if sized and rows.shape[1] > max_depth:
            rows = rows[:, :max_depth]
        width = max(width, rows.shape[1])
        wts.append(counts * cand.weight)
        shs.append(counts / total)
        nrows.append(len(counts))
        for row in rows.tolist():
            node = -1
            start = len(seq)
            for tok in row:
                if tok < 0:
                    break
                key = (node, tok)
                nid = node_of.get(key)
                if nid is None:
                    nid = node_of[key] = len(parent)
                    parent.append(node)
                    token.append(tok)
                seq.append(nid)
                node = nid
            lengths.append(len(seq) - start)
    n = len(parent)
    if n == 0:
        return None
    seq_a = np.asarray(seq, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64)
    row_of_cell = np.repeat(np.arange(len(lens)), lens)
    col = np.arange(width)
    inside = col[None, :] < lens[:, None]
    cells = np.full((len(lens), width), -1, dtype=np.int64)
    cells[inside] = seq_a
    depth = np.empty(n, dtype=np.int64)
    depth[seq_a] = np.broadcast_to(col + 1, cells.shape)[inside]
    weight = np.bincount(seq_a, weights=np.concatenate(wts)[row_of_cell], minlength=n)
    # per source and node, one bincount over (source, node) pairs: shares and which sources reach a node
    part_of_row = np.repeat(np.arange(len(parts)), nrows)
    pair = part_of_row[row_of_cell] * n + seq_a
    share = np.bincount(pair, weights=np.concatenate(shs)[row_of_cell], minlength=len(parts) * n)
    share = share.reshape(len(parts), n)
    present = np.bincount(pair, minlength=len(parts) * n).reshape(len(parts), n) > 0
    bits = np.array([int(c.source) for c in parts], dtype=np.int64)[:, None]
    source = np.bitwise_or.reduce(np.where(present, bits, 0), axis=0)
    lengths_of = np.array([int(c.match_length) for c in parts], dtype=np.int64)[:, None]
    match = np.max(np.where(present, lengths_of, 0), axis=0)
    return (np.asarray(parent, dtype=np.int64), np.asarray(token, dtype=np.int64), depth, weight, source,
            share, match, cells)


def _prefix_closed(keep: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """``keep`` ((N,) bool) without the nodes that have an ancestor outside it (guards against
    float-rounding ties). ``cells``: (K, L) node of each row's token, -1 past its end (:func:`_trie`)."""
    valid = cells >= 0
    closed = np.logical_and.accumulate(keep[cells] & valid, axis=1)
    out = np.zeros_like(keep)
    out[cells[closed]] = True
    return out


def _choose_by_estimate(cells, parent, token, depth, source, share, match, weight, budget, min_prob, estimator,
                        cost):
    """Kept nodes ((N,) bool), every node's estimate bucket ((N,) int64) and estimated probability ((N,)
    float64, P(accepted | parent accepted)), by expected tokens per cost. ``share``: (N,) the node's
    largest share of one source's continuations; ``parent``, ``token``: (N,) int64; ``weight``: (N,) float64;
    ``cells``: see :func:`_trie`."""
    from .acceptance import bucket_keys  # noqa: PLC0415

    keys = bucket_keys(source, depth, share, match, alternatives(parent.tolist(), share.tolist()))
    p = estimator.estimate(keys, share)
    p[share < min_prob - 1e-12] = 0.0
    nodes = getattr(estimator, "node_model", None)
    if nodes is not None:  # the learned per-node estimate over the trie's features (engine.node_model)
        p = np.asarray(nodes.adjust(token.tolist(), parent.tolist(), depth.tolist(), source.tolist(), share.tolist(),
                                    match.tolist(), weight.tolist(), p.tolist()), dtype=np.float64)
    head = getattr(estimator, "depth_one", None)
    if head is not None:  # the draft head's calibrated estimates of the depth-1 nodes (engine.draft_head)
        p = np.asarray(head.adjust(token.tolist(), parent.tolist(), p.tolist()), dtype=np.float64)
    # path probability: the product of the estimates along the root-to-node path, a running product
    # along each row (every row through a node gives the same value)
    valid = cells >= 0
    path = np.empty(len(p), dtype=np.float64)
    path[cells[valid]] = np.cumprod(np.where(valid, p[cells], 1.0), axis=1)[valid]
    chosen = choose_by_cost(path, depth, cost, budget)
    keep = np.zeros(len(p), dtype=bool)
    keep[chosen[path[chosen] > 0]] = True
    return keep, keys, p


#: With cost sizing, trees of at most this many trie nodes get their estimates, order and choice in
#: plain Python; larger ones in array calls (whose ~30 us of fixed cost only pays past ~40 nodes).
SIZED_PYTHON_NODES = 40


def _sized_rows(cand: Candidates, max_depth: int = SIZED_MAX_DEPTH) -> tuple | None:
    """One source's rows as the sized builders insert them: ``(rows, row_counts, total, weight, bit,
    match_length)`` with ``rows`` a (K, <= max_depth) int array of the (at most SIZED_MAX_ROWS most
    frequent) continuations, ``row_counts`` their counts (a list of Python numbers), ``total`` the float64
    sum of all the source's counts (>= 1e-12), or None for inputs outside the shortcuts (negative or
    non-finite counts, a sum that is not exact)."""
    counts = np.asarray(cand.counts)
    if counts.ndim != 1:
        counts = counts.reshape(-1)
    all_counts = counts.tolist()
    kind = counts.dtype.kind
    if kind in "iub":  # integer counts: a Python int sum is exact, so it is numpy's float64 sum
        total = sum(all_counts)
        if not (0 <= total < 2 ** 53 and min(all_counts) >= 0):
            return None
        total = float(total)
    elif kind == "f" and len(all_counts) <= 2:  # one addition: any order gives the same float
        total = float(sum(all_counts))
    elif kind == "f":
        total = float(np.asarray(counts, dtype=np.float64).sum())
    else:
        return None
    rows = np.asarray(cand.tokens)
    if rows.ndim == 1:
        rows = rows[None]
    k = min(len(rows), len(all_counts))
    if k > SIZED_MAX_ROWS:  # the cost model keeps few nodes: skip rare rows
        top = np.argsort(-np.asarray(counts[:k], dtype=np.float64), kind="stable")[:SIZED_MAX_ROWS].tolist()
        rows, row_counts = rows[top], [all_counts[i] for i in top]
    else:
        rows, row_counts = rows[:k], all_counts[:k]
    if rows.shape[1] > max_depth:
        rows = rows[:, :max_depth]
    if not (0.0 <= total < math.inf and (not row_counts or min(row_counts) >= 0.0)):
        return None  # shares could be negative: the fold below assumes a node's best share >= 0
    return rows, row_counts, max(total, 1e-12), float(cand.weight), int(cand.source), max(int(cand.match_length), 0)


def _build_sized(parts: Sequence[Candidates], budget: int, min_prob: float, estimator, cost,
                 max_depth: int = SIZED_MAX_DEPTH) -> DraftTree | None:
    """:func:`build_draft_tree` with ``estimator`` and ``cost`` (``parts`` non-empty, ``budget`` > 0): the
    same tree, bit for bit, as :func:`_trie` + :func:`_choose_by_estimate` build, in plain Python.

    Every decode step calls this (~2 sources, ~12 continuations, ~15 nodes at the median, a few hundred
    at most), so its cost is fixed per-call overhead, not arithmetic: the trie and every per-node sum
    are kept in lists during insertion (sums in the same order as :func:`_trie`'s, so the same floats),
    a source's shares are folded into the node's best share when its rows end, path probabilities are
    one loop over nodes in insertion order (parents first), and small trees are ordered with Python's
    ``sorted``; trees of more than :data:`SIZED_PYTHON_NODES` nodes take the array calls for the
    estimates and the choice (:func:`engine.acceptance.choose_by_cost`). Where the library of
    :mod:`engine.native` is built, the trie, estimates and choice run in C instead (the same tree, bit for
    bit; ~0.14 -> ~0.05 ms a step on recorded inputs, most of it this function's Python preparation).

    Returns None (the caller takes the array path) for inputs outside what the shortcuts assume:
    negative or non-finite counts, or NaN estimates.
    """
    prepared = []
    for cand in parts:
        rows = _sized_rows(cand, max_depth)
        if rows is None:
            return None
        prepared.append(rows)
    lib = native.library()
    if lib is not None and type(estimator) is AcceptanceEstimator:
        from .native.tree import build_sized_native  # noqa: PLC0415  (it imports this module)

        tree = build_sized_native(lib, prepared, budget, min_prob, estimator, cost)
        if tree is not None:
            return tree
    node_of: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    token: list[int] = []
    depth: list[int] = []
    weight: list[float] = []   # sum of count x source weight over the rows through the node, in row order
    source: list[int] = []     # bitmask of the sources through the node
    match: list[int] = []      # longest matched suffix of those sources (>= 0)
    best: list[float] = []     # largest share of one source's continuations through the node
    base: list[int] = []       # acceptance-estimate bucket but for the share (acceptance.bucket_bases)
    n = 0
    for rows, row_counts, total, part_weight, bit, length in prepared:
        bases = bucket_bases(bit, length, max_depth)
        n0 = n
        shares: list[float] = []        # this source's share of the nodes it created (node n0 + j)
        old_shares: dict[int, float] = {}  # and of nodes earlier sources created
        get_old = old_shares.get
        node_get = node_of.get
        for row, count in zip(rows.tolist(), row_counts):
            w = count * part_weight
            sh = count / total
            node = -1
            d = 0
            for tok in row:
                if tok < 0:
                    break
                nid = node_get((node, tok))
                if nid is None:
                    # the rest of the row is new nodes: their parent is new, so nothing to look up
                    w0, sh0 = 0.0 + w, 0.0 + sh  # _trie's sums start at 0.0 (a -0.0 count gives 0.0)
                    for tok in row[d:]:
                        if tok < 0:
                            break
                        d += 1
                        node_of[(node, tok)] = n
                        parent.append(node)
                        token.append(tok)
                        depth.append(d)
                        weight.append(w0)
                        shares.append(sh0)
                        base.append(bases[d])
                        node = n
                        n += 1
                    break
                d += 1
                weight[nid] += w
                if nid >= n0:
                    shares[nid - n0] += sh
                else:
                    old_shares[nid] = get_old(nid, 0.0) + sh
                node = nid
        for nid, sh in old_shares.items():  # nodes of several sources
            if sh > best[nid]:
                best[nid] = sh
            source[nid] |= bit
            if length > match[nid]:
                match[nid] = length
            base[nid] = bucket_bases(source[nid], match[nid], max_depth)[depth[nid]]
        best.extend(shares)
        source.extend([bit] * len(shares))
        match.extend([length] * len(shares))
    if n == 0:  # only empty rows
        tree = DraftTree.empty()
        tree.keys, tree.probs = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return tree

    # Estimates P(node accepted | parent accepted) and path probabilities (their products to the root).
    base = [b + ALTERNATIVE_STRIDE if alt else b for b, alt in zip(base, alternatives(parent, best))]
    small = n <= SIZED_PYTHON_NODES
    probs = None
    if small and type(estimator).estimate is AcceptanceEstimator.estimate:  # its estimate_list is the same
        keys = keys_from_bases(base, best)
        probs = estimator.estimate_list(keys, best)
    if probs is None:
        best_a = np.fromiter(best, dtype=np.float64, count=n)
        keys_a = keys_from_bases_array(np.fromiter(base, dtype=np.int64, count=n), best_a)
        probs = estimator.estimate(keys_a, best_a).tolist()
        keys = keys_a  # indexed for the kept nodes only
    if min_prob > 0.0:  # shares are >= 0: nothing is below a min_prob <= 0
        cut = min_prob - 1e-12
        probs = [0.0 if b < cut else q for b, q in zip(best, probs)]
    nodes = getattr(estimator, "node_model", None)
    if nodes is not None:  # the learned per-node estimate over the trie's features (engine.node_model)
        probs = nodes.adjust(token, parent, depth, source, best, match, weight, probs)
    head = getattr(estimator, "depth_one", None)
    if head is not None:  # the draft head's calibrated estimates of the depth-1 nodes (engine.draft_head)
        probs = head.adjust(token, parent, probs)
    path: list[float] = []
    append = path.append
    for q, up in zip(probs, parent):
        append(q * path[up] if up >= 0 else q)
    if math.isnan(sum(path)):
        return None  # NaN sorts last in arrays, nowhere in particular in Python

    # Best-first prefix maximising expected tokens per verify cost (acceptance.choose_by_cost).
    if small:
        order = [i for _, _, i in sorted(zip([-x for x in path], depth, range(n)))[:budget]]
        m = len(order)
        upto = getattr(cost, "upto", None)
        table = (upto(m) if upto is not None else cost.c(np.arange(m + 1))).tolist()
        ratio = 1.0 / table[0]  # np.argmax: the first maximum, or the first NaN
        chosen = 0
        if ratio == ratio:
            gain = 0.0
            for j in range(m):
                gain += path[order[j]]
                r = (1.0 + gain) / table[j + 1]
                if r > ratio:
                    ratio, chosen = r, j + 1
                elif r != r:
                    chosen = j + 1
                    break
        kept = {i for i in order[:chosen] if path[i] > 0}
    else:
        chosen = choose_by_cost(np.fromiter(path, dtype=np.float64, count=n), np.fromiter(depth, dtype=np.int64, count=n),
                                cost, budget).tolist()
        kept = {i for i in chosen if path[i] > 0}
    # prefix-closed (float ties could leave a child without its parent), breadth-first
    out = []
    for i in kept:
        up = parent[i]
        while up >= 0 and up in kept:
            up = parent[up]
        if up < 0:
            out.append(i)
    out.sort(key=lambda i: (depth[i], i))
    new_index = {old: new for new, old in enumerate(out)}
    m = len(out)
    ints = [token[i] for i in out]  # one flat list per dtype, one array call each (rows are views)
    ints += [new_index.get(parent[i], -1) for i in out]
    ints += [depth[i] for i in out]
    ints += [keys[i] for i in out]
    ints = np.fromiter(ints, dtype=np.int64, count=4 * m).reshape(4, m)
    floats = [weight[i] for i in out]
    floats += [probs[i] for i in out]
    floats = np.fromiter(floats, dtype=np.float64, count=2 * m).reshape(2, m)
    return DraftTree(ints[0], ints[1], ints[2], np.array([source[i] & 0xFF for i in out], dtype=np.uint8),
                     floats[0], ints[3], probs=floats[1])
