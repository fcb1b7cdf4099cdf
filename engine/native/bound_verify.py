"""One generation's verification steps on one cache (:class:`BoundVerify`): :meth:`engine.native.step.GreedyStep.verify`
with its checks made once per generation, each step's learning (acceptance estimates, per-source hits, the draft
head) in the same native call, and :meth:`BoundVerify.verify_loop`, the native step loop's entry
(:mod:`engine.native.step_loop`).

Split from :mod:`engine.native.step`, which owns the model's constants, the per-thread scratch and the one-call
forward; this module owns what one generation keeps between its steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kv_cache import buffers_epoch
from .draft_ahead import VP_PROBS
from .linear import sync_threads
from .propose import BuilderTree
from .step import _LEN, VIEW_ATTR, copy_probs
from .step_loop import (LOG_EXACT, LOG_HEAD_LEARNED, LOG_LEARNED, LOG_SCREENED, LP_KEYS, LP_KV_CAPACITY, LP_LAST_N,
                        LP_LAST_PAST, LP_MASK_FLOATS, LP_MAX_ROWS, LP_MAX_STEPS, LP_NOTE_MISS, LP_SOURCES,
                        LP_STEPS, StepLoop, step_loop_on)

if TYPE_CHECKING:
    from .step import GreedyStep


class BoundVerify:
    """:meth:`engine.native.step.GreedyStep.verify` for one cache through one generation, with its checks made
    once and then only where something they covered can have changed.

    Each ``GreedyStep.verify`` checks that the embedding and LM head are the step's (``stale``), that the fused plan's
    weights are current, that the cache's buffers are the ones the plan points at (a map over every layer's two
    buffers), and finds the thread's scratch, four calls deep from the decoder: ~45 us of Python a step with the
    caches cold after the forward (``benchmarks/results/2026-11-27e/``). Here they run at the first call and again
    only when a cheap test fails: another buffer anywhere (:func:`engine.kv_cache.buffers_epoch`), a plan pointed
    at another cache since, more rows than the checked capacity, a fill mark that is not ``past`` in every layer, a
    scratch too small. The weights are not checked again inside the generation: its caller holds
    :meth:`engine.native.layer.FusedPlan.pinned`'s promise that none changes there.

    Call ``bound(pending, tree, past) -> (path, committed, learned)``: ``path`` and ``committed`` as
    :func:`engine.verify.verify_greedy`'s, ``learned`` whether the call also did what ``learn`` asks (below); a step
    it does not take runs ``fallback(pending, tree, past)``, which returns the same triple (the three-call path and
    the walk in Python, ``learned`` False). Raises MemoryError as :meth:`engine.native.step.GreedyStep.run`.

    ``learn``: None, or ``(estimator, hits, alternative_stride, source_stride, head)``: the same native call then
    updates ``estimator``'s Beta counts from the walk as :meth:`engine.acceptance.AcceptanceEstimator.update` does
    (for trees with ``keys``; ``estimator`` None: none), adds each accepted node to ``hits[sources[node]]`` ((256,)
    int64), the decoder's per-source count, and runs ``head``'s step (an :class:`engine.draft_head.DepthOneFeature`
    with native arguments, as its :meth:`~engine.draft_head.DepthOneFeature.step` from the row that chose the new
    pending token; None: none; :attr:`head` says which head the calls feed: None where ``head`` has no native
    arguments) (``fc_greedy_tree_verify_learn``: ~10 us and ~10 us less Python a step). Where a call did not
    (``learned`` False: a fallback step, a key outside the arrays, estimates in arrays it does not take) nothing was
    updated, counted or fed, and the caller does all of it as before.
    """

    __slots__ = ("step", "cache", "kept", "max_rows", "fallback", "epoch", "layers", "capacity", "pointed", "fn",
                 "sd_ptr", "estimator", "beta", "hits", "la", "la_ptr", "head", "head_lr")

    def __init__(self, step: "GreedyStep", cache, kept: list, max_rows: int, fallback, learn=None):
        self.step, self.cache, self.kept, self.max_rows, self.fallback = step, cache, kept, max_rows, fallback
        self.epoch = self.layers = self.pointed = None  # nothing checked yet
        self.capacity = 0
        self.sd_ptr = step._sd_ptr
        self.estimator = self.beta = self.hits = self.la = self.head = self.head_lr = None
        if learn is None:
            self.fn, self.la_ptr = step.lib.fc_greedy_tree_verify, None
            return
        estimator, hits, alternative, source, head = learn
        if type(hits) is not np.ndarray or hits.dtype != np.int64 or hits.shape != (256,) \
                or not hits.flags.c_contiguous:
            raise ValueError("BoundVerify's hits must be a (256,) C-contiguous int64 array")
        self.fn = step.lib.fc_greedy_tree_verify_learn
        self.estimator, self.hits = estimator, hits
        self.la = np.zeros(16, dtype=np.int64)  # fc_greedy_tree_verify_learn's fields
        self.la[8], self.la[9], self.la[10] = alternative, source, hits.ctypes.data
        self.la_ptr = self.la.ctypes.data
        native = getattr(head, "_native", None)
        if native is not None:  # (fc_head_hidden, fc_head_step, ia address, da address, buffers)
            self.head, self.head_lr = head, np.array([head.learning_rate], dtype=np.float64)
            self.la[12], self.la[13], self.la[14] = native[2], native[3], self.head_lr.ctypes.data

    def _point_estimator(self) -> bool:
        """Point the learning fields at the estimator's four Beta-count arrays (again where one was replaced);
        False for arrays the native update does not take (not float64 C-contiguous)."""
        est = self.estimator
        beta = (est.accepted, est.tried, est.pooled_accepted, est.pooled_tried)
        if not all(type(x) is np.ndarray and x.dtype == np.float64 and x.flags.c_contiguous for x in beta) \
                or len(beta[0]) != len(beta[1]) or len(beta[2]) != len(beta[3]):
            self.beta = None
            return False
        la = self.la
        la[2], la[3], la[4], la[5] = (x.ctypes.data for x in beta)
        la[6], la[7] = len(beta[0]), len(beta[2])
        self.beta = beta
        return True

    def _estimator_pointed(self) -> bool:
        """Whether the learning fields point at the estimator's current Beta-count arrays (pointed again where one was
        replaced); False where the native update does not take them."""
        est, beta = self.estimator, self.beta
        return ((beta is not None and beta[0] is est.accepted and beta[1] is est.tried
                 and beta[2] is est.pooled_accepted and beta[3] is est.pooled_tried) or self._point_estimator())

    def _stale(self, rows: int, past: int) -> bool:
        """Whether a step of ``rows`` rows after ``past`` entries finds what :meth:`_check` covered changed (a buffer
        change, a re-pointed plan, a moved fill mark, too little room) and :meth:`_check` fails again."""
        return ((self.epoch != buffers_epoch() or past + rows > self.capacity
                 or self.step.plan.pointed is not self.pointed or not all(map(past.__eq__, map(_LEN, self.layers))))
                and not self._check(rows, past))

    def _learned(self, ready: bool) -> bool:
        """After a learning call: whether it learned (``ready``: its fields were set), the draft head's count moved."""
        learned = ready and bool(self.la[11])
        if learned and self.head is not None:
            self.head.learned += int(self.la[15])
        return learned

    def _walked_here(self, got: int, scratch, tree, pending: int, past: int, rows: int) -> tuple[list[int], list[int]]:
        """``(path, committed)`` of a call that returned ``got`` < 0 (no memory: raises): the rows' tokens from the
        whole head, walked and compacted here (nothing was learned), or the checked call where that fails."""
        step = self.step
        best = step._finish(got, scratch, self.layers, past, rows, self.kept)
        if best is None:
            return self.fallback(pending, tree, past)[:2]
        return step.walk(best, tree, past, self.cache)

    def _learn_args(self, tree, scratch, n: int) -> bool:
        """The learning fields for ``tree`` (its keys and sources copied into the scratch); False, with both fields
        0 (nothing learned natively), where its estimates cannot be updated there (the caller then does it all)."""
        la, est, keys = self.la, self.estimator, tree.keys
        la[0] = la[1] = 0
        if est is not None and keys is not None:
            if len(keys) != n or not self._estimator_pointed():
                return False
            scratch.keys[:n] = keys
            la[0] = scratch.keys_ptr
        scratch.sources[:n] = tree.sources
        la[1] = scratch.sources_ptr
        return True

    def _check(self, rows: int, past: int) -> bool:
        """``GreedyStep._ready``'s checks for ``rows`` rows after ``past`` entries (the plan pointed at the cache and
        its buffers grown where needed), and what they found kept for the next calls; False where they fail."""
        step, cache = self.step, self.cache
        self.epoch = None
        ready = step._ready(cache, rows)
        if ready is None or ready[1] != past:
            return False
        view = cache.__dict__.get(VIEW_ATTR)
        if view is None:
            return False
        self.layers, self.capacity, self.pointed = ready[0], view.capacity, step.plan.pointed
        self.epoch = buffers_epoch()  # after _ready, which may have grown the buffers
        return True

    def _point_fields(self, tree, n: int, scratch, ahead) -> tuple[bool, bool]:
        """The fields of a fused call on ``tree`` (``n`` nodes): vp's buffers (``scratch``'s), the learning fields (a
        tree in the builder's outputs: its keys and sources there; else copied into the scratch with its tokens and
        parents). Returns ``(ready, estimated)``: whether the call learns its estimates (as :meth:`_learn_args`: the
        hits alone where there is no estimator), and whether the estimator's arrays are pointed at."""
        vp, la = ahead.vp, self.la
        if scratch is not ahead.scratch:
            vp[0:6] = [scratch.tokens_ptr, scratch.parents_ptr, *scratch.verify_ptrs]
            ahead.scratch = scratch
        estimated = self.estimator is not None and self._estimator_pointed()
        if type(tree) is BuilderTree:
            keys, sources = ahead.builder_fields(tree.scratch)
            la[0], la[1] = (keys if estimated else 0), sources
            return self.estimator is None or estimated, estimated
        ready = self._learn_args(tree, scratch, n)
        if n:
            scratch.tokens[:n] = tree.tokens
            scratch.parents[:n] = tree.parents
        vp[VP_PROBS] = copy_probs(scratch, tree, n) or 0
        return ready, estimated

    def verify_draft(self, pending: int, tree, past: int, ahead) -> tuple[list[int], list[int], bool, bool]:
        """:meth:`__call__`, then the next step's drafting in the same native call (``fc_verify_propose``): ``ahead``
        an :class:`engine.native.draft_ahead.DraftAhead` made :meth:`~engine.native.draft_ahead.DraftAhead.ready` for
        this step; ``tree`` a DraftTree or the :class:`~engine.native.propose.BuilderTree` the last call drafted
        (verified in place). Returns ``(path, committed, learned, drafted)``; ``drafted`` False where the call was not
        taken (the step ran as :meth:`__call__`, nothing drafted) or did not draft (``ahead``'s result says which)."""
        n = len(tree)
        rows = n + 1
        step = self.step
        in_builder = type(tree) is BuilderTree
        if rows > self.max_rows or self.la_ptr is None:  # as __call__ takes it
            return (*self(pending, tree.tree() if in_builder else tree, past), False)
        if self._stale(rows, past):
            return (*self.fallback(pending, tree.tree() if in_builder else tree, past), False)
        scratch = step._scratch(rows, rows * (past + rows) if n else 0)
        sync_threads(step.lib)
        vp = ahead.vp
        ready, _ = self._point_fields(tree, n, scratch, ahead)
        if ahead.from_builder is not in_builder:
            vp[6] = ahead.from_builder = in_builder
        args = ahead.args
        if ahead.lock is None:
            got = step.lib.fc_verify_propose(scratch.sa_ptr, self.sd_ptr, pending, n, past, self.la_ptr,
                                             *args.addresses, ahead.vp_ptr)
        else:
            with ahead.lock:  # another thread's add may replace the history's buffer
                ahead.history_len()
                got = step.lib.fc_verify_propose(scratch.sa_ptr, self.sd_ptr, pending, n, past, self.la_ptr,
                                                 *args.addresses, ahead.vp_ptr)
        learned = self._learned(ready)
        if got < 0:  # as __call__ (nothing drafted)
            return (*self._walked_here(got, scratch, tree.tree() if in_builder else tree, pending, past, rows),
                    False, False)
        return (*step._verified(got, scratch, self.layers, past, rows, self.kept), learned, True)

    def verify_loop(self, pending: int, tree, past: int, ahead, loop: "StepLoop"
                    ) -> tuple[list[int], list[int], bool, bool, list]:
        """:meth:`verify_draft`, then, while the step leaves the decoder nothing to do in Python before the next one,
        that next step in the same native call, up to ``loop.max_steps`` steps (``fc_verify_propose_loop``; the steps'
        conditions are in draft_ahead.c). Returns ``(path, committed, learned, drafted, logged)``: the last step's as
        :meth:`verify_draft` returns them, and ``logged`` the steps before it
        (:class:`engine.native.step_loop.LoggedStep` each): the caller replays their bookkeeping in order. This
        verifier's own (the screen's counts, the draft head's learned count) is done here; ``loop.last_n`` is the
        last step's tree size."""
        n = len(tree)
        rows = n + 1
        in_builder = type(tree) is BuilderTree
        if rows > self.max_rows or self.la_ptr is None or ahead.sc is None or self._stale(rows, past):
            loop.last_n = n
            return (*self.verify_draft(pending, tree, past, ahead), [])
        step = self.step
        scratch = step._scratch(rows, rows * (past + rows) if n else 0)
        sync_threads(step.lib)
        vp, lp = ahead.vp, loop.lp
        ready, estimated = self._point_fields(tree, n, scratch, ahead)
        keys, sources = ahead.builder_fields(ahead.sc)
        vp[6] = in_builder
        later_ready = self.estimator is None or estimated  # the next trees are the builder's
        lp[LP_MAX_STEPS] = loop.max_steps if later_ready else 1
        lp[LP_MAX_ROWS], lp[LP_MASK_FLOATS], lp[LP_KV_CAPACITY] = min(self.max_rows, scratch.rows), scratch.floats, \
            self.capacity
        lp[LP_KEYS], lp[LP_SOURCES] = (keys if estimated else 0), sources
        drafter = ahead.drafter
        lp[LP_NOTE_MISS] = drafter.opts.use_strategy and (drafter.repo is not None or drafter.common is not None)
        args = ahead.args
        if ahead.lock is None:
            got = step.lib.fc_verify_propose_loop(scratch.sa_ptr, self.sd_ptr, pending, n, past, self.la_ptr,
                                                  *args.addresses, ahead.vp_ptr, loop.lp_ptr)
        else:
            with ahead.lock:  # another thread's add may replace the history's buffer (held for the steps)
                ahead.history_len()
                got = step.lib.fc_verify_propose_loop(scratch.sa_ptr, self.sd_ptr, pending, n, past, self.la_ptr,
                                                      *args.addresses, ahead.vp_ptr, loop.lp_ptr)
        k, n_last, past_last = int(lp[LP_STEPS]), int(lp[LP_LAST_N]), int(lp[LP_LAST_PAST])
        loop.last_n = n_last
        records = loop.log[:k].tolist()
        logged = loop.logged(records)
        if k:
            loop.last_tree = BuilderTree(ahead.sc, n_last)
            ahead.from_builder = True
            screen = step.screen
            for i, rec in enumerate(records):
                screen.rows += rec[LOG_SCREENED]
                screen.exact += rec[LOG_EXACT]
                if (ready if i == 0 else later_ready) and rec[LOG_LEARNED] and self.head is not None:
                    self.head.learned += rec[LOG_HEAD_LEARNED]
            ready = later_ready
            pending = logged[-1].committed[-1]
        else:
            ahead.from_builder = in_builder
        learned = self._learned(ready)
        rows = n_last + 1
        if got < 0:  # as __call__ (nothing drafted)
            if k:
                tree = loop.last_tree
            return (*self._walked_here(got, scratch, tree.tree() if type(tree) is BuilderTree else tree, pending,
                                       past_last, rows), False, False, logged)
        return (*step._verified(got, scratch, self.layers, past_last, rows, self.kept), learned, True, logged)

    def step_loop(self, need_counted: bool, touch: np.ndarray | None) -> "StepLoop | None":
        """A generation's :class:`StepLoop` for :meth:`verify_loop` (arguments as its), or None where steps do not run
        back to back (no learning call, or ``$FASTCODER_STEP_LOOP`` is 0)."""
        if self.la_ptr is None or not step_loop_on():
            return None
        return StepLoop(self.max_rows, need_counted, touch)

    def __call__(self, pending: int, tree, past: int) -> tuple[list[int], list[int], bool]:
        n = len(tree)
        rows = n + 1
        step = self.step
        if rows > self.max_rows or self._stale(rows, past):
            return self.fallback(pending, tree, past)
        scratch = step._tree_scratch(tree, n, past)
        la_ptr = self.la_ptr
        learned = False
        if la_ptr is None:
            got = self.fn(scratch.sa_ptr, self.sd_ptr, pending, scratch.tokens_ptr, scratch.parents_ptr,
                          scratch.probs_arg, n, past, *scratch.verify_ptrs)
        else:
            ready = self._learn_args(tree, scratch, n)
            got = self.fn(scratch.sa_ptr, self.sd_ptr, pending, scratch.tokens_ptr, scratch.parents_ptr,
                          scratch.probs_arg, n, past, *scratch.verify_ptrs, la_ptr)
            learned = self._learned(ready)
        if got < 0:  # no memory (raises), or the whole head's tokens: walked here (nothing learned: C walked nothing)
            return (*self._walked_here(got, scratch, tree, pending, past, rows), False)
        return (*step._verified(got, scratch, self.layers, past, rows, self.kept), learned)
