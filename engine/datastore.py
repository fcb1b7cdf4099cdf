"""Token-level suffix-array datastore (REST, He et al., NAACL 2024, Sec. 3 and Alg. 1).

A :class:`Datastore` holds a corpus of token-id documents and answers one question fast:
*which continuations follow the longest suffix of a context that occurs in the corpus?*

Layout (kept minimal, so a memory-mapped store costs ~ (w + 4) bytes per token):

- ``tokens``: the documents concatenated, each followed by one separator, encoded as
  **big-endian unsigned integers of width w** (w = 2 bytes when ``vocab_size <= 65_535``, else 4):
  a token id ``t`` is stored as ``t + 1`` and the separator (:data:`SEPARATOR`, -1) as 0.
  Big-endian fixed width makes byte-wise lexicographic order equal token-wise order, so the
  C suffix-array search of libdivsufsort (``sa_search``) works on the raw bytes, and numpy reads
  the same buffer back as token values through a ``>u2``/``>u4`` view (no second copy).
- ``sa``: the suffix array of the token sequence, stored as **byte offsets** (token index * w),
  int32 (int64 once ``num_tokens * w >= 2**31``), built with pydivsufsort's libdivsufsort over
  the bytes and keeping the suffixes that start on a token boundary.

Search (REST Alg. 1): the longest ``n`` in ``[n_min, n_max]`` whose last-``n``-token suffix of the
context occurs; occurrence is monotone in ``n`` (a suffix of an occurring pattern occurs), so ``n``
is found by binary search, each probe one ``sa_search`` call (O(n log N) byte compares, in C).

Incremental search (a decoder's context only grows between steps): a :class:`MatchState` passed to
:meth:`Datastore.search` keeps the last context's tail, an upper bound on its longest occurring suffix
and the suffix-array interval found. When the new context extends that one by k tokens, its longest
occurring suffix is at most ``bound + k`` (the first tokens of an occurring pattern occur), so the
search probes that length first, inside the previous interval when the pattern extends the previous
match (one ``sa_search`` over a few entries), and binary-searches only below it on a miss. Results
are exactly those of a fresh search.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["SEPARATOR", "FORMAT_VERSION", "Datastore", "DatastoreError", "MatchState", "Retrieval"]

#: Token value placed between documents; no match or continuation ever crosses it.
SEPARATOR = -1
#: On-disk format version written to ``meta.json``.
FORMAT_VERSION = 1

_INT32_MAX = 2**31 - 1

try:  # libdivsufsort shipped inside the pydivsufsort wheel
    from pydivsufsort.dll import libdivsufsort as _lib32, libdivsufsort64 as _lib64

    for _fn, _idx in ((_lib32.sa_search, ctypes.c_int32), (_lib64.sa_search64, ctypes.c_int64)):
        _fn.restype = _idx
        _fn.argtypes = [ctypes.c_void_p, _idx, ctypes.c_char_p, _idx, ctypes.c_void_p, _idx,
                        ctypes.POINTER(_idx)]
    _lib32.divsufsort.restype = ctypes.c_int32
    _lib32.divsufsort.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    _lib64.divsufsort64.restype = ctypes.c_int32
    _lib64.divsufsort64.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    HAVE_C_SEARCH = True
except Exception:  # pragma: no cover - pydivsufsort without its shared libraries
    _lib32 = _lib64 = None
    HAVE_C_SEARCH = False


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
    """

    __slots__ = ("key", "length", "tail", "bound", "match", "searches", "incremental")

    def __init__(self) -> None:
        self.searches = self.incremental = 0
        self.reset()

    def reset(self) -> None:
        """Forget the last context (the next search is a fresh one)."""
        self.key = None
        self.length = 0
        self.tail = np.empty(0, np.int64)
        self.bound = UNBOUNDED
        self.match = (0, 0, 0)

    def extension(self, key, context) -> int | None:
        """Tokens appended since the last search when ``context`` extends it under the same ``key``
        (0: the same context), else None."""
        if key != self.key:
            return None
        old = self.length
        k = len(context) - old
        t = len(self.tail)
        if k < 0:
            return None
        if t:
            try:
                same = np.array_equal(np.asarray(context[old - t:old], dtype=np.int64), self.tail)
            except (TypeError, ValueError, OverflowError):
                return None
            if not same:
                return None
        return k

    def upper(self, k: int, q_len: int) -> int:
        """Longest match length worth probing after ``k`` appended tokens, for a query of ``q_len``."""
        return q_len if self.bound >= UNBOUNDED else min(q_len, self.bound + k)

    def record(self, key, context, q_len: int, n_min: int, n_max: int, match: tuple[int, int, int]) -> None:
        """Remember a search of ``context`` (its prepared query was ``q_len`` tokens) and its result."""
        try:
            self.tail = np.array(context[max(len(context) - n_max, 0):], dtype=np.int64).reshape(-1)
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
        self.key, self.length, self.bound, self.match = key, len(context), bound, match


# --------------------------------------------------------------------------------------------


class Datastore:
    """Immutable token datastore with a suffix array (REST Sec. 3.1); see the module docstring.

    Build with :meth:`from_documents`, persist with :meth:`save` / :meth:`load`, query with
    :meth:`search`. Thread-safe for concurrent readers (the data is never mutated after construction;
    a small cache of search results changes with single dict operations only).
    """

    #: :meth:`search` takes a ``state`` (:class:`MatchState`).
    supports_match_state = True

    def __init__(self, tokens_be: np.ndarray, sa: np.ndarray, vocab_size: int, num_documents: int,
                 tokenizer_fingerprint: str = "") -> None:
        """Internal: use :meth:`from_documents` or :meth:`load`.

        ``tokens_be``: (N,) ``>u2``/``>u4`` encoded tokens (id + 1, separator 0); ``sa``: (N,) int32 or
        int64 byte offsets of the sorted suffixes.
        """
        # plain ndarray views of np.memmap inputs: indexing a memmap subclass is slower
        self._tokens = tokens_be.view(np.ndarray)
        self._sa = sa.view(np.ndarray)
        self._width = tokens_be.dtype.itemsize
        self._vocab_size = int(vocab_size)
        self._num_documents = int(num_documents)
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self._n = int(tokens_be.shape[0])
        self._bytes = tokens_be.view(np.uint8) if self._n else np.zeros(1, np.uint8)
        self._use_c = HAVE_C_SEARCH and self._n > 0
        if self._use_c:
            self._is64 = sa.dtype == np.int64
            self._c_search = _lib64.sa_search64 if self._is64 else _lib32.sa_search
            self._c_idx = ctypes.c_int64 if self._is64 else ctypes.c_int32
            self._t_ptr = ctypes.c_void_p(self._bytes.ctypes.data)
            self._sa_ptr = ctypes.c_void_p(self._sa.ctypes.data)
            self._t_size = self._c_idx(self._bytes.size)
            self._sa_size = self._c_idx(self._sa.size)
        # (n, left, count, draft_len, max_matches) -> (continuations, counts): the rows read for one
        # suffix-array interval, a pure function of this immutable store. Decoding revisits the same
        # short matches often (27% of the searches of a 6-task pluggy replay, 64 entries).
        self._rows_cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_documents(cls, docs: Iterable[Sequence[int] | np.ndarray], vocab_size: int,
                       tokenizer_fingerprint: str = "") -> "Datastore":
        """Concatenate ``docs`` (each a 1-D sequence of token ids in ``[0, vocab_size)``), each
        followed by a separator, and build the suffix array with libdivsufsort.

        Cost: ~0.25 s and ~(w * 9) bytes/token of transient memory per 1M tokens (2 CPU cores).
        Raises DatastoreError for a non-positive vocab_size or ids outside ``[0, vocab_size)``.
        Empty input gives an empty datastore (every search returns an empty Retrieval).
        """
        vocab_size = int(vocab_size)
        if vocab_size <= 0 or vocab_size >= 2**32 - 1:
            raise DatastoreError(f"vocab_size must be in [1, 2**32 - 1), got {vocab_size}")
        width = token_width(vocab_size)
        dtype = _be_dtype(width)
        parts: list[np.ndarray] = []
        sep = np.zeros(1, dtype)
        num_docs = 0
        for i, doc in enumerate(docs):
            arr = np.asarray(doc)
            if arr.size:
                if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
                    raise DatastoreError(f"document {i} must be a 1-D sequence of integer token ids")
                lo, hi = int(arr.min()), int(arr.max())
                if lo < 0 or hi >= vocab_size:
                    raise DatastoreError(f"document {i} has token id {lo if lo < 0 else hi} outside "
                                         f"[0, {vocab_size})")
                parts.append((arr.astype(np.int64) + 1).astype(dtype))
            parts.append(sep)
            num_docs += 1
        tokens = np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)
        return cls(tokens, _build_sa(tokens), vocab_size, num_docs, tokenizer_fingerprint)

    # ---------------------------------------------------------------- properties

    @property
    def num_tokens(self) -> int:
        """Stored tokens including one separator per document."""
        return self._n

    @property
    def num_documents(self) -> int:
        return self._num_documents

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def token_width(self) -> int:
        """Bytes per stored token (2 or 4)."""
        return self._width

    @property
    def nbytes(self) -> int:
        """Bytes of the token and suffix arrays (resident once paged in)."""
        return int(self._tokens.nbytes + self._sa.nbytes)

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return (f"Datastore(num_tokens={self._n}, num_documents={self._num_documents}, "
                f"vocab_size={self._vocab_size}, nbytes={self.nbytes})")

    def document_tokens(self) -> list[np.ndarray]:
        """All documents as int32 arrays (a copy; for tests and merges, not the hot path)."""
        vals = self._tokens.astype(np.int32) - 1
        cuts = np.flatnonzero(vals == SEPARATOR)
        out, start = [], 0
        for c in cuts:
            out.append(vals[start:c])
            start = c + 1
        return out

    # ---------------------------------------------------------------- search primitives

    def encode_query(self, q: np.ndarray) -> bytes:
        """(k,) int64 in-vocabulary ids -> the big-endian byte pattern (k * w bytes)."""
        return (q + 1).astype(self._tokens.dtype).tobytes()

    def find(self, pattern: bytes, within: tuple[int, int] | None = None) -> tuple[int, int]:
        """Suffix-array range ``(left, count)`` of an encoded pattern (see :meth:`encode_query`).

        ``count`` occurrences sit at ``sa[left:left+count]``; (0, 0) when absent. ``within``: a
        suffix-array range ``(left, count)`` known to contain the answer (that of a prefix of the
        pattern): only it is searched (O(len * log count) compares instead of O(len * log N)).
        """
        if self._n == 0 or not pattern:
            return 0, 0
        base, size = (0, self._sa.size) if within is None else within
        if size <= 0:
            return 0, 0
        if self._use_c:
            left = self._c_idx()
            sa_ptr = self._sa_ptr if not base else ctypes.c_void_p(self._sa_ptr.value + base * self._sa.itemsize)
            cnt = self._c_search(self._t_ptr, self._t_size, pattern, self._c_idx(len(pattern)),
                                 sa_ptr, self._c_idx(size), ctypes.byref(left))
            if cnt <= 0:  # absent, or a libdivsufsort argument error
                return 0, 0
            return base + int(left.value), int(cnt)
        return self._find_numpy(pattern)

    def _find_numpy(self, pattern: bytes) -> tuple[int, int]:
        """Fallback bisection over the suffix array comparing byte slices (~30 us at 10M tokens)."""
        data, sa, m = self._bytes, self._sa, len(pattern)

        def key(i: int) -> bytes:
            off = int(sa[i])
            return data[off:off + m].tobytes()

        lo, hi = 0, len(sa)
        while lo < hi:
            mid = (lo + hi) // 2
            if key(mid) < pattern:
                lo = mid + 1
            else:
                hi = mid
        start, hi = lo, len(sa)
        while lo < hi:
            mid = (lo + hi) // 2
            if key(mid) <= pattern:
                lo = mid + 1
            else:
                hi = mid
        return (start, lo - start) if lo > start else (0, 0)

    def positions(self, sa_indices: np.ndarray) -> np.ndarray:
        """Token positions (int64) of the suffixes at the given suffix-array indices."""
        return self._sa[sa_indices].astype(np.int64) // self._width

    def continuations_at(self, starts: np.ndarray, draft_len: int) -> np.ndarray:
        """(K, draft_len) int32 tokens from each token position in ``starts`` (K,), cut at the first
        separator (that and later cells are -1). Vectorised gather, no Python loop."""
        if starts.size == 0 or draft_len <= 0:
            return np.empty((starts.size, max(draft_len, 0)), np.int32)
        idx = starts[:, None] + np.arange(draft_len, dtype=np.int64)[None, :]
        np.minimum(idx, self._n - 1, out=idx)  # the last stored token is always a separator
        vals = self._tokens[idx].astype(np.int32)
        dead = np.cumsum(vals == 0, axis=1, dtype=np.int32) > 0
        vals -= 1
        vals[dead] = SEPARATOR
        return vals

    def longest_match(self, q: np.ndarray, n_min: int, hi: int | None = None,
                      within: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """Binary search for the longest n in [n_min, hi] with ``q[-n:]`` occurring (hi defaults to
        ``len(q)``).

        ``hi`` given (an upper bound known from an earlier search, see :class:`MatchState`): that length
        is probed first, inside the suffix-array range ``within`` when given (the range of a prefix of
        ``q[-hi:]``), and the binary search runs below it only when it is absent. Returns (n, left, count)
        with n = 0 when even ``q[-n_min:]`` is absent (or hi < n_min).
        """
        pattern = self.encode_query(q)
        w = self._width

        def probe(m: int, rng=None):
            left, cnt = self.find(pattern[len(pattern) - m * w:], rng)
            return (left, cnt) if cnt else None

        n, hit = longest_length(probe, len(q), n_min, hi, lambda m: probe(m, within))
        return (n, *hit) if n else (0, 0, 0)

    # ---------------------------------------------------------------- public search

    def search(self, context, n_max: int = 16, n_min: int = 2, draft_len: int = 16,
               max_matches: int = 128, state: MatchState | None = None) -> Retrieval:
        """REST Alg. 1: continuations of the longest suffix of ``context`` found in the datastore.

        Args:
            context: 1-D list or array of token ids (int).
            n_max / n_min: longest / shortest suffix length tried, in tokens.
            draft_len: tokens per continuation.
            max_matches: cap on occurrences read; above it ``max_matches`` suffix-array entries evenly
                spaced over the match range are read (deterministic, representative counts).
            state: a :class:`MatchState` kept across the searches of one growing context: when
                ``context`` extends the last one, the match is found from the last one's (usually one
                probe) instead of a binary search. The result is the same with or without it.
        Returns:
            :class:`Retrieval`; empty (match_length 0) for contexts shorter than ``n_min``, an empty
            datastore, out-of-vocabulary ids at the end of the context, or no match. Never raises for
            bad context values.
        """
        draft_len = int(draft_len)
        if self._n == 0 or n_max < n_min or max_matches <= 0:
            return Retrieval.empty(draft_len)
        n_max, n_min = int(n_max), max(int(n_min), 1)
        q = prepare_context(context, n_max, self._vocab_size)
        if state is None:
            if len(q) < n_min:
                return Retrieval.empty(draft_len)
            n, left, cnt = self.longest_match(q, n_min)
        else:
            key = (self, 0, n_min, n_max)
            k = state.extension(key, context)
            state.searches += 1
            if len(q) < n_min:
                n = left = cnt = 0
            elif k is None:
                n, left, cnt = self.longest_match(q, n_min)
            else:
                state.incremental += 1
                hi = state.upper(k, len(q))
                n0, left0, cnt0 = state.match
                within = (left0, cnt0) if n0 and k and hi == n0 + k else None
                n, left, cnt = self.longest_match(q, n_min, hi, within)
            state.record(key, context, len(q), n_min, n_max, (n, left, cnt))
        if n == 0:
            return Retrieval.empty(draft_len)
        key = (n, left, cnt, draft_len, int(max_matches))
        hit = self._rows_cache.get(key)
        if hit is None:
            idx = sample_range(left, cnt, int(max_matches))
            rows = self.continuations_at(self.positions(idx) + n, draft_len)
            if draft_len > 0:
                rows = rows[rows[:, 0] != SEPARATOR]
            hit = count_rows(rows, presorted=True)
            for a in hit:
                a.setflags(write=False)  # shared by later hits
            if len(self._rows_cache) >= ROWS_CACHE_ENTRIES:
                try:  # oldest first; another reader may have removed it already
                    self._rows_cache.pop(next(iter(self._rows_cache)), None)
                except (StopIteration, RuntimeError):
                    pass
            self._rows_cache[key] = hit
        return Retrieval(n, hit[0], hit[1], cnt)

    # ---------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike) -> Path:
        """Write the datastore to directory ``path`` (created; replaced atomically if it exists).

        Files: ``tokens.npy`` (N,) ``>u2``/``>u4``, ``sa.npy`` (N,) int32/int64 byte offsets, and
        ``meta.json`` (format version, vocab_size, num_tokens, num_documents, tokenizer fingerprint,
        token width, dtypes, crc32 of each array's bytes). Returns the directory path.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent))
        try:
            np.save(tmp / "tokens.npy", self._tokens, allow_pickle=False)
            np.save(tmp / "sa.npy", self._sa, allow_pickle=False)
            meta = {
                "format": "fastcoder-datastore",
                "format_version": FORMAT_VERSION,
                "vocab_size": self._vocab_size,
                "num_tokens": self._n,
                "num_documents": self._num_documents,
                "tokenizer_fingerprint": self.tokenizer_fingerprint,
                "token_width": self._width,
                "tokens_dtype": self._tokens.dtype.str,
                "sa_dtype": self._sa.dtype.str,
                "crc32": {"tokens": _crc32(self._tokens), "sa": _crc32(self._sa)},
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            for name in ("tokens.npy", "sa.npy", "meta.json"):
                _fsync(tmp / name)
            _fsync(tmp)
            if path.exists():
                old = path.with_name(f".{path.name}.old-{os.getpid()}")
                shutil.rmtree(old, ignore_errors=True)
                path.rename(old)
                tmp.rename(path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(path)
            _fsync(path.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, tokenizer_fingerprint: str | None = None,
             mmap: bool | None = None) -> "Datastore":
        """Load a datastore written by :meth:`save` and validate it.

        ``tokenizer_fingerprint``: if given, must equal the stored one. ``mmap``: True maps the
        arrays, False reads them; None (default) maps only stores above :data:`MMAP_MIN_BYTES`.
        Raises DatastoreError (one line) for: missing/unreadable directory or files, unknown format
        version, tokenizer fingerprint mismatch (expected vs found), truncated or corrupt arrays
        (shape, dtype or crc32 mismatch), token ids out of range, inconsistent document count.
        Cost: one crc32 pass over the arrays (~50 ms for 8.6M tokens).
        """
        path = Path(path)
        meta = _read_meta(path)
        found = meta.get("tokenizer_fingerprint", "")
        if tokenizer_fingerprint is not None and found != tokenizer_fingerprint:
            raise DatastoreError(f"datastore {path} was built for a different tokenizer: expected "
                                 f"fingerprint {tokenizer_fingerprint!r}, found {found!r}")
        try:
            n = int(meta["num_tokens"])
            vocab = int(meta["vocab_size"])
            ndocs = int(meta["num_documents"])
            width = int(meta["token_width"])
            crcs = meta["crc32"]
            tok_dtype, sa_dtype = np.dtype(meta["tokens_dtype"]), np.dtype(meta["sa_dtype"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DatastoreError(f"datastore {path}/meta.json is missing or has a bad field: {exc}")
        if width not in (2, 4) or tok_dtype != _be_dtype(width) or width != token_width(vocab):
            raise DatastoreError(f"datastore {path}: unsupported token encoding {tok_dtype} "
                                 f"(width {width}) for vocab_size {vocab}")
        if sa_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise DatastoreError(f"datastore {path}: unsupported suffix-array dtype {sa_dtype}")
        if mmap is None:  # map only large stores: a mapped file truncated under us would SIGBUS
            mmap = n * (tok_dtype.itemsize + sa_dtype.itemsize) > MMAP_MIN_BYTES
        tokens = _load_array(path / "tokens.npy", tok_dtype, n, crcs.get("tokens"), mmap)
        sa = _load_array(path / "sa.npy", sa_dtype, n, crcs.get("sa"), mmap)
        if n:
            hi = int(tokens.max())
            if hi > vocab:
                raise DatastoreError(f"datastore {path}: token id {hi - 1} out of range for "
                                     f"vocab_size {vocab}")
            seps = int(np.count_nonzero(tokens == 0))
            if seps != ndocs or tokens[-1] != 0:
                raise DatastoreError(f"datastore {path}: {seps} document separators found, meta.json "
                                     f"says {ndocs} documents")
            lo_sa, hi_sa = int(sa.min()), int(sa.max())
            if lo_sa < 0 or hi_sa > (n - 1) * width:
                raise DatastoreError(f"datastore {path}: suffix array offsets out of range")
        elif ndocs:
            raise DatastoreError(f"datastore {path}: no tokens but {ndocs} documents in meta.json")
        return cls(tokens, sa, vocab, ndocs, found)


# --------------------------------------------------------------------------------------------


def _build_sa(tokens: np.ndarray) -> np.ndarray:
    """Suffix array of a big-endian token array, as byte offsets (int32, or int64 when large)."""
    n = tokens.shape[0]
    if n == 0:
        return np.empty(0, np.int32)
    width = tokens.dtype.itemsize
    data = np.ascontiguousarray(tokens).view(np.uint8)
    nb = data.size
    if HAVE_C_SEARCH:
        if nb <= _INT32_MAX:
            out = np.empty(nb, np.int32)
            rc = _lib32.divsufsort(data.ctypes.data, out.ctypes.data, nb)
        else:
            out = np.empty(nb, np.int64)
            rc = _lib64.divsufsort64(data.ctypes.data, out.ctypes.data, nb)
        if rc:
            raise DatastoreError(f"libdivsufsort failed with code {rc}")
    else:  # pragma: no cover
        from pydivsufsort import divsufsort

        out = divsufsort(data)
    if width > 1:
        out = out[(out & (width - 1)) == 0]
    return out


#: Datastores whose arrays are larger than this (bytes) are memory-mapped by :meth:`Datastore.load`;
#: smaller ones are read into memory, so that a file truncated or rewritten under a running server
#: cannot kill it with SIGBUS (the stdlib D_c is ~52 MB).
MMAP_MIN_BYTES = 512 * 1024 * 1024


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (best effort: some file systems refuse directories)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete what an interrupted :meth:`Datastore.save` of ``path`` left beside it.

    A save writes ``.NAME.tmp-PID-*`` and, while replacing, ``.NAME.old-PID``; a kill -9 leaves
    them. Those whose writer process no longer runs are removed. Returns the removed paths.
    """
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    for entry in path.parent.glob(f".{path.name}.*"):
        rest = entry.name[len(path.name) + 2:]
        kind, _, tail = rest.partition("-")
        pid_text = tail.split("-", 1)[0]
        if kind not in ("tmp", "old") or not pid_text.isdigit():
            continue
        if not _pid_alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _crc32(arr: np.ndarray) -> int:
    crc = 0
    flat = arr.reshape(-1).view(np.uint8)
    step = 1 << 26
    for i in range(0, flat.size, step):
        crc = zlib.crc32(flat[i:i + step], crc)
    return crc


def _read_meta(path: Path) -> dict:
    if not path.is_dir():
        raise DatastoreError(f"datastore directory {path} does not exist")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise DatastoreError(f"datastore {path} has no meta.json (not a datastore, or an interrupted "
                             f"build)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatastoreError(f"datastore {path}/meta.json is unreadable: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != "fastcoder-datastore":
        raise DatastoreError(f"datastore {path}/meta.json is not a fastcoder datastore")
    if meta.get("format_version") != FORMAT_VERSION:
        raise DatastoreError(f"datastore {path} has format version {meta.get('format_version')}, "
                             f"this fastcoder reads version {FORMAT_VERSION}: rebuild it")
    return meta


def _load_array(file: Path, dtype: np.dtype, n: int, crc, mmap: bool) -> np.ndarray:
    name = file.name
    try:
        arr = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise DatastoreError(f"datastore file {file} is missing") from None
    except Exception as exc:  # truncated header/body: ValueError, OSError, EOFError
        raise DatastoreError(f"datastore file {file} is truncated or corrupt ({exc})") from None
    if arr.dtype != dtype or arr.shape != (n,):
        raise DatastoreError(f"datastore file {file} holds {arr.dtype}{list(arr.shape)}, expected "
                             f"{dtype}[{n}] (truncated or from another build)")
    if crc is None or _crc32(arr) != int(crc):
        raise DatastoreError(f"datastore file {file} is corrupt (crc32 mismatch on {name})")
    return arr
