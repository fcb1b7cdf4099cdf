"""fastcoder's greedy steps back to back in one native call (``fc_verify_propose_loop`` in draft_ahead.c): the fields
of :meth:`engine.native.bound_verify.BoundVerify.verify_loop` and its log of the steps it ran before its last, which the
decoder replays (:meth:`engine.generation.Generation._replay`).

Between two fused steps (``fc_verify_propose``: the verification and the next tree's drafting) the decoder spent
~200-250 us of Python with the caches cold after the forward: the weights' and the KV cache's stream evicts the
interpreter's objects and code (2026-11-29, 2-core AMD EPYC: ``sync_threads`` 10.8 us cold against 0.47 us warm,
``BoundVerify._stale`` 16.3 against 3.5; ``benchmarks/results/2026-11-29d/``). Where a step leaves the decoder
nothing to decide before the next one, the loop runs it at once.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import numpy as np

from ..datastore.matching import MATCH_OUT_OFFSET

#: fc_verify_propose_loop's fields (LP_* in draft_ahead.c) and its log's (LOG_*).
(LP_MAX_STEPS, LP_MAX_ROWS, LP_MASK_FLOATS, LP_KV_CAPACITY, LP_NEED_COUNTED, LP_LOG, LP_LOG_STRIDE, LP_STEPS, LP_KEYS,
 LP_SOURCES, LP_TOUCH, LP_N_TOUCH, LP_LAST_N, LP_LAST_PAST, LP_OUT_OFFSET, LP_NOTE_MISS, LP_CANCEL, LP_DEADLINE_NS,
 LP_FIELDS) = range(19)
(LOG_GOT, LOG_N, LOG_FIRST_SOURCE, LOG_PROPOSE_NS, LOG_FOUND, LOG_CACHE_LEN_OUT, LOG_EXACT, LOG_LEARNED,
 LOG_HEAD_LEARNED, LOG_COMMITTED_N, LOG_RETRIEVED, LOG_SCREENED, LOG_STORES) = range(13)
#: A logged step's committed tokens: after the datastores' turn's 6 fields per store (its MatchState's 5 outputs, its
#: rows found).
LOG_COMMITTED = LOG_STORES + 12
#: ``0``: every fastcoder step returns to Python (:class:`StepLoop` not used).
STEP_LOOP_ENV = "FASTCODER_STEP_LOOP"
#: Steps one loop call runs at most. A cancel that calls back (:meth:`StepLoop.watch`) and a deadline end the call
#: after the step under way; a plain :class:`threading.Event` is seen between calls (~4 ms a step here: <= ~32 ms).
LOOP_STEPS = 8


def step_loop_on() -> bool:
    """Whether fastcoder's steps run back to back in one native call where they can (``$FASTCODER_STEP_LOOP`` not
    ``0``)."""
    return os.environ.get(STEP_LOOP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class StepLoop:
    """A generation's fields for :meth:`engine.native.bound_verify.BoundVerify.verify_loop`
    (``fc_verify_propose_loop``'s ``lp`` and its log).

    Args:
        max_rows: rows a step's forward takes at most (the log holds that many committed tokens a step).
        need_counted: whether a step must have been learned in the call to continue (the draft head fed there).
        touch: None, or a (V,) uint8 table of the tokens that share a byte with a stop string (a step committing one
            ends the loop: the decoder searches for the stop strings in Python).
        max_steps: steps a call runs at most (None: :data:`LOOP_STEPS`).
    """

    def __init__(self, max_rows: int, need_counted: bool, touch: np.ndarray | None, max_steps: int | None = None):
        self.max_steps = max_steps = LOOP_STEPS if max_steps is None else max_steps
        self.stride = LOG_COMMITTED + max_rows + 1
        self.log = np.zeros((max_steps, self.stride), dtype=np.int64)
        self.lp = np.zeros(LP_FIELDS, dtype=np.int64)
        self.lp_ptr = self.lp.ctypes.data
        self.touch = touch
        lp = self.lp
        lp[LP_NEED_COUNTED], lp[LP_LOG], lp[LP_LOG_STRIDE] = int(need_counted), self.log.ctypes.data, self.stride
        lp[LP_TOUCH], lp[LP_N_TOUCH] = (0, 0) if touch is None else (touch.ctypes.data, len(touch))
        lp[LP_OUT_OFFSET] = MATCH_OUT_OFFSET
        self.last_n = 0
        self.last_tree = None  # the last step's tree (in the builder's outputs) after a call that ran several
        self.cancel_word = np.zeros(1, dtype=np.int64)  # set to 1 by a watched cancel (lp[LP_CANCEL] points here)
        self._watched = None  # (cancel, its callback) while watched

    def watch(self, cancel, deadline: float | None) -> None:
        """Let a call end after the step under way once ``cancel`` is set or ``deadline`` (``time.monotonic()``
        seconds, the C clock's CLOCK_MONOTONIC; None: none) has passed, not only between calls. ``cancel`` is seen
        inside a call where it has ``add_callback`` (``lsp_server.backends.CancelEvent``: its callback, run by the
        thread that sets it while the call runs without the GIL, writes :attr:`cancel_word`); a plain
        :class:`threading.Event` is seen between calls. :meth:`unwatch` removes the callback."""
        lp = self.lp
        ns = deadline * 1e9 if deadline is not None else math.nan
        # none in C where it is not a clock reading (nan, inf, past int64): Python's check between calls holds
        lp[LP_DEADLINE_NS] = max(1, int(ns)) if math.isfinite(ns) and ns < 2.0 ** 62 else 0
        self.cancel_word[0] = 0
        add = getattr(cancel, "add_callback", None)
        if add is None:
            lp[LP_CANCEL] = 0
            return
        word = self.cancel_word

        def cancelled() -> None:
            word[0] = 1
        lp[LP_CANCEL] = word.ctypes.data
        self._watched = (cancel, cancelled)
        add(cancelled)  # runs at once where ``cancel`` is already set

    def unwatch(self) -> None:
        """Remove :meth:`watch`'s callback from its cancel (a no-op where none)."""
        watched, self._watched = self._watched, None
        if watched is not None:
            remove = getattr(watched[0], "remove_callback", None)
            if remove is not None:
                remove(watched[1])

    def logged(self, records: list) -> list:
        """The logged steps ``records`` (rows of :attr:`log` as lists) as
        :meth:`engine.native.bound_verify.BoundVerify.verify_loop` returns them."""
        out = []
        for rec in records:
            m = rec[LOG_COMMITTED_N]
            out.append(LoggedStep(rec[LOG_N], rec[LOG_GOT], rec[LOG_FIRST_SOURCE], rec[LOG_PROPOSE_NS],
                                  rec[LOG_FOUND], rec[LOG_CACHE_LEN_OUT], rec[LOG_RETRIEVED],
                                  rec[LOG_STORES:LOG_COMMITTED], rec[LOG_COMMITTED:LOG_COMMITTED + m]))
        return out


class LoggedStep(NamedTuple):
    """A step :meth:`engine.native.bound_verify.BoundVerify.verify_loop` ran before its last, for the decoder's replay.

    Attributes:
        n: its tree's nodes.
        got: the accepted draft tokens.
        first_source: the first accepted node's source bits (0: none).
        propose_ns: the next tree's drafting (ns).
        found: fc_propose's result for the next tree (>= 0: built; flags as engine.native.propose's).
        cache_len_out: the cache mirror's length after the drafter's observation (tokens).
        retrieved: the next tree's datastores' turn (``vp[VP_RETRIEVED]``: 0 none, SKIP_MISSING or SEARCHED).
        stores: after a search, per store (D_r, D_c) its MatchState's 5 outputs and its rows found (12 ints).
        committed: the committed tokens (the accepted path's, then the model's own).
    """

    n: int
    got: int
    first_source: int
    propose_ns: int
    found: int
    cache_len_out: int
    retrieved: int
    stores: list
    committed: list
