"""A fastcoder decode step's drafting in one native call (``fc_propose`` in ``propose.c``): arguments and result.

:meth:`engine.drafters.FastCoderDrafter.propose` searches the per-document cache, copies from the context and
searches the completion history, then builds the cost-sized draft tree (:func:`engine.tree_builder.build_draft_tree`).
In Python that is ~10 separate code paths a step, each slow the first time after a verify forward has streamed
~40 MB through the caches. :func:`propose_native` gives the same tree, bit for bit, from one C call over int64
mirrors of the cache's and the history's token buffers (:class:`engine.history.TokenMirror`) and the context
copy's own sequence buffer (:class:`engine.context_match.SuffixMatchIndex`).

It serves the default configuration (cache and context copy on, D_r and D_c searched only when neither has a
continuation, or at every cache miss with ``retrieve_beside_copy``; cost-sized trees with an
:class:`engine.acceptance.AcceptanceEstimator`). A step where the datastores' turn comes applies the retrieval strategy in Python (the missing table, the skip
token: :meth:`~engine.drafters.FastCoderDrafter._retrieval_key`), then searches D_r and D_c and builds the tree in
a second C call (``fc_propose_retrieve``: each store's suffix-array search from its
:class:`~engine.datastore.MatchState` and its continuations, ``fc_ds_retrieve`` in datastore.c); a D_r with an edit
pending (its search merges base and overlay) is searched in Python. Any other configuration takes the Python path
(:func:`supported` and the ``None`` results below). ``$FASTCODER_NATIVE_PROPOSE=0`` turns it off.

On the CPU's one-call greedy step the next step's tree is drafted inside the verification's own native call
(``fc_verify_propose``: the verification, the drafter's observation of it in the cache's mirror, the committed tokens
appended to the copy's sequence, ``fc_propose``), left in the builder's arrays and verified there by the next call
(:mod:`engine.native.draft_ahead`, :class:`BuilderTree`, :meth:`engine.native.bound_verify.BoundVerify.verify_draft`):
the same trees, without the ~40 us of Python a step around ``fc_propose`` and the tree's arrays; where the datastores
get their turn the call applies the retrieval strategy and searches them too (``retrieve_turn``), Python keeping the
bookkeeping.
``$FASTCODER_DRAFT_AHEAD=0`` drafts before each verification instead (the same trees).
"""

from __future__ import annotations

import os

import numpy as np

from ..acceptance import AcceptanceEstimator
from ..datastore.matching import NATIVE_TAIL_MAX
from ..draft_tree import SOURCE_COMMON, SOURCE_REPO, Candidates, DraftTree
from ..tree_builder import SIZED_MAX_ROWS, build_draft_tree
from . import library
from .tree import _local, _tree_from, pack_parts, set_limits, set_stop, thread_scratch

NATIVE_PROPOSE_ENV = "FASTCODER_NATIVE_PROPOSE"
#: fc_propose's results: no continuation from the cache or the copy (the datastores are searched in Python), and
#: the flag added when the cache had one.
RETRIEVE = -100
NOTHING = -101
CACHE_HIT = 1 << 40
#: fc_propose's results for a step whose context ends in a special token (FastCoderDrafter._retrieval_key's first
#: rule, applied in C): the retrieval skipped, the tree from the history's source (the flag added), or nothing.
SKIPPED = 1 << 41
NOTHING_SKIPPED = -102
#: Settings beyond these take the Python path (the C code's fixed buffers, propose.c).
MAX_STARTS = 64
MAX_WIDTH = 64
MAX_CONTEXT = 256
CACHE_LIMIT = 32  # FastCoderCache.search's default limit, the one FastCoderDrafter.candidates uses
#: fc_propose_retrieve's fields per datastore (RETRIEVE_FIELDS in propose.c) and the most occurrences it reads per
#: search (a larger ``max_matches`` searches D_r and D_c in Python; the rows' buffers are sized by it).
RETRIEVE_FIELDS = 7
MAX_MATCHES = 4096


def supported(drafter) -> bool:
    """Whether ``drafter`` (a :class:`engine.drafters.FastCoderDrafter`) has a configuration the native step
    serves: the library is loaded, not switched off, and the settings fit the C code's buffers."""
    if os.environ.get(NATIVE_PROPOSE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    lib = library()
    if lib is None or not hasattr(lib, "fc_propose"):
        return False
    opts, ret, cache, idx, hist = drafter.opts, drafter.ret, drafter.cache, drafter.context_index, drafter.history
    if type(drafter.estimator) is not AcceptanceEstimator or drafter.cost is None:
        return False
    if not (opts.use_cache and opts.use_context_copy and opts.cache_min_sequences <= 0):
        return False
    if ret.budget <= 0 or not 1 <= ret.draft_len <= MAX_WIDTH or cache.n_min != 2 or not 2 <= cache.n_max <= MAX_CONTEXT:
        return False
    if idx.max_candidates > MAX_STARTS or idx.max_tokens > MAX_WIDTH:
        return False
    return hist is None or (hist.max_candidates <= MAX_STARTS and 1 <= hist.n_max <= MAX_CONTEXT)


def _settings(drafter) -> tuple:
    """The drafter's settings that fc_propose's arguments hold (every value of ``pa``/``pd`` but the addresses)."""
    ret, cache, idx, hist = drafter.ret, drafter.cache, drafter.context_index, drafter.history
    return (cache.n_max, cache.n_min, ret.draft_len, idx.max_candidates, idx.max_depth, idx.max_tokens, idx.factor,
            idx.min_prob, idx.depth_bound, drafter.opts.tree_max_depth,
            None if hist is None else (hist.n_max, hist.max_candidates, hist.min_match, hist.factor),
            ret.n_min, ret.n_max, ret.max_matches, drafter.opts.alpha, drafter.opts.beta, _special(drafter),
            drafter.opts.retrieve_beside_copy, idx.indent)  # the table itself: the key keeps pa[35]'s table alive


def _special(drafter) -> frozenset:
    """The drafter's special token ids (:attr:`engine.model.TokenInfo.special`; a frozenset caches its hash)."""
    return getattr(drafter.token_info, "special", None) or frozenset()


def propose_args(drafter) -> "ProposeArgs":
    """This thread's :class:`ProposeArgs` for ``drafter``'s settings: made once per thread and settings, not once
    per drafter (the decoder makes a drafter per generation, and making them cost ~0.2 ms with the caches cold)."""
    table = getattr(_local, "propose_args", None)
    if table is None:
        table = _local.propose_args = {}
    key = _settings(drafter)
    args = table.get(key)
    if args is None:
        args = table[key] = ProposeArgs(drafter)
    return args


def prepare(drafter, prompt_len: int) -> None:
    """A generation's setup before its first step (called from the drafter's ``reset``, before the prefill's forward,
    while the prompt is in the caches): the drafter's arguments, the context copy's native buffers, the cache's
    and the history's mirrors (the history's chains over the last generation's output: ~50-70 us in the first
    step after a cold prefill, measured on pluggy ``fim-line``) and the verify cost's table at the first step's context length (the prompt and the pending token;
    :meth:`engine.cost_model.VerifyCost.upto` builds one per context bucket, ~0.2 ms the first time), so that the
    first decode step does only the step's work."""
    args = drafter._native_args = propose_args(drafter)
    drafter.context_index._native_buffers()
    _sync_cache(args, drafter.cache)
    hist = drafter.history
    if hist is not None:  # the previous generation's output, added at its end, chained now rather than cold
        with hist._lock:
            _sync_history(args, hist)
    cost = drafter.cost_at(prompt_len + 1)
    if getattr(cost, "upto", None) is not None:
        set_limits(thread_scratch(drafter.opts.tree_max_depth), cost, drafter.ret.budget, drafter.ret.min_prob)


class ProposeArgs:
    """fc_propose's packed arguments for one thread and drafter settings (``pa`` int64, ``pd`` float64; layout in
    propose.c), with the addresses they hold, rewritten only when one changes (a numpy write is one more cold code
    path a step); and fc_propose_retrieve's (``ra`` int64, ``weights`` float64) with each datastore's rows'
    buffers ((max_matches, draft_len) int32 rows, (max_matches,) int64 counts, scratch)."""

    def __init__(self, drafter):
        ret, cache, idx, hist, opts = drafter.ret, drafter.cache, drafter.context_index, drafter.history, drafter.opts
        self.lib = library()  # loaded before any ProposeArgs is made (supported); one module call less a step
        self.pa = np.zeros(36, dtype=np.int64)
        self.pd = np.zeros(4, dtype=np.float64)  # [3]: the skip coin's threshold (draft_ahead.DraftAhead.start)
        self.pa[3:12] = [cache.n_max, CACHE_LIMIT, hist.n_max if hist else 0, hist.max_candidates if hist else 0,
                         hist.min_match if hist else 0, ret.draft_len, idx.max_candidates, idx.max_depth,
                         idx.max_tokens]
        self.pa[14:16] = [SIZED_MAX_ROWS, opts.tree_max_depth]
        self.pa[18] = cache.n_min
        self.pd[:3] = [idx.factor, idx.min_prob, hist.factor if hist else 0.0]
        self.addresses = (self.pa.ctypes.data, self.pd.ctypes.data)
        self.special = np.array(sorted(_special(drafter)), dtype=np.int64)  # a context ending in one: no retrieval
        self.pa[29:32] = [ret.n_min, self.special.ctypes.data if len(self.special) else 0, len(self.special)]
        self.pa[32] = int(bool(opts.retrieve_beside_copy))
        self.pa[34] = int(idx.depth_bound)
        self.pa[35] = idx.indent.table.ctypes.data if idx.indent is not None else 0  # alive: _settings' key
        # retrieve_beside_copy: a step's copy (length, match length, tokens), kept by fc_propose's first call for the
        # datastores' call that puts it beside their sources (not searched twice)
        self.kept_copy = np.zeros(2 + MAX_WIDTH, dtype=np.int64)
        self.pa[33] = self.kept_copy.ctypes.data
        self.seq = self.scratch = None  # the copy's buffers and the tree scratch that pa points at
        self.ahead = None  # the fields for drafting inside the verification's call (engine.native.draft_ahead)
        self.cache_pointers = self.history_pointers = None  # the mirrors' pointers that pa holds
        # D_r and D_c searched in C where their settings allow (fc_propose_retrieve)
        mm, width = int(ret.max_matches), int(ret.draft_len)
        self.retrieves = 0 < mm <= MAX_MATCHES and 1 <= ret.n_min <= ret.n_max <= NATIVE_TAIL_MAX
        self.ra = np.zeros(2 * RETRIEVE_FIELDS + 3, dtype=np.int64)
        self.weights = np.array([opts.alpha, opts.beta], dtype=np.float64)
        self.store_keys = [None, None]  # per store: (datastore, its MatchState, the state's key) that ra holds
        if self.retrieves:
            self.rows = [np.zeros((mm, width), dtype=np.int32) for _ in range(2)]
            self.counts = [np.zeros(mm, dtype=np.int64) for _ in range(2)]
            self.store_scratch = [np.zeros((mm * (width * 4 + 24) + 7) // 8, dtype=np.int64) for _ in range(2)]
            for j, source in enumerate((SOURCE_REPO, SOURCE_COMMON)):
                self.ra[RETRIEVE_FIELDS * j + 2:RETRIEVE_FIELDS * j + 6] = [
                    self.rows[j].ctypes.data, self.counts[j].ctypes.data, self.store_scratch[j].ctypes.data, source]
            self.ra[2 * RETRIEVE_FIELDS:] = [ret.n_min, ret.n_max, mm]
            self.pa[27], self.pa[28] = self.ra.ctypes.data, self.weights.ctypes.data


def propose_native(drafter, context: np.ndarray, cost) -> DraftTree | None:
    """:meth:`engine.drafters.FastCoderDrafter.propose`'s tree for ``context`` ((T,) int64, the pending token last)
    from ``fc_propose``: the same tree, bit for bit, and the same side effects (the cache's lookup and hit counts;
    where neither the cache nor the copy has a continuation, the retrieval strategy's counts and missing table,
    the datastores' match states and probe counts; D_r and D_c are searched by ``fc_propose_retrieve``, or in
    Python by :meth:`~engine.drafters.FastCoderDrafter._search_stores` where :func:`_retrieve_native` cannot,
    their sources then going to a second ``fc_propose`` call). ``cost``: the
    verify cost at this context's length (the drafter's per-bucket curve). None where the Python path must run
    from the start (nothing has been searched yet: the C code refused the settings or the estimates)."""
    args = drafter._native_args
    if args is None:
        args = drafter._native_args = propose_args(drafter)
    lib = args.lib
    idx = drafter.context_index
    idx.extend_to(context)
    sc = point_args(drafter, args, idx._native if idx._native is not None else idx._native_buffers(), cost)
    if sc is None:
        return None
    cache = drafter.cache
    cache_len = _sync_cache(args, cache)
    n_ctx = len(idx)
    found = _call(lib.fc_propose, args, drafter.history, n_ctx, cache_len, -1)
    return _after_propose(drafter, args, sc, context, found, cost, cache_len)


def point_args(drafter, args: ProposeArgs, seq, cost):
    """Point ``args`` at the copy's buffers ``seq`` and this thread's tree scratch (a wider one where the drafter's
    depth bound needs it), and the scratch at the drafter's estimator, stop table and ``cost``'s c(n) table under its
    caps (numpy written only where a value changed). Returns the scratch, or None where the C builder cannot take the
    estimator or the curve (the Python path runs)."""
    sc = args.scratch  # this thread's (args are per thread), unless a deeper bound needs a wider one
    if sc is None or sc.fits[1] < drafter.opts.tree_max_depth:
        sc = thread_scratch(drafter.opts.tree_max_depth)
    if getattr(cost, "upto", None) is None or not sc.use_estimator(drafter.estimator):
        return None
    pa = args.pa
    if seq is not args.seq:
        pa[0], args.seq = seq[1][0], seq
    if sc is not args.scratch:
        pa[12], pa[13] = sc.args
        pa[16], pa[17] = sc.fits[0], sc.fits[1]
        pa[19], pa[20] = sc.parts_args
        args.scratch = sc
    set_limits(sc, cost, drafter.ret.budget, drafter.ret.min_prob)
    set_stop(sc, drafter.stop)
    return sc


def _after_propose(drafter, args: ProposeArgs, sc, context: np.ndarray, found: int, cost, cache_len: int,
                   builder: bool = False):
    """The rest of :func:`propose_native` after fc_propose returned ``found`` for ``context`` (the copy's index
    holding it): the counters, the datastores' turn, the tree. ``builder``: a tree the C builder kept is returned
    as a :class:`BuilderTree` over its outputs rather than copied (only where fc_propose itself built it). ``cost``
    (the curve at the context) sizes the datastores' tree; only read where ``found`` is RETRIEVE."""
    cache = drafter.cache
    if found == RETRIEVE:  # the cache (and the copy, unless searched beside it) had nothing: D_r and D_c, the tree
        lib, n_ctx = args.lib, len(drafter.context_index)
        budget, min_prob = drafter.ret.budget, drafter.ret.min_prob
        cache.lookups += 1
        key = drafter._retrieval_key(context)
        if key is not None:
            found = _retrieve_native(lib, drafter, args, key, n_ctx, cache_len)
            if found is not None:
                return _retrieved_tree(drafter, args, sc, context, found, budget, min_prob, cost)
        parts = [] if key is None else drafter._search_stores(context, key)
        parts = [c for c in parts if c.tokens.size and len(c.counts)]
        n_parts = pack_parts(sc, parts) if len(parts) < sc.fits[2] else -1
        found = _call(lib.fc_propose, args, drafter.history, n_ctx, cache_len, n_parts) if n_parts >= 0 else -1
        if found == NOTHING:
            return DraftTree.empty()
        if found < 0:  # the sources are searched: the rest of the Python path, from them
            return _python_tree(drafter, parts, context, budget, min_prob, cost)
        return _tree_from(sc, found)
    if found == NOTHING_SKIPPED:
        cache.lookups += 1
        drafter.skipped += 1
        return DraftTree.empty()
    if found < 0:
        return None
    found = _count_built(drafter, found)
    return BuilderTree(sc, found) if builder else _tree_from(sc, found)


def _count_built(drafter, found: int) -> int:
    """The counts of a tree fc_propose built (``found`` >= 0: its nodes, flagged where the cache had the continuation
    or the turn was skipped): the cache's lookups and hits, the drafter's skips. Returns the nodes."""
    cache = drafter.cache
    cache.lookups += 1
    if found >= SKIPPED:
        drafter.skipped += 1
        return found - SKIPPED
    if found >= CACHE_HIT:
        cache.hits += 1
        return found - CACHE_HIT
    return found


def _python_tree(drafter, parts: list, context: np.ndarray, budget: int, min_prob: float, cost) -> DraftTree:
    """The Python path's tree from the datastores' sources ``parts`` (searched already), the context copy's
    (``retrieve_beside_copy``: searched beside it) and the history's, in :meth:`FastCoderDrafter.candidates`' order."""
    hist = drafter.history
    copied = drafter.context_index.candidates() if drafter.opts.retrieve_beside_copy else None
    indent = drafter.context_index.indent
    earlier = hist.search(context, drafter.ret.draft_len, indent=indent) if hist is not None else None
    return build_draft_tree(parts + [c for c in (copied, earlier) if c is not None], budget, min_prob,
                            drafter.estimator, cost, drafter.opts.tree_max_depth, drafter.stop)


def _retrieve_native(lib, drafter, args: ProposeArgs, key: tuple, n_ctx: int, cache_len: int) -> int | None:
    """D_r and D_c searched and the tree built in C (``fc_propose_retrieve``): each store through its
    :class:`~engine.datastore.MatchState` (the state's bookkeeping and the store's probe count kept as
    :meth:`engine.datastore.Datastore.search` keeps them), ``key`` into the missing table when neither has a
    continuation. Returns fc_propose's result, or None (nothing searched) where a store's search is not the
    C code's (an edit pending in D_r, no compiled search, settings beyond its buffers)."""
    armed = _store_fields(drafter, args)
    if armed is None:
        return None
    stores, searched = armed
    found = _call(lib.fc_propose_retrieve, args, drafter.history, n_ctx, cache_len, stores)
    _searched(drafter, args, searched, key, n_ctx)
    return found


def _store_fields(drafter, args: ProposeArgs) -> tuple[int, list] | None:
    """fc_propose_retrieve's store fields for ``drafter``'s D_r and D_c (each store's search and MatchState buffer in
    ``args.ra``, made again where the store or its state changed): ``(stores, searched)``, the call's store bits and
    per searched store ``(j, store, state, state key)``; None where a store's search is not the C code's (an edit
    pending in D_r, no compiled search, settings beyond its buffers)."""
    if not args.retrieves:
        return None
    ret = drafter.ret
    stores = 0
    searched = []
    for j, (store, state) in enumerate(((drafter.repo, drafter.repo_state), (drafter.common, drafter.common_state))):
        if store is None:
            continue
        get = getattr(store, "searched_store", None)
        base = get() if get is not None else None
        if base is None:
            return None
        held = args.store_keys[j]
        if held is None or held[0] is not base or held[1] is not state:
            native = base._native_match_search()
            if not native:
                if len(base) == 0:  # an empty store answers nothing and keeps no state
                    continue
                return None
            f = RETRIEVE_FIELDS * j
            args.ra[f], args.ra[f + 1] = native[1], state.buffer_address
            held = args.store_keys[j] = (base, state, base.match_key(ret.n_min, ret.n_max))
        stores |= 1 << j
        if not state.holds(held[2]):
            stores |= 4 << j
        searched.append((j, base, state, held[2]))
    return stores, searched


def _searched(drafter, args: ProposeArgs, searched: list, key: tuple, n_ctx: int, logged: list | None = None) -> None:
    """The bookkeeping after fc_propose_retrieve searched the stores ``searched`` (:func:`_store_fields`) for a
    context of ``n_ctx`` tokens ending in ``key``: each state's and store's counts, ``key`` into the missing table
    when neither store had a continuation. ``logged``: the search's outputs as the native step loop logged them (per
    store j from 6 * j: its MatchState's 5 outputs, its rows found) instead of the buffers (``args`` unread)."""
    any_rows = False
    for j, base, state, state_key in searched:
        if logged is None:
            base.probes += state.searched_native(state_key, n_ctx)[3]
            any_rows = any_rows or args.ra[RETRIEVE_FIELDS * j + 6] > 0
        else:
            base.probes += state.searched_native(state_key, n_ctx, logged[6 * j:6 * j + 5])[3]
            any_rows = any_rows or logged[6 * j + 5] > 0
    if not any_rows:
        drafter.note_miss(key)


def _retrieved_tree(drafter, args: ProposeArgs, sc, context: np.ndarray, found: int, budget: int, min_prob: float,
                    cost) -> DraftTree:
    """The tree of a step whose datastores fc_propose_retrieve searched: the C builder's, or where it refused
    (NaN estimates), the Python builder's from the same sources."""
    if found == NOTHING:
        return DraftTree.empty()
    if found >= 0:
        return _tree_from(sc, found)
    parts = []
    for j, (weight, source, state) in enumerate(((drafter.opts.alpha, SOURCE_REPO, drafter.repo_state),
                                                 (drafter.opts.beta, SOURCE_COMMON, drafter.common_state))):
        m = int(args.ra[RETRIEVE_FIELDS * j + 6])
        if m > 0:
            parts.append(Candidates(args.rows[j][:m].copy(), args.counts[j][:m].copy(), weight, source,
                                    int(state.match[0])))
    return _python_tree(drafter, parts, context, budget, min_prob, cost)


def _call(fn, args: ProposeArgs, hist, n_ctx: int, cache_len: int, last: int) -> int:
    """``fn`` (``fc_propose`` or ``fc_propose_retrieve``) with the history's buffer synced and held under its lock
    (another thread's ``add`` may replace it); ``last``: its last argument."""
    if hist is None:
        return fn(*args.addresses, n_ctx, cache_len, 0, last)
    with hist._lock:
        return fn(*args.addresses, n_ctx, cache_len, _sync_history(args, hist), last)


def _sync_cache(args: ProposeArgs, cache) -> int:
    """The cache's int64 mirror brought up to its buffer and its addresses into ``args.pa`` where they changed;
    returns the mirror's length (tokens)."""
    n = cache.mirror.sync(cache._buf)
    if cache.mirror.pointers is not args.cache_pointers:
        args.cache_pointers = got = cache.mirror.pointers
        args.pa[1], args.pa[21], args.pa[22], args.pa[23] = got
    return n


def _sync_history(args: ProposeArgs, hist) -> int:
    """:func:`_sync_cache` for the completion history (the caller holds its lock: another thread's ``add`` may
    replace its buffer)."""
    n = hist.mirror.sync(hist._buf)
    if hist.mirror.pointers is not args.history_pointers:
        args.history_pointers = got = hist.mirror.pointers
        args.pa[2], args.pa[24], args.pa[25], args.pa[26] = got
    return n


class BuilderTree:
    """A draft tree left in the C tree builder's outputs (``scratch``'s, :class:`engine.native.tree._NativeScratch`):
    its first ``n`` nodes, breadth-first, as :func:`engine.native.tree._tree_from` would copy them. The next
    ``fc_verify_propose`` call (:meth:`engine.native.bound_verify.BoundVerify.verify_draft`) verifies it in place;
    :meth:`tree` copies it out for any other reader. Valid until the builder's next tree on this thread."""

    __slots__ = ("scratch", "n")
    in_builder = True
    n_adaptive = 0

    def __init__(self, scratch, n: int):
        self.scratch, self.n = scratch, n

    def __len__(self) -> int:
        return self.n

    def tree(self) -> DraftTree:
        """The tree as a :class:`engine.draft_tree.DraftTree` (its arrays copied)."""
        return _tree_from(self.scratch, self.n)
