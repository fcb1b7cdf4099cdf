"""The ``hf-prompt-lookup`` baseline: transformers' own prompt lookup decoding (``prompt_lookup_num_tokens=10``),
timed the way :mod:`engine.decoder` times its methods (prefill ends at the second forward call)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass
class PromptLookupRun:
    """One ``generate`` call: the new token ids (EOS and after removed), why it ended (``"eos"`` or ``"length"``),
    its start, end of prefill and end (``time.perf_counter()`` seconds), and its forward passes after the prefill
    (transformers does not expose per-step acceptance: only the totals are known)."""

    new: list[int]
    finish: str
    t0: float
    t_prefill: float
    t_end: float
    passes: int


def generate_prompt_lookup(loaded, ids: list[int], max_new: int, params, seed: int | None) -> PromptLookupRun:
    """Run transformers' prompt lookup decoding on ``ids`` (prompt token ids) for ``max_new`` tokens with ``params``
    (an :class:`engine.verify.SamplingParams`: greedy, or sampled with its temperature, top-p and top-k; ``seed``
    seeds torch's generator when given)."""
    model = loaded.model
    calls: list[float] = []
    hook = model.register_forward_pre_hook(lambda *_: calls.append(time.perf_counter()))
    try:
        if seed is not None:
            torch.manual_seed(seed)
        prompt = torch.tensor([ids], dtype=torch.long, device=loaded.device)
        kwargs = dict(do_sample=False) if params.greedy else dict(
            do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        eos = sorted(loaded.eos_token_ids)
        pad = getattr(loaded.tokenizer, "pad_token_id", None) if loaded.tokenizer else None
        t0 = time.perf_counter()
        with torch.inference_mode():
            seq = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new,
                                 prompt_lookup_num_tokens=10, eos_token_id=eos or None,
                                 pad_token_id=pad if pad is not None else (eos[0] if eos else 0), **kwargs)
        t_end = time.perf_counter()
    finally:
        hook.remove()
    new = seq[0, len(ids):].tolist()
    finish = "length"
    for i, t in enumerate(new):
        if t in loaded.eos_token_ids:
            new, finish = new[:i], "eos"
            break
    t_prefill = calls[1] if len(calls) > 1 else t_end
    return PromptLookupRun(new, finish, t0, t_prefill, t_end, max(len(calls) - 1, 0))
