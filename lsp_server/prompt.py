"""Fill-in-the-middle (FIM) prompt building within a token budget.

The template comes from the tokenizer's own special tokens (the model families' published FIM formats):

- Qwen2.5-Coder / tiny-py-coder: ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>``
- StarCoder / StarCoder2: ``<fim_prefix>P<fim_suffix>S<fim_middle>``
- DeepSeek-Coder: ``<｜fim▁begin｜>P<｜fim▁hole｜>S<｜fim▁end｜>``
- CodeLlama: ``<s><PRE> P <SUF>S <MID>`` (tokens ``▁<PRE>``, ``▁<SUF>``, ``▁<MID>``)

A tokenizer with none of them gets a prefix-only prompt. The prefix keeps its tail and the suffix its head;
the suffix gets at most ``suffix_fraction`` of the budget and what it leaves unused goes to the prefix.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from engine.fim import FIM_TEMPLATES, FimTemplate, detect_fim_template, tokenizer_state  # noqa: F401 (re-exported)

DEFAULT_MAX_PROMPT_TOKENS = 1024
SUFFIX_FRACTION = 0.25
# Characters looked at per budget token before tokenising (BPE code averages ~3-4 chars/token); keeps
# tokenisation cost bounded for huge files.
_CHARS_PER_TOKEN_BOUND = 12


@dataclass(frozen=True)
class FimPrompt:
    """A prompt ready for ``decoder.generate``.

    token_ids: list[int] (the whole prompt, special tokens included); template: the FimTemplate name or
    ``"prefix-only"``; prefix_tokens / suffix_tokens: how many tokens of each side were kept;
    truncated: True when either side was cut to fit the budget; healed: the bytes token healing removed
    from the end of the prefix (the generation must start with them; b"" when not healed).
    """

    token_ids: list[int]
    template: str
    prefix_tokens: int
    suffix_tokens: int
    truncated: bool
    healed: bytes = b""


#: Texts whose token ids are kept per tokenizer (:func:`_encode`): a few prompts' windows. The background
#: prefill on every edit and the completion asked at the same place build the same prompt, and the text after
#: the cursor rarely changes between two keystrokes.
ENCODE_CACHE_ENTRIES = 32

_encoded: "weakref.WeakKeyDictionary[Any, OrderedDict[str, tuple[int, ...]]]" = weakref.WeakKeyDictionary()
_encoded_lock = threading.Lock()


def _encode(tokenizer: Any, text: str) -> list[int]:
    """``tokenizer.encode(text)`` without special tokens, from a small per-tokenizer LRU of recent texts
    (:data:`ENCODE_CACHE_ENTRIES`; a tokenizer that takes no weak reference is not cached)."""
    if not text:
        return []
    cache = tokenizer_state(_encoded, tokenizer, OrderedDict)
    if cache is None:
        return list(tokenizer.encode(text, add_special_tokens=False))
    with _encoded_lock:
        ids = cache.get(text)
        if ids is not None:
            cache.move_to_end(text)
            return list(ids)
    ids = tuple(tokenizer.encode(text, add_special_tokens=False))
    with _encoded_lock:
        cache[text] = ids
        while len(cache) > ENCODE_CACHE_ENTRIES:
            cache.popitem(last=False)
    return list(ids)


def _tail_chars(text: str, limit: int) -> str:
    """The last ``limit`` characters of text, starting at a line boundary when the cut is inside the text."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    nl = cut.find("\n")
    return cut[nl + 1 :] if 0 <= nl < len(cut) - 1 else cut


def _head_chars(text: str, limit: int) -> str:
    """The first ``limit`` characters of text, ending at a line boundary when the cut is inside the text."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    nl = cut.rfind("\n")
    return cut[: nl + 1] if nl > 0 else cut


def build_fim_prompt(
    tokenizer: Any,
    prefix: str,
    suffix: str,
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS,
    suffix_fraction: float = SUFFIX_FRACTION,
    heal: Any = None,
) -> FimPrompt:
    """Build the FIM prompt for a cursor between ``prefix`` and ``suffix`` (document text, str).

    max_prompt_tokens: total budget in tokens, special tokens included (>= 8). The suffix gets at most
    ``suffix_fraction`` of the rest; the prefix gets everything else. heal: an
    :class:`engine.healing.TokenBytes` to back the prefix up to a token boundary (token healing; the
    removed bytes are in ``FimPrompt.healed``), or None. Returns a :class:`FimPrompt`.
    Raises ValueError when max_prompt_tokens < 8.
    """
    if max_prompt_tokens < 8:
        raise ValueError(f"max_prompt_tokens must be >= 8, got {max_prompt_tokens}")
    found = detect_fim_template(tokenizer)
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if found is None:
        return _healed(_prefix_only(tokenizer, prefix, max_prompt_tokens), heal, 0)
    tpl, (pre_id, suf_id, mid_id) = found
    head = [bos_id] if tpl.bos and bos_id is not None else []
    budget = max_prompt_tokens - 3 - len(head)
    suffix_budget = int(budget * suffix_fraction)
    suffix_ids = _encode(tokenizer, _head_chars(suffix, suffix_budget * _CHARS_PER_TOKEN_BOUND))
    suffix_cut = len(suffix_ids) > suffix_budget or len(suffix) > suffix_budget * _CHARS_PER_TOKEN_BOUND
    suffix_ids = suffix_ids[:suffix_budget]
    prefix_ids, prefix_cut = anchored_tail_ids(tokenizer, prefix, budget - len(suffix_ids))
    healed = b""
    if heal is not None and prefix_ids:
        from engine.healing import heal_tail  # noqa: PLC0415

        prefix_ids, healed = heal_tail(heal, prefix_ids)
    ids = head + [pre_id] + prefix_ids + [suf_id] + suffix_ids + [mid_id]
    return FimPrompt(ids, tpl.name, len(prefix_ids), len(suffix_ids), prefix_cut or suffix_cut, healed)


def _healed(prompt: FimPrompt, heal: Any, start: int) -> FimPrompt:
    """A prefix-only prompt with its tail healed (see :func:`build_fim_prompt`)."""
    if heal is None or not prompt.token_ids:
        return prompt
    from engine.healing import heal_tail  # noqa: PLC0415

    ids, healed = heal_tail(heal, prompt.token_ids[start:])
    return FimPrompt(prompt.token_ids[:start] + ids, prompt.template, len(ids), 0, prompt.truncated, healed)


def _prefix_only(tokenizer: Any, prefix: str, max_prompt_tokens: int) -> FimPrompt:
    ids, cut = anchored_tail_ids(tokenizer, prefix, max_prompt_tokens)
    return FimPrompt(ids, "prefix-only", len(ids), 0, cut)


#: The prefix window's start moves in steps of this many characters (then to a line start).
ANCHOR_CHARS = 2048


def anchored_tail_ids(tokenizer: Any, prefix: str, budget: int) -> tuple[list[int], bool]:
    """Token ids of a tail of ``prefix`` that fits ``budget`` tokens, and whether it was cut.

    The window starts at a line boundary at or after a multiple of :data:`ANCHOR_CHARS`, not
    exactly ``budget`` tokens back: so while the user types, consecutive prompts keep the same start
    and the decoder reuses their common prefix's KV cache instead of re-running the prefill. The
    window holds between ``budget - ANCHOR_CHARS/4`` (roughly) and ``budget`` tokens: the longest
    anchored window that fits.

    The candidate windows are tokenized from the shortest up, stopping at the first that does not fit (a
    window that starts earlier holds more tokens): a 700-token budget over a long file took 4-5
    tokenizations of 2-9 KB each when they were tried from the longest down, ~7 ms a prompt here.
    """
    if budget <= 0 or not prefix:
        return [], bool(prefix)
    start = max(0, len(prefix) - budget * _CHARS_PER_TOKEN_BOUND)
    start = -(-start // ANCHOR_CHARS) * ANCHOR_CHARS
    line_starts: list[int] = []  # the candidate windows' starts, longest window first
    while start < len(prefix):
        line_start = 0 if start == 0 else (prefix.find("\n", start - 1) + 1 or len(prefix))
        if line_start >= len(prefix):
            break
        if not line_starts or line_start > line_starts[-1]:
            line_starts.append(line_start)
        start += ANCHOR_CHARS
    best: tuple[list[int], bool] | None = None
    for line_start in reversed(line_starts):
        ids = _encode(tokenizer, prefix[line_start:])
        if len(ids) > budget:
            break
        best = ids, line_start > 0
    if best is not None:
        return best
    # no anchored line start fits (one very long line): the last `budget` tokens
    ids = _encode(tokenizer, _tail_chars(prefix, budget * _CHARS_PER_TOKEN_BOUND))
    return ids[max(0, len(ids) - budget):], True


def model_max_tokens(config: Any, tokenizer: Any = None) -> int | None:
    """The model's context length in tokens (``max_position_embeddings`` or similar), or None if unknown."""
    for attr in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < 10**7:
        return value
    return None


def prompt_budget(setting: int | None, model_max: int | None, max_new_tokens: int) -> int:
    """Prompt budget in tokens: the setting, else min(1024, model max); always leaves ``max_new_tokens`` room
    in the model's context and is at least 8."""
    budget = setting if setting is not None else DEFAULT_MAX_PROMPT_TOKENS
    if model_max is not None:
        budget = min(budget, model_max - max_new_tokens)
    return max(8, budget)


def split_at_offset(source: str, offset: int) -> tuple[str, str]:
    """(prefix, suffix) of ``source`` around a code-point ``offset`` (clamped into range)."""
    offset = max(0, min(len(source), offset))
    return source[:offset], source[offset:]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token-id sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
