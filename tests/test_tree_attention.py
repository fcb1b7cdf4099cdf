"""Tree attention equals sequential decoding; KV compaction then one more step equals the sequential run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from engine.draft_tree import Candidates, DraftTree
from engine.tree_builder import build_draft_tree
from engine.verify import compact_cache, tree_forward
from tests.conftest import random_model


def sequential_logits(model, ids):
    """Logits after every position of ``ids`` with plain causal attention (1, T, V)."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def make_tree(vocab, seed=0):
    rng = np.random.default_rng(seed)
    conts = rng.integers(0, vocab, (12, 6))
    conts[:6, :2] = conts[0, :2]  # shared prefixes -> branching
    conts[3:, 0] = conts[3, 0]
    conts[5, 4:] = -1             # a shorter continuation
    return build_draft_tree([Candidates(conts, rng.integers(1, 5, 12).astype(float), 1.0, 2)], budget=40)


def path_to(tree: DraftTree, node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = int(tree.parents[node])
    return path[::-1]


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_tree_logits_equal_sequential(family):
    model = random_model(family, 211, seed=3)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 211, 17).tolist()
    tree = make_tree(211)
    assert len(tree) > 10 and int(tree.depths.max()) >= 5
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt[:-1]]), past_key_values=cache, use_cache=True)
        logits = tree_forward(model, cache, prompt[-1], tree, len(prompt) - 1)
    ref0 = sequential_logits(model, prompt)[-1]
    assert torch.max(torch.abs(logits[0] - ref0)) <= 1e-5
    for node in range(len(tree)):
        ids = prompt + tree.tokens[path_to(tree, node)].tolist()
        ref = sequential_logits(model, ids)[-1]
        assert torch.max(torch.abs(logits[1 + node] - ref)) <= 1e-5, f"node {node}"


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_compaction_then_next_step_equals_sequential(family):
    model = random_model(family, 211, seed=4)
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 211, 9).tolist()
    tree = make_tree(211, seed=2)
    deepest = int(np.argmax(tree.depths))
    path = path_to(tree, deepest)
    assert path != list(range(len(path))), "want a non-contiguous path so the gather is exercised"
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt[:-1]]), past_key_values=cache, use_cache=True)
        tree_forward(model, cache, prompt[-1], tree, len(prompt) - 1)
        compact_cache(cache, len(prompt) - 1, path, len(tree))
        assert cache.get_seq_length() == len(prompt) + len(path)
        nxt = 5
        step = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True).logits[0, -1]
    ref = sequential_logits(model, prompt + tree.tokens[path].tolist() + [nxt])[-1]
    assert torch.max(torch.abs(step - ref)) <= 1e-5


def test_mask_and_positions_shape():
    tree = DraftTree.from_chain([4, 5, 6], source=8)
    mask = tree.attention_mask(10, torch.float32, torch.device("cpu"))
    assert mask.shape == (1, 1, 4, 14)
    allowed = (mask[0, 0] == 0)
    assert allowed[:, :10].all()
    assert torch.equal(allowed[:, 10:], torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert tree.position_ids(10, torch.device("cpu")).tolist() == [[10, 11, 12, 13]]
