"""The next step's tree drafted inside the verification's native call (``fc_verify_propose`` in draft_ahead.c) on the
CPU's one-call greedy step: the call's fields and what the decoder does around it.

After the walk and the learning the call makes the drafter's observation of the step in the cache's int64 mirror,
appends the committed tokens to the context copy's sequence and runs ``fc_propose`` on the new context (on the cost
curve of the bucket it falls in), and where D_r and D_c get their turn, the retrieval strategy and their search
(``retrieve_turn``). The tree stays in the builder's arrays (:class:`engine.native.propose.BuilderTree`) and the next
call verifies it there (:meth:`engine.native.bound_verify.BoundVerify.verify_draft`). The same trees and counts as the
drafter's :meth:`~engine.drafters.FastCoderDrafter.propose` before each verification, which ``$FASTCODER_DRAFT_AHEAD=0``
keeps. A generation's first tree, and one the call before did not draft, come from ``fc_draft_ahead`` in the same
fields (:meth:`DraftAhead.draft_first`), the first step's fields made ready before the prefill (:meth:`DraftAhead.prime`).
"""

from __future__ import annotations

import os

import numpy as np

from ..cost_model import CONTEXT_BUCKET
from ..draft_tree import DraftTree
from .propose import (NOTHING, NOTHING_SKIPPED, RETRIEVE, BuilderTree, _after_propose, _count_built, _python_tree,
                      _retrieved_tree, _searched, _store_fields, _sync_cache, _sync_history, point_args)
from .tree import _tree_from

#: ``0``: each step's tree drafted by the drafter's propose before its verification, not inside the one before's call.
DRAFT_AHEAD_ENV = "FASTCODER_DRAFT_AHEAD"


def draft_ahead_on() -> bool:
    """Whether each next tree is drafted inside the verification's call (:class:`DraftAhead`; ``$FASTCODER_DRAFT_AHEAD``
    not ``0``)."""
    return os.environ.get(DRAFT_AHEAD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


#: fc_verify_propose's fields (VP_* in draft_ahead.c) and its results.
VP_FIELDS = 44
(VP_TOKENS, VP_PARENTS, VP_ARGMAX, VP_PATH, VP_COMMITTED, VP_EXACT, VP_FROM_BUILDER, VP_CTX_LEN, VP_CTX_CAP,
 VP_CACHE_LEN, VP_HISTORY_LEN, VP_OUT_LEN, VP_MAX_NEW, VP_EOS, VP_N_EOS, VP_STOP, VP_N_STOP, VP_BUCKET_END,
 VP_FOUND, VP_PROPOSE_NS, VP_FIRST_SOURCE, VP_NEXT_N, VP_NEXT_TABLE, VP_NEXT_TABLE_LEN, VP_NEXT_END,
 VP_OBSERVE, VP_CACHE_CAP, VP_CACHE_MAX_TOKENS, VP_CACHE_N_MIN, VP_N_MAX, VP_PROMPT_LEN, VP_CHUNK_FROM,
 VP_OUTPUT_CHUNK, VP_CACHE_LEN_OUT, VP_RETRIEVE, VP_STORES, VP_STRATEGY, VP_MISSING, VP_MISSING_MASK,
 VP_LINE_TABLES, VP_N_LINE_TABLE, VP_COIN, VP_RETRIEVED, VP_PROBS) = range(VP_FIELDS)
#: vp[VP_RETRIEVED] (RETRIEVED_* in draft_ahead.c): the datastores' turn skipped (the missing table, the skip token) or
#: searched in the call; the coin's flag added where it drew the skip coin.
SKIP_MISSING, SKIP_LINE, SEARCHED, DREW_COIN = 1, 2, 3, 16
_GOLDEN = 0x9E3779B97F4A7C15
#: Context tokens past its own a step's context may reach (its tree's depth and the bonus token, at most).
_REACH = 3 * CONTEXT_BUCKET
NOT_RUN = -200
NEXT_UNCUT = -1


class DraftAhead:
    """The next step's drafting done in the verification's native call (``fc_verify_propose`` in draft_ahead.c): the
    fields of :meth:`engine.native.bound_verify.BoundVerify.verify_draft`, one set per thread and drafter settings
    (kept by :class:`engine.native.propose.ProposeArgs`, taken by each generation's drafter through :meth:`start`).

    Per step the decoder calls :meth:`ready` (the drafter's arguments checked as
    :func:`engine.native.propose.propose_native` checks them, the cache's and the history's mirrors synced, the
    generation's state), the verification with :attr:`vp`, the drafter's observation of the step and
    :meth:`observed`, then, after committing, :meth:`next_tree` for the tree the call drafted: the tree
    :meth:`engine.drafters.FastCoderDrafter.propose` would give after that observation (the call makes the
    observation's additions to the cache's mirror before it drafts).
    """

    def __init__(self):
        self.vp = np.zeros(VP_FIELDS, dtype=np.int64)
        self.vp_ptr = self.vp.ctypes.data
        self.from_builder = False  # vp[VP_FROM_BUILDER]
        self.builder = (None, 0, 0)  # (a tree scratch, the addresses of its keys and sources)
        self.drafter = None
        self.eos = np.zeros(0, dtype=np.int64)
        self.stop = None  # the stop table vp[VP_STOP] points at
        self.scratch = None  # the step scratch whose buffers vp[:6] point at
        self.args = self.sc = None  # the drafter's fc_propose arguments and tree scratch this step uses
        self.curves = (None, None)  # (the cost curve, the context bucket) vp's curve fields were made for
        self.curve_fields: dict = {}  # (id of a curve, bucket) -> (the curve, its fields, the next curve's table)
        self.lock = None
        self.coin = self.vp[VP_COIN:VP_COIN + 1].view(np.float64)  # the skip coin's double in vp
        self.searched = []  # the stores the call may search this step (_store_fields)
        # (drafter, D_r's version) the stores' fields in vp were armed for; None after a search they do not know of
        self.armed = None
        self.missing_for = None  # (missing set, its change count) the missing table mirrors
        self.missing_table = np.zeros(0, dtype=np.int64)
        self.line_tables = (None, None)  # (token info, its two uint8 tables) vp[VP_LINE_TABLES] points at
        self.primed = None  # (n_ctx, out_len, the copy's buffers) the fields were made ready for ahead of the step
        # (n_ctx, out_len, the cache mirror's length) of the step after a call that drafted, where its fields are
        # the call's own but for those lengths (:meth:`observed`); None otherwise
        self.steady = None
        self.cost_of = None  # the drafter's curve (its ``cost``) the fields' c(n) table was taken from

    def start(self, drafter, eos, max_new: int) -> "DraftAhead":
        """Take the fields for ``drafter``'s generation (``eos``: the model's end-of-sequence ids, ``max_new``
        tokens at most); returns self."""
        self.drafter = drafter
        eos = sorted(int(t) for t in eos)
        if eos != self.eos.tolist():
            self.eos = np.array(eos, dtype=np.int64)
        vp = self.vp
        vp[VP_EOS], vp[VP_N_EOS], vp[VP_MAX_NEW] = self.eos.ctypes.data if eos else 0, len(eos), max_new
        self.lock = drafter.history._lock if drafter.history is not None else None
        cache, opts = drafter.cache, drafter.opts
        vp[VP_OBSERVE], vp[VP_CACHE_MAX_TOKENS], vp[VP_CACHE_N_MIN] = int(opts.use_cache), cache.max_tokens, cache.n_min
        vp[VP_N_MAX], vp[VP_PROMPT_LEN], vp[VP_OUTPUT_CHUNK] = drafter.ret.n_max, drafter._prompt_len, opts.output_chunk
        vp[VP_STRATEGY] = int(opts.use_strategy)
        self.armed = self.primed = self.steady = None
        drafter._native_args.pd[3] = opts.skip_probability
        info = drafter.token_info
        if self.line_tables[0] is not info:
            tables = None
            if info is not None and getattr(info, "ends_with_newline_ws", None) is not None:
                tables = np.concatenate([np.asarray(info.ends_with_newline_ws, dtype=np.uint8),
                                         np.asarray(info.whitespace_only, dtype=np.uint8)])
            self.line_tables = (info, tables)
            vp[VP_LINE_TABLES], vp[VP_N_LINE_TABLE] = (0, 0) if tables is None else (tables.ctypes.data,
                                                                                  len(tables) // 2)
        return self

    def builder_fields(self, sc) -> tuple[int, int]:
        """The addresses of the acceptance buckets and the source bits of the tree in ``sc``'s outputs (a
        :class:`engine.native.tree._NativeScratch`: the learning fields of a tree verified in place)."""
        held = self.builder
        if held[0] is not sc:
            held = self.builder = (sc, int(sc.ia[31]), int(sc.ia[32]))
        return held[1], held[2]

    def _arm(self, drafter, args) -> None:
        """Let the call take the datastores' turn where fc_propose gives it (D_r and D_c searched in C, the
        retrieval strategy's rules applied there: FastCoderDrafter._retrieval_key): the stores' fields, the missing
        table's mirror (cleared first where D_r changed, as the strategy does), the skip coin drawn ahead."""
        vp = self.vp
        version = getattr(drafter.repo, "version", None)
        if self.armed != (drafter, version):  # the stores' fields as the last step left them, unless searched since
            self.armed = None
            vp[VP_RETRIEVE] = 0
            if drafter.ret.n_min != 2:  # the mirror's keys are token pairs
                return
            armed = _store_fields(drafter, args)
            if armed is None:
                return
            vp[VP_STORES], self.searched = armed
            self.armed = (drafter, version)
        if drafter.opts.use_strategy:
            drafter.missing_for_version(version)
            if self.missing_for != (drafter.missing, drafter.missing_changes):
                self._mirror_missing(drafter)
            if drafter.coin is None:
                drafter.coin = drafter.rng.random()
                self.coin[0] = drafter.coin
        vp[VP_RETRIEVE] = 1

    def _mirror_missing(self, drafter) -> None:
        """The missing table's token pairs into an open-addressing table draft_ahead.c reads (``missing_holds``)."""
        keys = [k for k in drafter.missing if len(k) == 2]
        size = 64
        while size < 4 * len(keys):
            size *= 2
        table = np.zeros(size, dtype=np.int64)
        mask = size - 1
        for a, b in keys:
            if a < 0 or b < 0:
                continue
            code = (a + 1) << 32 | (b + 1)
            i = ((code * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) >> 20 & mask
            while table[i]:
                i = (i + 1) & mask
            table[i] = code
        self.missing_table = table
        self.vp[VP_MISSING], self.vp[VP_MISSING_MASK] = table.ctypes.data, mask
        self.missing_for = (drafter.missing, drafter.missing_changes)

    def ready(self, n_ctx: int, out_len: int) -> bool:
        """Set up a step whose context holds ``n_ctx`` tokens (the pending token last; the copy's buffer holds them)
        and whose output ``out_len`` (the pending token counted): False where the call cannot draft (the drafter's
        estimator or cost curve outside the C builder's, the copy's buffer not made)."""
        primed, self.primed = self.primed, None
        steady, self.steady = self.steady, None
        drafter = self.drafter
        if primed is not None and primed[:2] == (n_ctx, out_len) and primed[2] is drafter.context_index._native:
            self._arm(drafter, self.args)  # made ready already: only the stores' fields, where a turn moved them
            self._point_stop(drafter.stop)  # primed while a token-healing constraint held it off, then spelled
            return True
        vp = self.vp
        if (steady is not None and steady[0] == n_ctx and steady[1] == out_len and n_ctx < vp[VP_BUCKET_END]
                and drafter.cost is self.cost_of and self.args.seq is drafter.context_index._native):
            # the step after a call that drafted: its fields serve but for the lengths (the builder's table, the
            # copy's buffer, the stop table, the estimator as the call left them); the stores' fields re-armed
            vp[VP_CTX_LEN], vp[VP_OUT_LEN], vp[VP_CACHE_LEN] = n_ctx, out_len, steady[2]
            vp[VP_CHUNK_FROM] = drafter._chunk_from
            self._arm(drafter, self.args)
            return True
        args = drafter._native_args
        seq = drafter.context_index._native
        cost = drafter.cost_at(n_ctx)
        if args is None or seq is None:
            return False
        sc = point_args(drafter, args, seq, cost)
        if sc is None:
            return False
        self.cost_of = drafter.cost
        self._point_stop(drafter.stop)
        vp[VP_CTX_LEN], vp[VP_CTX_CAP], vp[VP_OUT_LEN] = n_ctx, len(seq[0][0]), out_len
        bucket = n_ctx // CONTEXT_BUCKET
        if self.curves[0] is not cost or self.curves[1] != bucket:
            held = self.curve_fields.get((id(cost), bucket))
            if held is None or held[0] is not cost:
                held = self.curve_fields[(id(cost), bucket)] = (cost, *self._curve_fields(cost, n_ctx, sc))
            vp[VP_BUCKET_END], vp[VP_NEXT_TABLE], vp[VP_NEXT_TABLE_LEN], vp[VP_NEXT_END] = held[1]
            self.curves = (cost, bucket)
        cache = drafter.cache
        vp[VP_CACHE_LEN] = _sync_cache(args, cache)
        vp[VP_CACHE_CAP], vp[VP_CHUNK_FROM] = len(cache.mirror.array), drafter._chunk_from
        self.args, self.sc = args, sc
        self._arm(drafter, args)
        return True

    def _point_stop(self, stop: np.ndarray | None) -> None:
        """The call's stop table: the drafter's (:meth:`engine.drafters.FastCoderDrafter.set_stop_tokens`)."""
        if stop is not self.stop:
            self.vp[VP_STOP], self.vp[VP_N_STOP] = (0, 0) if stop is None else (stop.ctypes.data, len(stop))
            self.stop = stop

    def draft_first(self, context: np.ndarray, out_len: int):
        """A generation's first tree (the step after the prefill, ``context`` ((T,) int64) the prompt with the pending
        token last, the output ``out_len`` tokens, the pending one counted), drafted by ``fc_draft_ahead`` in these
        fields as each next one is drafted in the verification's call: the tree the drafter's
        :meth:`~engine.drafters.FastCoderDrafter.propose` gives, without its ~100 us of Python with the caches cold
        after the prefill. The fields stay ready for this step's verification (the next :meth:`ready` with the same
        lengths only re-arms the stores where a turn moved them). Returns ``(tree, cut)`` as :meth:`next_tree`;
        ``(None, False)`` where the drafter's propose must run."""
        idx = self._copy()
        idx.extend_to(context)
        n_ctx = len(context)
        if not self.ready(n_ctx, out_len):
            return None, False
        lib = self.args.lib
        if self.lock is None:
            lib.fc_draft_ahead(*self.args.addresses, self.vp_ptr)
        else:
            with self.lock:  # another thread's add may replace the history's buffer
                self.history_len()
                lib.fc_draft_ahead(*self.args.addresses, self.vp_ptr)
        got = self.next_tree(context)
        if got[0] is not None:
            self.primed = (n_ctx, out_len, idx._native)
        return got

    def prime(self, n_ctx: int, out_len: int) -> None:
        """:meth:`ready` for the step after the prefill (``n_ctx``: the prompt's tokens and the pending one; ``out_len``
        its output, the pending token counted), made before the prefill's forward while the drafter's objects are in
        the caches: the step's own ready then only re-arms the stores (:meth:`draft_first` after a cold prefill of
        ~700 tokens took ~170 us, ~125 of them this, measured on jinja2 `fim-line`)."""
        idx = self._copy()
        if self.ready(n_ctx, out_len):
            self.primed = (n_ctx, out_len, idx._native)

    def _copy(self):
        """The drafter's context copy (:class:`engine.context_match.SuffixMatchIndex`), its native buffers made."""
        idx = self.drafter.context_index
        if idx._native is None:
            idx._native_buffers()
        return idx

    def observed(self, committed: int) -> None:
        """After the drafter observed a step the call drafted after (:meth:`FastCoderDrafter.observe_path`, its
        additions to the cache's list; ``committed`` tokens committed by the step): the cache's mirror holds them
        already (the call wrote them, to draft after them), so its length is moved to the list's; where the call's
        additions and the list's disagree, or it left them to Python part way, the mirror is rebuilt at its next
        sync. Where the mirror agrees and the call drafted from the sources it was given (no datastores' turn), the
        next step's :meth:`ready` only moves the lengths: the rest of the fields are the call's (~40 us of Python
        with the caches cold after the forward, measured on jinja2 `fim-line`)."""
        vp = self.vp
        got = int(vp[VP_CACHE_LEN_OUT])
        if got == -2:  # not observed in the call: the next sync brings the mirror up to the list
            return
        cache = self.drafter.cache
        mirror = cache.mirror
        if got >= 0 and got == len(cache._buf) and cache._buf is mirror.source:
            mirror.length = got
            found = int(vp[VP_FOUND])
            if not vp[VP_RETRIEVED] and (found >= 0 or found in (NOTHING, NOTHING_SKIPPED)):
                self.steady = (int(vp[VP_CTX_LEN]) + committed, int(vp[VP_OUT_LEN]) + committed, got)
        else:
            mirror.source = None

    def looped(self, cache_len_out: int) -> None:
        """A step the native loop ran on past (``fc_verify_propose_loop``, logged), after the drafter observed it: the
        cache mirror's length, as :meth:`observed` keeps it (the loop did the rest of that in C)."""
        cache = self.drafter.cache
        mirror = cache.mirror
        if cache_len_out == len(cache._buf) and cache._buf is mirror.source:
            mirror.length = cache_len_out
        else:
            mirror.source = None

    def looped_tree(self, found: int, retrieved: int, stores: list, context: np.ndarray) -> None:
        """What :meth:`next_tree` keeps in Python of the tree the native loop drafted after a step it ran on past
        (``found`` >= 0: fc_propose's result, ``context`` the committed context it was drafted after): the drafter's
        and the cache's counts, and after a datastores' turn (``retrieved``: ``vp[VP_RETRIEVED]``, no coin drawn) the
        stores' and their MatchStates' bookkeeping from the logged outputs (``stores``: 6 per store), the missing
        table's key, as :meth:`_turn_taken` does."""
        if retrieved:
            self.armed = None  # the stores' states moved
            self._count_turn(retrieved, context, stores)
        else:
            _count_built(self.drafter, found)

    def _curve_fields(self, cost, n_ctx: int, sc) -> tuple[tuple[int, int, int, int], np.ndarray | None]:
        """vp's cost-curve fields for contexts from ``n_ctx`` tokens (kept per curve and bucket): where ``cost``
        (the builder's curve) stops serving (the drafter's curves change per context bucket:
        :meth:`engine.cost_model.VerifyCost.at`), the next curve's table (held in the result: vp points at it) and
        where that one stops, within the most a step adds."""
        at = self.drafter.cost.at
        first = (n_ctx // CONTEXT_BUCKET + 1) * CONTEXT_BUCKET
        end = next((b for b in range(first, n_ctx + _REACH + CONTEXT_BUCKET, CONTEXT_BUCKET) if at(b) is not cost),
                   1 << 62)
        if end == 1 << 62:
            return (end, 0, 0, 0), None
        nxt = at(end)
        view = nxt.upto(min(self.drafter.ret.budget, sc.fits[0] * sc.fits[1]))
        table = view.base if view.base is not None else view
        next_end = next((b for b in range(end + CONTEXT_BUCKET, end + _REACH + CONTEXT_BUCKET, CONTEXT_BUCKET)
                         if at(b) is not nxt), 1 << 62)
        return (end, table.ctypes.data, len(table), next_end), table

    def history_len(self) -> None:
        """vp's history length, the history's buffer synced (the caller holds its lock)."""
        hist = self.drafter.history
        self.vp[VP_HISTORY_LEN] = 0 if hist is None else _sync_history(self.args, hist)

    def next_tree(self, context: np.ndarray):
        """The next step's tree after a verification that drafted it, ``context`` ((T,) int64) the committed
        context with the new pending token last: a :class:`BuilderTree` (cut to the tokens left), a
        :class:`engine.draft_tree.DraftTree` (the datastores' turn, or a cut the C code left to the caller: not yet
        cut by the decoder's ``_verifiable``: second item False), or None (nothing drafted: the caller proposes).
        Returns ``(tree, cut)``."""
        vp = self.vp
        found = int(vp[VP_FOUND])
        if found == NOT_RUN:
            self.armed = None  # the drafter's propose may search the stores
            return None, False
        drafter = self.drafter
        turn = int(vp[VP_RETRIEVED])
        if turn:  # the datastores' turn taken in the call
            self.armed = None  # the stores' states moved
            return self._turn_taken(context, found, turn)
        if found < 0 and found not in (RETRIEVE, NOTHING, NOTHING_SKIPPED) or found == RETRIEVE:
            self.armed = None  # the drafter's propose (or the turn in Python below) may search the stores
        if found < 0 and found not in (RETRIEVE, NOTHING, NOTHING_SKIPPED):
            return None, False
        if found == RETRIEVE:  # the datastores' turn runs in Python, on the index extended to the context
            drafter.context_index.extend_to(context)
        cost = drafter.cost_at(len(context)) if found == RETRIEVE else None  # only the turn in Python sizes a tree
        got = _after_propose(drafter, self.args, self.sc, context, found, cost, int(vp[VP_CACHE_LEN]), builder=True)
        if type(got) is BuilderTree:
            cut = int(vp[VP_NEXT_N])
            if cut == NEXT_UNCUT:
                return got.tree(), False
            got.n = cut
            return got, True
        return got, False

    def _count_turn(self, turn: int, context: np.ndarray, logged: list | None = None) -> None:
        """The counts of a datastores' turn (``turn``: SEARCHED or a skip) for the tree drafted after ``context``: the
        cache's lookup, and the search's bookkeeping (:func:`_searched`; ``logged``: its outputs as the native step
        loop logged them) or the drafter's skip."""
        drafter = self.drafter
        drafter.cache.lookups += 1
        if turn == SEARCHED:
            _searched(drafter, self.args, self.searched, tuple(context[-2:].tolist()), len(context), logged)
        else:
            drafter.skipped += 1

    def _turn_taken(self, context: np.ndarray, found: int, turn: int):
        """:meth:`next_tree` after the call took the datastores' turn (``turn``: vp[VP_RETRIEVED]): the counts the
        strategy and the stores keep (as :func:`_after_propose`'s turn keeps them), then the tree."""
        drafter, args, sc = self.drafter, self.args, self.sc
        if turn & DREW_COIN:
            drafter.coin = None
        self._count_turn(turn & (DREW_COIN - 1), context)
        if found == NOTHING:
            return DraftTree.empty(), False
        if found >= 0:
            cut = int(self.vp[VP_NEXT_N])
            if cut == NEXT_UNCUT:
                return _tree_from(sc, found), False
            return BuilderTree(sc, cut), True
        drafter.context_index.extend_to(context)  # the builder refused: the Python builder over the same sources
        cost, budget, min_prob = drafter.cost_at(len(context)), drafter.ret.budget, drafter.ret.min_prob
        if turn == SEARCHED:
            return _retrieved_tree(drafter, args, sc, context, found, budget, min_prob, cost), False
        return _python_tree(drafter, [], context, budget, min_prob, cost), False

    def drafting_s(self) -> float:
        """The last call's drafting time (s: its fc_propose, timed in C)."""
        return int(self.vp[VP_PROPOSE_NS]) * 1e-9

    def first_source(self) -> int:
        """The source bits of the last call's first accepted node (0: none accepted)."""
        return int(self.vp[VP_FIRST_SOURCE])
