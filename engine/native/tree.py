"""The cost-sized draft-tree builder's C call (``fc_build_sized`` in ``draft_tree.c``): buffers and marshalling.

:func:`engine.draft_tree._build_sized` prepares each source's rows and calls :func:`build_sized_native` when
the library is loaded; the tree is the same, bit for bit (tests/test_draft_tree_sized.py runs every case both
ways against the node-by-node reference).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..acceptance import (ALTERNATIVE_PRIOR, ALTERNATIVE_STRIDE, DEPTH_BUCKETS, MATCH_EDGES, PRIOR_SCALE,
                          SHARE_EDGES, SOURCE_SLOTS, SOURCE_STRIDE, AcceptanceEstimator)
from ..draft_tree import DraftTree


class _NativeScratch:
    """Buffers the C builder reads and writes, allocated once (and grown) with their addresses kept:
    taking an array's address costs more than the C builder's work for a typical tree."""

    def __init__(self, rows: int = 128, width: int = 16, parts: int = 8, table: int = 256):
        self.rows = np.full(rows * width, -1, dtype=np.int64)
        self.counts = np.zeros(rows, dtype=np.float64)
        self.row_part = np.zeros(rows, dtype=np.int64)
        self.part_ints = np.zeros((2, parts), dtype=np.int64)
        self.part_floats = np.zeros((2, parts), dtype=np.float64)
        self.table = np.zeros(table, dtype=np.float64)
        self.out_ints = np.zeros((4, rows * width), dtype=np.int64)
        self.out_floats = np.zeros((2, rows * width), dtype=np.float64)
        self.out_sources = np.zeros(rows * width, dtype=np.uint8)
        self.n_nodes = ctypes.c_int64(0)
        self.share_edges = np.asarray(SHARE_EDGES, dtype=np.float64)
        self.match_edges = np.asarray(MATCH_EDGES, dtype=np.int64)
        self.fits = (rows, width, parts, table)
        self.estimator = (None,) * 8  # (accepted, tried, pooled accepted, pooled tried, their addresses)
        a = lambda arr: arr.ctypes.data  # noqa: E731
        self.ptr = (a(self.rows), a(self.counts), a(self.row_part), a(self.part_ints[0]), a(self.part_ints[1]),
                    a(self.part_floats[0]), a(self.part_floats[1]), a(self.share_edges), a(self.match_edges),
                    a(self.table), ctypes.addressof(self.n_nodes), a(self.out_ints[0]), a(self.out_ints[1]),
                    a(self.out_ints[2]), a(self.out_ints[3]), a(self.out_sources), a(self.out_floats[0]),
                    a(self.out_floats[1]))

    def estimator_pointers(self, *arrays: np.ndarray) -> tuple[int, ...]:
        """The addresses of the estimator's four count arrays (cached while they are the same objects)."""
        cached = self.estimator
        if any(c is not a for c, a in zip(cached, arrays)):
            self.estimator = cached = (*arrays, *(a.ctypes.data for a in arrays))
        return cached[4:]


#: One scratch per thread: ctypes releases the GIL during the C call, so two threads drafting at once
#: must not share buffers.
_local = threading.local()


def build_sized_native(lib, prepared: list[tuple], budget: int, min_prob: float,
                        estimator: AcceptanceEstimator, cost) -> DraftTree | None:
    """:func:`engine.draft_tree._build_sized`'s tree from the C builder (``fc_build_sized``), bit for bit.

    Args:
        lib: the loaded library (:func:`engine.native.library`).
        prepared: per source, :func:`engine.draft_tree._sized_rows`'s tuple (rows, counts, total, weight,
            source bit, match length).
        budget, min_prob: draft tokens at most; nodes whose best share is below ``min_prob`` get estimate 0.
        estimator: an :class:`engine.acceptance.AcceptanceEstimator` (its float64 Beta counts are read).
        cost: a :class:`engine.cost_model.VerifyCost`.
    Returns:
        The :class:`engine.draft_tree.DraftTree` (``keys`` and ``probs`` set), or None where the C code leaves
        the input to the Python path (NaN estimates or costs, a zero denominator, odd estimator arrays).
    """
    beta = (estimator.accepted, estimator.tried, estimator.pooled_accepted, estimator.pooled_tried)
    if not (all(type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous for a in beta)
            and len(beta[0]) == len(beta[1]) and len(beta[2]) == len(beta[3])):
        return None
    n_rows = sum(len(p[1]) for p in prepared)
    width = max(p[0].shape[1] for p in prepared)
    n_parts = len(prepared)
    m = min(n_rows * width, budget)
    if n_rows == 0 or width == 0:
        return None
    sc = getattr(_local, "scratch", None)
    if sc is None or n_rows > sc.fits[0] or width > sc.fits[1] or n_parts > sc.fits[2] or m >= sc.fits[3]:
        sc = _local.scratch = _NativeScratch(max(n_rows, 128), max(width, 16), max(n_parts, 8), max(m + 1, 256))
    rows = sc.rows[:n_rows * width].reshape(n_rows, width)
    rows.fill(-1)
    at = 0
    for j, (part_rows, counts, total, part_weight, bit, length) in enumerate(prepared):
        k = len(counts)
        rows[at:at + k, :part_rows.shape[1]] = part_rows
        sc.counts[at:at + k] = counts  # exact: integer counts are below 2 ** 53 (_sized_rows)
        sc.row_part[at:at + k] = j
        at += k
        sc.part_ints[0, j], sc.part_ints[1, j] = bit, length
        sc.part_floats[0, j], sc.part_floats[1, j] = part_weight, total
    upto = getattr(cost, "upto", None)
    sc.table[:m + 1] = upto(m) if upto is not None else cost.c(np.arange(m + 1))
    acc_ptr, tried_ptr, pooled_acc_ptr, pooled_tried_ptr = sc.estimator_pointers(*beta)
    p = sc.ptr
    kept = lib.fc_build_sized(
        n_rows, width, p[0], p[1], p[2], n_parts, p[3], p[4], p[5], p[6],
        DEPTH_BUCKETS, p[7], len(SHARE_EDGES), p[8], len(MATCH_EDGES), SOURCE_SLOTS,
        acc_ptr, tried_ptr, len(beta[0]), float(estimator.prior_strength),
        pooled_acc_ptr, pooled_tried_ptr, len(beta[2]), float(estimator.pool_strength), ALTERNATIVE_STRIDE,
        SOURCE_STRIDE, ALTERNATIVE_PRIOR, PRIOR_SCALE, float(min_prob),
        int(budget), p[9], m + 1, p[10], *p[11:])
    if kept < 0:
        return None
    if sc.n_nodes.value == 0:  # only empty rows
        tree = DraftTree.empty()
        tree.keys, tree.probs = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return tree
    ints, floats = sc.out_ints[:, :kept].copy(), sc.out_floats[:, :kept].copy()
    return DraftTree(ints[0], ints[1], ints[2], sc.out_sources[:kept].copy(), floats[0], ints[3], probs=floats[1])
