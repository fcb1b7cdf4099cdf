"""Copies re-indented to the context's line: the context copy's drafts across nesting levels.

The tokenizers of code models spell a line break with its indentation as one token (tiny-py-coder: ``"\\n   "``
then ``" if"``), so every token within a line is the same at any nesting level and only the newline tokens carry
the indentation. A copy from an earlier occurrence of the context's tail that sits on a line indented differently
(a method's body written again inside a ``with`` block, a loop written again one level out) continues with newline
tokens of the wrong width, and verification rejects the copy at its first line break. Shifting every
newline-and-spaces token of the continuation by the difference of the two lines' widths turns it into the copy a
programmer makes.

Measured before building it (an n-gram proxy on the third-party benchmark packages, the file's own text as the
truth, ``benchmarks/results/2026-11-28e/indent_probe.py``): accepted tokens per position of the most frequent
4-token continuation, copies from the same file's earlier text, 0.887 -> 0.910 (pluggy) and 0.952 -> 0.971
(jinja2); from the package's other files 0.731 -> 0.754 and 0.620 -> 0.631.

:class:`IndentTable` is built once per tokenizer. The context copy (:class:`engine.context_match.SuffixMatchIndex`)
and the completion history (:class:`engine.history.CompletionHistory`: continuations of earlier completions, and of
the shipped store of the model's output on other packages) re-indent what they draft: :func:`shifted_row` and
:func:`shift_tokens` in Python, ``engine/native/indent_shift.h`` in C, the same tokens.

Lossless: only drafts change, never what verification accepts.
"""

from __future__ import annotations

import re

import numpy as np

#: Tokens scanned back for the newline token that starts a line (``SCAN_LINE`` in native/indent_shift.h).
SCAN_LINE = 256
#: Newline counts (1..MAX_NEWLINES) and widths (0..MAX_WIDTH) a table maps; wider indentation is not shifted.
MAX_NEWLINES = 4
MAX_WIDTH = 200
_NEWLINE_SPACES = re.compile(r"(\n+)( *)")


class IndentTable:
    """A tokenizer's newline-and-spaces tokens: each one's (newlines, width) and the token of each pair.

    Attributes:
        table: (3 + V + MAX_NEWLINES * (MAX_WIDTH + 1),) int32, the layout ``native/indent_shift.h`` reads: [0] V, [1]
            MAX_NEWLINES, [2] MAX_WIDTH, then per token id ``newlines * 256 + width`` for a token whose text is
            newlines followed by spaces only (width <= MAX_WIDTH), else -1, then the token of each (newlines, width)
            at ``(newlines - 1) * (MAX_WIDTH + 1) + width``, else -1.
        count: how many tokens are newline-and-spaces tokens.
    """

    def __init__(self, texts: list[str]):
        """``texts``: each token id's decoded text (index = id). Raises ValueError for an empty vocabulary."""
        if not texts:
            raise ValueError("IndentTable needs the tokenizer's token texts")
        v = len(texts)
        table = np.full(3 + v + MAX_NEWLINES * (MAX_WIDTH + 1), -1, dtype=np.int32)
        table[:3] = (v, MAX_NEWLINES, MAX_WIDTH)
        reverse = 3 + v
        self.count = 0
        for tok, text in enumerate(texts):
            found = _NEWLINE_SPACES.fullmatch(text or "")
            if found is None:
                continue
            nl, width = len(found.group(1)), len(found.group(2))
            if nl > MAX_NEWLINES or width > MAX_WIDTH:
                continue
            table[3 + tok] = nl * 256 + width
            slot = reverse + (nl - 1) * (MAX_WIDTH + 1) + width
            if table[slot] < 0:  # the first token of that spelling
                table[slot] = tok
            self.count += 1
        table.setflags(write=False)
        self.table = table
        self._codes = table[3:3 + v]

    @classmethod
    def from_texts(cls, texts: list[str], vocab_size: int) -> "IndentTable | None":
        """The table of ``vocab_size`` ids whose first ``len(texts)`` have those decoded texts (the rest none), or
        None when no token is a newline-and-spaces token."""
        if not texts or vocab_size <= 0:
            return None
        made = cls(texts[:vocab_size] + [""] * (vocab_size - len(texts)))
        return made if made.count else None

    def line_width(self, toks, p: int) -> int:
        """The width of the line that holds ``toks[p - 1]`` (the last newline token before ``p``, at most
        :data:`SCAN_LINE` tokens back), -1 when there is none or a -1 (a buffer's separator) comes first. A width
        of 0 counts as none: the token after a bare ``"\n"`` may or may not carry the line's first space (``" def"``
        at column 1, ``"def"`` at 0), so such a line is never shifted."""
        codes, v = self._codes, len(self._codes)
        for i in range(p - 1, max(p - 1 - SCAN_LINE, 0) - 1, -1):
            t = toks[i]
            if t < 0:  # a buffer's separator: the line starts in another sequence
                return -1
            if t < v and codes[t] >= 0:
                return (int(codes[t]) & 255) or -1
        return -1

    def shifted(self, tok: int, delta: int) -> int:
        """``tok`` moved ``delta`` columns: itself (not a newline token, or delta 0), the newline token of the
        new width, or -1 where there is none or either width is 0 (see :meth:`line_width`; the copy ends before
        it)."""
        v = len(self._codes)
        if delta == 0 or not 0 <= tok < v or self._codes[tok] < 0:
            return tok
        code = int(self._codes[tok])
        nl, width = code >> 8, (code & 255) + delta
        if not 1 <= nl <= MAX_NEWLINES or code & 255 == 0 or not 1 <= width <= MAX_WIDTH:
            return -1
        return int(self.table[3 + v + (nl - 1) * (MAX_WIDTH + 1) + width])


def shift_of(table: IndentTable | None, toks, width_n: int, start: int) -> int:
    """The column shift of the occurrence whose continuation starts at ``toks[start]``: the context line's width
    ``width_n`` less the occurrence line's, 0 where either is unknown (-1) or there is no table."""
    if table is None or width_n < 0:
        return 0
    w = table.line_width(toks, start)
    return 0 if w < 0 else width_n - w


def shift_tokens(table: IndentTable | None, tokens: list[int], delta: int) -> list[int]:
    """``tokens`` (a list) with every newline token moved ``delta`` columns, cut before the first one the table
    cannot spell (:meth:`IndentTable.shifted`); the same list without a table or shift."""
    if table is None or delta == 0:
        return tokens
    out = []
    for t in tokens:
        s = table.shifted(t, delta)
        if s < 0:
            break
        out.append(s)
    return out


def shifted_row(table: IndentTable | None, toks: list[int], n: int, width_n: int, start: int, depth: int
                ) -> list[int]:
    """The continuation ``toks[start:start + depth]`` of an occurrence of the context's tail (the context is
    ``toks[:n]``, its current line ``width_n`` columns wide, -1 unknown), each newline token shifted by the two
    lines' difference in width and cut before the first one the table cannot spell. Without a table, or where a
    width is unknown, the continuation as it is."""
    return shift_tokens(table, toks[start:start + depth], shift_of(table, toks, width_n, start))
