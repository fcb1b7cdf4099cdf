"""Fill-in-the-middle (FIM) templates: the special tokens of the code-model families' published formats.

Shared by the language server's prompt builder (:mod:`lsp_server.prompt`) and the SDSAT training recipe
(:mod:`engine.sdsat.train`, which keeps a FIM model's infilling by training on FIM samples too).
"""

from __future__ import annotations

import weakref
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


#: detect_fim_template's answer per tokenizer, with the vocabulary size it was found at.
_detected: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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
    try:
        held = _detected.get(tokenizer)
    except TypeError:  # not weakly referenceable: not kept
        return _detect(tokenizer)
    if held is not None and size is not None and held[0] == size:
        return held[1]
    found = _detect(tokenizer)
    if size is not None:
        _detected[tokenizer] = (size, found)
    return found


def _detect(tokenizer: Any) -> tuple[FimTemplate, tuple[int, int, int]] | None:
    vocab = _vocab(tokenizer)
    for tpl in FIM_TEMPLATES:
        ids = [vocab.get(t) for t in (tpl.prefix, tpl.suffix, tpl.middle)]
        if all(i is not None for i in ids):
            return tpl, (int(ids[0]), int(ids[1]), int(ids[2]))
    return None
