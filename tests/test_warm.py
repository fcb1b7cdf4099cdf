"""Warm cache (issue #10): a background prefill of a document's prompt, preemptible between chunks,
changes nothing in the output and spares the request its prefill."""

from __future__ import annotations

import threading

import pytest

from engine import SpeculativeDecoder


@pytest.mark.parametrize("method", ["ar", "fastcoder"])
def test_warm_then_generate_equals_a_cold_start(tiny_coder, real_code_prompts, method):
    decoder = SpeculativeDecoder(tiny_coder, method=method)
    for _, prompt in real_code_prompts[:2]:
        cold = decoder.generate(prompt, max_new_tokens=32)
        doc = decoder.new_cache()
        filled = decoder.warm(prompt, doc, max_new_tokens=32, chunk_tokens=100)
        assert filled == len(prompt) - 1
        warm = decoder.generate(prompt, max_new_tokens=32, cache=doc)
        assert warm.token_ids == cold.token_ids
        assert warm.stats["reused_prompt_tokens"] == len(prompt) - 1
        # the user typed on: the next prompt extends this one and reuses its prefix
        longer = list(prompt) + warm.token_ids[:3]
        again = decoder.generate(longer, max_new_tokens=16, cache=doc)
        assert again.token_ids == decoder.generate(longer, max_new_tokens=16).token_ids
        assert again.stats["reused_prompt_tokens"] >= len(prompt) - 1


def test_a_cancelled_warm_up_stops_between_chunks_and_keeps_what_it_filled(tiny_coder, real_code_prompts):
    decoder = SpeculativeDecoder(tiny_coder, method="fastcoder")
    prompt = real_code_prompts[0][1]
    cancel = threading.Event()
    chunks = []

    def count_chunk(module, args, kwargs):  # a completion arrives while the first chunk runs
        chunks.append(1)
        cancel.set()

    hook = tiny_coder.model.register_forward_pre_hook(count_chunk, with_kwargs=True)
    try:
        doc = decoder.new_cache()
        filled = decoder.warm(prompt, doc, max_new_tokens=32, cancel=cancel, chunk_tokens=64)
    finally:
        hook.remove()
    assert len(chunks) == 1 and filled == 64  # one chunk's forward, then it yielded
    res = decoder.generate(prompt, max_new_tokens=32, cache=doc)
    assert res.stats["reused_prompt_tokens"] == 64
    assert res.token_ids == decoder.generate(prompt, max_new_tokens=32).token_ids
