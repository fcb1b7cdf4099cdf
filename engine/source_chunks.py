"""Source text to token ids: batched tokenisation, and content-defined chunks so an edit re-tokenises only
the chunks around it (:class:`ChunkEncoder`, used by D_r's incremental updates)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

__all__ = ["ChunkEncoder", "split_chunks", "tokenize_texts"]

#: Characters of text tokenised per tokenizer call (and per D_r indexing batch).
TOKENIZE_BATCH_CHARS = 2_000_000


def tokenize_texts(tokenizer, texts: Sequence[str]) -> list[np.ndarray]:
    """Token ids of each text (no special tokens) with a HF tokenizer, batched. Returns int32 arrays."""
    out: list[np.ndarray] = []
    batch: list[str] = []
    size = 0

    def flush() -> None:
        if batch:
            ids = tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]
            out.extend(np.asarray(x, dtype=np.int32) for x in ids)
            batch.clear()

    for text in texts:
        if not text:
            if batch:
                flush()
                size = 0
            out.append(np.empty(0, np.int32))
            continue
        batch.append(text)
        size += len(text)
        if size >= TOKENIZE_BATCH_CHARS:
            flush()
            size = 0
    flush()
    return out


# Chunk boundaries: before every line indented by at most 4 spaces or one tab whose first character is
# not whitespace, placed just before the last whitespace character in front of it (the newline, or
# the last indentation character). For byte-level BPE tokenizers with GPT-2/Qwen-style pre-tokenizer regexes these
# positions are pre-token boundaries, so the concatenated chunk tokens equal the whole-text tokens;
# :class:`ChunkEncoder` checks that on a sample and otherwise tokenises whole files.
_BOUNDARY_RE = re.compile(r"\n(?: {1,4}|\t)?(?=\S)")
_CALIBRATION_TEXT = (
    'import os\nfrom typing import Any  \n\n\nclass Foo(Base):\n    """Doc."""\n\n    x: int = 1\n'
    "    @property\n    def bar(self, y):\n        if y:\n            return [1, 2]  # c\n"
    "        return {'a': y}\n\n\tdef tab(self):\n\t\tpass\n\n"
    'def main() -> None:\n    print("h\u00e9llo w\u00f6rld", 3.5e-3)\n  two = 2\n   three = 3\n'
    "@decorator\n# comment\n123\n'quote'\n\"dq\"\n.5\n)\n}\n\r\nx\r\n    y\n    \n  \tz\n")


def split_chunks(text: str) -> list[str]:
    """Split ``text`` at content-defined chunk boundaries (see ``_BOUNDARY_RE``); "".join() restores it.

    An edit changes only the chunks around it, so :meth:`RepoDatastore.update` re-tokenises those."""
    cuts = [m.end() - 1 for m in _BOUNDARY_RE.finditer(text)]
    out, start = [], 0
    for c in cuts:
        if c > start:
            out.append(text[start:c])
            start = c
    if start < len(text) or not out:
        out.append(text[start:])
    return out


class ChunkEncoder:
    """Tokenises file texts chunk by chunk with a cache, so an edited file costs only its changed chunks.

    ``chunked`` is decided once per tokenizer: True when chunk-wise tokenisation reproduces whole-text
    tokenisation on a calibration sample (byte-level BPE tokenizers do); else whole texts are
    tokenised (always exact, slower updates). Either way build and update use the same scheme, so an
    incrementally updated D_r equals a rebuild.
    """

    def __init__(self, tokenizer, chunked: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.chunked = self._calibrate() if chunked is None else bool(chunked)

    def _calibrate(self) -> bool:
        try:
            whole = tokenize_texts(self.tokenizer, [_CALIBRATION_TEXT])[0]
            parts = tokenize_texts(self.tokenizer, split_chunks(_CALIBRATION_TEXT))
            return bool(np.array_equal(whole, np.concatenate(parts)))
        except Exception:  # a tokenizer that cannot batch: whole files
            return False

    def encode(self, texts: Sequence[str], cache: dict | None = None
               ) -> tuple[list[np.ndarray], list[dict]]:
        """Token ids ((k,) int32 per text), reusing ``cache`` (chunk text -> ids) for known chunks.

        Returns (ids per text, per text the cache entries of its chunks; empty dicts when not chunked).
        """
        if not self.chunked:
            return tokenize_texts(self.tokenizer, texts), [{} for _ in texts]
        cache = cache if cache is not None else {}
        split = [split_chunks(t) if t else [] for t in texts]
        missing = list(dict.fromkeys(c for chunks in split for c in chunks if c not in cache))
        new = dict(zip(missing, tokenize_texts(self.tokenizer, missing))) if missing else {}
        ids, entries = [], []
        for chunks in split:
            own = {c: (new[c] if c in new else cache[c]) for c in chunks}
            arrs = [own[c] for c in chunks]
            entries.append(own)
            if not arrs:
                ids.append(np.empty(0, np.int32))
            else:
                ids.append(np.concatenate(arrs) if len(arrs) > 1 else arrs[0])
        return ids, entries
