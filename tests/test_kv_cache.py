"""engine/kv_cache.py: the preallocated KV cache gives the same logits as transformers' DynamicCache through
prefill, decode steps, tree verification with compaction and crops, and grows past its first capacity."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from engine.draft_tree import DraftTree
from engine import native
from engine.kv_cache import PreallocatedLayer, move_rows, new_kv_cache
from engine.verify import compact_cache, tree_forward
from tests.conftest import loaded_random


def _tree() -> DraftTree:
    # two branches below the pending token: [5, 6, 7] and [5, 8]
    return DraftTree(tokens=np.array([5, 6, 7, 8]), parents=np.array([-1, 0, 1, 0]), depths=np.array([1, 2, 3, 2]),
                     sources=np.ones(4, dtype=np.uint8), weights=np.ones(4))


def test_same_logits_as_dynamic_cache_through_decode_verify_compact_and_crop():
    loaded = loaded_random("llama")
    model = loaded.model
    torch.manual_seed(0)
    prompt = torch.randint(0, loaded.vocab_size, (1, 40))
    dyn, pre = DynamicCache(config=model.config), new_kv_cache(model, capacity=48)  # forces one growth
    assert all(isinstance(layer, PreallocatedLayer) for layer in pre.layers)
    with torch.inference_mode():
        outs = [model(input_ids=prompt, past_key_values=c, use_cache=True).logits for c in (dyn, pre)]
        assert torch.equal(outs[0], outs[1])
        pending = 3
        for step in range(6):
            past = dyn.get_seq_length()
            tree = _tree()
            a = tree_forward(model, dyn, pending, tree, past)
            b = tree_forward(model, pre, pending, tree, past)
            assert torch.equal(a, b)
            path = [0, 3] if step % 2 else [0, 1]  # accept a branch that needs moving, then one that does not
            path = [0] if step == 4 else path
            for cache in (dyn, pre):
                compact_cache(cache, past, path, len(tree))
            assert dyn.get_seq_length() == pre.get_seq_length() == past + 1 + len(path)
            for layer_d, layer_p in zip(dyn.layers, pre.layers):
                assert torch.equal(layer_d.keys, layer_p.keys) and torch.equal(layer_d.values, layer_p.values)
            pending = int(tree.tokens[path[-1]])
    assert pre.layers[0].capacity >= pre.get_seq_length() > 48  # grew past its first capacity
    # the moves went through the native call (its table follows the buffers the growth replaced)
    assert native.library() is None or pre._fc_move_table[0][0][0] is pre.layers[0]._kbuf
    held = pre.layers[0].buffer_nbytes
    assert held == pre.layers[0].capacity * pre.layers[0].keys[0, :, 0].numel() * 4 * 2


def _two_batch_caches():
    """Ours and transformers' DynamicCache after the same 2 x 3-token prefill of a random llama."""
    loaded = loaded_random("llama")
    cache, ref = new_kv_cache(loaded.model), DynamicCache(config=loaded.model.config)
    with torch.inference_mode():
        for c in (cache, ref):
            loaded.model(input_ids=torch.tensor([[1, 2, 3], [4, 5, 6]]), past_key_values=c, use_cache=True)
    return cache, ref


def test_crop_to_nothing_and_reuse():
    loaded = loaded_random("llama")
    cache = new_kv_cache(loaded.model)
    with torch.inference_mode():
        loaded.model(input_ids=torch.tensor([[1, 2, 3, 4]]), past_key_values=cache, use_cache=True)
        cache.crop(-4)
        assert cache.get_seq_length() == 0
        ref = DynamicCache(config=loaded.model.config)
        a = loaded.model(input_ids=torch.tensor([[7, 8]]), past_key_values=cache, use_cache=True).logits
        b = loaded.model(input_ids=torch.tensor([[7, 8]]), past_key_values=ref, use_cache=True).logits
    assert torch.equal(a, b)


def test_batch_operations_act_on_the_buffers():
    cache, ref = _two_batch_caches()
    with torch.inference_mode():
        for c in (cache, ref):
            c.layers[0].batch_repeat_interleave(2)
            c.layers[0].batch_select_indices(torch.tensor([3, 0]))
        mine, theirs = cache.layers[0], ref.layers[0]
        assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)
        mine.update(theirs.keys[..., :1, :], theirs.values[..., :1, :])  # later writes go to the selected rows
    assert mine.get_seq_length() == 4 and torch.equal(mine.keys[..., :3, :], theirs.keys)


def test_views_follow_the_fill_mark_and_transformers_assignments_replace_the_buffer():
    """keys/values are made when read: a crop or a moved fill mark shows at once, the views write through to the
    buffers (compaction), and a tensor transformers assigns (reorder_cache, offload) is what later reads and updates
    see, as with DynamicLayer."""
    cache, ref = _two_batch_caches()
    with torch.inference_mode():
        layer = cache.layers[0]
        layer._len = 2  # what the fused layer and crop do: move the mark
        assert layer.keys.shape[-2] == 2 and layer.keys.data_ptr() == layer._kbuf.data_ptr()
        layer._len = 3
        layer.keys[..., 0, :] = 0.5  # a view: writes reach the buffer
        assert torch.all(layer._kbuf[..., 0, :] == 0.5)
        for c in (cache, ref):
            c.layers[0].reorder_cache(torch.tensor([1, 0]))
        assert torch.equal(layer.values, ref.layers[0].values) and layer.get_seq_length() == 3
        layer.update(ref.layers[0].keys[..., :1, :], ref.layers[0].values[..., :1, :])
        assert layer.get_seq_length() == 4 and torch.equal(layer.values[..., :3, :], ref.layers[0].values)


def test_native_row_moves_equal_a_gather_then_write_after_the_buffers_change():
    """move_rows (one native call) gives numpy's gather-then-write on every layer, keys and values, batch rows
    included, and rebuilds its table when a layer's buffers are replaced (batch reordering)."""
    if native.library() is None:
        pytest.skip("no C compiler: the native move is not built here")
    cache, _ = _two_batch_caches()
    src, lo = [3, 5, 6], 1  # ascending, src[j] >= lo + j; row 3 moves over rows 2 and 3's new content
    with torch.inference_mode():
        for step in range(2):
            if step:  # new buffers: the table kept on the cache must not be used
                for layer in cache.layers:
                    layer.batch_repeat_interleave(2)
            for layer in cache.layers:
                for buf in (layer._kbuf, layer._vbuf):
                    buf.copy_(torch.randn(buf.shape))
            want = [(layer._kbuf.clone(), layer._vbuf.clone()) for layer in cache.layers]
            for pair in want:
                for buf in pair:
                    buf[..., lo:lo + len(src), :] = buf[..., src, :].clone()
            assert move_rows(cache, src, lo)
            for layer, (k, v) in zip(cache.layers, want):
                assert torch.equal(layer._kbuf, k) and torch.equal(layer._vbuf, v)
