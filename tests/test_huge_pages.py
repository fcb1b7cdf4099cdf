"""engine.huge_pages: the buffers every forward streams (packed weights, the KV cache, the LM head's screen) sit on
2 MB pages where the kernel gives them, and hold the same bytes as before."""
import numpy as np
import pytest
import torch

from engine import huge_pages
from engine.kv_cache import new_kv_cache

THP = huge_pages.enabled()


def test_small_buffers_are_ordinary_and_aligned():
    buf = huge_pages.empty_bytes(1000)
    assert buf.shape == (1000,) and buf.dtype == np.uint8 and buf.ctypes.data % 64 == 0
    assert not buf.any()
    t = huge_pages.empty((3, 5), torch.float32)
    assert t.shape == (3, 5) and t.dtype == torch.float32 and not t.any()
    with pytest.raises(ValueError):
        huge_pages.empty_bytes(-1)
    with pytest.raises(ValueError):
        huge_pages.empty((2, -1))


@pytest.mark.skipif(not THP, reason="transparent huge pages off or not Linux")
def test_large_buffer_is_aligned_zeroed_writable_and_on_huge_pages():
    t = huge_pages.empty((4, 1 << 18), torch.float32)  # 4 MB
    assert t.data_ptr() % huge_pages.HUGE_PAGE == 0 and t.is_contiguous() and not t.any()
    t.fill_(1.5)  # touched: the kernel backs it (a huge page where it can)
    assert float(t.sum()) == 1.5 * t.numel()
    assert huge_pages.huge_bytes(t.data_ptr()) >= huge_pages.HUGE_PAGE


def test_off_switch(monkeypatch):
    monkeypatch.setenv(huge_pages.ENV, "0")
    assert not huge_pages.enabled()
    buf = huge_pages.empty_bytes(4 << 20)
    assert buf.shape == (4 << 20,) and buf.ctypes.data % 64 == 0
    assert huge_pages.round_up(3000, 1024) == 3000


def test_round_up_fills_whole_pages():
    if not THP:
        assert huge_pages.round_up(3000, 1024) == 3000
        return
    assert huge_pages.round_up(3000, 1024) == 4096  # 3 MB of 1 KB items -> two whole 2 MB pages
    assert huge_pages.round_up(100, 1024) == 100  # under a page: as asked
    assert huge_pages.round_up(2048, 1024) == 2048


def test_kv_cache_buffers_fill_whole_pages_and_keep_their_entries():
    """A cache of 2 MB buffers or more gets whole pages' worth of capacity; growing keeps every entry."""
    from conftest import random_model

    model = random_model("llama")
    per_token = model.config.num_key_value_heads * model.config.head_dim * 4
    want = huge_pages.HUGE_PAGE // per_token + 7
    cache = new_kv_cache(model, want)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=gen)
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    layer = cache.layers[0]
    if THP:
        assert layer.capacity * per_token % huge_pages.HUGE_PAGE == 0 and layer.capacity >= want
    else:
        assert layer.capacity == want
    before = layer.keys.clone()
    layer._ensure(layer.capacity + 1, layer.keys)  # grow
    assert torch.equal(layer.keys, before)


def test_packed_weights_on_huge_pages_decode_the_same_tokens(monkeypatch):
    """tiny-py-coder's packed weights land on 2 MB pages (where the kernel gives them) and greedy decoding gives the
    same tokens as with them on ordinary pages (FASTCODER_HUGE_PAGES=0)."""
    from conftest import TINY_CODER

    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    from engine.model import load_model
    from engine.steps import decode_one_token_greedy

    def decode(loaded, steps=12):
        model = loaded.model
        cache = new_kv_cache(model, 64)
        ids = torch.arange(5, 45).unsqueeze(0)
        with torch.inference_mode():
            tok = int(model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0, -1].argmax())
            out = [tok]
            for past in range(ids.shape[1], ids.shape[1] + steps):
                tok = decode_one_token_greedy(model, cache, tok, past)
                out.append(tok)
        return out

    on = load_model(str(TINY_CODER), device="cpu")
    monkeypatch.setenv(huge_pages.ENV, "0")
    off = load_model(str(TINY_CODER), device="cpu")
    if on.packing is None or on.packing.kernel != "native":
        pytest.skip("the native few-row kernel does not serve here")
    assert off.packing.huge_page_bytes == 0
    if THP:
        assert on.packing.huge_page_bytes >= huge_pages.HUGE_PAGE
    assert decode(on) == decode(off)
    from engine.cost_model import cost_key

    assert cost_key(on)["huge_pages"] is THP and cost_key(off)["huge_pages"] is False  # c(n) measured apart
