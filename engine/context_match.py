"""Copies from the context chosen as SuffixDecoding chooses them: FastCoder's context-copy source.

SuffixDecoding (Oliaro et al., NeurIPS 2025, section 3; arctic-inference's ``SuffixTree::speculate``)
keeps a suffix tree over each request's prompt and output. Every step it tries each length m of the
context's suffix that occurred before; for each it follows the most frequent continuation of that
suffix, multiplying the branch frequencies (the estimated probability of each token), stopping below
``min_prob`` and after ``factor * m`` tokens; it keeps the draft whose summed probabilities (expected
accepted tokens) is highest, the longest match on ties. CopySpec's fixed gamma-gram copy ignores how
far an occurrence agrees with the context and how often its continuation recurs; measured in an
oracle replay of the benchmark (pygls, 10 function tasks) this choice gives FastCoder 3.99 accepted
tokens per forward instead of 3.67 with 4-recent 3-gram copies.

:class:`SuffixMatchIndex` gives the same draft from a hash map instead of a suffix tree:

- every token of the growing sequence maps to the positions its continuation starts at (appending a
  token is one dict insert; built lazily, by the Python draft only: the C draft scans the sequence
  backwards for the last token's occurrences, ~1 us for a 1,000-token context);
- a query takes the most recent ``max_candidates`` earlier occurrences of the last token and measures
  in one (K, max_depth) comparison how far each agrees with the context backwards: the occurrences of
  the last m tokens are those that agree for >= m tokens;
- match lengths are tried longest first; a length whose draft cannot beat the best score so far
  (at most ``min(factor * m, max_tokens)`` tokens at probability <= 1, and ``max_depth - m`` under
  ``depth_bound``) is not evaluated, so a step usually evaluates a few lengths.

SuffixDecoding's suffix tree holds substrings of at most ``max_tree_depth`` tokens, so its match and
draft together are bounded by it: after a 20-token agreement a 16-token copy is drafted as an 8-token
match (the longest whose copy fits), pooled with the occurrences that agree for only 8 tokens, and its
match length, which FastCoder's acceptance estimates are bucketed by, understates it. The hash map has no
such bound; ``depth_bound=False`` (FastCoder's setting) drops it, the draft then bounded by ``factor * m``
and ``max_tokens`` only.

With the tokenizer's :class:`engine.indent_shift.IndentTable` (FastCoder's setting, ``indent_shift``) every
occurrence's continuation is re-indented to the context's current line before it is counted: a copy from a line
of another nesting level no longer breaks at its first line break.

The query runs in C where the library of :mod:`engine.native` is built (``fc_suffix_draft``: the same
tokens, floats and match length; 0.16 -> ~0.05 ms a step in the replay), in Python otherwise.

Frequencies are counted over the ``max_candidates`` most recent occurrences (SuffixDecoding counts all
of them). Accepted length in the replay above with 8 / 16 / 32 candidates: 4.16 / 4.13 / 4.11 (pygls),
3.37 / 3.33 / 3.33 (pluggy), 3.86 / 3.87 / 3.91 (jinja2); 4,096 gave the same as 32.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import native
from .draft_tree import SOURCE_CONTEXT, Candidates
from .indent_shift import IndentTable, shifted_row

#: The C draft (engine/native/context_copy.c, ``fc_suffix_draft``) serves settings within its fixed buffers.
_NATIVE_MAX_CANDIDATES = 256
_NATIVE_MAX_TOKENS = 64
#: The count of a copy's one continuation (shared, read-only).
_ONE_COUNT = np.ones(1)
_ONE_COUNT.setflags(write=False)
#: The C draft's output buffers, one set per thread (each call's outputs are copied out before the next call).
_outputs = threading.local()


class SuffixMatchIndex:
    """Earlier occurrences of the context's suffixes in a growing token sequence (prompt + output).

    Args:
        max_depth: longest suffix compared and bound on match + draft (tokens; SuffixDecoding's
            ``max_tree_depth``, 24).
        max_candidates: most recent occurrences of the last token compared per query.
        factor: a draft after a match of m tokens holds at most ``factor * m`` tokens
            (``max_spec_factor``, 1.0).
        min_prob: a draft stops where its estimated probability falls below this
            (``min_token_prob``, 0.1).
        max_tokens: draft tokens at most.
        depth_bound: True: match + draft <= ``max_depth`` (SuffixDecoding's suffix-tree bound); False: the
            draft is bounded by ``factor * m`` and ``max_tokens`` only (see the module docstring).
        indent: the tokenizer's newline-token table: copies re-indented to the context's line
            (:mod:`engine.indent_shift`); None: copies as they were written.
    Raises:
        ValueError: ``max_depth < 2``, ``max_candidates < 1``, ``factor < 0`` or ``min_prob``
            outside [0, 1].
    """

    def __init__(self, max_depth: int = 24, max_candidates: int = 16, factor: float = 1.0,
                 min_prob: float = 0.1, max_tokens: int = 16, depth_bound: bool = True,
                 indent: IndentTable | None = None):
        if max_depth < 2 or max_candidates < 1 or factor < 0 or not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"invalid SuffixMatchIndex settings: max_depth={max_depth}, "
                             f"max_candidates={max_candidates}, factor={factor}, min_prob={min_prob}")
        self.max_depth, self.max_candidates = int(max_depth), int(max_candidates)
        self.factor, self.min_prob, self.max_tokens = float(factor), float(min_prob), int(max_tokens)
        self.depth_bound = bool(depth_bound)
        self.indent = indent  # copies re-indented to the context's line (engine.indent_shift); None: as they are
        self._indent_ptr = indent.table.ctypes.data if indent is not None else None
        # the sequence: the first _n tokens of _seq ((capacity,) int64, the C draft's buffer as well); a
        # reset or an append is one numpy copy (no Python list on the C path: a 750-token prompt's reset took
        # ~100 us with the caches cold as a list and then an array, ~5 us as one copy)
        self._seq = np.empty(0, dtype=np.int64)
        self._n = 0
        self._list: list[int] = []  # the Python draft's copy of the sequence, brought up to date on its use
        self._positions: dict[int, list[int]] = {}
        self._indexed = 0  # tokens whose continuation starts are in _positions (the Python draft's map)
        self._native = None  # (buffers, their addresses) for the C draft, made on first use

    def __len__(self) -> int:
        return self._n

    @property
    def tokens(self) -> np.ndarray:
        """(T,) int64 copy of the indexed sequence."""
        return self._seq[:self._n].copy()

    def reset(self, tokens) -> None:
        """Index ``tokens`` ((T,) ints) from scratch."""
        self._positions = {}
        self._indexed = 0
        self._list = []
        self._n = 0
        self.extend_to(tokens)

    def extend_to(self, context) -> None:
        """Index ``context`` ((T,) ints), which extends the sequence seen so far; a context that does
        not (a rollback, another sequence) is indexed from scratch."""
        n, old = len(context), self._n
        if n < old or (old and int(context[old - 1]) != int(self._seq[old - 1])):
            self.reset(context)
            return
        if n == old:
            return
        if n > len(self._seq):  # grow: a new buffer (new addresses for the C draft)
            seq = np.empty(max(2 * n, 4096), dtype=np.int64)
            seq[:old] = self._seq[:old]
            self._seq, self._native = seq, None
        self._seq[old:n] = context[old:n]
        self._n = n

    def _sequence_list(self) -> list[int]:
        """The sequence as a Python list (the Python draft's), extended by the tokens appended since its last use."""
        toks = self._list
        if len(toks) < self._n:
            toks.extend(self._seq[len(toks):self._n].tolist())
        return toks

    def _index_positions(self) -> dict[int, list[int]]:
        """The map token -> continuation starts, brought up to date (only the Python draft reads it: the C
        draft scans the sequence itself)."""
        toks, positions = self._sequence_list(), self._positions
        for start in range(max(self._indexed, 1), len(toks)):  # token at start - 1 -> continuation at start
            found = positions.get(toks[start - 1])
            if found is None:
                positions[toks[start - 1]] = [start]
            else:
                found.append(start)
        self._indexed = max(self._indexed, len(toks))
        return positions

    def draft(self) -> tuple[list[int], list[float], int]:
        """The SuffixDecoding draft for the end of the sequence: (tokens, estimated probability of
        reaching each, match length m in tokens); ([], [], 0) when no earlier occurrence agrees."""
        n = self._n
        if n < 2:
            return [], [], 0
        if self._native_ok():
            lib = native.library()
            if lib is not None:
                return self._native_draft(lib)
        toks = self._sequence_list()
        found = self._index_positions().get(toks[-1])
        if not found:  # (the last token itself is indexed only once a token follows it)
            return [], [], 0
        depth = self.max_depth
        indent = self.indent
        width_n = indent.line_width(toks, n) if indent is not None else -1
        by_length: dict[int, list[int]] = {}  # match length -> continuation starts, most recent first
        for s in found[:-self.max_candidates - 1:-1]:
            m = 1
            while m < depth and m < s and toks[s - 1 - m] == toks[n - 1 - m]:
                m += 1
            by_length.setdefault(m, []).append(s)
        best: tuple[list[int], list[float], int] = ([], [], 0)
        best_score = 0.0
        rows: list[list[int]] = []
        bound = depth if self.depth_bound else 1 << 30
        for m in range(max(by_length), 0, -1):  # under depth_bound, a shorter match may allow a longer draft
            rows += [shifted_row(indent, toks, n, width_n, s, depth)  # occurrences of the last m tokens
                     for s in by_length.get(m, ())]
            cap = min(int(self.factor * m + 1e-6), bound - m, self.max_tokens)
            if cap <= best_score:  # a draft holds at most cap tokens at probability <= 1
                continue
            draft, probs, score = _frequency_chain(rows, cap, self.min_prob)
            if draft and score > best_score:
                best, best_score = (draft, probs, m), score
        return best

    def _native_buffers(self):
        """The C draft's buffers (the sequence, its output tokens, probabilities and match length) and their
        addresses, made on first use and after the sequence's buffer grows."""
        if self._native is None:
            if len(self._seq) == 0:
                self._seq = np.empty(4096, dtype=np.int64)
            seq = self._seq
            outs = getattr(_outputs, "buffers", None)
            if outs is None:  # the draft's outputs, read right after each call: one set per thread
                out_tokens = np.zeros(_NATIVE_MAX_TOKENS, dtype=np.int64)
                out_probs = np.zeros(_NATIVE_MAX_TOKENS, dtype=np.float64)
                match = ctypes.c_int64(0)
                outs = _outputs.buffers = ((out_tokens, out_probs, match),
                                           (out_tokens.ctypes.data, out_probs.ctypes.data, ctypes.addressof(match)))
            self._native = ((seq,) + outs[0], (seq.ctypes.data,) + outs[1])
        return self._native

    def _native_run(self, lib) -> int:
        """``fc_suffix_draft`` (engine/native/context_copy.c) into the native buffers: the draft's length k (its
        tokens and probabilities are the buffers' first k, the match length in the third buffer)."""
        _, ptr = self._native_buffers()
        return lib.fc_suffix_draft(ptr[0], self._n, self.max_candidates, self.max_depth, self.factor,
                                   self.min_prob, self.max_tokens, int(self.depth_bound), ptr[1], ptr[2], ptr[3],
                                   self._indent_ptr)

    def _native_draft(self, lib) -> tuple[list[int], list[float], int]:
        """:meth:`draft` by ``fc_suffix_draft``: the same tokens, floats and m."""
        k = self._native_run(lib)
        if k <= 0:
            return [], [], 0
        _, out_tokens, out_probs, match = self._native[0]
        return out_tokens[:k].tolist(), out_probs[:k].tolist(), int(match.value)

    def _native_ok(self) -> bool:
        return (self._n >= 2 and self.max_candidates <= _NATIVE_MAX_CANDIDATES
                and self.max_tokens <= _NATIVE_MAX_TOKENS)

    def candidates(self, source: int = SOURCE_CONTEXT) -> Candidates | None:
        """:meth:`draft` as one continuation for the draft tree ((1, k) int64 tokens, count 1, its match
        length), or None. The C draft's tokens are copied straight from its buffer (no list round trip)."""
        lib = native.library() if self._native_ok() else None
        if lib is not None:
            k = self._native_run(lib)
            if k <= 0:
                return None
            _, out_tokens, _, match = self._native[0]
            return Candidates(out_tokens[:k].reshape(1, k).copy(), _ONE_COUNT, 1.0, source, int(match.value))
        toks, _, m = self.draft()
        if not toks:
            return None
        return Candidates(np.asarray([toks], dtype=np.int64), _ONE_COUNT, 1.0, source, m)


def _frequency_chain(rows: list[list[int]], cap: int, min_prob: float) -> tuple[list[int], list[float], float]:
    """Follow the most frequent next token of ``rows`` (continuations of one match, of any length) while
    the running product of branch frequencies stays >= ``min_prob``, at most ``cap`` tokens. A row that
    ends still counts in the denominator, as a suffix ending at a suffix-tree node counts in its
    count. Returns (tokens, probability of reaching each, their sum). Ties go to the earliest row."""
    active = rows
    out: list[int] = []
    probs: list[float] = []
    prob, score = 1.0, 0.0
    for d in range(cap):
        if len(active) == 1:  # one occurrence left: the rest of it at the same probability
            rest = active[0][d:cap]
            out += rest
            probs += [prob] * len(rest)
            score += prob * len(rest)
            break
        counts: dict[int, int] = {}
        for r in active:
            if d < len(r):
                counts[r[d]] = counts.get(r[d], 0) + 1
        if not counts:
            break
        tok = max(counts, key=counts.__getitem__)
        prob *= counts[tok] / len(active)
        if prob < min_prob:
            break
        out.append(tok)
        probs.append(prob)
        score += prob
        active = [r for r in active if d < len(r) and r[d] == tok]
    return out, probs, score
