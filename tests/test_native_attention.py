"""Native few-row attention (engine/native_attention.py, engine/native/tree_attention.c): the same attention as
torch's SDPA up to rounding, a row's output independent of the other rows, and with the native linear kernel a
verified draft tree's logits equal sequential decoding's bit for bit."""

from __future__ import annotations

import os

import pytest
import torch

from engine import native_attention
from engine.kv_cache import new_kv_cache
from engine.native.attention import attention, attention_library
from engine.native.linear import gemm_library
from engine.packed_linear import pack_linear_weights
from tests.conftest import chain_in_tree_logits, random_model, tree_mask

needs_kernel = pytest.mark.skipif(attention_library() is None or gemm_library() is None,
                                  reason="no native kernels on this machine")
LOW = torch.finfo(torch.float32).min


def _inputs(m: int, s: int, heads: int = 4, kv_heads: int = 2, d: int = 16, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, m, heads, d, generator=gen).transpose(1, 2)  # (B, H, M, D), strided as transformers gives
    kbuf = torch.randn(1, kv_heads, s + 32, d, generator=gen)  # a cache buffer with spare capacity
    vbuf = torch.randn(1, kv_heads, s + 32, d, generator=gen)
    visible = torch.ones(m, s, dtype=torch.bool).tril(s - m)
    visible[:, s - m:] &= torch.rand(m, m, generator=gen) < 0.5  # tree-like: some earlier nodes hidden
    visible[torch.arange(m), s - m + torch.arange(m)] = True
    return q, kbuf[:, :, :s], vbuf[:, :, :s], visible[None, None]


def _tree_masks(m: int, s: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A draft tree's masks over ``s`` keys, its ``m`` rows last: ``(visible, bias)``, bool (m, s) with every row
    seeing the keys before the tree, itself and a random half of the other rows, and float (m, s) adding a random
    bias where visible and the float minimum elsewhere."""
    visible = torch.ones(m, s, dtype=torch.bool).tril(s - m)
    visible[:, s - m:] &= torch.rand(m, m, generator=gen) < 0.5
    visible[torch.arange(m), s - m + torch.arange(m)] = True
    return visible, (0.3 * torch.randn(m, s, generator=gen)).masked_fill_(~visible, LOW)


def _sdpa(q, k, v, mask=None, causal=False):
    rep = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask, is_causal=causal).transpose(1, 2)


@needs_kernel
@pytest.mark.parametrize("m,s", [(1, 1), (1, 37), (5, 40), (9, 200), (17, 64)])
def test_kernel_matches_sdpa_for_float_bool_and_causal_masks(m, s):
    lib = attention_library()
    q, k, v, visible = _inputs(m, s)
    scale = q.shape[-1] ** -0.5
    want = _sdpa(q, k, v, visible)
    fmask = torch.zeros(visible.shape).masked_fill_(~visible, LOW)
    got = attention(lib, q, k, v, fmask, scale, False)
    assert got.shape == (1, m, 4, 16) and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(attention(lib, q, k, v, visible, scale, False), got)  # bool mask: the same bits
    wide = torch.cat([fmask, torch.full((1, 1, m, 5), LOW)], -1)  # columns past the keys are ignored
    assert torch.equal(attention(lib, q, k, v, wide, scale, False), got)
    causal = torch.ones(m, s, dtype=torch.bool).tril(s - m)[None, None]
    torch.testing.assert_close(attention(lib, q, k, v, None, scale, True), _sdpa(q, k, v, causal),
                               rtol=1e-5, atol=1e-5)
    bias = torch.randn(1, 1, m, s).masked_fill_(~visible, float("-inf"))  # finite values are added
    torch.testing.assert_close(attention(lib, q, k, v, bias, scale, False), _sdpa(q, k, v, bias),
                               rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_row_depends_only_on_the_keys_it_sees():
    """Row i over a cache with hidden keys between its visible ones gives the same bits as row i alone over
    just its visible keys, whatever the number of rows: a tree node and the same token decoded alone."""
    lib = attention_library()
    q, k, v, visible = _inputs(12, 300)
    scale = q.shape[-1] ** -0.5
    together = attention(lib, q, k, v, visible, scale, False)
    for i in range(12):
        keep = visible[0, 0, i].nonzero()[:, 0]
        alone = attention(lib, q[:, :, i:i + 1], k[:, :, keep], v[:, :, keep], None, scale, False)
        assert torch.equal(alone[:, 0], together[:, i])


@needs_kernel
@pytest.mark.parametrize("kind", ["bool", "bias", "causal"])
@pytest.mark.parametrize("d", [16, 64, 72, 128])
def test_rows_sharing_their_first_keys_get_the_bits_of_each_row_alone(kind, d):
    """The kernel reads the keys every row sees (the cache before a draft tree) once for all rows; each row
    still gets exactly what it gets alone, for every mask kind and head size (64-dim chunks and the rest)."""
    lib = attention_library()
    m, s = 9, 203  # with AVX-512: rows 0-7 two and four at a time, row 8 alone
    gen = torch.Generator().manual_seed(d)
    q = torch.randn(1, m, 4, d, generator=gen).transpose(1, 2)
    k, v = torch.randn(1, 2, s, d, generator=gen), torch.randn(1, 2, s, d, generator=gen)
    visible = torch.ones(m, s, dtype=torch.bool).tril(s - m)
    if kind != "causal":
        visible[:, s - m:] &= torch.rand(m, m, generator=gen) < 0.5
        visible[torch.arange(m), s - m + torch.arange(m)] = True
    bias = (0.3 * torch.randn(m, s, generator=gen)).masked_fill_(~visible, LOW)
    mask = {"bool": visible[None, None], "bias": bias[None, None], "causal": None}[kind]
    scale = d ** -0.5
    together = attention(lib, q, k, v, mask, scale, kind == "causal")
    for i in range(m):
        row_mask = None if mask is None else mask[:, :, i:i + 1]
        if mask is None:  # row i alone: causal over keys 0 .. s - m + i
            keep = s - m + i + 1
            alone = attention(lib, q[:, :, i:i + 1], k[:, :, :keep], v[:, :, :keep], None, scale, False)
        else:
            alone = attention(lib, q[:, :, i:i + 1], k, v, row_mask, scale, False)
        assert torch.equal(alone[:, 0], together[:, i]), i


@needs_kernel
@pytest.mark.parametrize("d", [16, 64, 128])
def test_avx512_and_avx2_kernels_give_the_same_bits(d):
    """Where the CPU has AVX-512, shared keys are scored two rows at a time and their values summed four, then three
    or two rows at a time: each row's bits are those of the AVX2 path, which takes one row at a time, for every row
    count (pairs and blocks of four with rows left over: 3 and 7 end on a block of three), mask kind and head size
    (d = 16 is not a multiple of 64: its values stay one row at a time)."""
    from engine.native import kernel_isa  # noqa: PLC0415

    lib = attention_library()
    gen = torch.Generator().manual_seed(d)
    try:
        for m in (1, 2, 3, 4, 5, 6, 7, 9, 13):
            s = 150 + m
            q = torch.randn(1, m, 4, d, generator=gen).transpose(1, 2)
            k, v = torch.randn(1, 2, s, d, generator=gen), torch.randn(1, 2, s, d, generator=gen)
            visible, bias = _tree_masks(m, s, gen)
            bias[1::2] = bias[1::2].masked_fill(visible[1::2], 0.0)  # rows without a bias beside rows with one
            for mask, causal in ((visible[None, None], False), (bias[None, None], False), (None, True)):
                assert lib.fc_attention_use(1) == 1
                avx2 = attention(lib, q, k, v, mask, d ** -0.5, causal)
                lib.fc_attention_use(0)
                assert torch.equal(attention(lib, q, k, v, mask, d ** -0.5, causal), avx2), (m, causal)
    finally:
        lib.fc_attention_use(1 if kernel_isa(lib) == "avx2" else 0)  # as the process chose


@needs_kernel
@pytest.mark.parametrize("threads", [2, 3])
def test_heads_split_over_threads_give_the_bits_of_one_thread(threads):
    """With torch on several threads the kernel splits the heads over them (each thread its own scratch):
    every output equals the one-thread result, for every mask kind, with grouped kv heads."""
    lib = attention_library()
    m, s, d = 7, 700, 64
    gen = torch.Generator().manual_seed(threads)
    q = torch.randn(1, m, 8, d, generator=gen).transpose(1, 2)
    k, v = torch.randn(1, 4, s, d, generator=gen), torch.randn(1, 4, s, d, generator=gen)
    visible, bias = _tree_masks(m, s, gen)
    before = torch.get_num_threads()
    try:
        for mask, causal in ((visible[None, None], False), (bias[None, None], False), (None, True)):
            torch.set_num_threads(1)
            one = attention(lib, q, k, v, mask, d ** -0.5, causal)
            torch.set_num_threads(threads)
            assert torch.equal(attention(lib, q, k, v, mask, d ** -0.5, causal), one)
    finally:
        torch.set_num_threads(before)


@needs_kernel
def test_a_row_that_sees_nothing_gets_zeros():
    lib = attention_library()
    q, k, v, visible = _inputs(3, 20)
    visible[..., 1, :] = False
    got = attention(lib, q, k, v, visible, 0.25, False)
    assert torch.equal(got[:, 1], torch.zeros_like(got[:, 1])) and torch.isfinite(got).all()


def _installed_model(monkeypatch, max_rows: int = 64):
    model = random_model("llama", vocab_size=256)
    pack_linear_weights(model, budget_bytes=2**30, kernel="native")
    monkeypatch.delenv(native_attention.ROWS_ENV, raising=False)  # the suite's fixed rows: this one's instead
    monkeypatch.setattr(native_attention, "_probe_forwards", lambda m, report: max_rows)  # whatever the timing
    report = native_attention.install_native_attention(model)
    assert report.installed and report.max_rows == max_rows
    assert model.config._attn_implementation == native_attention.NAME
    return model


@needs_kernel
def test_tree_logits_equal_sequential_decoding_bit_for_bit(monkeypatch):
    """A chain inside a draft tree (a sibling branch in between), verified in one forward with the 4D tree
    mask, gives exactly the logits of decoding the chain one token at a time: greedy verification cannot
    differ from the model's own decoding. With transformers' SDPA and F.linear it differs by ~1e-6."""
    tree, seq = chain_in_tree_logits(_installed_model(monkeypatch))
    for i, row in enumerate([0, 1, 3, 4, 5, 6]):
        assert torch.equal(tree[row], seq[i]), i


@needs_kernel
def test_more_rows_than_max_rows_and_prefills_use_sdpa(monkeypatch):
    model = _installed_model(monkeypatch, max_rows=4)
    reference = random_model("llama", vocab_size=256)  # same seed: same weights, stock attention
    calls = []
    real = native_attention.native_attention
    monkeypatch.setattr(native_attention, "native_attention", lambda *a: calls.append(a[1].shape[2]) or real(*a))
    ids = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        got = model(input_ids=ids).logits  # a 30-token prefill: sdpa
        assert calls == []
        torch.testing.assert_close(got, reference(input_ids=ids).logits, rtol=1e-4, atol=1e-4)
        cache = new_kv_cache(model, 64)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        model(input_ids=ids[:, :3], past_key_values=cache, use_cache=True)  # 3 rows: the kernel
    assert calls == [3, 3]  # once per layer


def test_not_installed_when_disabled_or_for_other_attention(monkeypatch):
    monkeypatch.setenv(native_attention.ATTENTION_ENV, "0")
    model = random_model("llama", vocab_size=256)
    report = native_attention.install_native_attention(model)
    assert not report.installed and native_attention.ATTENTION_ENV in report.reason
    assert model.config._attn_implementation == "sdpa"
    monkeypatch.delenv(native_attention.ATTENTION_ENV)
    model.set_attn_implementation("eager")
    report = native_attention.install_native_attention(model)
    assert not report.installed and "eager" in report.reason
    assert model.config._attn_implementation == "eager"


@needs_kernel
def test_a_slower_probe_keeps_sdpa(monkeypatch):
    model = random_model("llama", vocab_size=256)
    monkeypatch.delenv(native_attention.ROWS_ENV, raising=False)
    monkeypatch.setattr(native_attention, "_probe_forwards", lambda m, report: 0)
    report = native_attention.install_native_attention(model)
    assert not report.installed and "faster" in report.reason
    assert model.config._attn_implementation == "sdpa"


def test_tiny_coder_reports_its_attention(tiny_coder):
    report = tiny_coder.attention
    assert report is not None
    if attention_library() is not None and report.installed:
        assert report.max_rows == int(os.environ[native_attention.ROWS_ENV])  # the suite's fixed rows, not probed
        assert tiny_coder.model.config._attn_implementation == native_attention.NAME
    else:
        assert report.reason


@needs_kernel
def test_the_probe_times_the_forward_unless_the_rows_are_fixed(monkeypatch):
    """Without $FASTCODER_NATIVE_ATTENTION_ROWS the load-time probe times the model's forward at each probed row count
    (both attentions, fastest round of each) and decides the rows; with it, the rows are taken as given and nothing is
    timed; a value that is not a count is ignored (the probe decides)."""
    monkeypatch.delenv(native_attention.ROWS_ENV, raising=False)
    probed = native_attention.install_native_attention(random_model("llama", vocab_size=256))
    assert set(probed.probe_ms) <= set(native_attention.PROBE_ROWS) and 1 in probed.probe_ms
    assert all(native > 0 and sdpa > 0 for native, sdpa in probed.probe_ms.values())
    assert probed.max_rows in (0, *native_attention.PROBE_ROWS)
    monkeypatch.setenv(native_attention.ROWS_ENV, "8")
    fixed = native_attention.install_native_attention(random_model("llama", vocab_size=256))
    assert fixed.installed and fixed.max_rows == 8 and not fixed.probe_ms
    monkeypatch.setenv(native_attention.ROWS_ENV, "many")
    assert 1 in native_attention.install_native_attention(random_model("llama", vocab_size=256)).probe_ms
