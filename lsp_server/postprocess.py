"""Post-processing of a raw model completion into an inline-completion item text.

Rules (after llm-ls single-line truncation, llama.vim / Tabby suffix-duplication filters; see
shared/notes/editor-clients.md section 5 targets #11 and #12):

- ``stop_at="line"``: keep up to the end of the current line. When the cursor ends a non-blank line and
  the completion starts with a newline, the (one) next line is kept instead, so ``def f():|`` can still be
  completed with its first body line.
- ``stop_at="block"``: stop at the first blank line or at a line indented less than the cursor line.
- Text that repeats what follows the cursor is trimmed (the rest of the current line, or whole lines equal
  to the following lines).
- Whitespace-only results become None (no item).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CursorContext:
    """Text around the cursor: ``line_prefix`` / ``line_suffix`` are the current line before / after the
    cursor (no newline); ``following`` is the document text after the current line (may be empty)."""

    line_prefix: str
    line_suffix: str
    following: str = ""

    @classmethod
    def from_split(cls, prefix: str, suffix: str) -> "CursorContext":
        """Build from the document text before and after the cursor."""
        line_prefix = prefix[prefix.rfind("\n") + 1 :]
        nl = suffix.find("\n")
        line_suffix = suffix if nl < 0 else suffix[:nl]
        following = "" if nl < 0 else suffix[nl + 1 :]
        return cls(line_prefix, line_suffix.rstrip("\r"), following)

    @property
    def at_end_of_nonblank_line(self) -> bool:
        """True when the cursor ends a line that has text before it."""
        return bool(self.line_prefix.strip()) and not self.line_suffix.strip()


def generation_stop(stop_at: str, ctx: CursorContext) -> list[str] | None:
    """Stop strings to pass to ``decoder.generate`` so that decoding ends as soon as post-processing would
    cut anyway: ``["\\n"]`` for a line completion mid-line or on a blank line, ``["\\n\\n"]`` for blocks and
    for a line completion at the end of a non-blank line (whose first line may be a newline)."""
    if stop_at == "line" and not ctx.at_end_of_nonblank_line:
        return ["\n"]
    return ["\n\n"]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _cut_line(text: str, ctx: CursorContext) -> str:
    if ctx.at_end_of_nonblank_line and text.startswith(("\n", "\r\n")):
        body = text.lstrip("\r\n")
        nl = body.find("\n")
        line = body if nl < 0 else body[:nl]
        return "\n" + line.rstrip() if line.strip() else ""
    nl = text.find("\n")
    return (text if nl < 0 else text[:nl]).rstrip()


def _cut_block(text: str, ctx: CursorContext) -> str:
    lines = text.split("\n")
    base = _indent(ctx.line_prefix + lines[0]) if (ctx.line_prefix + lines[0]).strip() else _indent(ctx.line_prefix)
    kept = [lines[0]]
    for line in lines[1:]:
        if not line.strip():
            if any(k.strip() for k in kept):
                break
            kept.append(line)  # a leading newline right after the cursor
            continue
        if _indent(line) < base:
            break
        kept.append(line)
    return "\n".join(kept).rstrip()


def _trim_suffix_repeat(text: str, ctx: CursorContext) -> str:
    tail = ctx.line_suffix.strip()
    if "\n" not in text and tail and text.rstrip().endswith(tail):
        return text.rstrip()[: -len(tail)]
    lines = text.split("\n")
    nxt = [ln.rstrip() for ln in ctx.following.split("\n") if ln.strip()]
    # drop trailing lines that only repeat the next non-blank lines after the cursor line
    for n in range(min(len(lines) - 1, len(nxt)), 0, -1):
        if [ln.rstrip() for ln in lines[-n:]] == nxt[:n]:
            return "\n".join(lines[:-n])
    return text


def postprocess(text: str, ctx: CursorContext, stop_at: str = "line") -> str | None:
    """Turn raw completion ``text`` into the item's insertText, or None when nothing useful is left.

    stop_at: ``"line"`` or ``"block"`` (anything else is treated as ``"line"``).
    """
    text = text.replace("\r\n", "\n")
    text = _cut_block(text, ctx) if stop_at == "block" else _cut_line(text, ctx)
    text = _trim_suffix_repeat(text, ctx)
    if not text.strip():
        return None
    if ctx.line_suffix.strip() and text.strip() == ctx.line_suffix.strip():
        return None
    return text


def strip_healed(text: str, healed: bytes) -> str:
    """The generated text after the bytes token healing removed from the prompt (it starts with them:
    the decoder constrained it); ``text`` unchanged if it does not (a constraint no token could spell)."""
    raw = text.encode("utf-8")
    return raw[len(healed):].decode("utf-8", errors="ignore") if raw.startswith(healed) else text


def whole_lines(text: str) -> str:
    """The complete lines of a generation cut by its deadline: up to and including the last newline
    (the line being written is dropped); "" when no line is complete. A suggestion is never a
    half-written line."""
    cut = text.rfind("\n")
    return text[:cut + 1] if cut >= 0 else ""
