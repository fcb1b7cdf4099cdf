"""A generation's prompt as token ids (:meth:`engine.decoder.SpeculativeDecoder.generate`): text tokenized without
special tokens, given ids checked against the vocabulary, an empty prompt started from the BOS token, and a prompt
too long for the model's positions left-truncated (its last tokens kept)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def prompt_ids(loaded, prompt, max_new_tokens: int, tree_room: int) -> tuple[list[int], bool]:
    """``prompt`` (a str, or a sequence of token ids) as a list of ids for ``loaded`` (an
    :class:`engine.model.LoadedModel`), and whether it was truncated: at most ``loaded.max_positions -
    max_new_tokens - tree_room`` tokens (at least 1) are kept, ``tree_room`` being the positions one draft tree
    may take beyond the new tokens.

    Raises:
        ValueError: a text prompt without a tokenizer, an id outside ``0..vocab_size - 1``, or an empty prompt
            for a model without a BOS token.
    """
    tok = loaded.tokenizer
    if isinstance(prompt, str):
        if tok is None:
            raise ValueError("a text prompt needs a tokenizer; pass token ids instead")
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
    else:
        ids = [int(t) for t in prompt]
        vocab = loaded.vocab_size  # a config lookup (~4 us): once, not per prompt token
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    if not ids:
        bos = getattr(tok, "bos_token_id", None) if tok is not None else None
        bos = bos if bos is not None else getattr(loaded.model.config, "bos_token_id", None)
        if bos is None or not 0 <= int(bos) < loaded.vocab_size:
            raise ValueError("empty prompt, and the model has no BOS token to start from")
        ids = [int(bos)]
    room = max(loaded.max_positions - max_new_tokens - tree_room, 1)
    if len(ids) > room:
        log.warning("prompt of %d tokens is longer than the model allows with %d new tokens; "
                    "keeping its last %d tokens", len(ids), max_new_tokens, room)
        return ids[-room:], True
    return ids, False
