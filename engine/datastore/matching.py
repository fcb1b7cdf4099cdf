"""What a datastore search returns, the query's preparation and the match carried across steps.

:class:`Retrieval` (the result of :meth:`engine.datastore.Datastore.search`), the helpers a search and
:mod:`engine.repo_datastore` share (query encoding, continuation counting, sampling, the binary search over
match lengths) and :class:`MatchState`, the incremental search's state (see :mod:`engine.datastore`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Token value placed between documents; no match or continuation ever crosses it.
SEPARATOR = -1


class DatastoreError(ValueError):
    """A datastore cannot be built, saved or loaded; the message is one human-readable line."""


@dataclass(frozen=True)
class Retrieval:
    """Result of :meth:`Datastore.search`.

    Attributes:
        match_length: n, the length in tokens of the longest context suffix found (0 = no match).
        continuations: (M, draft_len) int32, the distinct next-``draft_len``-token sequences after the
            (sampled) occurrences; padded with :data:`SEPARATOR` (-1) where the document ends
            (a continuation never crosses a separator). Occurrences with no following token are
            not listed. Row order: ``counts`` descending, then rows lexicographically ascending.
        counts: (M,) int64, how many of the sampled occurrences are followed by that row.
        total_matches: occurrences of the matched suffix in the datastore, before the
            ``max_matches`` cap.

    ``bool(retrieval)`` is True when there is at least one continuation to draft from.
    :meth:`Datastore.search` may hand out the same (read-only) arrays again for the same match.
    """

    match_length: int
    continuations: np.ndarray
    counts: np.ndarray
    total_matches: int

    @classmethod
    def empty(cls, draft_len: int = 16) -> "Retrieval":
        """The "nothing found" result: match_length 0, (0, draft_len) continuations."""
        return cls(0, np.empty((0, max(int(draft_len), 0)), np.int32), np.empty(0, np.int64), 0)

    def __bool__(self) -> bool:
        return self.match_length > 0 and len(self.counts) > 0


# --------------------------------------------------------------------------------------------
# helpers shared with repo_datastore


def token_width(vocab_size: int) -> int:
    """Bytes per stored token: 2 if every ``id + 1`` fits in uint16, else 4."""
    return 2 if vocab_size <= 0xFFFF else 4


def _be_dtype(width: int) -> np.dtype:
    return np.dtype(">u2") if width == 2 else np.dtype(">u4")


def prepare_context(context, n_max: int, vocab_size: int) -> np.ndarray:
    """The longest in-vocabulary tail (at most ``n_max`` tokens) of ``context`` as int64.

    ``context``: 1-D sequence or array of token ids. Ids outside ``[0, vocab_size)`` cut the tail
    (a pattern containing them cannot occur). Returns a (k,) int64 array, k <= n_max.
    """
    if n_max <= 0:
        return np.empty(0, np.int64)
    try:
        q = np.asarray(context[-n_max:], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError, OverflowError, IndexError):
        return np.empty(0, np.int64)
    bad = q.view(np.uint64) >= vocab_size  # negative ids wrap to huge values
    if bad.any():
        q = q[np.flatnonzero(bad)[-1] + 1:]
    return q


def count_rows(rows: np.ndarray, presorted: bool) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a (K, L) int32 array and their multiplicities, in Retrieval order.

    ``presorted``: rows are already lexicographically ascending (true for rows read in suffix-array
    order), which skips the sort. Returns ((M, L) int32, (M,) int64) ordered by count descending,
    then rows ascending.
    """
    k = rows.shape[0]
    if k == 0:
        return rows, np.empty(0, np.int64)
    if not presorted:
        order = np.lexsort(rows.T[::-1])
        rows = rows[order]
    new = np.empty(k, bool)  # a row differing from the one before starts a group
    new[0] = True
    np.any(rows[1:] != rows[:-1], axis=1, out=new[1:])
    starts = np.flatnonzero(new)
    counts = np.empty(len(starts), np.int64)
    counts[:-1] = starts[1:] - starts[:-1]
    counts[-1] = k - starts[-1]
    order = np.argsort(-counts, kind="stable")
    return rows[starts[order]], counts[order]


def sample_range(left: int, count: int, max_matches: int) -> np.ndarray:
    """Suffix-array indices to read: all of ``[left, left+count)``, or ``max_matches`` of them evenly
    spaced (deterministic) when ``count > max_matches``. Returns (k,) int64."""
    if count <= max_matches:
        return np.arange(left, left + count, dtype=np.int64)
    return left + (np.arange(max_matches, dtype=np.int64) * count) // max_matches


#: Search results (continuation rows of one suffix-array interval) a :class:`Datastore` keeps.
ROWS_CACHE_ENTRIES = 64

#: "No known bound" for :attr:`MatchState.bound`.
UNBOUNDED = 1 << 30


def longest_length(probe: Callable[[int], object], q_len: int, n_min: int, hi: int | None = None,
                   probe_hi: Callable[[int], object] | None = None) -> tuple[int, object]:
    """The longest n in [max(n_min, 1), hi] whose suffix probe hits (REST Alg. 1's longest match, by
    binary search: a suffix that occurs implies every shorter one does).

    ``probe(n)`` returns a hit (anything but None) when the last n tokens occur. ``hi`` defaults to
    ``q_len``; when given (a bound from an earlier search, :class:`MatchState`), it is probed first, with
    ``probe_hi`` if given (e.g. inside a known suffix-array range), and the search runs below it only on a
    miss. Returns (n, hit), (0, None) when nothing hits.
    """
    lo = max(n_min, 1)
    if hi is None:
        hi = q_len
    else:
        hi = min(hi, q_len)
        if hi >= lo:
            hit = (probe_hi or probe)(hi)
            if hit is not None:
                return hi, hit
            hi -= 1
    best: tuple[int, object] = (0, None)
    while lo <= hi:
        mid = (lo + hi) // 2
        hit = probe(mid)
        if hit is not None:
            best = (mid, hit)
            lo = mid + 1
        else:
            hi = mid - 1
    return best


#: MatchState's buffer, shared with ``fc_ds_search`` (engine/native/datastore.c): the last context's length,
#: its tail's length, the bound, the match (n, left, count), the last search's probes and whether it started
#: from the state, then the tail.
_LENGTH, _TAIL_LEN, _BOUND, _N, _LEFT, _COUNT, _PROBES, _INCREMENTAL, _TAIL = range(9)
#: Where a MatchState's buffer holds a C search's 5 outputs (n, left, count, probes, incremental), in int64s: read
#: by the native step loop (engine.native.step_loop) to log each search it runs.
MATCH_OUT_OFFSET = _N
#: The longest ``n_max`` (tokens) the native search serves (``TAIL_MAX`` in datastore.c).
NATIVE_TAIL_MAX = 64
#: Context tokens the native search is handed at most (appended since the last search + ``n_max``); a longer
#: gap starts the search afresh (the same answer, more probes).
NATIVE_CONTEXT_MAX = 1024


class MatchState:
    """Longest-match state of one growing context against one datastore, kept between searches.

    Pass the same instance to every :meth:`Datastore.search` (or ``RepoDatastore.search``) of one token
    stream (one per drafter and datastore; not thread-safe). Any context that is not an extension of
    the previous one (a rollback, a new prompt), another datastore or snapshot, or other n_min/n_max
    resets it; results never depend on it, only the number of suffix-array probes does.

    Attributes:
        key: what the state is valid for: (datastore, snapshot version, n_min, n_max); None when reset.
        length: length (tokens) of the last context searched.
        tail: (t,) int64, its last t = min(length, n_max) tokens, to recognise an extension.
        bound: its longest suffix that occurs in the datastore (at any length) is at most this many
            tokens (:data:`UNBOUNDED` when the match reached n_max).
        match: (n, left, count) of the last search: match length and suffix-array interval.
        searches / incremental: searches made through the state / of them, answered from the bound.

    A search in C (:meth:`search_native`, ``fc_ds_search``) keeps ``tail``, ``bound`` and ``match`` in an
    int64 buffer the C code reads and writes; the Python path (:meth:`extension`, :meth:`record`) keeps them
    as attributes. The properties read whichever the last search wrote.
    """

    __slots__ = ("key", "length", "searches", "incremental", "_tail", "_bound", "_match", "_in_buffer", "_st",
                 "_out", "_ctx", "_addrs")

    def __init__(self) -> None:
        self.searches = self.incremental = 0
        self._st = np.zeros(_TAIL + NATIVE_TAIL_MAX, np.int64)
        self._out = self._st[_N:_TAIL]  # n, left, count, probes, incremental: one tolist() per search
        self._ctx = np.zeros(NATIVE_CONTEXT_MAX, np.int64)
        self._addrs = (self._st.ctypes.data, self._ctx.ctypes.data)
        self.reset()

    def reset(self) -> None:
        """Forget the last context (the next search is a fresh one)."""
        self.key = None
        self.length = 0
        self._tail = np.empty(0, np.int64)
        self._bound = UNBOUNDED
        self._match = (0, 0, 0)
        self._in_buffer = False

    @property
    def tail(self) -> np.ndarray:
        if self._in_buffer:
            return self._st[_TAIL:_TAIL + int(self._st[_TAIL_LEN])].copy()
        return self._tail

    @property
    def bound(self) -> int:
        return int(self._st[_BOUND]) if self._in_buffer else self._bound

    @property
    def match(self) -> tuple[int, int, int]:
        return tuple(self._out[:3].tolist()) if self._in_buffer else self._match

    def extension(self, key, context) -> int | None:
        """Tokens appended since the last search when ``context`` extends it under the same ``key``
        (0: the same context), else None."""
        if key != self.key:
            return None
        old = self.length
        k = len(context) - old
        tail = self.tail
        t = len(tail)
        if k < 0:
            return None
        if t:
            try:
                same = np.array_equal(np.asarray(context[old - t:old], dtype=np.int64), tail)
            except (TypeError, ValueError, OverflowError):
                return None
            if not same:
                return None
        return k

    def upper(self, k: int, q_len: int) -> int:
        """Longest match length worth probing after ``k`` appended tokens, for a query of ``q_len``."""
        bound = self.bound
        return q_len if bound >= UNBOUNDED else min(q_len, bound + k)

    def record(self, key, context, q_len: int, n_min: int, n_max: int, match: tuple[int, int, int]) -> None:
        """Remember a search of ``context`` (its prepared query was ``q_len`` tokens) and its result."""
        try:
            tail = np.array(context[max(len(context) - n_max, 0):], dtype=np.int64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            self.reset()
            return
        n = match[0]
        if q_len < n_min:            # too short: the suffix is cut by an unknown id or the context start
            bound = q_len
        elif n == 0:                 # not even n_min tokens occur
            bound = n_min - 1
        elif n < q_len:              # n + 1 tokens were probed and do not occur
            bound = n
        elif q_len < n_max:          # matched up to the cut (unknown id or context start)
            bound = q_len
        else:                        # matched n_max: longer ones were not probed
            bound = UNBOUNDED
        self.key, self.length, self._tail, self._bound, self._match = key, len(context), tail, bound, match
        self._in_buffer = False

    def search_native(self, search, args: int, key, context: np.ndarray, n_min: int, n_max: int
                      ) -> tuple[int, int, int, int]:
        """:meth:`extension`, the longest match and :meth:`record` in one C call (``fc_ds_search``).

        Args:
            search: the library's ``fc_ds_search``; args: the address of the store's packed arguments
                (``Datastore._native_match_args``).
            key: as :meth:`extension`; context: (T,) int64 ndarray; n_min >= 1; n_max <= NATIVE_TAIL_MAX.
        Returns:
            (n, left, count, probes): the match length (0: none), its suffix-array interval and the
            ``sa_search`` calls made; the same match as the Python path.
        Raises:
            ValueError: ``n_min`` below 1 or ``n_max`` above :data:`NATIVE_TAIL_MAX` (the C code refuses them;
                :meth:`Datastore.search` sends those to the Python path).
        """
        ctx_len = len(context)
        fresh = not self.holds(key)
        need = n_max
        if not fresh and ctx_len >= self.length:
            need = ctx_len - self.length + n_max  # the appended tokens and the old tail, to recognise it
        if need > NATIVE_CONTEXT_MAX:
            need, fresh = n_max, True
        if need > ctx_len:
            need = ctx_len
        self._ctx[:need] = context[ctx_len - need:]
        if search(args, self._addrs[0], self._addrs[1], need, ctx_len, n_min, n_max, fresh) < 0:
            raise ValueError(f"native match search refused n_min={n_min}, n_max={n_max}")
        return self.searched_native(key, ctx_len)

    def holds(self, key) -> bool:
        """Whether the state's buffer holds the last search under ``key`` (else a C search starts afresh)."""
        return self._in_buffer and key == self.key

    def searched_native(self, key, ctx_len: int, out: list[int] | None = None) -> tuple[int, int, int, int]:
        """The bookkeeping after a C search (``fc_ds_search``, or ``fc_ds_retrieve`` from
        :mod:`engine.native.propose`) wrote this state's buffer for a context of ``ctx_len`` tokens under ``key``
        (``out``: that search's 5 outputs, as logged by the native step loop when later searches followed it).
        Returns (n, left, count, probes) as :meth:`search_native`."""
        n, left, count, probes, incremental = self._out.tolist() if out is None else out
        self.searches += 1
        self.incremental += incremental
        self.key, self.length, self._in_buffer = key, ctx_len, True
        return n, left, count, probes

    @property
    def buffer_address(self) -> int:
        """The address of the int64 buffer the C search reads and writes (``st`` in datastore.c)."""
        return self._addrs[0]
