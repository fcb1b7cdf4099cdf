"""MKL-packed weights for few-row products (engine/packed_linear.py): same products, same decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine import packed_linear
from engine.packed_linear import PackedLinear, pack_linear_weights

pytestmark = pytest.mark.skipif(not packed_linear.mkl_packing_available(), reason="torch without MKL")


def _model(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64, bias=False)).eval()


def test_packed_products_match_f_linear_for_every_row_count():
    model = _model()
    report = pack_linear_weights(model, budget_bytes=2**30, max_overhead=1e9)
    assert report.layers == ["0", "2"] or sorted(report.layers) == ["0", "2"]
    assert all(type(m) is PackedLinear for m in (model[0], model[2]))
    for rows in (1, 2, 3, 5, 8, 17, 40):
        x = torch.randn(1, rows, 64)
        with torch.inference_mode():
            got = model[0](x)
            want = F.linear(x, model[0].weight, model[0].bias)
        assert got.shape == (1, rows, 512)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        if rows == 1:  # one row keeps F.linear itself: a plain decode step is untouched
            assert torch.equal(got, want)


def test_budget_and_overhead_bound_what_is_packed():
    assert pack_linear_weights(_model(), budget_bytes=0).layers == []
    assert "budget 0" in pack_linear_weights(_model(), budget_bytes=0).reason
    model = _model()
    report = pack_linear_weights(model, budget_bytes=1, max_overhead=1e9)
    assert report.layers == [] and report.reason == "no linear layer fits the budget"
    assert all(type(m) is torch.nn.Linear for m in (model[0], model[2]))
    # a tiny overhead bound leaves every layer unpacked (MKL's buffer is larger than the weight)
    assert pack_linear_weights(_model(), budget_bytes=2**30, max_overhead=0.5).layers == []


def test_a_weight_changed_after_packing_is_used_not_the_stale_pack():
    model = _model()
    pack_linear_weights(model, budget_bytes=2**30, max_overhead=1e9)
    with torch.no_grad():
        model[0].weight.mul_(-2.0)
    x = torch.randn(4, 64)
    with torch.inference_mode():
        torch.testing.assert_close(model[0](x), F.linear(x, model[0].weight, model[0].bias))


def test_gradients_flow_through_a_packed_layer():
    model = _model()
    pack_linear_weights(model, budget_bytes=2**30, max_overhead=1e9)
    model.train()
    x = torch.randn(3, 64)
    model(x).sum().backward()
    assert model[0].weight.grad is not None and model[0].weight.grad.abs().sum() > 0


def test_env_budget(monkeypatch):
    monkeypatch.setenv(packed_linear.BUDGET_ENV, "0")
    assert packed_linear.packing_budget_bytes() == 0
    monkeypatch.setenv(packed_linear.BUDGET_ENV, "1.5")
    assert packed_linear.packing_budget_bytes() == int(1.5 * 2**20)
    monkeypatch.setenv(packed_linear.BUDGET_ENV, "lots")
    assert packed_linear.packing_budget_bytes() == packed_linear.DEFAULT_BUDGET_MB * 2**20


def test_without_mkl_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(packed_linear, "mkl_packing_available", lambda: False)
    model = _model()
    report = pack_linear_weights(model, budget_bytes=2**30)
    assert report.layers == [] and "MKL" in report.reason
    assert type(model[0]) is torch.nn.Linear


def test_tiny_coder_packs_its_head_and_decodes_as_unpacked(tiny_coder, real_code_prompts):
    """The dev model packs its LM head (the one matrix within the overhead bound), and fastcoder's tree
    verification through it gives ar's tokens; the unpacked model's forward over a tree gives the same
    argmax per row."""
    from engine import SpeculativeDecoder

    assert tiny_coder.packing is not None and tiny_coder.packing.layers == ["lm_head"]
    assert type(tiny_coder.model.lm_head) is PackedLinear
    ar = SpeculativeDecoder(tiny_coder, "ar")
    fc = SpeculativeDecoder(tiny_coder, "fastcoder")
    drafted = accepted = 0
    for _, ids in real_code_prompts[:4]:
        want = ar.generate(ids, max_new_tokens=48).token_ids
        got = fc.generate(ids, max_new_tokens=48)
        assert got.token_ids == want
        drafted += sum(got.stats["draft_sizes"])
        accepted += sum(a - 1 for a in got.stats["accepted_lengths"])
    assert drafted > 0 and accepted > 0  # trees were verified (rows >= 2: the packed path) and accepted
    ids = torch.tensor([real_code_prompts[0][1][:64]])
    head = tiny_coder.model.lm_head
    with torch.inference_mode():
        hidden = tiny_coder.model.model(input_ids=ids).last_hidden_state
        packed = head(hidden)
        plain = F.linear(hidden, head.weight)
    assert torch.equal(packed.argmax(-1), plain.argmax(-1))
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
