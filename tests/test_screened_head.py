"""The LM head's argmax by int8 screening and exact rescoring (engine/native/screened_head.c): the same index as
the argmax of the full native head's logits, bit for bit, on any rows; and greedy decoding through it produces the
same tokens as through the full head."""

from __future__ import annotations

import pytest
import torch

from engine import SpeculativeDecoder
from engine.lean_forward import greedy_ready
from engine.native.linear import gemm, gemm_library, pack_panels
from engine.native.screened_head import ScreenedHead, screened_head

needs_screen = pytest.mark.skipif(ScreenedHead.for_weight(torch.ones(16, 8)) is None,
                                  reason="no AVX2/FMA (or no native library) on this machine")


@pytest.fixture(params=["best", "avx2"])
def isa(request):
    """Each test once with the best instruction set this CPU has (AVX-512 VNNI here) and once on the AVX2 path."""
    from engine.native import library  # noqa: PLC0415

    lib = library()
    if request.param == "avx2" and lib.fc_screen_use(1) != 1:
        lib.fc_screen_use(0)
        pytest.skip("no AVX2 on this machine")
    yield request.param
    lib.fc_screen_use(0)


def full_head_argmax(weight: torch.Tensor, x: torch.Tensor) -> list[int]:
    """numpy's argmax of the native full head's logits (small_gemm.c: the bits the decoder's head computes)."""
    lib = gemm_library()
    panels = pack_panels(lib, weight)
    return gemm(lib, x.contiguous(), panels.data_ptr(), weight.shape[0]).numpy().argmax(-1).tolist()


@needs_screen
@pytest.mark.parametrize("vocab,dim", [(8192, 256), (1000, 70), (37, 5), (16, 4)])
def test_screened_argmax_equals_the_full_heads_for_any_rows(vocab, dim, isa):
    g = torch.Generator().manual_seed(vocab + dim)
    weight = torch.randn(vocab, dim, generator=g) * 0.05
    weight[3] = weight[vocab - 1]  # two tokens with the same weights: equal logits, the first index wins
    head = ScreenedHead.for_weight(weight)
    assert head is not None
    for rows in (1, 2, 3, 4, 5, 7, 9, 16):
        for scale in (1e-3, 1.0, 30.0, 1e4):
            x = torch.randn(rows, dim, generator=g) * scale
            x[0] = weight[vocab - 1] * scale * 50  # a row whose best token is the duplicated one
            assert head.argmax(x) == full_head_argmax(weight, x), (rows, scale)
    assert head.exact >= head.rows > 0


@needs_screen
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_screened_argmax_on_any_number_of_threads(threads, isa):
    """The packing splits the tokens and the int8 product its panels over torch's threads: the same sums, the same
    tokens."""
    g = torch.Generator().manual_seed(threads)
    weight = torch.randn(4099, 128, generator=g) * 0.05  # 257 panels, the last one partial
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        head = ScreenedHead.for_weight(weight)
        for rows in (1, 2, 4, 7):
            x = torch.randn(rows, 128, generator=g) * 10
            assert head.argmax(x) == full_head_argmax(weight, x)
    finally:
        torch.set_num_threads(before)


@needs_screen
def test_near_ties_are_rescored_exactly(isa):
    """Tokens within the int8 error of each other: every one is rescored, and the exact float32 logits decide."""
    g = torch.Generator().manual_seed(5)
    base = torch.randn(64, generator=g)
    weight = base.repeat(512, 1) + torch.randn(512, 64, generator=g) * 1e-6  # 512 nearly equal tokens
    head = ScreenedHead.for_weight(weight)
    x = torch.randn(6, 64, generator=g) + base
    assert head.argmax(x) == full_head_argmax(weight, x)
    assert head.exact > 6 * 100  # the screen could not separate them: most were rescored


@needs_screen
def test_rows_the_screen_does_not_take_give_none(isa):
    weight = torch.randn(100, 32)
    head = ScreenedHead.for_weight(weight)
    ok = torch.randn(3, 32)
    for bad in (float("nan"), float("inf")):
        x = ok.clone()
        x[1, 7] = bad
        assert head.argmax(x) is None
    assert head.argmax(torch.zeros(2, 32)) is None
    assert ScreenedHead.for_weight(torch.full((10, 4), float("nan"))) is None
    assert ScreenedHead.for_weight(torch.ones(10, 4, dtype=torch.float64)) is None


@needs_screen
def test_tiny_coder_hidden_states_screen_to_the_same_tokens(tiny_coder, real_code_prompts, isa):
    """Real final hidden states over third-party code: the same argmax, and only a few exact logits a row."""
    model = tiny_coder.model
    head = screened_head(model.lm_head)
    assert head is not None
    before_rows, before_exact = head.rows, head.exact
    with torch.inference_mode():
        for _, ids in real_code_prompts[:3]:
            hidden = model(input_ids=torch.tensor([ids[:400]]), output_hidden_states=True).hidden_states[-1][0]
            want = full_head_argmax(model.lm_head.weight.detach(), hidden)
            got = [t for i in range(0, len(hidden), 7) for t in head.argmax(hidden[i:i + 7])]
            assert got == want
    rows, exact = head.rows - before_rows, head.exact - before_exact
    assert exact / rows < 3.0, "the screen should leave ~1 token a row to rescore"


@needs_screen
@pytest.mark.parametrize("method", ["ar", "fastcoder"])
def test_greedy_decoding_through_the_screen_equals_the_full_head(tiny_coder, real_code_prompts, method, isa):
    with torch.inference_mode():
        assert greedy_ready(tiny_coder.model)
    head = screened_head(tiny_coder.model.lm_head)
    screened = SpeculativeDecoder(tiny_coder, method=method)
    full = SpeculativeDecoder(tiny_coder, method=method, screened_head=False)
    for _, ids in real_code_prompts[:4]:
        rows = head.rows
        a = screened.generate(ids, max_new_tokens=64)
        assert head.rows > rows, "the screened head was not used"
        rows = head.rows
        b = full.generate(ids, max_new_tokens=64)
        assert head.rows == rows, "screened_head=False still used the screen"
        assert a.token_ids == b.token_ids


@needs_screen
def test_the_verify_cost_is_measured_through_the_greedy_steps(tiny_coder, monkeypatch):
    """c(n) is timed through the calls greedy decoding makes: with the screen, the generation's bound verification,
    of an empty tree for the plain step and of the draft otherwise."""
    from engine.native.bound_verify import BoundVerify
    import engine.verify as ver
    from engine.cost_model import SMALL_SAMPLES, measure_verify_cost

    calls = []
    real = ver.greedy_verifier

    def counted_verifier(model, cache, *learn):
        verify = real(model, cache, *learn)
        assert isinstance(verify, BoundVerify)

        def counted(pending, tree, past_len):
            calls.append(len(tree))
            return verify(pending, tree, past_len)
        return counted

    monkeypatch.setattr(ver, "greedy_verifier", counted_verifier)
    measure_verify_cost(tiny_coder, context=16, sizes=(1, 3), repeats=2)
    assert sorted(calls) == [0] * 2 * SMALL_SAMPLES + [1] * 2 * SMALL_SAMPLES + [3] * 2 * SMALL_SAMPLES  # 2 rounds


@needs_screen
def test_a_weight_changed_after_packing_gets_a_new_screen():
    """Training in the same process (SDSAT) changes the head in place: the screen follows, never a stale one."""
    torch.manual_seed(0)
    head = torch.nn.Linear(32, 300, bias=False)
    x = torch.randn(4, 32)
    first = screened_head(head)
    assert first is not None and first.argmax(x) == full_head_argmax(head.weight.detach(), x)
    assert screened_head(head) is first  # kept while the weight is unchanged
    with torch.no_grad():
        head.weight.mul_(-1.0)  # every argmax moves
    second = screened_head(head)
    assert second is not first
    assert second.argmax(x) == full_head_argmax(head.weight.detach(), x)
    head.weight = torch.nn.Parameter(torch.randn(300, 32))  # replaced
    assert screened_head(head).argmax(x) == full_head_argmax(head.weight.detach(), x)
    assert screened_head(torch.nn.Linear(32, 300, bias=True)) is None  # a bias: the whole head
