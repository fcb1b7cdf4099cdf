"""A greedy step's verification bound to one cache for a generation (engine.native.bound_verify.BoundVerify through
engine.verify.greedy_verifier): its checks run at the first call and again only after something they covered changed
(the cache's buffers grown, the plan pointed at another cache, more rows than the attention takes), and every step's
path, committed tokens and kept keys and values are those of engine.verify.verify_greedy, which checks at every call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import lean_forward
from engine.acceptance import NUM_BUCKETS, AcceptanceEstimator
from engine.draft_tree import DraftTree
from engine.kv_cache import buffers_epoch, new_kv_cache
from engine.lean_forward import weights_pinned
from engine.native import layer as fused_layer
from engine.native import step as native_step
from engine.native.bound_verify import BoundVerify
from engine.steps import decode_one_token_greedy
from engine.verify import greedy_verifier, verify_greedy
from test_greedy_step import _model

pytestmark = pytest.mark.skipif(fused_layer.fused_library() is None, reason="no native kernels on this machine")


def _prefilled(model, prompt, capacity: int):
    cache = new_kv_cache(model, capacity)
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def _continuation(model, prompt, pending: int, count: int) -> list[int]:
    """The model's own greedy tokens after ``prompt`` + ``pending``."""
    cache = _prefilled(model, prompt, prompt.shape[1] + count + 2)
    out, tok = [], pending
    for _ in range(count):
        tok = decode_one_token_greedy(model, cache, tok, cache.get_seq_length())
        out.append(tok)
    return out


def _tree(right: list[int], wrong: int, width: int) -> DraftTree:
    """A wrong first node with a child, then the right chain ``right`` from the root, then ``width`` more wrong
    children of the root: the walk takes the chain (its nodes move in the cache)."""
    tokens = [wrong, right[0] if right else wrong] + list(right) + [(wrong + 1 + j) % 256 for j in range(width)]
    parents = [-1, 0] + ([-1] + list(range(2, 2 + len(right) - 1)) if right else []) + [-1] * width
    n = len(tokens)
    depths = np.zeros(n, dtype=np.int64)
    for i, p in enumerate(parents):
        depths[i] = 1 if p < 0 else depths[p] + 1
    return DraftTree(np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64), depths,
                     np.ones(n, dtype=np.uint8), np.ones(n))


def _kv(cache):
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _same_kv(a, b) -> None:
    for (ka, va), (kb, vb) in zip(a, b):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_bound_steps_are_the_checked_calls_and_check_again_only_after_a_change(monkeypatch):
    model = _model(monkeypatch, max_rows=12)
    gen = torch.Generator().manual_seed(11)
    prompt = torch.randint(0, 256, (1, 244), generator=gen)  # the buffers' first 256 entries fill on the way
    pending = 9
    plan = [(2, 3), (0, 1), (3, 5), (1, 2), (4, 1), (2, 2), (0, 12), (1, 5), (2, 1), (1, 1)]  # (right chain, wrong)
    with torch.inference_mode(), weights_pinned(model):
        g = _continuation(model, prompt, pending, 48)
        trees, want = [], []  # the checked call at every step, on a cache of its own
        checked_cache = _prefilled(model, prompt, prompt.shape[1] + 64)
        tok, done = pending, 0
        for k, width in plan:
            trees.append(_tree(g[done:done + k], (g[done] + 7) % 256, width))
            got = verify_greedy(model, checked_cache, tok, trees[-1], checked_cache.get_seq_length())
            want.append((got, _kv(checked_cache)))
            assert got[1] == g[done:done + len(got[1])]
            tok, done = got[1][-1], done + len(got[1])
    checks, fallbacks = [], []
    real_check = BoundVerify._check
    monkeypatch.setattr(BoundVerify, "_check", lambda self, *a: checks.append(1) or real_check(self, *a))
    with torch.inference_mode(), weights_pinned(model):
        bound_cache = _prefilled(model, prompt, prompt.shape[1] + 8)  # grows on the way: new buffers
        other = _prefilled(model, prompt, prompt.shape[1] + 64)
        verify = greedy_verifier(model, bound_cache)
        assert isinstance(verify, BoundVerify)
        real_fallback = verify.fallback
        verify.fallback = lambda *a: fallbacks.append(len(a[1])) or real_fallback(*a)
        tok = pending
        epochs = []
        for i, tree in enumerate(trees):
            epochs.append(buffers_epoch())
            past = bound_cache.get_seq_length()
            *got, learned = verify(tok, tree, past)
            assert got == list(want[i][0]) and learned is False  # nothing asked to learn
            assert bound_cache.get_seq_length() == past + 1 + len(got[0])
            _same_kv(_kv(bound_cache), want[i][1])
            if i == 3:  # another cache stepped in between: the plan points at its buffers
                verify_greedy(model, other, tok, _tree([], 5, 2), other.get_seq_length())
            tok = got[1][-1]
    assert fallbacks == [1 + 1 + 12]  # 14 nodes: past the attention's 12 rows, the checked path took that step
    assert len(set(epochs)) >= 2  # the bound cache's buffers grew on the way
    # checked at the first call, at the step that outgrew the buffers and after the other cache; not at the other
    # seven (the fallback's forward moved the fill marks as a bound step would: nothing to check after it)
    assert len(checks) == 3


def test_outside_the_native_stack_the_verifier_is_the_checked_call(monkeypatch):
    """No one-call step (switched off): greedy_verifier gives verify_greedy itself, the same tokens."""
    model = _model(monkeypatch)
    monkeypatch.setattr(native_step.GreedyStep, "bind", lambda *a: pytest.fail("bound without a step"))
    model.__dict__[lean_forward.STEP_ATTR][0][0] = False
    gen = torch.Generator().manual_seed(12)
    prompt = torch.randint(0, 256, (1, 20), generator=gen)
    with torch.inference_mode():
        g = _continuation(model, prompt, 3, 6)
        cache = _prefilled(model, prompt, 40)
        verify = greedy_verifier(model, cache)
        assert not isinstance(verify, BoundVerify)
        path, committed, learned = verify(3, _tree(g[:3], (g[0] + 1) % 256, 1), cache.get_seq_length())
    assert path == [2, 3, 4] and committed == g[:4] and learned is False


def _keyed(tree: DraftTree, keys, sources) -> DraftTree:
    tree.keys = np.asarray(keys, dtype=np.int64)
    tree.sources = np.asarray(sources, dtype=np.uint8)
    return tree


def test_the_bound_step_learns_the_estimates_and_hits_the_python_update_would(monkeypatch):
    """learn=(estimator, hits): after each bound step the estimator's four count arrays and the per-bitmask hits are
    those AcceptanceEstimator.update and the decoder's count give for the same walk, bit for bit; a tree without
    keys (not sized by cost) only counts its hits; one with a key outside the arrays changes nothing (learned
    False: the caller's own update runs, and raises)."""
    model = _model(monkeypatch)
    gen = torch.Generator().manual_seed(13)
    prompt = torch.randint(0, 256, (1, 40), generator=gen)
    rng = np.random.default_rng(13)
    native_est, python_est = AcceptanceEstimator(), AcceptanceEstimator()
    native_hits, python_hits = np.zeros(256, dtype=np.int64), np.zeros(256, dtype=np.int64)
    with torch.inference_mode(), weights_pinned(model):
        g = _continuation(model, prompt, 5, 48)
        cache = _prefilled(model, prompt, 128)
        verify = greedy_verifier(model, cache, native_est, native_hits)
        tok, done = 5, 0
        for k, width in [(2, 3), (0, 2), (3, 1), (1, 4), (4, 0), (2, 2)]:
            tree = _tree(g[done:done + k], (g[done] + 7) % 256, width)
            n = len(tree)
            _keyed(tree, rng.integers(0, NUM_BUCKETS, n), rng.integers(1, 256, n))
            path, committed, learned = verify(tok, tree, cache.get_seq_length())
            assert learned is True
            python_est.update(tree.keys, tree.parents, path)
            for node in path:
                python_hits[tree.sources[node]] += 1
            for a, b in zip((native_est.accepted, native_est.tried, native_est.pooled_accepted,
                             native_est.pooled_tried), (python_est.accepted, python_est.tried,
                                                        python_est.pooled_accepted, python_est.pooled_tried)):
                assert np.array_equal(a, b)
            assert np.array_equal(native_hits, python_hits)
            tok, done = committed[-1], done + len(committed)
        assert python_hits.sum() > 0 and python_est.accepted.sum() > 0  # something was accepted on the way
        plain = _tree(g[done:done + 2], (g[done] + 7) % 256, 1)
        plain.sources = np.full(len(plain), 3, dtype=np.uint8)  # keys None: a tree not sized by cost
        tried = native_est.tried.copy()
        path, committed, learned = verify(tok, plain, cache.get_seq_length())
        assert learned is True and path and np.array_equal(native_est.tried, tried)
        python_hits[3] += len(path)
        assert np.array_equal(native_hits, python_hits)
        tok, done = committed[-1], done + len(committed)
        before = [x.copy() for x in (native_est.accepted, native_est.tried, native_hits)]
        bad = _keyed(_tree(g[done:done + 2], (g[done] + 7) % 256, 1), [0, 1, NUM_BUCKETS, 2, 3], [1] * 5)
        *_, learned = verify(tok, bad, cache.get_seq_length())
        assert learned is False  # a key past the arrays: the caller's own update runs (and raises)
        assert all(np.array_equal(x, y) for x, y in zip(before, (native_est.accepted, native_est.tried, native_hits)))


def test_the_bound_step_feeds_the_draft_head_as_its_own_step_does(monkeypatch):
    """learn=(..., head): the draft head learns from the committed token after the pending one and takes the hidden
    state of the row that chose the new pending token, in the verification's call: the same parameters, h', records
    and learned count, bit for bit, as DepthOneFeature.step on the same rows after a plain bound step."""
    import engine.draft_head as dh  # noqa: PLC0415
    from test_draft_head import _feature  # noqa: PLC0415

    model = _model(monkeypatch)
    dim, vocab = model.config.hidden_size, model.config.vocab_size
    fed, own = _feature(vocab, dim, 5), _feature(vocab, dim, 5)
    if fed._native is None:
        pytest.skip("no native draft-head step here")
    gen = torch.Generator().manual_seed(14)
    prompt = torch.randint(0, vocab, (1, 40), generator=gen)
    rng = np.random.default_rng(14)
    with torch.inference_mode(), weights_pinned(model):
        g = _continuation(model, prompt, 5, 40)
        caches = _prefilled(model, prompt, 128), _prefilled(model, prompt, 128)
        hits = np.zeros(256, dtype=np.int64), np.zeros(256, dtype=np.int64)
        bound = greedy_verifier(model, caches[0], None, hits[0], fed)
        plain = greedy_verifier(model, caches[1], None, hits[1])  # learns no head: fed below by its own step
        assert bound.head is fed and plain.head is None
        tok, done = 5, 0
        for k, width in [(2, 3), (0, 2), (3, 1), (1, 4)]:
            tree = _tree(g[done:done + k], (g[done] + 7) % vocab, width)
            toks = rng.choice(vocab, size=2, replace=False)  # the last build's depth-1 records, the same in both
            for f in (fed, own):
                f.seen_tokens[0] = 2
                f.seen_tokens[1:3] = toks
                f.seen_values[:4] = [0.4, -2.0, 0.7, -1.0]
            path, committed, learned = bound(tok, tree, caches[0].get_seq_length())
            assert learned is True
            assert plain(tok, tree, caches[1].get_seq_length())[:2] == (path, committed)
            own.step(lean_forward.hidden_rows(model), path[-1] + 1 if path else 0, committed[0])
            assert fed.params.tolist() == own.params.tolist() and np.array_equal(fed.hidden, own.hidden)
            assert fed.learned == own.learned and _seen_records(fed) == _seen_records(own)
            tok, done = committed[-1], done + len(committed)
    assert fed.learned > 0 and isinstance(fed, dh.DepthOneFeature)


def _seen_records(feature):
    n = int(feature.seen_tokens[0])
    return feature.seen_tokens[1:1 + n].tolist(), feature.seen_values[:2 * n].tolist()
