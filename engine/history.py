"""Completion history: the model's verified output of earlier completions, across documents.

FastCoder's CACHE (:class:`engine.drafters.FastCoderCache`) is per document and stores model output in
20-token chunks, so a short completion (an editor's line completion is ~2-10 tokens) never reaches it
and nothing learned in one file helps in another. SuffixDecoding (Oliaro et al., NeurIPS 2025,
section 3) keeps a *global* suffix tree over every earlier request's output besides each request's own
prompt, and on this project's fill-in-the-middle benchmark that is where it beat fastcoder: the model
ends many middles with the same few tokens (tiny-py-coder writes ``e.`` then ends in 5 of 10 jinja2
line tasks), and drafting the last token lets the end of the middle come as the bonus token of the same
forward instead of one more.

:class:`CompletionHistory` is that global store for the fastcoder drafter: each finished generation is
stored with the last ``context_tokens`` prompt tokens before it (so a match can begin in the prompt) in
one token buffer, separated by -1, with a map from each token to the positions its continuations start
at. A query takes the most recent occurrences of the context's last token, measures how far each agrees
with the context backwards, and returns the distinct continuations of the longest agreement with their
counts (REST's "longest suffix that occurs"), at most ``factor`` times as many tokens as matched
(SuffixDecoding's ``max_spec_factor``); the acceptance estimates, learned per source and match length,
then decide what is worth verifying.

The defaults come from an oracle replay of the benchmark (tiny-py-coder, 10 tasks per repository, the
model's own output replayed, EOS included; speedup over ``ar`` predicted from the measured c(n), drafting
time excluded), without the history -> with it, matches of at least 1 / 2 / 3 tokens:

| task kind, repository | none | 1 | 2 | 3 |
|---|---|---|---|---|
| fim-line jinja2 | 1.021 | 1.131 | 1.134 | 0.984 |
| fim-line pluggy | 1.178 | 1.191 | 1.199 | 1.165 |
| fim-block jinja2 | 2.761 | 2.796 | 2.856 | 2.705 |
| fim-block pluggy | 2.297 | 2.216 | 2.249 | 2.253 |

and a draft of up to 16 tokens after a 1-token match (no ``factor`` cap) gave 1.115 / 2.781 / 2.190 in
rows 1, 3 and 4.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from . import native
from .draft_tree import SOURCE_HISTORY, Candidates
from .indent_shift import IndentTable, shift_of, shift_tokens


def sequences_from(buf: list[int], start: int) -> list[list[int]]:
    """The whole sequences of a -1-separated token buffer that begin at or after ``start`` (a position
    inside a sequence moves on to the next one's start); the buffers of :class:`CompletionHistory` and
    FastCoder's CACHE evict their oldest sequences this way."""
    while 0 < start < len(buf) and buf[start - 1] != -1:
        start += 1
    out: list[list[int]] = []
    seq: list[int] = []
    for t in buf[start:]:
        if t == -1:
            out.append(seq)
            seq = []
        else:
            seq.append(t)
    return out


class TokenMirror:
    """An int64 numpy copy of a -1-separated token list (the buffers of :class:`CompletionHistory` and FastCoder's
    CACHE) with each token's chain of earlier occurrences, kept up to date incrementally for the native drafting
    step (:mod:`engine.native.propose`), which follows the chains instead of the Python dict indexes.

    :meth:`sync` copies the tokens appended since the last call and extends the chains over them
    (``fc_chain_extend``); a replaced list (the buffers are rebuilt, not shortened in place, when they evict) is
    copied whole. After a sync: ``array`` ((capacity,) int64, the first ``length`` entries valid), ``prev``
    ((capacity,) int32: the last earlier position of the same token, -1 for none and for separators), ``head``
    (int32 per token id: its last position, -1 for none; grown to the largest id seen) and ``pointers`` (their
    addresses and ``len(head)``, a new tuple whenever one changes). Without the native library only ``array``
    is kept.
    """

    __slots__ = ("source", "array", "prev", "head", "length", "pointers")

    def __init__(self):
        self.source: list[int] | None = None
        self.array = np.empty(0, dtype=np.int64)
        self.prev = np.empty(0, dtype=np.int32)
        self.head = np.empty(0, dtype=np.int32)
        self.length = 0
        self.pointers = (0, 0, 0, 0)

    @property
    def nbytes(self) -> int:
        """Memory held by the copy and its chains (bytes)."""
        return self.array.nbytes + self.prev.nbytes + self.head.nbytes

    def sync(self, buf: list[int]) -> int:
        """Bring the copy and its chains up to ``buf``; returns its length (tokens)."""
        n = len(buf)
        if buf is self.source and self.length <= n <= len(self.array):
            if n != self.length:
                self.array[self.length:n] = buf[self.length:n]
                self._chain(self.length, n)
                self.length = n
            return n
        grown = buf is self.source and self.length <= n  # appended past the capacity: the chains so far stay
        array = np.empty(max(1024, 2 * n), dtype=np.int64)
        array[:n] = buf
        prev = np.empty(len(array), dtype=np.int32)
        done = 0
        if grown:
            prev[:self.length] = self.prev[:self.length]
            done = self.length
        else:
            self.head = np.full(max(len(self.head), 1024), -1, dtype=np.int32)
        self.source, self.array, self.prev = buf, array, prev
        self._point()
        self._chain(done, n)
        self.length = n
        return n

    def _point(self) -> None:
        """``pointers`` for the current arrays (after one of them is replaced: a numpy array's ``.ctypes.data`` costs
        ~20 us a call with the caches cold after a verify forward, so steps that only append reuse them)."""
        self.pointers = (self.array.ctypes.data, self.prev.ctypes.data, self.head.ctypes.data, len(self.head))

    def _chain(self, start: int, end: int) -> None:
        """Extend the chains over ``array[start:end]`` (growing ``head`` for larger token ids; ``pointers`` are the
        current arrays')."""
        lib = native.library()
        if lib is None:
            return
        while start < end:
            array, prev, head, n_head = self.pointers
            start = lib.fc_chain_extend(array, prev, head, n_head, start, end)
            if start < end:  # a token id past the head table
                head = np.full(max(2 * len(self.head), int(self.array[start]) + 1), -1, dtype=np.int32)
                head[:len(self.head)] = self.head
                self.head = head
                self._point()


def longest_agreement(buf: list[int], starts: list[int], ctx: list[int], agreed: int) -> tuple[int, list[int]]:
    """Of the continuation starts ``starts`` in ``buf`` (each preceded by the last ``agreed`` tokens of
    ``ctx``) that a token follows, those whose preceding tokens agree longest with the end of ``ctx``:
    (that length in tokens, 0 if none; their starts). -1 separators end every agreement."""
    best, found = 0, []
    for s in starts:
        if s >= len(buf) or buf[s] == -1:  # nothing followed this occurrence
            continue
        n = agreed
        while n < len(ctx) and s - n - 1 >= 0 and buf[s - n - 1] == ctx[-n - 1]:
            n += 1
        if n > best:
            best, found = n, [s]
        elif n == best:
            found.append(s)
    return best, found


def count_continuations(buf: list[int], starts: list[int], width: int, indent: IndentTable | None = None,
                        width_n: int = -1) -> dict[tuple[int, ...], int]:
    """The distinct continuations (at most ``width`` tokens, never past a -1 separator) at ``starts`` in
    ``buf``, with how many starts each came from (insertion order: first seen first). With an indentation
    table and the context line's width ``width_n`` (-1: unknown), each one re-indented to the context's line
    first (:mod:`engine.indent_shift`)."""
    conts: dict[tuple[int, ...], int] = {}
    for s in starts:
        cont = buf[s:s + width]
        if -1 in cont:
            cont = cont[:cont.index(-1)]
        if indent is not None and width_n >= 0:
            cont = shift_tokens(indent, cont, shift_of(indent, buf, width_n, s))
        if cont:
            key = tuple(cont)
            conts[key] = conts.get(key, 0) + 1
    return conts


def continuation_candidates(conts: dict[tuple[int, ...], int], source: int, match_length: int,
                            width: int | None = None) -> Candidates | None:
    """:func:`count_continuations`' result as :class:`engine.draft_tree.Candidates` (rows (K, W) int64
    padded with -1, W = ``width`` or the longest continuation; counts (K,) float64); None when empty."""
    if not conts:
        return None
    width = width or max(map(len, conts))
    # both arrays from lists by one numpy path (np.full, a row-wise fill and np.fromiter were three, each cold
    # after a forward)
    rows = np.array([[*cont, *(-1,) * (width - len(cont))] for cont in conts], dtype=np.int64)
    return Candidates(rows, np.array(list(conts.values()), dtype=np.float64), 1.0, source, match_length)


def _ints(tokens: Sequence[int]) -> list[int]:
    """``tokens`` (a numpy array or a sequence of ints) as a list of Python ints."""
    to_list = getattr(tokens, "tolist", None)
    return to_list() if to_list is not None else [int(t) for t in tokens]


class CompletionHistory:
    """Earlier completions' verified output, searchable by the context's suffix.

    Args:
        max_tokens: buffer bound (tokens, separators included; >= 2); the oldest half is dropped when full.
        context_tokens: prompt tokens stored before each completion's output (a match may start there).
        n_max: longest context suffix compared (tokens).
        max_candidates: most recent occurrences of the last token compared per query.
        factor: a draft after a match of m tokens holds at most ``max(1, factor * m)`` tokens
            (SuffixDecoding's ``max_spec_factor``: a short match predicts little).
        min_match: shortest context suffix (tokens) whose continuations are returned.
    Raises:
        ValueError: ``n_max`` or ``max_candidates`` below 1, ``max_tokens`` below 2, or a negative
            ``context_tokens``.

    Thread-safe: a server's completions of different workspace folders may run on different threads.
    A query costs ~15-20 us in the replay of the benchmark's fim-block pygls tasks. A vectorised (K, n)
    numpy comparison measured 37-56 us: this loop stops at the first disagreement, which comes within a
    few tokens for most occurrences.
    """

    def __init__(self, max_tokens: int = 1 << 15, context_tokens: int = 16, n_max: int = 16,
                 max_candidates: int = 32, factor: float = 1.0, min_match: int = 2):
        if min(n_max, max_candidates) < 1 or max_tokens < 2 or context_tokens < 0:
            raise ValueError("CompletionHistory bounds must be >= 1 (max_tokens >= 2, context_tokens >= 0)")
        self.max_tokens, self.context_tokens = int(max_tokens), int(context_tokens)
        self.n_max, self.max_candidates = int(n_max), int(max_candidates)
        self.factor, self.min_match = float(factor), int(min_match)
        self.num_completions = 0
        #: What warmed it: :meth:`engine.output_store.OutputStore.describe` (set by
        #: :func:`engine.output_store.new_completion_history`), None for a history that started empty.
        self.store: dict | None = None
        self._buf: list[int] = []
        self._starts: dict[int, list[int]] = {}  # token -> positions right after its occurrences (by search())
        self._indexed = 0  # buffer positions _starts covers
        self._lock = threading.Lock()
        self.mirror = TokenMirror()  # the buffer as int64, for engine.native.propose (synced under the lock)

    @property
    def num_tokens(self) -> int:
        """Tokens held, separators included."""
        return len(self._buf)

    @property
    def nbytes(self) -> int:
        """Approximate memory held (bytes)."""
        return 8 * len(self._buf) + 64 * len(self._starts) + self.mirror.nbytes

    def for_completion(self, one_line: bool) -> "CompletionHistory":
        """The history a completion drafts from: this one (:class:`engine.output_store.WarmHistory` gives one-line
        completions its session part)."""
        return self

    def add(self, prompt_tail: Sequence[int], output: Sequence[int]) -> None:
        """Store one finished generation: its ``output`` token ids (an end-of-sequence token excluded) after
        the last :attr:`context_tokens` of ``prompt_tail``. An empty output stores nothing; an output longer
        than half the buffer keeps its last half-buffer of tokens."""
        # numpy arrays (the decoder's context) converted in one call each: iterating numpy scalars cost ~25 us
        # more with the caches cold at a generation's end
        out = [t for t in _ints(output) if t >= 0]
        if not out:
            return
        tail = [t for t in _ints(prompt_tail[max(0, len(prompt_tail) - self.context_tokens):])
                if t >= 0] if self.context_tokens else []
        seq = (tail + out)[-(self.max_tokens // 2):]
        with self._lock:
            while self._buf and len(self._buf) + len(seq) + 1 > self.max_tokens:
                self._drop_oldest_half()
            self._append(seq)
            self.num_completions += 1

    def _append(self, seq: list[int]) -> None:
        self._buf.extend(seq)
        self._buf.append(-1)

    def _drop_oldest_half(self) -> None:
        kept = sequences_from(self._buf, len(self._buf) // 2)
        self._buf, self._starts, self._indexed = [], {}, 0
        for seq in kept:
            self._append(seq)

    def _token_index(self) -> dict[int, list[int]]:
        """The map token -> the positions right after its occurrences (separators excluded), brought up to the
        buffer's end; the caller holds the lock. Built here, not in :meth:`add`: only this Python search reads it
        (the native step scans :attr:`mirror`)."""
        buf, starts = self._buf, self._starts
        for i in range(self._indexed, len(buf)):  # token at i -> its continuation starts at i + 1
            tok = buf[i]
            if tok != -1:
                found = starts.get(tok)
                if found is None:
                    starts[tok] = [i + 1]
                else:
                    found.append(i + 1)
        self._indexed = len(buf)
        return starts

    def search(self, context: np.ndarray, draft_len: int = 16, tail: list[int] | None = None,
               indent: IndentTable | None = None) -> Candidates | None:
        """Continuations of the longest suffix of ``context`` ((T,) int64, pending token last) found in the
        history, as :class:`engine.draft_tree.Candidates` of source ``SOURCE_HISTORY``: rows (K, W) int64
        padded with -1 (W <= min(draft_len, max(1, factor * match))), counts (K,) float64, ``match_length``
        in tokens. None when no suffix of at least ``min_match`` tokens occurred followed by a token.
        ``tail``: the context's last tokens as a list (at least ``n_max``, or the whole context) when the
        caller has made it already. ``indent``: continuations re-indented to the context's line
        (:mod:`engine.indent_shift`)."""
        if len(context) == 0 or draft_len < 1:
            return None
        ctx = context[-self.n_max:].tolist() if tail is None else tail[-self.n_max:]
        width_n = indent.line_width(context, len(context)) if indent is not None else -1
        with self._lock:
            starts = self._token_index().get(ctx[-1])
            if not starts:
                return None
            starts = starts[-self.max_candidates:]
            buf = self._buf
            best, found = longest_agreement(buf, starts, ctx, 1)
            conts = count_continuations(buf, found, min(draft_len, max(1, int(self.factor * best))), indent, width_n)
        if best < self.min_match:
            return None
        return continuation_candidates(conts, SOURCE_HISTORY, best)
