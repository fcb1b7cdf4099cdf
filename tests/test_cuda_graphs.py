"""engine.cuda_graphs on a CPU: the graphed forward's body run eagerly (``capture=False``: the same padded rows, masks,
bound KV buffer and compaction a GPU replays), against the model's own forward and greedy output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import SpeculativeDecoder
from engine.cuda_graphs import (ATTR, GRAPHS_ENV, ROW_BUCKETS, TOKENS_ENV, GraphedForward, graphed, install_cuda_graphs,
                                why_not)
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.steps import prefill
from engine.verify import compact_cache, tree_forward
from tests.conftest import loaded_random
from tests.test_lossless import perturbed_datastore, reference_greedy


def _tree(rng, n: int, vocab: int) -> DraftTree:
    """A random tree of ``n`` nodes (parents first)."""
    if n == 0:
        return DraftTree.empty()
    parents = np.array([-1] + [int(rng.integers(-1, i)) for i in range(1, n)], dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    for i, p in enumerate(parents):
        depths[i] = 1 if p < 0 else depths[p] + 1
    return DraftTree(rng.integers(0, vocab, n).astype(np.int64), parents, depths, np.zeros(n, dtype=np.uint8),
                     np.ones(n))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("n", [0, 1, 6, 40, 80])
def test_padded_rows_and_masked_keys_give_the_eager_forwards_logits_and_cache(family, n):
    loaded = loaded_random(family, 300, seed=3)
    model = loaded.model
    rng = np.random.default_rng(n)
    prompt = torch.tensor([rng.integers(0, 300, 200).tolist()])
    tree = _tree(rng, n, 300)
    caches, outs = [], []
    for graphs in (False, True):
        if graphs:
            assert install_cuda_graphs(model, capacity=512, capture=False) == ""
        with torch.inference_mode():
            cache = new_kv_cache(model, 256)
            prefill(model, cache, prompt)
            logits = tree_forward(model, cache, 7, tree, 200).clone()
            assert cache.get_seq_length() == 201 + n
            path = [0, 2] if n >= 3 and tree.parents[2] == 0 else []
            compact_cache(cache, 200, path, n)
        caches.append(cache)
        outs.append(logits)
    runner = graphed(model)
    assert runner.replays == 1 and runner.bound(caches[1])
    assert outs[1].shape == (1 + n, 300)
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    assert outs[1].argmax(-1).tolist() == outs[0].argmax(-1).tolist()
    length = caches[0].get_seq_length()
    assert caches[1].get_seq_length() == length
    for eager, bound in zip(caches[0].layers, caches[1].layers):
        torch.testing.assert_close(bound.keys[..., :length, :], eager.keys[..., :length, :], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(bound.values[..., :length, :], eager.values[..., :length, :], rtol=1e-5,
                                   atol=1e-5)


def test_every_method_stays_lossless_through_the_graphed_forward():
    """Greedy output equals transformers' generate for the plain step and the drafting methods, across the key
    buckets (a 240-token prompt, 48 new tokens: 256 then 512 keys) and across generations that rebind caches."""
    loaded = loaded_random("llama", 512, seed=1)
    rng = np.random.default_rng(2)
    base = rng.integers(0, 512, 110).tolist()
    prompts = [base + rng.integers(0, 512, 20).tolist() + base[:110], base[:60] + base[:60]]
    refs = [reference_greedy(loaded, p, 48) for p in prompts]
    store = perturbed_datastore(refs[0], prompts[0], 512)
    assert install_cuda_graphs(loaded.model, capacity=512, capture=False) == ""
    runner = graphed(loaded.model)
    accepted = 0.0
    for method in ("ar", "copyspec", "fastcoder"):
        dec = SpeculativeDecoder(loaded, method=method, repo_datastore=store if method == "fastcoder" else None,
                                 common_datastore=store)
        doc = dec.new_cache() if method == "fastcoder" else None
        for prompt, ref in [*zip(prompts, refs), (prompts[0], refs[0])]:  # the last reuses its kept prompt KV
            before = runner.replays
            res = dec.generate(prompt, max_new_tokens=48, cache=doc) if doc is not None else \
                dec.generate(prompt, max_new_tokens=48)
            assert res.token_ids == ref, f"{method} diverged from greedy through the graphed forward"
            assert runner.replays > before
            if method != "ar":
                accepted = max(accepted, res.stats["mean_accepted_length"])
    assert accepted > 1.5, "drafts were never accepted: the test would not exercise tree verification"
    assert {keys for _, keys in runner.graphs} == {256, 512}


def test_a_cache_bound_before_keeps_its_entries_when_another_binds():
    loaded = loaded_random("llama", 300, seed=4)
    model = loaded.model
    runner = GraphedForward(model, 512, capture=False)
    rng = np.random.default_rng(0)
    with torch.inference_mode():
        first, second = new_kv_cache(model, 64), new_kv_cache(model, 64)
        prefill(model, first, torch.tensor([rng.integers(0, 300, 30).tolist()]))
        prefill(model, second, torch.tensor([rng.integers(0, 300, 50).tolist()]))
        keys = [layer.keys.clone() for layer in first.layers]
        assert runner.bind(first) and runner.bound(first)
        assert runner.bind(second) and runner.bound(second) and not runner.bound(first)
        for layer, kept in zip(first.layers, keys):
            assert layer.get_seq_length() == 30
            assert torch.equal(layer.keys, kept)
        assert runner.bind(first)
        for layer, kept in zip(first.layers, keys):
            assert torch.equal(layer.keys, kept)


def test_forwards_the_graphs_do_not_take_run_eagerly():
    loaded = loaded_random("llama", 300, seed=5)
    model = loaded.model
    runner = GraphedForward(model, 256, capture=False)
    rng = np.random.default_rng(1)
    with torch.inference_mode():
        cache = new_kv_cache(model, 64)
        prefill(model, cache, torch.tensor([rng.integers(0, 300, 40).tolist()]))
        assert runner.tree_logits(cache, 3, _tree(rng, ROW_BUCKETS[-1], 300), 40) is None  # past the largest bucket
        assert runner.tree_logits(cache, 3, _tree(rng, 4, 300), 39) is None  # the cache holds another length
        assert runner.tree_logits(cache, 3, _tree(rng, 30, 300), 240) is None  # past the capacity
        assert runner.replays == 0 and not runner.bound(cache)


def test_install_says_why_not(monkeypatch):
    loaded = loaded_random("llama", 300, seed=6)
    assert "cuda" in install_cuda_graphs(loaded.model).lower()  # a CPU model, no capture=False
    monkeypatch.setenv(GRAPHS_ENV, "0")
    assert install_cuda_graphs(loaded.model, capture=False) == f"{GRAPHS_ENV}=0"
    assert ATTR not in loaded.model.__dict__
    assert "gpt2" in why_not(loaded_random("gpt2", 300, seed=6).model)
    with pytest.raises(ValueError):
        GraphedForward(loaded.model, 100, capture=False)
    monkeypatch.delenv(GRAPHS_ENV)
    monkeypatch.setenv(TOKENS_ENV, "lots")
    assert TOKENS_ENV in install_cuda_graphs(loaded.model, capture=False)
    monkeypatch.setenv(TOKENS_ENV, "300")
    assert install_cuda_graphs(loaded.model, capture=False) == ""
    assert graphed(loaded.model).capacity == 300


def test_the_install_probe_passes_a_correct_body_and_names_a_wrong_one():
    from engine.cuda_graphs import probe

    loaded = loaded_random("qwen2", 300, seed=7)
    runner = GraphedForward(loaded.model, 512, capture=False)
    assert probe(runner, repeats=1, require_faster=False, record_keys=512) == ""
    assert runner.replays == 2
    assert set(runner.graphs) == {(r, k) for r in ROW_BUCKETS for k in (256, 512)}  # every bucket made at install
    runner.cos = runner.cos.flip(0)  # every position's rotation wrong: the replays' logits differ
    assert "differ from the eager forward" in probe(runner, repeats=1, require_faster=False)


def test_a_recording_that_fails_turns_the_graphs_off_and_the_step_runs_eagerly():
    loaded = loaded_random("llama", 512, seed=1)
    rng = np.random.default_rng(2)
    prompt = rng.integers(0, 512, 40).tolist() * 2
    ref = reference_greedy(loaded, prompt, 24)
    assert install_cuda_graphs(loaded.model, capacity=256, capture=False) == ""
    runner = graphed(loaded.model)
    runner.capture = True

    def refuse(rows, keys):
        raise RuntimeError("operation not permitted when stream is capturing")

    runner._record = refuse
    res = SpeculativeDecoder(loaded, method="copyspec").generate(prompt, max_new_tokens=24)
    assert res.token_ids == ref
    assert "operation not permitted" in runner.broken and runner.replays == 0
