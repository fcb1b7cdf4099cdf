"""The lean decode forward (engine/lean_forward.py) gives transformers' outputs bit for bit and steps aside for
every call it does not cover."""

from __future__ import annotations

import pytest
import torch

from engine import lean_forward
from engine.kv_cache import new_kv_cache
from engine.lean_forward import INSTALLED_ATTR, install_lean_forward, why_not
from tests.conftest import random_model, tree_mask

PARENT = [-1, 0, 0, 1, 3]  # a draft tree: the pending token, two children, a chain below the first
DEPTH = torch.tensor([0, 1, 1, 2, 3])


def _model(family: str):
    """A random model whose norm weights are not all ones (as trained ones are not)."""
    model = random_model(family, vocab_size=256)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=gen))
    return model


def _run(model, prompt, steps):
    """Prefill logits, then per step (token ids; a plain step for one id, else a tree of shape PARENT) its
    logits; one cache throughout, keeping each step's first token as acceptance would."""
    outs = []
    with torch.inference_mode():
        cache = new_kv_cache(model, prompt.shape[1] + 32)
        outs.append(model(input_ids=prompt, past_key_values=cache, use_cache=True).logits)
        for ids in steps:
            past = cache.get_seq_length()
            if ids.shape[1] == 1:
                pos, mask = torch.tensor([[past]]), None
            else:
                pos, mask = (past + DEPTH)[None], tree_mask(past, PARENT)
            outs.append(model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache,
                              use_cache=True, logits_to_keep=ids.shape[1]).logits)
            cache.crop(past + 1 - cache.get_seq_length())
    return outs


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_lean_forward_equals_transformers_bit_for_bit(family, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 256, (1, 40), generator=gen)
    steps = [torch.randint(0, 256, (1, 1 if i % 2 == 0 else len(PARENT)), generator=gen) for i in range(8)]
    reference = _run(_model(family), prompt, steps)
    model = _model(family)
    assert install_lean_forward(model) == "" and getattr(model.model, INSTALLED_ATTR)
    calls = []
    real = lean_forward._gathered  # once per lean forward
    monkeypatch.setattr(lean_forward, "_gathered", lambda *a: calls.append(1) or real(*a))
    got = _run(model, prompt, steps)
    assert len(calls) == len(got)
    for want, have in zip(reference, got):
        assert torch.equal(want, have)


def test_calls_it_does_not_cover_go_to_transformers(monkeypatch):
    model = random_model("llama", vocab_size=256)
    reference = random_model("llama", vocab_size=256)
    install_lean_forward(model)
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(4))
    # a batch, no cache, inputs_embeds, gradients: all through the original forward, same results
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=0)
        embeds = reference.model.embed_tokens(ids[:1])
        torch.testing.assert_close(model(inputs_embeds=embeds).logits, reference(inputs_embeds=embeds).logits,
                                   rtol=0, atol=0)
    out = model(input_ids=ids[:1], past_key_values=new_kv_cache(model, 16), use_cache=True).logits
    assert out.requires_grad  # gradients kept: the original forward ran
    out.sum().backward()
    with torch.inference_mode():  # labels and a tuple output: transformers' causal LM forward, same results
        got = model(input_ids=ids[:1], past_key_values=new_kv_cache(model, 16), use_cache=True, labels=ids[:1])
        want = reference(input_ids=ids[:1], past_key_values=new_kv_cache(reference, 16), use_cache=True,
                         labels=ids[:1])
        assert torch.equal(got.loss, want.loss) and torch.equal(got.logits, want.logits)
        got = model(input_ids=ids[:1], past_key_values=new_kv_cache(model, 16), use_cache=True, return_dict=False)
        assert isinstance(got, tuple) and torch.equal(got[0], want.logits)


def test_the_causal_lm_forward_keeps_the_last_logits_asked_for():
    """``logits_to_keep`` as transformers reads it: the last k positions (0: all), or a slice."""
    model, reference = random_model("llama", vocab_size=256), random_model("llama", vocab_size=256)
    install_lean_forward(model)
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        for keep in (0, 1, 4, slice(2, 5)):
            got = model(input_ids=ids, past_key_values=new_kv_cache(model, 16), use_cache=True, logits_to_keep=keep)
            want = reference(input_ids=ids, past_key_values=new_kv_cache(reference, 16), use_cache=True,
                             logits_to_keep=keep)
            assert torch.equal(got.logits, want.logits), keep


def test_unsupported_models_are_left_alone(monkeypatch):
    gpt2 = random_model("gpt2", vocab_size=256)
    assert "gpt2" in install_lean_forward(gpt2) and not getattr(gpt2.transformer, INSTALLED_ATTR, False)
    model = random_model("llama", vocab_size=256)
    model.model.layers[0].input_layernorm = torch.nn.LayerNorm(64)  # arithmetic the lean forward does not replay
    assert "norm" in why_not(model)
    monkeypatch.setenv(lean_forward.LEAN_ENV, "0")
    model = random_model("llama", vocab_size=256)
    assert lean_forward.LEAN_ENV in install_lean_forward(model)
    assert not getattr(model.model, INSTALLED_ATTR, False)


def test_tiny_coder_runs_the_lean_forward(tiny_coder):
    assert tiny_coder.lean_forward == "" and getattr(tiny_coder.model.model, INSTALLED_ATTR)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_rotary_table_gives_the_modules_bits(family):
    """The lean forward reads cos and sin from a table the rotary module made once: for any positions (one
    row or a tree's, past the table's end, negative) they equal the module's own call bit for bit."""
    model = _model(family)
    base = model.model
    x = torch.zeros(1, 1, model.config.hidden_size)
    gen = torch.Generator().manual_seed(0)
    limit = model.config.max_position_embeddings
    cases = [torch.randint(0, limit, (1, n), generator=gen) for n in (1, 1, 5, 17, 64)]
    cases += [torch.tensor([[limit - 1, limit, limit + 7]]), torch.tensor([[3, -1]])]
    with torch.inference_mode():
        for pos in cases:
            want, got = base.rotary_emb(x, position_ids=pos), lean_forward._rotary(base, x, pos)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert base.rotary_emb._fastcoder_table  # the table was made and served the in-range cases


def test_forward_logits_equals_the_model_call_and_falls_back_to_it():
    """The direct logits function gives the model call's logits bit for bit (plain steps and a tree with
    ``logits_to_keep``), and a model without the lean forward, or a call under autograd, goes through
    ``model(...)``."""
    gen = torch.Generator().manual_seed(6)
    prompt = torch.randint(0, 256, (1, 30), generator=gen)
    ids = torch.randint(0, 256, (1, len(PARENT)), generator=gen)
    model = _model("llama")
    assert install_lean_forward(model) == "" and getattr(model, lean_forward.LOGITS_ATTR, None) is not None
    plain = _model("llama")
    for m in (model, plain):
        with torch.inference_mode():
            outs = []
            for direct in (False, True):
                cache = new_kv_cache(m, 64)
                call = lean_forward.forward_logits if direct else (
                    lambda mm, i, c, p=None, a=None, k=0: mm(input_ids=i, past_key_values=c, position_ids=p,
                                                             attention_mask=a, use_cache=True,
                                                             logits_to_keep=k).logits)
                first = call(m, prompt, cache)
                past = cache.get_seq_length()
                tree = call(m, ids, cache, (past + DEPTH)[None], tree_mask(past, PARENT), len(PARENT))
                outs.append((first, tree))
            assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
            assert outs[1][1].shape == (1, len(PARENT), 256)
    seen = []
    real = model.forward
    model.forward = lambda **kw: seen.append(1) or real(**kw)
    with torch.enable_grad():
        lean_forward.forward_logits(model, prompt, new_kv_cache(model, 64))
    assert seen == [1]


def test_inputs_gathered_natively_equal_the_embedding_and_rotary_and_bad_ids_still_raise():
    """After the first forward (which makes the rotary table), a forward's embedding rows and cos/sin come from one
    native call: the same bits as the embedding module and the table lookup. An id outside the vocabulary is
    refused there and raises torch's IndexError, as without the lean forward."""
    from engine.native import layer as native_layer  # noqa: PLC0415

    if native_layer.fused_library() is None:
        pytest.skip("no native kernels on this machine")
    model = _model("llama")
    assert install_lean_forward(model) == ""
    base = model.model
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(8))
    with torch.inference_mode():
        cache = new_kv_cache(model, 64)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        positions = torch.arange(6, 12)[None]
        got = lean_forward._gathered(base, ids, positions)
        assert got is not None and getattr(base, lean_forward.GATHER_ATTR)
        x, cos, sin = got
        want_cos, want_sin = lean_forward._rotary(base, x, positions)
        assert torch.equal(x, base.embed_tokens(ids))
        assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
        assert lean_forward._gathered(base, torch.tensor([[3, 256]]), torch.tensor([[12, 13]])) is None
        with pytest.raises(IndexError):
            model(input_ids=torch.tensor([[3, 256]]), past_key_values=cache, use_cache=True)


@pytest.mark.parametrize("lean", [True, False])
def test_a_plain_step_at_its_known_position_gives_the_same_logits(lean):
    """The decoder passes a plain step its position (the cache's length): the token and position then go through
    this thread's two reused buffers, and every step's logits equal those of the step that reads the position
    from the cache, bit for bit, step after step (the buffers are rewritten, never aliased by a result)."""
    from engine.steps import decode_one_token

    gen = torch.Generator().manual_seed(8)
    prompt = torch.randint(0, 256, (1, 20), generator=gen)
    tokens = torch.randint(0, 256, (6,), generator=gen).tolist()
    model = _model("llama")
    if lean:
        assert install_lean_forward(model) == ""
    runs = []
    for known in (False, True):
        with torch.inference_mode():
            cache = new_kv_cache(model, 64)
            model(input_ids=prompt, past_key_values=cache, use_cache=True)
            steps = []
            for tok in tokens:
                past = cache.get_seq_length()
                steps.append(decode_one_token(model, cache, tok, past if known else None))
                assert cache.get_seq_length() == past + 1
            runs.append(steps)
    assert all(torch.equal(a, b) for a, b in zip(*runs)) and len(runs[1]) == len(tokens)
    assert not torch.equal(runs[1][0], runs[1][1])  # different steps, different logits: nothing was overwritten
