"""A greedy decoding step in one native call (``step.c``): the embedding and rotary rows, every decoder layer and the
final norm, each row's greedy token from the int8-screened LM head and, for a draft tree's verification, the greedy
walk and the accepted nodes' keys and values moved into place.

:func:`engine.lean_forward.forward_greedy` made the forward's three native calls one by one, with ~45 converted
arguments, three tensor allocations and the checks between them in Python, and the decoder then walked the tree and
compacted the cache in Python: with the interpreter's caches cold after the previous forward, ~300-450 us of a
tiny-py-coder step over 1,000 cached tokens on this project's 2-core CPU
(``benchmarks/results/2026-11-27b/``). :class:`GreedyStep` writes the model's constants into one array once and checks
per step only what can change between steps: the weights (once per generation inside
:meth:`engine.native.layer.FusedPlan.pinned`), the cache's buffers, the row count. Entry points: :meth:`GreedyStep.tree`
(a plain step or a tree's forward from the tree's own arrays: ``fc_greedy_tree_step``), :meth:`GreedyStep.verify` (the
same, walked and compacted, the LM head screening only the rows the walk reads: ``fc_greedy_tree_verify``),
:meth:`GreedyStep.bind` (``verify`` for one cache through one generation, :mod:`engine.native.bound_verify`) and
:meth:`GreedyStep.run` (a forward from tensors: ``fc_greedy_step``). The arithmetic is the separate calls', so tokens
and cache bytes are the same bits.

:mod:`engine.lean_forward` decides when a step takes it (the native attention and fused layer serve the model, the
LM head has a screen); this module checks tensors and moves pointers.
"""

from __future__ import annotations

import itertools
import operator
import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np
import torch

from .layer import FusedPlan, mask_args, point_at_cache
from .linear import sync_threads
from .screened_head import ScreenedHead

if TYPE_CHECKING:
    from .bound_verify import BoundVerify

_KBUF = operator.attrgetter("_kbuf")
_VBUF = operator.attrgetter("_vbuf")
_LEN = operator.attrgetter("_len")
_NONES = itertools.repeat(None)
#: Rows and tree-mask floats the per-thread scratch holds at first (grown by doubling).
FIRST_ROWS, FIRST_FLOATS = 32, 1 << 15
#: A masked-out entry of a tree mask, as DraftTree.attention_mask writes it.
_LOW = float(torch.finfo(torch.float32).min)


class _CacheView:
    """What a :class:`GreedyStep` last found in one cache (kept on the cache): weak references to its layers' key and
    value buffers (a cache grown since does not keep its old buffers alive through this) and the smallest capacity
    among them (entries)."""

    __slots__ = ("krefs", "vrefs", "capacity", "__weakref__")

    def __init__(self, kbufs, vbufs, capacity: int):
        self.krefs, self.vrefs = list(map(weakref.ref, kbufs)), list(map(weakref.ref, vbufs))
        self.capacity = capacity


def copy_probs(scratch: "_Scratch", tree, n: int) -> int | None:
    """``tree``'s node estimates (``probs``: (n,) float64) copied into the scratch for the lazy walk's choice of the
    rows it screens ahead; returns their address (also ``scratch.probs_arg``), or None (the C code's NULL: the first
    children, no bound) for a tree without them."""
    probs = getattr(tree, "probs", None)
    scratch.probs_arg = None
    if n and probs is not None and len(probs) == n:
        scratch.probs[:n] = probs
        scratch.probs_arg = scratch.probs_ptr
    return scratch.probs_arg


class _Scratch:
    """One thread's buffers for :class:`GreedyStep`: ``sa`` (the step's constants and this thread's buffers) and its
    address, the inputs' and outputs' scratch for ``rows`` rows and a tree mask of ``floats`` entries."""

    def __init__(self, step: "GreedyStep", rows: int, floats: int):
        self.rows, self.floats = rows, floats
        self.x = torch.empty((rows, step.hidden), dtype=torch.float32)
        self.cos, self.sin = (torch.empty((rows, step.head_dim), dtype=torch.float32) for _ in range(2))
        self.out = torch.empty((1, rows, step.hidden), dtype=torch.float32)  # the final hidden states
        # out's first r rows for every r, made here: slicing a tensor per forward cost ~60 us with the caches cold
        self.out_rows = [self.out[:, :r] for r in range(rows + 1)]
        self.screen_scratch, _ = step.screen._scratch()
        self.argmax = np.zeros(rows, dtype=np.int64)
        self.ids, self.positions = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)
        self.tokens, self.parents = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)
        # the nodes' acceptance estimates, which choose the rows the lazy walk screens ahead (fc_greedy_tree_verify)
        self.probs = np.zeros(rows, dtype=np.float64)
        self.probs_ptr = self.probs.ctypes.data
        self.probs_arg = None  # the call's: probs_ptr where its tree has estimates, else None (NULL)
        self.mask = np.zeros(floats, dtype=np.float32)
        self.sa = step.sa.copy()
        self.sa[10:14] = [self.x.data_ptr(), self.cos.data_ptr(), self.sin.data_ptr(), self.out.data_ptr()]
        self.sa[22:28] = [self.screen_scratch.ctypes.data, rows, self.ids.ctypes.data, self.positions.ctypes.data,
                          self.mask.ctypes.data, floats]
        self.sa_ptr, self.argmax_ptr = self.sa.ctypes.data, self.argmax.ctypes.data
        # exact: the screen's exact logits and rows screened in the call
        self.path, self.committed, self.exact = (np.zeros(k, dtype=np.int64) for k in (rows, rows + 1, 2))
        self.verify_ptrs = (self.argmax_ptr, self.path.ctypes.data, self.committed.ctypes.data, self.exact.ctypes.data)
        self.tokens_ptr, self.parents_ptr = self.tokens.ctypes.data, self.parents.ctypes.data
        # a verified tree's acceptance-estimate buckets and source bitmasks (BoundVerify's learning)
        self.keys, self.sources = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.uint8)
        self.keys_ptr, self.sources_ptr = self.keys.ctypes.data, self.sources.ctypes.data


#: Attribute of a cache: its :class:`_CacheView`.
VIEW_ATTR = "_fastcoder_step_view"


class GreedyStep:
    """One model's greedy forward as one native call (see the module docstring).

    Args:
        lib: the native library.
        plan: the inner model's :class:`engine.native.layer.FusedPlan`, with its final norm set.
        embedding: the embedding module (``nn.Embedding``, float32 (V, hidden) CPU weight).
        table: the rotary tables ``(cos, sin)``, (positions, head_dim) float32 each.
        head: the LM head module and its :class:`engine.native.screened_head.ScreenedHead`.
        whole_head: the greedy tokens of (R, hidden) final hidden states from the whole LM head (a row the screen
            does not take).
        walk: ``walk(best, tree, past, cache) -> (path, committed)``: the greedy walk over the rows' tokens ``best``
            and the cache's compaction (:func:`engine.verify.walk_greedy`, :func:`engine.verify.compact_cache`),
            for :meth:`verify`'s steps whose tokens the whole head chose.

    Raises ValueError for arguments of another kind (the caller checks them; this is the last guard).
    """

    def __init__(self, lib, plan: FusedPlan, embedding: torch.nn.Module, table, head: torch.nn.Module,
                 screen: ScreenedHead, whole_head, walk):
        w = embedding.weight
        cos_t, sin_t = table
        if (plan.final is None or w.dtype != torch.float32 or w.dim() != 2 or not w.is_contiguous()
                or cos_t.dtype != torch.float32 or not cos_t.is_contiguous() or not sin_t.is_contiguous()
                or screen.dim != w.shape[1] or cos_t.shape[1] != plan.head_dim):
            raise ValueError("GreedyStep needs a float32 contiguous embedding, rotary tables and a final norm")
        self.lib, self.plan, self.screen, self.whole_head, self.walk = lib, plan, screen, whole_head, walk
        self.hidden, self.head_dim = int(w.shape[1]), int(cos_t.shape[1])
        self._emb_params, self._head_params = embedding._parameters, head._parameters
        self._emb_w, self._emb_version = weakref.ref(w), w._version
        hw = head.weight  # the Parameter (the screen holds a detached tensor of it)
        self._head_w, self._head_version = weakref.ref(hw), hw._version
        self._table = table  # held: sa points into it
        self.max_rows = plan.max_rows
        self.sa = np.zeros(28, dtype=np.int64)
        self.sa[:10] = [plan.ia.ctypes.data, plan.da.ctypes.data, len(plan.layers), self.hidden, w.data_ptr(),
                        w.shape[0], cos_t.data_ptr(), sin_t.data_ptr(), cos_t.shape[0], self.head_dim]
        self.sa[14] = plan.final[1]
        self.sa[15:22] = screen._args
        self.sd = np.array([plan.final[2], _LOW], dtype=np.float64)
        self._sd_ptr = self.sd.ctypes.data
        self._local = threading.local()

    def stale(self) -> bool:
        """Whether the embedding or the LM head no longer holds the weight this step was made with, unchanged (then
        every entry point declines its calls: make a new step)."""
        w, h = self._emb_params.get("weight"), self._head_params.get("weight")
        return not (w is self._emb_w() and w._version == self._emb_version and h is self._head_w()
                    and h._version == self._head_version)

    def _scratch(self, rows: int, floats: int = 0):
        """This thread's :class:`_Scratch`, with room for ``rows`` rows and a tree mask of ``floats`` entries."""
        held = getattr(self._local, "held", None)
        if held is None or held.rows < rows or held.floats < floats:
            rows = max(rows, FIRST_ROWS if held is None else 2 * held.rows)
            floats = max(floats, FIRST_FLOATS if held is None else 2 * held.floats)
            held = self._local.held = _Scratch(self, rows, floats)
        return held

    def _view(self, cache, layers, rows: int) -> int | None:
        """The entries every layer of ``cache`` holds when its buffers take ``rows`` more and the plan points at them
        (grown and pointed here when needed), or None for a cache this call does not take. Buffers met before are
        not checked again (:func:`engine.native.layer.cache_ready` checked them: float32, CPU, batch 1)."""
        view = cache.__dict__.get(VIEW_ATTR)
        kbufs = list(map(_KBUF, layers))
        # the same live buffers as when checked (a dead reference reads None: so must no buffer)
        if view is None or not all(map(operator.is_not, kbufs, _NONES)) \
                or not all(map(operator.is_, kbufs, map(operator.call, view.krefs))) \
                or not all(map(operator.is_, map(_VBUF, layers), map(operator.call, view.vrefs))):
            view = None
        lens = set(map(_LEN, layers))
        if len(lens) != 1:
            return None
        past = lens.pop()
        if view is None or past + rows > view.capacity:
            if not point_at_cache(self.plan, cache, rows):
                return None
            kbufs = list(map(_KBUF, layers))
            view = _CacheView(kbufs, list(map(_VBUF, layers)), min(k.shape[2] for k in kbufs))
            cache.__dict__[VIEW_ATTR] = view
            self.plan.pointed = weakref.ref(view)
        elif self.plan.pointed is None or self.plan.pointed() is not view:  # the plan points at another cache
            if not point_at_cache(self.plan, cache, rows):
                return None
            self.plan.pointed = weakref.ref(view)
        return past

    def _ready(self, cache, rows: int):
        """``(layers, past)`` when a forward of ``rows`` rows on ``cache`` can be taken (the weights are the step's,
        the cache's buffers take it and the plan points at them), else None."""
        if rows > self.max_rows or self.stale() or not self.plan.current():
            return None
        layers = cache.layers[:len(self.plan.layers)]
        if len(layers) < len(self.plan.layers):
            return None
        past = self._view(cache, layers, rows)
        return None if past is None else (layers, past)

    def _finish(self, n: int, scratch: _Scratch, layers, past: int, rows: int, kept: list) -> list[int] | None:
        """The tokens of a native step that returned ``n`` (see ``fc_greedy_step``), the cache's fill marks moved."""
        if n == -1:
            return None
        if n == -2:
            raise MemoryError("the fused decoder layer could not allocate its scratch memory")
        for layer in layers:
            layer._len = past + rows
        kept[0] = last = scratch.out_rows[rows]
        if n == -3:  # a row the screen does not take: the whole head
            return self.whole_head(last[0])
        screen = self.screen
        screen.rows += rows
        screen.exact += n
        return scratch.argmax[:rows].tolist()

    def tree(self, pending: int, tree, past: int, cache, kept: list) -> list[int] | None:
        """A decode step's greedy forward over ``pending`` and the draft tree below it: the greedy token after each
        of the 1 + N rows (row 0 the pending token's, row 1 + i node i's), the cache extended by them; None with
        nothing done when this step does not take the call (the caller's own path runs it).

        Args:
            pending: the token at position ``past``.
            tree: an :class:`engine.draft_tree.DraftTree` (``tokens`` and ``parents``: (N,) int64); an empty one
                makes a plain step.
            past: the entries every layer of ``cache`` holds (None is returned where they differ).
            cache: a DynamicCache of :class:`engine.kv_cache.PreallocatedLayer` float32 buffers.
            kept: as :meth:`run`'s.
        Raises MemoryError as :meth:`run`.
        """
        ready = self._tree_ready(tree, past, cache)
        if ready is None:
            return None
        layers, scratch, n = ready
        got = self.lib.fc_greedy_tree_step(scratch.sa_ptr, self._sd_ptr, pending, scratch.tokens_ptr,
                                           scratch.parents_ptr, n, past, scratch.argmax_ptr)
        return self._finish(got, scratch, layers, past, n + 1, kept)

    def _tree_ready(self, tree, past: int, cache):
        """``(layers, scratch, N)`` for a step over ``tree``'s N nodes below the pending token, its tokens and
        parents copied into the scratch, or None where :meth:`tree` and :meth:`verify` decline it."""
        n = len(tree)
        ready = self._ready(cache, n + 1)
        if ready is None or ready[1] != past:
            return None
        return ready[0], self._tree_scratch(tree, n, past), n

    def _tree_scratch(self, tree, n: int, past: int) -> _Scratch:
        """This thread's scratch with room for ``tree``'s ``n`` nodes after ``past`` entries, their tokens and parents
        copied into it, the library's thread count synced."""
        rows = n + 1
        scratch = self._scratch(rows, rows * (past + rows) if n else 0)
        if n:
            scratch.tokens[:n] = tree.tokens
            scratch.parents[:n] = tree.parents
        copy_probs(scratch, tree, n)
        sync_threads(self.lib)
        return scratch

    def _verified(self, got: int, scratch: _Scratch, layers, past: int, rows: int, kept: list
                  ) -> tuple[list[int], list[int]]:
        """``(path, committed)`` of a verification the native call walked (``got`` >= 0 nodes accepted), the cache's
        fill marks, the final hidden states' holder and the screen's counts moved."""
        end = past + 1 + got
        for layer in layers:
            layer._len = end
        kept[0] = scratch.out_rows[rows]
        screen = self.screen
        screen.rows += int(scratch.exact[1])
        screen.exact += int(scratch.exact[0])
        return scratch.path[:got].tolist(), scratch.committed[:got + 1].tolist()

    def verify(self, pending: int, tree, past: int, cache, kept: list) -> tuple[list[int], list[int]] | None:
        """:meth:`tree`'s forward, then greedy acceptance in the same native call (``fc_greedy_tree_verify``): the walk
        from the root, the LM head screening only the rows it reads (the pending token's and each accepted node's, in
        passes of up to 4 rows along the likeliest children by ``tree.probs``), and the accepted nodes' keys and
        values moved next to the pending token (the same path, tokens and cache bytes as
        :func:`engine.verify.walk_greedy` over every row and :func:`engine.verify.compact_cache`).

        Returns ``(path, committed)``: the accepted node indices (root to leaf) and their tokens followed by the
        model's own next token; the cache then holds ``past + 1 + len(path)`` entries. None with nothing done where
        this step does not take the call (as :meth:`tree`). Raises MemoryError as :meth:`run`.
        """
        ready = self._tree_ready(tree, past, cache)
        if ready is None:
            return None
        layers, scratch, n = ready
        rows = n + 1
        got = self.lib.fc_greedy_tree_verify(scratch.sa_ptr, self._sd_ptr, pending, scratch.tokens_ptr,
                                             scratch.parents_ptr, scratch.probs_arg, n, past, *scratch.verify_ptrs)
        if got < 0:  # not taken (None), no memory (raises), or the whole head's tokens: walked here
            best = self._finish(got, scratch, layers, past, rows, kept)
            return None if best is None else self.walk(best, tree, past, cache)
        return self._verified(got, scratch, layers, past, rows, kept)

    def bind(self, cache, kept: list, max_rows: int, fallback, learn=None) -> "BoundVerify":
        """:meth:`verify` on ``cache`` for one generation (:class:`~engine.native.bound_verify.BoundVerify`);
        ``max_rows``: the most rows the native attention takes; ``fallback(pending, tree, past)``: what runs a step
        this one does not take; ``learn``: None, or what each step learns in the same call (``BoundVerify``'s
        ``learn``)."""
        from .bound_verify import BoundVerify  # it imports this module
        return BoundVerify(self, cache, kept, min(max_rows, self.max_rows), fallback, learn)

    def run(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor | None, cache,
            kept: list) -> list[int] | None:
        """The greedy token after each row, the cache extended by the rows, or None with nothing done (a call this
        step does not take: the caller's own path runs it).

        Args:
            input_ids, position_ids: (1, rows) int64 CPU tensors, contiguous.
            mask: None (the rows causal among themselves after the whole cache) or a (1, 1, rows, >= keys) float32
                or bool mask as :func:`engine.native.layer.mask_args` takes it.
            cache: a DynamicCache of :class:`engine.kv_cache.PreallocatedLayer` float32 buffers.
            kept: a one-item list: the final hidden states ((1, rows, hidden) view of this thread's scratch, valid
                until its next call) are put in it (:func:`engine.lean_forward.hidden_rows`).
        Returns:
            ``rows`` token ids. Raises MemoryError when the layers' scratch memory could not be allocated.
        """
        rows = input_ids.shape[1]
        if (input_ids.dtype != torch.int64 or position_ids.dtype != torch.int64
                or position_ids.shape != input_ids.shape or not input_ids.is_contiguous()
                or not position_ids.is_contiguous() or input_ids.device.type != "cpu"
                or position_ids.device.type != "cpu"):
            return None
        margs = mask_args(mask, rows, 0)
        ready = self._ready(cache, rows) if margs is not None else None
        if ready is None or (mask is not None and mask.shape[3] < ready[1] + rows):
            return None
        layers, past = ready
        scratch = self._scratch(rows)
        kind, mptr, strides, _ = margs
        sync_threads(self.lib)
        got = self.lib.fc_greedy_step(scratch.sa_ptr, self._sd_ptr, input_ids.data_ptr(), position_ids.data_ptr(),
                                      rows, past, mptr, kind, strides, scratch.argmax_ptr)
        return self._finish(got, scratch, layers, past, rows, kept)


def __getattr__(name: str):
    """``engine.native.step.BoundVerify``, the class's home before it moved to :mod:`engine.native.bound_verify`
    (the scripts under ``benchmarks/results/`` of 2026-11-27 to 2026-11-29 import it from here)."""
    if name == "BoundVerify":
        from .bound_verify import BoundVerify
        return BoundVerify
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
