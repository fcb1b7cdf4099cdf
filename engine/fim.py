"""Fill-in-the-middle (FIM) templates: the special tokens of the code-model families' published formats.

Shared by the language server's prompt builder (:mod:`lsp_server.prompt`) and the SDSAT training recipe
(:mod:`engine.sdsat.train`, which keeps a FIM model's infilling by training on FIM samples too).
"""

from __future__ import annotations

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


def detect_fim_template(tokenizer: Any) -> tuple[FimTemplate, tuple[int, int, int]] | None:
    """The first FIM family whose three special tokens are all in ``tokenizer``'s vocabulary, with their ids
    (prefix, suffix, middle); None when the tokenizer has no FIM tokens."""
    vocab = _vocab(tokenizer)
    for tpl in FIM_TEMPLATES:
        ids = [vocab.get(t) for t in (tpl.prefix, tpl.suffix, tpl.middle)]
        if all(i is not None for i in ids):
            return tpl, (int(ids[0]), int(ids[1]), int(ids[2]))
    return None
