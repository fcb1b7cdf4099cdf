"""Packed weights for few-row products (engine/packed_linear.py): the native kernel and MKL's packed GEMM give
the same products as F.linear (up to rounding) and the same decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine import packed_linear
from engine.native.linear import gemm_library
from engine.packed_linear import NativeLinear, PackedLinear, pack_linear_weights

needs_mkl = pytest.mark.skipif(not packed_linear.mkl_packing_available(), reason="torch without MKL")
needs_native = pytest.mark.skipif(gemm_library() is None, reason="no native few-row kernel on this machine")


def _model(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64, bias=False)).eval()


@needs_mkl
def test_packed_products_match_f_linear_for_every_row_count():
    model = _model()
    report = pack_linear_weights(model, budget_bytes=2**30, max_overhead=1e9, kernel="mkl")
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


@needs_mkl
def test_budget_and_overhead_bound_what_is_packed():
    assert pack_linear_weights(_model(), budget_bytes=0, kernel="mkl").layers == []
    assert "budget 0" in pack_linear_weights(_model(), budget_bytes=0, kernel="mkl").reason
    model = _model()
    report = pack_linear_weights(model, budget_bytes=1, max_overhead=1e9, kernel="mkl")
    assert report.layers == [] and report.reason == "no linear layer fits the budget"
    assert all(type(m) is torch.nn.Linear for m in (model[0], model[2]))
    # a tiny overhead bound leaves every layer unpacked (MKL's buffer is larger than the weight)
    assert pack_linear_weights(_model(), budget_bytes=2**30, max_overhead=0.5, kernel="mkl").layers == []


@needs_mkl
def test_a_weight_changed_after_packing_is_used_not_the_stale_pack():
    model = _model()
    pack_linear_weights(model, budget_bytes=2**30, max_overhead=1e9, kernel="mkl")
    with torch.no_grad():
        model[0].weight.mul_(-2.0)
    x = torch.randn(4, 64)
    with torch.inference_mode():
        torch.testing.assert_close(model[0](x), F.linear(x, model[0].weight, model[0].bias))


@needs_mkl
def test_gradients_flow_through_a_packed_layer():
    model = _model()
    pack_linear_weights(model, budget_bytes=2**30, max_overhead=1e9, kernel="mkl")
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


def test_without_a_kernel_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(packed_linear, "mkl_packing_available", lambda: False)
    monkeypatch.setattr(packed_linear, "gemm_library", lambda: None)
    model = _model()
    report = pack_linear_weights(model, budget_bytes=2**30)
    assert report.layers == [] and "MKL" in report.reason and "native" in report.reason
    assert report.kernel == "" and type(model[0]) is torch.nn.Linear


def test_unknown_kernel_is_a_clear_error():
    with pytest.raises(ValueError, match="kernel must be"):
        pack_linear_weights(_model(), kernel="cuda")


@needs_native
def test_native_products_match_f_linear_and_a_row_does_not_depend_on_the_row_count():
    model = _model()
    report = pack_linear_weights(model, budget_bytes=2**30, kernel="native")
    assert report.kernel == "native" and sorted(report.layers) == ["0", "2"] and report.max_rows >= 1
    assert all(type(m) is NativeLinear for m in (model[0], model[2]))
    assert report.max_rows == max(packed_linear.PROBE_ROWS)  # forced: whatever the timing
    layer = model[0]
    x = torch.randn(1, 70, 64)
    with torch.inference_mode():
        alone = torch.cat([layer(x[:, i:i + 1]) for i in range(64)], dim=1)  # each row by itself
        for rows in (1, 2, 3, 5, 6, 7, 8, 13, 17, 40, 64):
            got = layer(x[:, :rows])
            assert got.shape == (1, rows, 512)
            torch.testing.assert_close(got, F.linear(x[:, :rows], layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
            assert torch.equal(got, alone[:, :rows])  # every row: the same bits whatever the row count
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))  # past max_rows: F.linear itself
        wide = torch.randn(512, 5).t()  # a non-contiguous input
        torch.testing.assert_close(model[2](wide), F.linear(wide, model[2].weight), rtol=1e-5, atol=1e-5)
    odd = torch.nn.Sequential(torch.nn.Linear(37, 21)).eval()  # outputs not a multiple of the 16-wide panels
    pack_linear_weights(odd, budget_bytes=2**30, kernel="native")
    assert type(odd[0]) is NativeLinear
    with torch.inference_mode():
        for rows in (7, 9, 13):  # a partial panel in kern7 (7 rows) and in the rows left after 6-row blocks
            xo = torch.randn(rows, 37)
            torch.testing.assert_close(odd(xo), F.linear(xo, odd[0].weight, odd[0].bias), rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_native_products_give_the_same_bits_on_any_number_of_threads(threads):
    """fc_gemm splits its panels over torch's threads (a library built with OpenMP): whole panels per thread,
    so every output is the same FMA chain as on one thread, at every row count and for a last partial
    panel (577 outputs: 37 panels, split into uneven ranges)."""
    from engine.native import library  # noqa: PLC0415
    from engine.native.linear import gemm, pack_panels  # noqa: PLC0415

    lib = library()
    gen = torch.Generator().manual_seed(threads)
    before = torch.get_num_threads()
    try:
        for n, k in ((577, 64), (256, 96), (2048, 32)):
            panels = pack_panels(lib, torch.randn(n, k, generator=gen))
            for rows in (1, 2, 3, 6, 7, 8, 13, 16):
                x = torch.randn(rows, k, generator=gen)
                torch.set_num_threads(1)
                one = gemm(lib, x, panels.data_ptr(), n)
                torch.set_num_threads(threads)
                assert torch.equal(gemm(lib, x, panels.data_ptr(), n), one), (n, rows)
    finally:
        torch.set_num_threads(before)


@needs_native
def test_avx512_and_avx2_kernels_give_the_same_bits():
    """fc_gemm's AVX-512 kernels (2-8 rows a register block, blocks of 8 above) and its AVX2 ones (kern7, blocks of 6)
    compute every output as the same FMA chain: the same bits at every row count, for a last partial panel and an odd
    number of inputs, and F.linear's values up to rounding. Where the CPU has no AVX-512 both runs take AVX2."""
    from engine.native import kernel_isa, library  # noqa: PLC0415
    from engine.native.linear import gemm, pack_panels  # noqa: PLC0415

    lib = library()
    gen = torch.Generator().manual_seed(5)
    try:
        for n, k in ((577, 37), (256, 96), (48, 768)):
            w = torch.randn(n, k, generator=gen)
            panels = pack_panels(lib, w)
            for rows in (*range(1, 18), 23, 24, 25, 40):
                x = torch.randn(rows, k, generator=gen)
                assert lib.fc_gemm_use(1) == 1
                avx2 = gemm(lib, x, panels.data_ptr(), n)
                best = lib.fc_gemm_use(0)
                got = gemm(lib, x, panels.data_ptr(), n)
                assert torch.equal(got, avx2), (n, k, rows, best)
                torch.testing.assert_close(got, F.linear(x, w), rtol=1e-4, atol=1e-4)  # sums of up to 768
    finally:
        lib.fc_gemm_use(1 if kernel_isa(lib) == "avx2" else 0)  # as the process chose


@needs_native
def test_two_rows_streamed_or_by_two_panels_give_the_same_bits():
    """A product of two rows alone streams one panel at a time on AVX2 (kern2); the rows left after 6-row blocks, and
    fc_gemm_two_rows(0), take two panels at once (kern2x2). Same FMA chains: the same bits as each other and as the
    same rows inside a larger product, for full and partial last panels."""
    from engine.native import kernel_isa, library  # noqa: PLC0415
    from engine.native.linear import gemm, pack_panels  # noqa: PLC0415

    lib = library()
    gen = torch.Generator().manual_seed(7)
    assert lib.fc_gemm_two_rows(-1) == 1  # the default
    try:
        assert lib.fc_gemm_use(1) == 1  # the AVX2 kernels, where the two-row choice is made
        for n, k in ((577, 37), (256, 96), (64, 768)):
            w = torch.randn(n, k, generator=gen)
            panels = pack_panels(lib, w)
            x = torch.randn(8, k, generator=gen)  # 8 rows: a 6-row block, then the last 2 by kern2x2
            inside = gemm(lib, x, panels.data_ptr(), n)
            streamed = gemm(lib, x[6:].contiguous(), panels.data_ptr(), n)
            assert lib.fc_gemm_two_rows(0) == 0
            by_two = gemm(lib, x[6:].contiguous(), panels.data_ptr(), n)
            assert lib.fc_gemm_two_rows(1) == 1
            assert torch.equal(streamed, by_two) and torch.equal(streamed, inside[6:]), (n, k)
            torch.testing.assert_close(streamed, F.linear(x[6:], w), rtol=1e-4, atol=1e-4)
    finally:
        lib.fc_gemm_two_rows(1)
        lib.fc_gemm_use(1 if kernel_isa(lib) == "avx2" else 0)  # as the process chose


@needs_native
def test_the_prefetch_distance_changes_no_bits():
    """fc_gemm_prefetch sets how far ahead the AVX2 kernels prefetch their weight stream (48 lines by default), and
    fc_gemm_group_prefetch whether the passes over a cached panel group prefetch the next group (on by default); a
    prefetch reads nothing into the arithmetic, so every setting gives the same bits at every row count."""
    from engine.native import kernel_isa, library  # noqa: PLC0415
    from engine.native.linear import gemm, pack_panels  # noqa: PLC0415

    lib = library()
    gen = torch.Generator().manual_seed(11)
    default = lib.fc_gemm_prefetch(-1)
    assert default == 48 and lib.fc_gemm_group_prefetch(-1) == 1
    try:
        assert lib.fc_gemm_use(1) == 1
        for n, k in ((577, 37), (96, 768), (300, 256)):
            w = torch.randn(n, k, generator=gen)
            panels = pack_panels(lib, w)
            for rows in (2, 3, 6, 7, 8, 9, 13, 14):
                x = torch.randn(rows, k, generator=gen)
                outs = []
                for lines, group in ((0, 1), (16, 1), (48, 1), (4096, 1), (48, 0)):
                    assert lib.fc_gemm_prefetch(lines) == lines and lib.fc_gemm_group_prefetch(group) == group
                    outs.append(gemm(lib, x, panels.data_ptr(), n))
                assert all(torch.equal(o, outs[0]) for o in outs[1:]), (n, k, rows)
                torch.testing.assert_close(outs[0], F.linear(x, w), rtol=1e-4, atol=1e-4)
    finally:
        lib.fc_gemm_prefetch(default)
        lib.fc_gemm_group_prefetch(1)
        lib.fc_gemm_use(1 if kernel_isa(lib) == "avx2" else 0)


def test_isa_env_forces_the_avx2_kernels(monkeypatch):
    """``$FASTCODER_ISA=avx2`` is read once per process and switches the products and the attention together; the
    choice is reported (and keys the c(n) curve)."""
    from engine import native  # noqa: PLC0415

    calls = []

    class FakeLib:
        def fc_gemm_supported(self):
            return 1

        def fc_gemm_use(self, isa):
            calls.append(("gemm", isa))
            return 1 if isa == 1 else 2

        def fc_attention_use(self, isa):
            calls.append(("attention", isa))
            return 1 if isa == 1 else 2

    monkeypatch.setattr(native, "_ISA", {})
    monkeypatch.setenv(native.ISA_ENV, "avx2")
    assert native.kernel_isa(FakeLib()) == "avx2" and calls == [("gemm", 1), ("attention", 1)]
    assert native.kernel_isa(FakeLib()) == "avx2" and len(calls) == 2  # once per process
    monkeypatch.setattr(native, "_ISA", {})
    monkeypatch.delenv(native.ISA_ENV)
    assert native.kernel_isa(FakeLib()) == "avx512" and calls[2:] == [("gemm", 0), ("attention", 0)]


@needs_native
def test_native_layers_fall_back_for_a_changed_weight_and_for_gradients():
    model = _model()
    pack_linear_weights(model, budget_bytes=2**30, kernel="native")
    with torch.no_grad():
        model[0].weight.mul_(-2.0)
    x = torch.randn(4, 64)
    with torch.inference_mode():
        torch.testing.assert_close(model[0](x), F.linear(x, model[0].weight, model[0].bias))
    model.train()
    model(x).sum().backward()
    assert model[0].weight.grad is not None and model[0].weight.grad.abs().sum() > 0


@needs_native
def test_native_budget_and_a_slower_probe_leave_mkl_or_nothing(monkeypatch):
    report = pack_linear_weights(_model(), budget_bytes=64 * 512 * 4 + 1, kernel="native")
    assert report.layers == ["0"] or report.layers == ["2"]  # one of the two equal-sized layers fits
    monkeypatch.setattr(packed_linear, "_probe_native", lambda *a: (0, {1: [0.1, 0.2]}, "", False))
    report = pack_linear_weights(_model(), budget_bytes=2**30, max_overhead=1e9)  # "auto" believes the probe
    assert report.probe_ms == {1: [0.1, 0.2]}
    if packed_linear.mkl_packing_available():
        assert report.kernel == "mkl"
    else:
        assert report.layers == [] and "faster" in report.reason


def test_tiny_coder_packs_its_layers_and_decodes_as_unpacked(tiny_coder, real_code_prompts):
    """The dev model packs every linear layer for the native kernel (else its LM head, the one matrix within
    MKL's overhead bound), and fastcoder's tree verification through them gives ar's tokens; the unpacked
    head over the same hidden states gives the same argmax per row."""
    from engine import SpeculativeDecoder

    packing = tiny_coder.packing
    assert packing is not None
    if gemm_library() is not None:
        assert packing.kernel == "native" and len(packing.layers) == 43 and packing.max_rows >= 1
        assert type(tiny_coder.model.lm_head) is NativeLinear
    else:
        assert packing.layers == ["lm_head"] and type(tiny_coder.model.lm_head) is PackedLinear
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


@needs_native
def test_the_native_row_argmax_follows_numpys_rule():
    """fc_rows_argmax against numpy's argmax: ties (the first maximum), NaNs (the first NaN), -0.0 and +0.0
    (equal), infinities, rows shorter and longer than the 8 lanes and their tails."""
    import numpy as np

    lib = gemm_library()
    rng = np.random.default_rng(0)
    for trial in range(1200):
        n, rows = int(rng.integers(1, 300)), int(rng.integers(1, 5))
        y = rng.standard_normal((rows, n)).astype(np.float32)
        kind = trial % 6
        if kind == 1:
            y = np.round(y).astype(np.float32)
        elif kind == 2:
            y[rng.random(y.shape) < 0.05] = np.nan
        elif kind == 3:
            y[:] = -np.inf
            y[rng.random(y.shape) < 0.1] = np.inf
        elif kind == 4:
            y = np.where(rng.random(y.shape) < 0.5, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
        elif kind == 5:
            y[rng.random(y.shape) < 0.3] = -np.inf
        out = np.zeros(rows, np.int64)
        lib.fc_rows_argmax(y.ctypes.data, rows, n, out.ctypes.data)
        assert out.tolist() == y.argmax(-1).tolist(), (trial, y)


@needs_native
def test_an_lm_head_takes_its_rows_argmax_in_its_own_call():
    """A model whose output layer is native: argmax_rows of its logits is numpy's answer without reading them
    (once: a second ask, or a view starting elsewhere, computes afresh); other layers and other threads do not
    see it; a head with a bias is not enabled."""
    import threading

    import numpy as np

    from engine.native import linear as native_linear
    from engine.verify import argmax_rows

    class Head(torch.nn.Module):
        def __init__(self, bias: bool):
            super().__init__()
            torch.manual_seed(1)
            self.body = torch.nn.Linear(32, 32, bias=False)
            self.out = torch.nn.Linear(32, 300, bias=bias)

        def get_output_embeddings(self):
            return self.out

        def forward(self, x):
            return self.out(self.body(x))

    model = Head(bias=False).eval()
    pack_linear_weights(model, budget_bytes=2**30, kernel="native")
    assert type(model.out) is NativeLinear and model.out._argmax is not None and model.body._argmax is None
    x = torch.randn(5, 32)
    with torch.inference_mode():
        logits = model(x)
        want = logits.numpy().argmax(-1).tolist()
        seen = []
        other = threading.Thread(target=lambda: seen.append(native_linear.known_argmax(logits)))
        other.start()
        other.join()
        assert seen == [None]  # per thread
        assert native_linear.known_argmax(logits[1:]) is None  # rows starting elsewhere: not the registered ones
        assert native_linear.known_argmax(logits) == want
        assert native_linear.known_argmax(logits) is None  # used once
        assert argmax_rows(logits) == want  # numpy's answer then
        logits = model(x)
        assert argmax_rows(logits[:2]) == want[:2]  # the first rows of the registered output
        model(x)
        model.body(x)  # a plain native layer registers nothing: the head's output stays registered
        assert native_linear.known_argmax(model(x)) == want
    biased = Head(bias=True).eval()
    pack_linear_weights(biased, budget_bytes=2**30, kernel="native")
    assert type(biased.out) is NativeLinear and biased.out._argmax is None


def test_kernel_env_chooses_the_packing_kernel_at_load(monkeypatch, caplog):
    """$FASTCODER_PACKED_KERNEL gives load_model's packing kernel (the suite sets "native" so no timing decides);
    unset it is "auto", and a value that is not a kernel is logged and taken as "auto"."""
    monkeypatch.delenv(packed_linear.KERNEL_ENV, raising=False)
    assert packed_linear.packing_kernel() == "auto"
    for value in ("native", "MKL ", "auto"):
        monkeypatch.setenv(packed_linear.KERNEL_ENV, value)
        assert packed_linear.packing_kernel() == value.strip().lower()
    monkeypatch.setenv(packed_linear.KERNEL_ENV, "fast")
    with caplog.at_level("WARNING", logger=packed_linear.__name__):
        assert packed_linear.packing_kernel() == "auto"
    assert "fast" in caplog.text
