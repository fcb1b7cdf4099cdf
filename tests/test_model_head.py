"""The CPU output head (engine.model.TransposedHead): the same logits as the model's own nn.Linear, applied by
load_model on a CPU, and left alone where it would not fit (a bias, a tied matrix too large to copy)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import random_model

from engine import model as model_mod
from engine.model import TransposedHead, transpose_output_head


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_transposed_head_gives_the_same_logits_and_generations(family):
    stock = random_model(family, vocab_size=300, seed=3)
    fast = copy.deepcopy(stock)
    tied_before = fast.get_input_embeddings().weight is fast.get_output_embeddings().weight
    assert transpose_output_head(fast)
    assert isinstance(fast.get_output_embeddings(), TransposedHead)
    if tied_before:  # the input embedding keeps its own (V, H) matrix, contiguous
        assert fast.get_input_embeddings().weight.is_contiguous()
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want, got = stock(input_ids=ids).logits, fast(input_ids=ids).logits
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
        assert torch.equal(stock.generate(ids, max_new_tokens=20, do_sample=False),
                           fast.generate(ids, max_new_tokens=20, do_sample=False))


def test_heads_it_cannot_serve_are_left_alone(monkeypatch):
    with_bias = random_model("llama", vocab_size=300)
    with_bias.lm_head = torch.nn.Linear(64, 300, bias=True)
    assert not transpose_output_head(with_bias)
    assert type(with_bias.lm_head) is torch.nn.Linear

    tied = random_model("gpt2", vocab_size=300)
    assert tied.get_input_embeddings().weight is tied.get_output_embeddings().weight
    monkeypatch.setattr(model_mod, "MAX_HEAD_COPY_BYTES", 1000)  # a copy would exceed it
    assert not transpose_output_head(tied)
    assert type(tied.get_output_embeddings()) is torch.nn.Linear


def test_load_model_on_cpu_uses_the_transposed_head(tiny_coder):
    head = tiny_coder.model.get_output_embeddings()
    assert isinstance(head, TransposedHead) and head.weight_t.is_contiguous()
    assert head.weight.shape == (tiny_coder.vocab_size, tiny_coder.model.config.hidden_size)
