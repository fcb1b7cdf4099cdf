"""Stop strings in speculative decoding: which tokens can spell one, when to search the output, where to cut it.

A completion ends at the first occurrence of a stop string (the server's ``"\\n"`` for a line, ``"\\n\\n"`` for a
block) in its decoded text. The decoder (:mod:`engine.decoder`) checks the output once per forward, only after a
token that shares a byte with a stop string (:func:`stop_touching`), prunes a draft tree's nodes whose token
already spells one, and the nodes below them (:func:`stop_tokens`, :func:`engine.verify.prune_after_stop`: the
bonus token gives a stop token in the same step; the fastcoder drafter cuts its sources' continuations there before
it sizes the tree, :func:`stop_table`) and cuts the result's text at the first stop (:func:`stop_cut`). Token sets
are kept per model by :class:`engine.healing.TokenBytes`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np


def one_line(stop: Sequence[str] | None) -> bool:
    """Whether a completion ends at the end of its line (a stop string ``"\\n"``): the editor's line completions,
    which draft without the draft head and from the session's own completions only."""
    return bool(stop) and "\n" in stop


def stop_texts(stop: Sequence[str] | None, tokenizer) -> tuple[str, ...] | None:
    """The non-empty ``stop`` strings, or None without any or without a tokenizer to spell them."""
    texts = tuple(s for s in stop or () if s)
    return texts if texts and tokenizer is not None else None


def stop_tokens(stop: Sequence[str] | None, loaded) -> frozenset[int] | None:
    """The ids of the tokens whose own text contains one of the ``stop`` strings (None without stop strings or a
    tokenizer); ``loaded``: an :class:`engine.model.LoadedModel`, whose :class:`engine.healing.TokenBytes` keeps the
    set (:meth:`engine.healing.TokenBytes.containing_ids`)."""
    texts = stop_texts(stop, loaded.tokenizer)
    return None if texts is None else loaded.token_bytes.containing_ids(texts)


@lru_cache(maxsize=16)
def stop_table(ids: frozenset[int], vocab_size: int) -> np.ndarray:
    """``ids`` (:func:`stop_tokens`' set) as a read-only (max(vocab_size, max id + 1),) uint8 table, 1 for a stop
    token: what the drafters' tree builders read (:meth:`engine.drafters.FastCoderDrafter.set_stop_tokens`). Kept
    per set (the sets are kept per stop strings, so one table per stop strings)."""
    table = np.zeros(max(int(vocab_size), max(ids, default=-1) + 1), dtype=np.uint8)
    table[sorted(ids)] = 1
    table.flags.writeable = False
    return table


def stop_touching(stop: Sequence[str] | None, loaded) -> frozenset[int] | None:
    """The ids of the tokens that share a byte with one of the ``stop`` strings
    (:meth:`engine.healing.TokenBytes.touching_ids`; kept per model), or None without stop strings or a tokenizer
    (then every step searches). A decoded output whose new tokens hold none of them cannot newly contain a stop
    string: the decode and search of the whole output (~50-100 us a step with the caches cold) is skipped.
    Skipping can only delay a stop, never invent one, and the result's text is cut at the first stop string in
    any case (:func:`stop_cut`). ``loaded``: as for :func:`stop_tokens`."""
    texts = stop_texts(stop, loaded.tokenizer)
    return None if texts is None else loaded.token_bytes.touching_ids(texts)


def hit_stop(tokenizer, out: list[int], stop: Sequence[str], skip: int = 0) -> bool:
    """Whether a stop string occurs in the decoded ``out`` (token ids) after its first ``skip`` characters; False
    without a tokenizer."""
    if tokenizer is None:
        return False
    text = tokenizer.decode(out, skip_special_tokens=True)
    return any(s and text.find(s, skip) >= 0 for s in stop)


def stop_end(tokenizer, out: list[int], stop: Sequence[str], skip: int = 0, since: int = 0) -> int:
    """The length (tokens) of the shortest prefix of ``out`` whose decoded text holds a stop string after its first
    ``skip`` characters (:func:`hit_stop`), given that ``out`` does and its first ``since`` tokens do not: where a
    decoder that searches after every token (``ar``) stops, so that a speculative step that committed tokens past the
    stop returns the same token ids. One decode per token after ``since`` at most; ``len(out)`` where no shorter
    prefix holds one."""
    for k in range(since + 1, len(out)):
        if hit_stop(tokenizer, out[:k], stop, skip):
            return k
    return len(out)


def stop_cut(text: str, stop: Sequence[str] | None, skip: int = 0) -> int:
    """The index (characters) of the first occurrence of any ``stop`` string in ``text`` at or after ``skip``, or
    -1 when none occurs."""
    return min((i for i in (text.find(s, skip) for s in stop or () if s) if i >= 0), default=-1)
