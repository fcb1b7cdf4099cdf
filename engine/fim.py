"""Fill-in-the-middle (FIM) templates: the special tokens of the code-model families' published formats.

Shared by the language server's prompt builder (:mod:`lsp_server.prompt`) and the SDSAT training recipe
(:mod:`engine.sdsat.train`, which keeps a FIM model's infilling by training on FIM samples too).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FimTemplate:
    """Special tokens of one FIM family, in PSM order (prefix, suffix, middle). ``bos`` means the prompt
    starts with the tokenizer's BOS token (CodeLlama)."""

    name: str
    prefix: str
    suffix: str
    middle: str
    bos: bool = False


FIM_TEMPLATES: tuple[FimTemplate, ...] = (
    FimTemplate("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    FimTemplate("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    FimTemplate("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    FimTemplate("codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", bos=True),
    FimTemplate("codellama", "<PRE>", "<SUF>", "<MID>", bos=True),
)


def _vocab(tokenizer: Any) -> dict[str, int]:
    try:
        return dict(tokenizer.get_vocab())
    except Exception:
        return {}


#: detect_fim_template's answer per tokenizer: {vocabulary size: answer}.
_detected: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_state_lock = threading.Lock()


def tokenizer_state(store: weakref.WeakKeyDictionary, tokenizer: Any, make: Callable[[], Any]) -> Any | None:
    """``store[tokenizer]``, made by ``make()`` the first time: state kept per tokenizer for as long as it lives
    (the FIM template here, recent tokenizations in :mod:`lsp_server.prompt`). None for a tokenizer that takes
    no weak reference or no hashing: its callers then work without the state."""
    try:
        with _state_lock:
            state = store.get(tokenizer)
            if state is None:
                state = store[tokenizer] = make()
            return state
    except TypeError:
        return None


def _vocab_size(tokenizer: Any) -> int | None:
    try:
        return len(tokenizer)
    except Exception:
        return None


def detect_fim_template(tokenizer: Any) -> tuple[FimTemplate, tuple[int, int, int]] | None:
    """The first FIM family whose three special tokens are all in ``tokenizer``'s vocabulary, with their ids
    (prefix, suffix, middle); None when the tokenizer has no FIM tokens.

    Kept per tokenizer while its vocabulary size stays the same (tokens added later are seen): reading a
    vocabulary cost ~2 ms for 8K tokens, on every prompt the language server built."""
    size = _vocab_size(tokenizer)
    seen = tokenizer_state(_detected, tokenizer, dict) if size is not None else None
    if seen is None:
        return _detect(tokenizer)
    if size not in seen:
        seen.clear()
        seen[size] = _detect(tokenizer)
    return seen[size]


def _detect(tokenizer: Any) -> tuple[FimTemplate, tuple[int, int, int]] | None:
    vocab = _vocab(tokenizer)
    for tpl in FIM_TEMPLATES:
        ids = [vocab.get(t) for t in (tpl.prefix, tpl.suffix, tpl.middle)]
        if all(i is not None for i in ids):
            return tpl, (int(ids[0]), int(ids[1]), int(ids[2]))
    return None
