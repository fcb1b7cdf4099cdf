"""A greedy forward in one native call (engine/native/step.c, engine/native/step.py): the same tokens and final hidden
states, bit for bit, as the three native calls it replaces (gather, fused layers, screened head), through cache growth,
caches taken in turn, replaced weights and rows the screen does not take; calls it does not take go the other way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import lean_forward
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.native import layer as fused_layer
from engine.native import step as native_step
from engine.native.screened_head import screened_head
from engine.steps import decode_one_token_greedy
from engine.verify import tree_forward_greedy
from test_fused_layer import _model as fused_model

pytestmark = pytest.mark.skipif(fused_layer.fused_library() is None, reason="no native kernels on this machine")

PARENTS = [-1, 0, 0, 1, 3, -1]  # below the pending token: two branches, a chain of three under the first


def _model(monkeypatch, max_rows: int = 16):
    model = fused_model(monkeypatch, max_rows=max_rows)
    if screened_head(model.lm_head) is None:
        pytest.skip("no int8 screen on this CPU")
    return model


def _tree(tokens) -> DraftTree:
    n = len(tokens)
    parents = np.asarray(PARENTS[:n], dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    for i, p in enumerate(parents):
        depths[i] = 1 if p < 0 else depths[p] + 1
    return DraftTree(np.asarray(tokens, dtype=np.int64), parents, depths, np.ones(n, dtype=np.uint8), np.ones(n))


def _use_step(model, on: bool) -> None:
    """The model's greedy step on (made again on its next use) or off (every forward takes the three calls)."""
    model.__dict__[lean_forward.STEP_ATTR][0][0] = None if on else False


def _count(monkeypatch) -> list:
    taken = []
    real = native_step.GreedyStep.tree

    def counted(self, pending, tree, *args):
        got = real(self, pending, tree, *args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(native_step.GreedyStep, "tree", counted)
    return taken


def _decode(model, prompt, steps, capacity=None, caches=None):
    """Prefill ``prompt``, then per step a plain step (one token) or a tree step (more), keeping the pending token
    as acceptance would. Returns per step the greedy tokens and a copy of the final hidden states."""
    out = []
    with torch.inference_mode():
        cache = caches if caches is not None else new_kv_cache(model, capacity or prompt.shape[1] + 64)
        if cache.get_seq_length() == 0:
            model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        for ids in steps:
            past = cache.get_seq_length()
            if len(ids) == 1:
                got = [decode_one_token_greedy(model, cache, ids[0], past)]
            else:
                got = tree_forward_greedy(model, cache, ids[0], _tree(ids[1:]), past)
            out.append((got, lean_forward.hidden_rows(model)[0].clone()))
            cache.crop(past + 1 - cache.get_seq_length())
    return out


def _steps(seed: int, count: int = 12):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 256, (1, 30), generator=gen)
    sizes = [1, 4, 7, 1, 2, 6, 1, 3, 7, 1, 5, 7][:count]
    return prompt, [torch.randint(0, 256, (k,), generator=gen).tolist() for k in sizes]


def _fast_then_slow(model, prompt, steps, **kw):
    """``_decode`` with the greedy step as it is, then with it off."""
    fast = _decode(model, prompt, steps, **kw)
    _use_step(model, False)
    return fast, _decode(model, prompt, steps, **kw)


def _same(a, b) -> None:
    assert [t for t, _ in a] == [t for t, _ in b]
    for (_, ha), (_, hb) in zip(a, b):
        assert torch.equal(ha, hb)


def test_one_native_call_gives_the_three_calls_tokens_and_hidden_states_bit_for_bit(monkeypatch):
    model = _model(monkeypatch)
    prompt, steps = _steps(1)
    taken = _count(monkeypatch)
    fast, slow = _fast_then_slow(model, prompt, steps, capacity=prompt.shape[1] + 2)  # the buffers grow on the way
    assert taken == [True] * len(steps)  # not asked while off
    _same(fast, slow)


def test_caches_taken_in_turn_each_get_their_own_entries(monkeypatch):
    model = _model(monkeypatch)
    (p1, s1), (p2, s2) = _steps(2), _steps(3)
    alone = _decode(model, p1, s1), _decode(model, p2, s2)
    with torch.inference_mode():
        caches = new_kv_cache(model, 40), new_kv_cache(model, 200)
    turns = ([], [])
    for i in range(len(s1)):  # one step of each cache in turn: the plan's cache pointers move every step
        turns[0].extend(_decode(model, p1, [s1[i]], caches=caches[0]))
        turns[1].extend(_decode(model, p2, [s2[i]], caches=caches[1]))
    _same(turns[0], alone[0])
    _same(turns[1], alone[1])


def test_a_replaced_embedding_weight_gets_a_new_step(monkeypatch):
    model = _model(monkeypatch)
    prompt, steps = _steps(4, count=6)
    _decode(model, prompt, steps)
    emb = model.model.embed_tokens
    with torch.no_grad():
        emb.weight = torch.nn.Parameter(emb.weight.flip(0).clone())
    taken = _count(monkeypatch)
    fast, slow = _fast_then_slow(model, prompt, steps)
    assert taken[0] is False and all(taken[1:])  # the first call finds the old weight, the next ones a new step
    _same(fast, slow)
    _use_step(model, True)
    _decode(model, prompt, steps[:1])  # a step made with the weight as it is now
    with torch.no_grad():
        emb.weight.mul_(1.5)  # then changed in place: the same
    taken.clear()
    fast, slow = _fast_then_slow(model, prompt, steps)
    assert taken[0] is False and all(taken[1:])
    _same(fast, slow)


def test_a_row_the_screen_does_not_take_gets_the_whole_head(monkeypatch):
    model = _model(monkeypatch)
    prompt, steps = _steps(5, count=4)
    with torch.no_grad():
        model.model.embed_tokens.weight[steps[1][2]] = float("nan")  # a node whose hidden state is not finite
    taken = _count(monkeypatch)
    fast, slow = _fast_then_slow(model, prompt, steps)
    assert all(taken)
    assert [t for t, _ in fast] == [t for t, _ in slow]


def test_more_rows_than_the_attention_takes_go_the_other_way(monkeypatch):
    model = _model(monkeypatch, max_rows=4)
    prompt, steps = _steps(6, count=3)  # 1, 4 and 7 rows: the last is past the attention's 4
    taken = _count(monkeypatch)
    fast, slow = _fast_then_slow(model, prompt, steps)
    assert taken == [True, True]
    _same(fast, slow)


def test_autograd_or_a_position_that_is_not_the_caches_take_the_other_way(monkeypatch):
    model = _model(monkeypatch)
    prompt, steps = _steps(7, count=2)
    with torch.inference_mode():
        cache = new_kv_cache(model, 64)
        model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        past = cache.get_seq_length()
        assert lean_forward.greedy_tree_step(model, cache, 3, _tree([]), past + 1) is None  # not the cache's length
        assert cache.get_seq_length() == past
    with torch.enable_grad():
        assert lean_forward.greedy_tree_step(model, cache, 3, _tree([]), past) is None
    assert cache.get_seq_length() == past


def test_the_verify_cost_key_says_whether_greedy_forwards_take_one_call(monkeypatch):
    """c(n) measured through the one-call step is not the curve of the three calls: the cache key tells them apart."""
    from engine.cost_model import cost_key  # noqa: PLC0415
    from engine.model import LoadedModel  # noqa: PLC0415

    model = _model(monkeypatch)
    loaded = LoadedModel(model=model, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                         name="random-llama", lean_forward="")
    assert cost_key(loaded)["greedy_step"] is True
    monkeypatch.setenv(lean_forward.STEP_ENV, "0")
    assert cost_key(loaded)["greedy_step"] is False


def _verify_run(model, prompt, pending: int, tokens, parents, probs=None):
    """Prefill ``prompt``, then one greedy verification of the tree (tokens, parents; ``probs`` its nodes' estimates,
    None: none) below ``pending``; returns the path, the committed tokens, every layer's kept keys and values and the
    rows the LM head's screen read."""
    from engine.verify import verify_greedy  # noqa: PLC0415

    screen = screened_head(model.lm_head)
    with torch.inference_mode():
        cache = new_kv_cache(model, prompt.shape[1] + 16)
        model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        past = cache.get_seq_length()
        n = len(tokens)
        depths = np.zeros(n, dtype=np.int64)
        for i, p in enumerate(parents):
            depths[i] = 1 if p < 0 else depths[p] + 1
        tree = DraftTree(np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64), depths,
                         np.ones(n, dtype=np.uint8), np.ones(n),
                         probs=None if probs is None else np.asarray(probs, dtype=np.float64))
        before = screen.rows
        path, committed = verify_greedy(model, cache, pending, tree, past)
        assert cache.get_seq_length() == past + 1 + len(path)
        kv = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    return path, committed, kv, screen.rows - before


def _continuation(model, prompt, pending: int, count: int = 4) -> list[int]:
    """The model's ``count`` greedy tokens after ``prompt`` and ``pending``."""
    with torch.inference_mode():
        cache = new_kv_cache(model, prompt.shape[1] + count + 1)
        model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        g, tok = [], pending
        for _ in range(count):
            tok = decode_one_token_greedy(model, cache, tok, cache.get_seq_length())
            g.append(tok)
    return g


def test_verification_in_one_call_walks_and_compacts_as_the_three_calls_and_python_do(monkeypatch):
    model = _model(monkeypatch)
    prompt, _ = _steps(8, count=1)
    pending = 17
    g = _continuation(model, prompt, pending)  # the model's own tokens after pending: g[0], g[1], ...
    wrong = [(t + 1) % 256 for t in g]
    # the right chain on the second branch (nodes 1, 2, 3 move to slots 0, 1, 2), a wrong node below the first
    tokens, parents = [wrong[0], g[0], g[1], g[2], g[1]], [-1, -1, 1, 2, 0]
    calls = []
    real = native_step.GreedyStep.verify
    monkeypatch.setattr(native_step.GreedyStep, "verify", lambda self, *a: calls.append(1) or real(self, *a))
    fast = _verify_run(model, prompt, pending, tokens, parents)
    assert calls and fast[0] == [1, 2, 3] and fast[1] == g
    _use_step(model, False)
    slow = _verify_run(model, prompt, pending, tokens, parents)
    assert len(calls) == 1 and fast[:2] == slow[:2]
    for (kf, vf), (ks, vs) in zip(fast[2], slow[2]):
        assert torch.equal(kf, ks) and torch.equal(vf, vs)


def test_the_step_is_made_at_the_load_or_the_first_greedy_forward_and_reported(monkeypatch):
    model = _model(monkeypatch)  # no forward yet: no rotary table
    assert lean_forward.greedy_step_serves(model) is False  # reads only: not made yet
    assert lean_forward.greedy_step_serves(model, make=True) is True  # the server's load makes it (and the table)
    prompt, steps = _steps(9, count=3)
    taken = _count(monkeypatch)
    _decode(model, prompt, steps)
    assert taken == [True] * 3
    monkeypatch.setenv(lean_forward.STEP_ENV, "0")
    off = _model(monkeypatch)
    assert lean_forward.greedy_step_serves(off, make=True) is False


def test_a_reset_cache_is_not_stepped_through_its_freed_buffers(monkeypatch):
    """The step remembers a cache's buffers by weak reference; after a reset (buffers gone, freed) the cache is
    checked again and declined, and after a new prefill it is stepped into its new buffers."""
    import gc  # noqa: PLC0415

    model = _model(monkeypatch)
    prompt, steps = _steps(10, count=4)
    taken = _count(monkeypatch)
    with torch.inference_mode():
        cache = new_kv_cache(model, 64)
    before = _decode(model, prompt, steps, caches=cache)
    cache.reset()
    gc.collect()
    with torch.inference_mode():
        assert lean_forward.greedy_tree_step(model, cache, 3, _tree([]), 0) is None  # no buffers: declined
    after = _decode(model, prompt, steps, caches=cache)  # prefilled again: new buffers
    _same(before, after)
    assert taken == [True] * 4 + [False] + [True] * 4


def test_the_walk_screens_only_the_rows_it_reads_ahead_along_the_likeliest_children(monkeypatch):
    """A wrong chain of six nodes beside the model's own chain of three: the screen reads the pending token's row and,
    in the same pass, up to three rows below it along the likeliest children while their estimated reach stays >= 0.4;
    a row the walk then needs and no pass read starts another pass. Path, tokens and cache bytes stay those of the
    three calls, which read every row."""
    model = _model(monkeypatch)
    prompt, _ = _steps(9, count=1)
    pending = 23
    g = _continuation(model, prompt, pending)
    wrong = [(t + 7) % 256 for t in (*g, *g)][:6]
    right = [*wrong, g[0], g[1], g[2]]  # nodes 0-5: the wrong chain (rows 1-6); 6-8: the model's (rows 7-9)
    off = [*wrong, g[0], wrong[1], g[2]]  # the same with the model's chain wrong from its second node
    parents = [-1, 0, 1, 2, 3, 4, -1, 6, 7]
    cases = {  # tokens, estimates -> rows screened
        "the model's chain likelier": (right, [0.5] * 6 + [0.9] * 3, 4),  # rows 0, 7, 8, 9 in one pass
        "the wrong chain likelier": (right, [0.9] * 6 + [0.5] * 3, 7),  # rows 0-3, then 7, 8 (reach 0.5), 9
        "no estimates": (right, None, 7),  # the first children: rows 0-3, then 7-9
        "the reach falls below the bound": (off, [0.5] * 6 + [0.9, 0.3, 0.9], 2),  # rows 0, 7: node 7 rejected
    }
    got = {name: _verify_run(model, prompt, pending, tokens, parents, probs)
           for name, (tokens, probs, _) in cases.items()}
    _use_step(model, False)
    whole = {id(tokens): _verify_run(model, prompt, pending, tokens, parents, None) for tokens in (right, off)}
    assert whole[id(right)][:2] == ([6, 7, 8], g) and whole[id(off)][:2] == ([6], g[:2])
    for name, (tokens, _, rows) in cases.items():
        path, committed, kv, screened = got[name]
        want = whole[id(tokens)]
        assert (path, committed, screened) == (want[0], want[1], rows), name
        for (kf, vf), (ks, vs) in zip(kv, want[2]):
            assert torch.equal(kf, ks) and torch.equal(vf, vs)
