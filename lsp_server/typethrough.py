"""Type-through: while the user types what the suggestion already says, answer from it at once.

After a suggestion ``text`` was shown at a cursor whose line began with ``line_prefix``, a new request
on the same line whose line prefix is ``line_prefix + typed`` with ``text.startswith(typed)`` is
answered with ``text[len(typed):]`` without calling the model (editors re-request on every keystroke;
llama.vim and Copilot do the same). The suggestion is the model's own output for the earlier prompt, so
nothing is shown that the model did not write.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Suggestion:
    """A suggestion shown (or about to be): document, line (0-based), the line's text before the
    cursor, the document text after the cursor on that line, and the suggested text."""

    uri: str
    line: int
    line_prefix: str
    line_suffix: str
    text: str


def type_through(shown: Suggestion | None, uri: str, line: int, line_prefix: str, line_suffix: str) -> str | None:
    """The rest of ``shown`` after what was typed since, or None when the new cursor is not a
    type-through of it (another document or line, a deletion, typed text that diverges, the text after
    the cursor changed, or nothing left to suggest)."""
    if shown is None or shown.uri != uri or shown.line != line or line_suffix != shown.line_suffix:
        return None
    if not line_prefix.startswith(shown.line_prefix):
        return None
    typed = line_prefix[len(shown.line_prefix):]
    if not typed or not shown.text.startswith(typed) or len(typed) >= len(shown.text):
        return None
    return shown.text[len(typed):]
