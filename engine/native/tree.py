"""The cost-sized draft-tree builder's C call (``fc_build_sized`` in ``draft_tree.c``, through
``fc_build_sized_packed``): buffers and marshalling.

:func:`engine.tree_builder._build_sized` prepares each source's rows and calls :func:`build_sized_native` when
the library is loaded; the tree is the same, bit for bit (tests/test_draft_tree_sized.py runs every case both
ways against the node-by-node reference).
"""

from __future__ import annotations

import threading

import numpy as np

from ..acceptance import (ALTERNATIVE_PRIOR, ALTERNATIVE_STRIDE, DEPTH_BUCKETS, MATCH_EDGES, PRIOR_SCALE,
                          SHARE_EDGES, SOURCE_SLOTS, SOURCE_STRIDE, AcceptanceEstimator)
from ..draft_tree import DraftTree
from ..node_model import NodeModel
from ..tree_builder import SIZED_MAX_DEPTH, SIZED_MAX_ROWS


class _NativeScratch:
    """Buffers the C builder reads and writes, allocated once (and grown), and its packed arguments
    (``fc_build_sized_packed``: ``ia`` int64, ``da`` float64) with every constant and address filled in:
    converting forty ctypes arguments, or taking an array's address, costs more than the builder's work for a
    typical tree."""

    def __init__(self, rows: int = 128, width: int = SIZED_MAX_DEPTH, parts: int = 8, table: int = 256):
        self.rows = np.full(rows * width, -1, dtype=np.int64)
        self.counts = np.zeros(rows, dtype=np.float64)
        self.row_part = np.zeros(rows, dtype=np.int64)
        self.part_ints = np.zeros((2, parts), dtype=np.int64)
        self.part_floats = np.zeros((2, parts), dtype=np.float64)
        self.table = np.zeros(table, dtype=np.float64)
        self.out_ints = np.zeros((4, rows * width), dtype=np.int64)
        self.out_floats = np.zeros((2, rows * width), dtype=np.float64)
        self.out_sources = np.zeros(rows * width, dtype=np.uint8)
        self.n_nodes = np.zeros(1, dtype=np.int64)
        self.share_edges = np.asarray(SHARE_EDGES, dtype=np.float64)
        self.match_edges = np.asarray(MATCH_EDGES, dtype=np.int64)
        self.fits = (rows, width, parts, table)
        self.curve_table = None  # the curve's own cached table that ia[25] points at (None: self.table)
        self.curve_cost = None  # the curve object whose table ia[25] points at (its tables are not changed in place)
        self.curve_len = 0  # entries of that table
        self.estimator = None  # the estimator whose counts' addresses ia holds
        self.depth_one = None  # the DepthOneFeature whose buffers ia[35:43] hold (None: ia[39] = 0)
        self.node_model = None  # the NodeModel whose weights ia[45:48] hold (None: ia[45] = 0)
        self.strengths = None  # (prior, pool strength) in da[0:2]
        self.limits = None  # (budget, min_prob) in ia[24], da[4]
        a = lambda arr: arr.ctypes.data  # noqa: E731
        # [35:43]: the draft head's buffers (use_estimator), 0: none; [43:45]: the stop tokens' table (set_stop);
        # [45:48]: the node model's weights, token classes and vocabulary size (use_estimator), 0: none
        self.ia = np.zeros(48, dtype=np.int64)
        self.stop = None  # the (V,) uint8 table ia[43] points at (None: ia[43] = 0)
        self.ia[[2, 3, 4, 6, 7, 8, 9]] = [a(self.rows), a(self.counts), a(self.row_part), a(self.part_ints[0]),
                                         a(self.part_ints[1]), a(self.part_floats[0]), a(self.part_floats[1])]
        self.ia[10:16] = [DEPTH_BUCKETS, a(self.share_edges), len(SHARE_EDGES), a(self.match_edges),
                          len(MATCH_EDGES), SOURCE_SLOTS]
        self.ia[22:24] = [ALTERNATIVE_STRIDE, SOURCE_STRIDE]
        self.ia[25] = a(self.table)
        self.ia[27:35] = [a(self.n_nodes), a(self.out_ints[0]), a(self.out_ints[1]), a(self.out_ints[2]),
                          a(self.out_ints[3]), a(self.out_sources), a(self.out_floats[0]), a(self.out_floats[1])]
        self.da = np.zeros(5, dtype=np.float64)
        self.da[2:4] = [ALTERNATIVE_PRIOR, PRIOR_SCALE]
        self.args = (a(self.ia), a(self.da))
        # the sources' rows and counts copied here (fixed addresses: a numpy array's .ctypes.data is one more
        # code path cold after each forward, ~25 us; a slice assignment's is warm from the context copy's)
        self.src_tokens = np.zeros(parts * rows * width, dtype=np.int64)
        self.src_int_counts = np.zeros(parts * rows, dtype=np.int64)
        self.src_float_counts = np.zeros(parts * rows, dtype=np.float64)
        self.src_addrs = (a(self.src_tokens), a(self.src_int_counts), a(self.src_float_counts))
        self.parts = np.zeros(parts * 10, dtype=np.int64)  # fc_build_sized_parts: 10 fields per source
        self.weights = np.zeros(parts, dtype=np.float64)
        self.parts_args = (a(self.parts), a(self.weights))

    def use_estimator(self, estimator: AcceptanceEstimator) -> bool:
        """Point the arguments at ``estimator``'s Beta counts; False when they are not float64 C-contiguous
        arrays of matching lengths (checked once per estimator and arrays)."""
        held = self.estimator
        if held is not None and held[0] is estimator:  # the usual case: plain comparisons, numpy written on change
            b = held[1]
            if (b[0] is estimator.accepted and b[1] is estimator.tried and b[2] is estimator.pooled_accepted
                    and b[3] is estimator.pooled_tried):
                strengths = (estimator.prior_strength, estimator.pool_strength)
                if strengths != self.strengths:
                    self.da[0], self.da[1] = self.strengths = strengths
                if estimator.depth_one is not self.depth_one:
                    self._use_head(estimator.depth_one)
                if estimator.node_model is not self.node_model:
                    return self._use_node_model(estimator.node_model)
                return True
        beta = (estimator.accepted, estimator.tried, estimator.pooled_accepted, estimator.pooled_tried)
        if not (all(type(x) is np.ndarray and x.dtype == np.float64 and x.flags.c_contiguous for x in beta)
                and len(beta[0]) == len(beta[1]) and len(beta[2]) == len(beta[3])):
            return False
        self.ia[[16, 17, 18, 19, 20, 21]] = [beta[0].ctypes.data, beta[1].ctypes.data, len(beta[0]),
                                             beta[2].ctypes.data, beta[3].ctypes.data, len(beta[2])]
        self.da[0], self.da[1] = self.strengths = (estimator.prior_strength, estimator.pool_strength)
        if not self._use_node_model(estimator.node_model):
            return False
        self.estimator = (estimator, beta)
        self._use_head(estimator.depth_one)
        return True

    def _use_head(self, feature) -> None:
        """Point ia[35:43] at ``feature``'s buffers (a :class:`engine.draft_head.DepthOneFeature`), or clear them."""
        if feature is None:
            self.ia[35:43] = 0
        else:
            emb = feature.embedding
            self.ia[35:43] = [emb.ctypes.data, feature.hidden.ctypes.data, emb.shape[1], emb.shape[0],
                              feature.params.ctypes.data, feature.seen_tokens.ctypes.data,
                              feature.seen_values.ctypes.data, len(feature.seen_tokens) - 1]
        self.depth_one = feature

    def _use_node_model(self, model) -> bool:
        """Point ia[45:48] at ``model``'s packed weights and token class codes (an
        :class:`engine.node_model.NodeModel`), or clear them; False (nothing changed) for another kind of hook,
        which only the Python builder runs."""
        if model is None:
            self.ia[45:48] = 0
        elif isinstance(model, NodeModel):
            self.ia[45:48] = [model.packed.ctypes.data, model.codes.ctypes.data, len(model.codes)]
        else:
            return False
        self.node_model = model
        return True


#: One scratch per thread: ctypes releases the GIL during the C call, so two threads drafting at once
#: must not share buffers.
_local = threading.local()


def build_sized_native(lib, prepared: list[tuple], budget: int, min_prob: float,
                       estimator: AcceptanceEstimator, cost) -> DraftTree | None:
    """:func:`engine.tree_builder._build_sized`'s tree from the C builder (``fc_build_sized``), bit for bit.

    Args:
        lib: the loaded library (:func:`engine.native.library`).
        prepared: per source, :func:`engine.tree_builder._sized_rows`'s tuple (rows, counts, total, weight,
            source bit, match length).
        budget, min_prob: draft tokens at most; nodes whose best share is below ``min_prob`` get estimate 0.
        estimator: an :class:`engine.acceptance.AcceptanceEstimator` (its float64 Beta counts are read).
        cost: a :class:`engine.cost_model.VerifyCost`.
    Returns:
        The :class:`engine.draft_tree.DraftTree` (``keys`` and ``probs`` set), or None where the C code leaves
        the input to the Python path (NaN estimates or costs, a zero denominator, odd estimator arrays).
    """
    n_rows = width = 0
    for p in prepared:
        n_rows += len(p[1])
        if p[0].shape[1] > width:
            width = p[0].shape[1]
    n_parts = len(prepared)
    m = min(n_rows * width, budget)
    if n_rows == 0 or width == 0:
        return None
    sc = getattr(_local, "scratch", None)
    if sc is None or n_rows > sc.fits[0] or width > sc.fits[1] or n_parts > sc.fits[2] or m >= sc.fits[3]:
        sc = _local.scratch = _NativeScratch(max(n_rows, 128), max(width, 16), max(n_parts, 8), max(m + 1, 256))
    if not sc.use_estimator(estimator):
        return None
    rows = sc.rows[:n_rows * width].reshape(n_rows, width)
    rows.fill(-1)
    at = 0
    part_ints, part_floats = sc.part_ints, sc.part_floats
    for j, (part_rows, counts, total, part_weight, bit, length) in enumerate(prepared):
        k = len(counts)
        rows[at:at + k, :part_rows.shape[1]] = part_rows
        sc.counts[at:at + k] = counts  # exact: integer counts are below 2 ** 53 (_sized_rows)
        sc.row_part[at:at + k] = j
        at += k
        part_ints[0, j], part_ints[1, j] = bit, length
        part_floats[0, j], part_floats[1, j] = part_weight, total
    _point_table(sc, cost, m)
    ia = sc.ia
    ia[0], ia[1], ia[5], ia[24] = n_rows, width, n_parts, budget
    sc.da[4] = min_prob
    sc.limits = (budget, min_prob)
    kept = lib.fc_build_sized_packed(*sc.args)
    return _tree_from(sc, kept)


def thread_scratch(width: int = SIZED_MAX_DEPTH) -> _NativeScratch:
    """This thread's scratch (made on first use), its rows at least ``width`` tokens wide (the trees' depth bound:
    remade wider when a drafter's bound exceeds it)."""
    sc = getattr(_local, "scratch", None)
    if sc is None or sc.fits[1] < width:
        rows, _, parts, table = sc.fits if sc is not None else (128, 0, 8, 256)
        sc = _local.scratch = _NativeScratch(rows, max(width, SIZED_MAX_DEPTH), parts, table)
    return sc


def set_stop(sc: _NativeScratch, stop: np.ndarray | None) -> None:
    """Point fc_build_sized_parts at ``stop`` ((V,) uint8 C-contiguous, nonzero for a token whose text holds a stop
    string; None: no stop): each source row is cut at its first stop token (:func:`engine.tree_builder.cut_at_stop`).
    numpy is written only when the table changes."""
    if stop is not sc.stop:
        sc.ia[43], sc.ia[44] = (0, 0) if stop is None else (stop.ctypes.data, len(stop))
        sc.stop = stop


def set_limits(sc: _NativeScratch, cost, budget: int, min_prob: float) -> None:
    """Point the builder at ``cost``'s c(n) table for any tree the scratch holds, and set its caps (``budget``
    draft tokens, ``min_prob``); numpy is written only when a value changes."""
    _point_table(sc, cost, min(budget, sc.fits[0] * sc.fits[1]))  # no tree outgrows the scratch
    if (budget, min_prob) != sc.limits:
        sc.ia[24], sc.da[4] = sc.limits = (budget, min_prob)


def _point_table(sc: _NativeScratch, cost, m: int) -> None:
    """Point the builder's c(0), c(1), ... argument (``ia[25]``, its length ``ia[26]``) at a table holding at
    least c(0..m): the curve's own cached table (:meth:`engine.cost_model.VerifyCost.upto`, the same values
    as ``cost.c``) where it has one, re-pointed only when that table changes; else ``sc.table`` filled from
    ``cost.c`` (``m`` < ``sc.fits[3]``)."""
    if sc.curve_cost is cost and sc.curve_len > m:  # the same curve object as the last call: its table still serves
        return
    upto = getattr(cost, "upto", None)
    if upto is None:
        sc.table[:m + 1] = cost.c(np.arange(m + 1))
        sc.ia[25], sc.ia[26], sc.curve_table, sc.curve_cost = sc.table.ctypes.data, m + 1, None, None
        sc.curve_len = m + 1
        return
    view = upto(m)
    table = view.base if view.base is not None else view
    if sc.curve_table is not table:
        sc.ia[25], sc.ia[26], sc.curve_table = table.ctypes.data, len(table), table
    sc.curve_cost, sc.curve_len = cost, len(table)


def _tree_from(sc: _NativeScratch, kept: int) -> DraftTree | None:
    """The DraftTree the C builder wrote into ``sc``'s outputs (``kept`` nodes), an empty one (with empty
    ``keys`` and ``probs``) when the trie had no node, None when the C code returned an error (< 0)."""
    if kept < 0:
        return None
    if kept == 0:  # only empty rows, or no node worth its cost
        tree = DraftTree.empty()
        tree.keys, tree.probs = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return tree
    ints, floats = sc.out_ints[:, :kept].copy(), sc.out_floats[:, :kept].copy()
    return DraftTree(ints[0], ints[1], ints[2], sc.out_sources[:kept].copy(), floats[0], ints[3], probs=floats[1])


_I32, _I64, _F64 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float64)


def pack_parts(sc: _NativeScratch, parts: list) -> int:
    """Write ``parts`` (:class:`engine.draft_tree.Candidates`, at most ``sc.fits[2]``) as ``fc_build_sized_parts``'
    source fields and weights into ``sc.parts`` and ``sc.weights``, each source's rows and counts copied into the
    scratch where they fit (else read in place). Returns the number of sources, or -1 where the Python
    preparation must run (other dtypes or layouts)."""
    fields: list = []
    weights: list = []
    src_tokens, src_ints, src_floats = sc.src_tokens, sc.src_int_counts, sc.src_float_counts
    tok_addr, int_addr, float_addr = sc.src_addrs
    at_tok = at_int = at_float = 0
    for c in parts:
        tokens, counts = c.tokens, c.counts
        if type(tokens) is not np.ndarray or type(counts) is not np.ndarray or counts.ndim != 1:
            return -1
        dt, kind = tokens.dtype, counts.dtype
        if (dt != _I64 and dt != _I32) or (kind != _I64 and kind != _F64):
            return -1
        if tokens.ndim == 2:
            n_rows, width = tokens.shape
        elif tokens.ndim == 1:
            n_rows, width = 1, tokens.shape[0]
        else:
            return -1
        size, n_counts = n_rows * width, counts.shape[0]
        if at_tok + size <= len(src_tokens) and max(at_int, at_float) + n_counts <= len(src_ints):
            src_tokens[at_tok:at_tok + size] = tokens.reshape(-1)
            if kind == _F64:
                src_floats[at_float:at_float + n_counts] = counts
                counts_addr, at_float = float_addr + 8 * at_float, at_float + n_counts
            else:
                src_ints[at_int:at_int + n_counts] = counts
                counts_addr, at_int = int_addr + 8 * at_int, at_int + n_counts
            fields += (tok_addr + 8 * at_tok, 8, width, n_rows, width, counts_addr, int(kind == _F64), n_counts,
                       int(c.source), int(c.match_length))
            at_tok += size
        else:  # more than the scratch holds: the arrays' own memory
            item = dt.itemsize
            row_stride = tokens.strides[0] if tokens.ndim == 2 else size * item
            if (tokens.strides[-1] != item or row_stride % item or counts.strides[0] != kind.itemsize):
                return -1
            fields += (tokens.ctypes.data, item, row_stride // item, n_rows, width, counts.ctypes.data,
                       int(kind == _F64), n_counts, int(c.source), int(c.match_length))
        weights.append(c.weight)
    sc.parts[:len(fields)] = fields
    sc.weights[:len(weights)] = weights
    return len(weights)


def build_sized_parts(lib, parts: list, budget: int, min_prob: float, estimator: AcceptanceEstimator,
                      cost, max_depth: int = SIZED_MAX_DEPTH, stop: np.ndarray | None = None) -> DraftTree | None:
    """The same tree as :func:`engine.tree_builder._build_sized`, bit for bit, from the sources' own arrays: the
    C code (``fc_build_sized_parts``) also does :func:`engine.tree_builder._sized_rows`'s preparation (the most
    frequent rows, the depth cut, the counts' sum), which took most of a step's ~0.1 ms of tree building
    in numpy calls.

    Args:
        parts: non-empty :class:`engine.draft_tree.Candidates` (tokens: (K, L) or (L,) int32/int64 arrays
            with contiguous rows; counts: (M,) int64 or float64 contiguous arrays).
        budget, min_prob, estimator, cost: as :func:`build_sized_native`; ``cost`` must have ``upto``.
        max_depth: rows are cut to this many tokens (the tree's depth bound).
        stop: (V,) uint8, nonzero for stop tokens: rows are also cut at their first one (:func:`set_stop`).
    Returns:
        The tree, or None where the caller must take :func:`engine.tree_builder._build_sized` (other dtypes or
        layouts, counts whose sum Python must take, NaN estimates, more sources than the scratch holds).
    """
    upto = getattr(cost, "upto", None)
    n_parts = len(parts)
    sc = thread_scratch(max_depth)
    if upto is None or n_parts > sc.fits[2] or not sc.use_estimator(estimator):
        return None
    if pack_parts(sc, parts) < 0:
        return None
    set_limits(sc, cost, budget, min_prob)
    set_stop(sc, stop)
    kept = lib.fc_build_sized_parts(*sc.args, *sc.parts_args, n_parts, SIZED_MAX_ROWS, max_depth,
                                    sc.fits[0], sc.fits[1])
    return _tree_from(sc, kept)
