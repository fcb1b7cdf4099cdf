"""The fused decoder layer (engine/native/decoder_layer.c, engine/native/layer.py) under the lean forward: used for
the verify forward's few rows, the per-operation forward's results up to rounding, a draft tree's logits equal to
decoding its chain token by token bit for bit (what keeps greedy verification lossless), and it steps aside for
whatever it does not cover."""

from __future__ import annotations

import pytest
import torch

from engine import lean_forward, native_attention
from engine.kv_cache import new_kv_cache
from engine.native import layer as fused_layer
from engine.packed_linear import pack_linear_weights
from test_lean_forward import PARENT, _run
from test_lean_forward import _model as lean_model
from tests.conftest import chain_in_tree_logits, random_model

pytestmark = pytest.mark.skipif(fused_layer.fused_library() is None, reason="no native kernels on this machine")


def _model(monkeypatch, family: str = "llama", max_rows: int = 16, intermediate: int | None = None):
    """A random model with norm weights that are not all ones, native-packed weights, the native attention
    (``max_rows`` query rows) and the lean forward: the stack the decoder runs on a CPU. ``intermediate``: an
    MLP width other than the random model's 128."""
    model = lean_model(family)
    if intermediate is not None:
        from transformers import LlamaForCausalLM  # noqa: PLC0415

        config = model.config
        config.intermediate_size = intermediate
        torch.manual_seed(1)
        model = LlamaForCausalLM(config).eval()
    pack_linear_weights(model, budget_bytes=2**30, kernel="native")
    monkeypatch.delenv(native_attention.ROWS_ENV, raising=False)  # the suite's fixed rows: this one's instead
    monkeypatch.setattr(native_attention, "_probe_forwards", lambda m, report: max_rows)  # whatever the timing
    assert native_attention.install_native_attention(model).installed
    assert lean_forward.install_lean_forward(model) == ""
    return model


def _count_fused(monkeypatch) -> list:
    calls = []
    real = fused_layer.run_layers
    monkeypatch.setattr(fused_layer, "run_layers", lambda plan, x, *a: calls.append(x.shape[1]) or real(plan, x, *a))
    return calls


def _steps(seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 256, (1, 40), generator=gen)
    return prompt, [torch.randint(0, 256, (1, 1 if i % 2 == 0 else len(PARENT)), generator=gen) for i in range(8)]


def test_the_fused_layer_gives_the_per_operation_forward_up_to_rounding(monkeypatch):
    prompt, steps = _steps()
    model = _model(monkeypatch)
    calls = _count_fused(monkeypatch)
    fused = _run(model, prompt, steps)
    assert calls == [1 if s.shape[1] == 1 else 5 for s in steps]  # every decode step, not the 40-token prefill
    monkeypatch.setenv(fused_layer.FUSED_ENV, "0")
    setattr(model.model, lean_forward.PLAN_ATTR, None)  # planned again: none with the variable set
    per_op = _run(model, prompt, steps)
    assert len(calls) == len(steps)  # not called again
    for a, b in zip(fused, per_op):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_tree_logits_equal_sequential_decoding_bit_for_bit(monkeypatch):
    """A chain inside a draft tree (a sibling branch in between), verified in one fused forward under the tree
    mask, gives exactly the logits of decoding the chain one fused step at a time."""
    model = _model(monkeypatch)
    calls = _count_fused(monkeypatch)
    tree, seq = chain_in_tree_logits(model)
    assert calls == [7] + [1] * 6
    for i, row in enumerate([0, 1, 3, 4, 5, 6]):
        assert torch.equal(tree[row], seq[i]), i


def test_an_mlp_width_that_is_not_a_multiple_of_eight_keeps_both_properties(monkeypatch):
    """SiLU runs 8 values at a time; the last values of a 100-wide row go through the same lanes from a padded
    copy. Up to rounding against the per-operation forward, and bit for bit between a tree and its chain."""
    model = _model(monkeypatch, intermediate=100)
    assert fused_layer.plan_for(model.model) is not None
    prompt, steps = _steps()
    fused = _run(model, prompt, steps)
    tree, seq = chain_in_tree_logits(model)
    for i, row in enumerate([0, 1, 3, 4, 5, 6]):
        assert torch.equal(tree[row], seq[i]), i
    monkeypatch.setenv(fused_layer.FUSED_ENV, "0")
    setattr(model.model, lean_forward.PLAN_ATTR, None)
    for a, b in zip(fused, _run(model, prompt, steps)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_it_steps_aside_for_more_rows_than_the_kernels_take(monkeypatch):
    model = _model(monkeypatch, max_rows=4)
    calls = _count_fused(monkeypatch)
    ids = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        cache = new_kv_cache(model, 64)
        model(input_ids=ids, past_key_values=cache, use_cache=True)  # a 30-token prefill
        model(input_ids=ids[:, :5], past_key_values=cache, use_cache=True)  # 5 rows: above the attention's 4
        model(input_ids=ids[:, :3], past_key_values=cache, use_cache=True)  # 3 rows: fused
    assert calls == [3]
    assert cache.get_seq_length() == 38


def test_models_it_does_not_cover_keep_the_per_operation_forward(monkeypatch):
    """Qwen2's q/k/v carry biases; a model without native packing has no panels: no plan, same results."""
    model = _model(monkeypatch, family="qwen2")
    assert fused_layer.plan_for(model.model) is None
    plain = random_model("llama", vocab_size=256)
    assert lean_forward.install_lean_forward(plain) == ""
    assert fused_layer.plan_for(plain.model) is None
    calls = _count_fused(monkeypatch)
    prompt, steps = _steps()
    _run(model, prompt, steps)
    _run(plain, prompt, steps)
    assert calls == []


def test_a_weight_changed_after_packing_turns_the_fused_layer_off(monkeypatch):
    model = _model(monkeypatch)
    calls = _count_fused(monkeypatch)
    prompt, steps = _steps()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(2)
    _run(model, prompt, steps)
    assert calls == []


def test_a_linear_weight_replaced_after_packing_is_used_not_its_stale_panels(monkeypatch):
    """A new Parameter whose version counter happens to equal the packed one's: neither the fused layer nor the
    packed linear layer takes it for the weight they packed; the forward then computes with the new weight."""
    model = _model(monkeypatch)
    prompt, steps = _steps()
    before = _run(model, prompt, steps)
    lin = model.model.layers[0].mlp.down_proj
    with torch.no_grad():
        new = torch.nn.Parameter(lin.weight.detach() * 2)
        while new._version < lin._pack_version:
            new.add_(0.0)
        assert new._version == lin._pack_version
        lin.weight = new
    calls = _count_fused(monkeypatch)
    after = _run(model, prompt, steps)
    assert calls == []
    with torch.no_grad():
        lin.weight = torch.nn.Parameter(new.detach().clone())  # the same values, never packed: F.linear
    for a, b in zip(_run(model, prompt, steps), after):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(before[-1], after[-1])


def test_the_final_norm_runs_in_the_same_call_and_a_new_norm_weight_turns_it_off(monkeypatch):
    """The plan applies the model's final RMSNorm in C (row by row, as the layers' norms: the bit-for-bit tree test
    above covers it); replacing that weight's storage after planning is noticed, and the per-operation forward
    runs, with the new weight."""
    model = _model(monkeypatch)
    plan = fused_layer.plan_for(model.model)
    assert plan is not None and plan.final is not None and plan.final[0] is model.model.norm
    prompt, steps = _steps()
    before = _run(model, prompt, steps)
    calls = _count_fused(monkeypatch)
    with torch.no_grad():
        model.model.norm.weight = torch.nn.Parameter(model.model.norm.weight * 3)
    after = _run(model, prompt, steps)
    assert calls == []
    assert not torch.allclose(before[-1], after[-1])


def test_a_replaced_layer_norm_weight_turns_the_fused_layer_off(monkeypatch):
    model = _model(monkeypatch)
    _run(model, *_steps())  # planned with the original weights
    calls = _count_fused(monkeypatch)
    norm = model.model.layers[1].post_attention_layernorm
    with torch.no_grad():
        norm.weight = torch.nn.Parameter(norm.weight * 2)
    _run(model, *_steps())
    assert calls == []


def test_the_verify_cost_key_says_whether_the_fused_layer_serves(monkeypatch):
    """c(n) measured with the fused layer is not the curve without it: the cache key tells them apart."""
    from engine.cost_model import cost_key  # noqa: PLC0415
    from engine.model import LoadedModel  # noqa: PLC0415

    model = _model(monkeypatch)
    loaded = LoadedModel(model=model, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                         name="random-llama", lean_forward="")
    assert lean_forward.fused_layer_serves(model) and cost_key(loaded)["fused_layer"] is True
    monkeypatch.setenv(fused_layer.FUSED_ENV, "0")
    setattr(model.model, lean_forward.PLAN_ATTR, None)
    assert not lean_forward.fused_layer_serves(model) and cost_key(loaded)["fused_layer"] is False


def test_inside_a_pinned_window_the_weights_are_checked_once_and_after_it_at_every_forward(monkeypatch):
    """The decoder pins the weights for one generation (lean_forward.weights_pinned): the plan's ~60 us check
    runs on entry only. A weight changed after the window is noticed by the next forward, as without it."""
    model = _model(monkeypatch)
    prompt, steps = _steps()
    _run(model, prompt, steps)  # planned
    plan = getattr(model.model, lean_forward.PLAN_ATTR)
    checks = []
    real = fused_layer.FusedPlan.current
    monkeypatch.setattr(fused_layer.FusedPlan, "current", lambda self: checks.append(self._pinned) or real(self))
    calls = _count_fused(monkeypatch)
    with lean_forward.weights_pinned(model) as ok:
        assert ok and plan._pinned == 1
        pinned = _run(model, prompt, steps)
    assert plan._pinned == 0 and checks[0] == 0 and all(checks[1:])  # checked on entry; then answered pinned
    assert calls == [1 if s.shape[1] == 1 else 5 for s in steps]
    for a, b in zip(pinned, _run(model, prompt, steps)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(2)
    calls.clear()
    with lean_forward.weights_pinned(model) as ok:  # the entry check fails: every forward checks, none fused
        assert not ok and plan._pinned == 0
        _run(model, prompt, steps)
    assert calls == []
