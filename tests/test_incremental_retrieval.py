"""Incremental retrieval (engine.datastore.MatchState): a search that carries the last step's match
returns exactly what a fresh search returns, over random appends, rollbacks and new prompts, and it
needs fewer suffix-array probes when the context only grows."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine.datastore import Datastore, MatchState, Retrieval
from engine.drafters import FastCoderDrafter, FastCoderOptions, RestDrafter, RetrievalOptions


def summary(r: Retrieval):
    return (r.match_length, r.continuations.tolist(), r.counts.tolist(), r.total_matches,
            r.continuations.shape)


# A stream of operations on a growing context: append tokens (random ones, or a stretch copied from a
# document so matches get long), roll back, or start a new prompt. Ids may fall outside the vocabulary.
@st.composite
def streams(draw):
    alphabet = draw(st.integers(1, 5))
    offset = draw(st.sampled_from([0, 300, 65_534]))  # 65_534 + a: 4-byte tokens
    vocab = offset + alphabet + draw(st.integers(0, 2))
    tok = st.integers(offset, offset + alphabet - 1)
    docs = draw(st.lists(st.lists(tok, max_size=40), min_size=1, max_size=6))
    ops = draw(st.lists(st.tuples(st.sampled_from(["rand", "copy", "copy", "copy", "oov", "back", "new", "same"]),
                                  st.integers(0, 2**31 - 1)), min_size=1, max_size=40))
    return docs, vocab, offset, alphabet, ops


def apply_op(op, seed, context, docs, vocab, offset, alphabet):
    rng = random.Random(seed)
    if op == "rand":
        return context + [rng.randrange(offset, offset + alphabet) for _ in range(rng.randint(1, 4))]
    if op == "copy":
        doc = docs[rng.randrange(len(docs))]
        if not doc:
            return context
        i = rng.randrange(len(doc))
        return context + list(doc[i:i + rng.randint(1, 8)])
    if op == "oov":
        return context + [rng.choice([vocab, vocab + 5])]
    if op == "back":
        return context[:rng.randint(0, len(context))]
    if op == "new":
        doc = docs[rng.randrange(len(docs))]
        return list(doc[:rng.randint(0, len(doc))]) + [rng.randrange(offset, offset + alphabet)]
    return list(context)  # "same": searched again unchanged


@settings(max_examples=250, deadline=None)
@given(streams(), st.integers(1, 12), st.integers(1, 4), st.integers(0, 6), st.sampled_from([1, 3, 10**6]))
def test_incremental_search_equals_fresh(case, n_max, n_min, draft_len, max_matches):
    docs, vocab, offset, alphabet, ops = case
    ds = Datastore.from_documents(docs, vocab)
    state = MatchState()
    context: list[int] = []
    for i, (op, seed) in enumerate(ops):
        context = apply_op(op, seed, context, docs, vocab, offset, alphabet)
        arr = np.asarray(context, dtype=np.int64)
        ctx = arr if i % 2 else context  # arrays and lists alike
        got = ds.search(ctx, n_max=n_max, n_min=n_min, draft_len=draft_len, max_matches=max_matches, state=state)
        want = ds.search(ctx, n_max=n_max, n_min=n_min, draft_len=draft_len, max_matches=max_matches)
        assert summary(got) == summary(want), (i, op, context)


@settings(max_examples=60, deadline=None)
@given(streams(), st.lists(st.tuples(st.integers(1, 10), st.integers(1, 3)), min_size=1, max_size=4))
def test_changed_settings_or_datastore_reset_the_state(case, settings_list):
    """One state used with other n_min/n_max values or another datastore must still answer exactly."""
    docs, vocab, offset, alphabet, ops = case
    stores = [Datastore.from_documents(docs, vocab), Datastore.from_documents(docs[::-1] + [[offset] * 3], vocab)]
    state = MatchState()
    context: list[int] = []
    for i, (op, seed) in enumerate(ops):
        context = apply_op(op, seed, context, docs, vocab, offset, alphabet)
        n_max, n_min = settings_list[i % len(settings_list)]
        ds = stores[(seed >> 3) % 2]
        got = ds.search(context, n_max=n_max, n_min=n_min, draft_len=4, state=state)
        assert summary(got) == summary(ds.search(context, n_max=n_max, n_min=n_min, draft_len=4))


def test_seeded_long_streams_on_a_larger_corpus():
    """Longer streams than hypothesis draws: a 20k-token corpus of 40 ids, contexts walking copies of it
    with random breaks, rollbacks and restarts (n_max 16, the engine's setting)."""
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 40, rng.integers(50, 800)).tolist() for _ in range(40)]
    # repeated blocks make long matches with many occurrences
    block = rng.integers(0, 40, 30).tolist()
    docs += [block + rng.integers(0, 40, 20).tolist() for _ in range(15)]
    ds = Datastore.from_documents(docs, 40)
    state = MatchState()
    pr = random.Random(11)
    context: list[int] = list(block[:5])
    for step in range(1500):
        r = pr.random()
        if r < 0.55:
            doc = docs[pr.randrange(len(docs))]
            i = pr.randrange(len(doc))
            context += doc[i:i + pr.randint(1, 6)]
        elif r < 0.8:
            context.append(pr.randrange(40))
        elif r < 0.93:
            context = context[:pr.randint(0, len(context))]
        else:
            context = list(docs[pr.randrange(len(docs))][:pr.randint(1, 30)])
        for n_min in (2,):
            got = ds.search(np.asarray(context), n_max=16, n_min=n_min, draft_len=12, max_matches=32, state=state)
            want = ds.search(np.asarray(context), n_max=16, n_min=n_min, draft_len=12, max_matches=32)
            assert summary(got) == summary(want), step
    assert state.incremental > state.searches // 2


def test_extending_context_needs_fewer_probes():
    """Walking a document token by token: the incremental search probes once per step (the match
    grows by one, inside the last interval) where a fresh search binary-searches log2(n_max) times."""
    rng = np.random.default_rng(3)
    doc = rng.integers(0, 50, 3000).tolist()
    ds = Datastore.from_documents([doc, rng.integers(0, 50, 3000).tolist()], 50)
    walk = doc[100:400]
    fresh = inc = 0
    state = MatchState()
    for end in range(2, len(walk)):
        ctx = np.asarray(walk[:end])
        before = ds.probes  # suffix-array searches, native or Python
        got = ds.search(ctx, n_max=16, n_min=2, draft_len=8, state=state)
        inc += ds.probes - before
        before = ds.probes
        want = ds.search(ctx, n_max=16, n_min=2, draft_len=8)
        fresh += ds.probes - before
        assert summary(got) == summary(want)
    steps = len(walk) - 2
    assert inc <= steps * 1.05, (inc, steps)   # one probe per step (a few misses near the start)
    assert fresh >= steps * 3, (fresh, steps)  # a binary search over [2, 16]
    assert state.incremental == steps - 1      # every step after the first extends the last


def test_probe_inside_previous_interval_is_exact():
    """The first probe runs over the previous match's suffix-array interval only; its answer is the
    global interval (same left and count as an unrestricted search)."""
    rng = np.random.default_rng(5)
    docs = [([1, 2, 3] + rng.integers(0, 6, 5).tolist()) * 20 for _ in range(10)]
    ds = Datastore.from_documents(docs, 6)
    for n in range(1, 6):
        for _ in range(20):
            pat = docs[rng.integers(10)][(i := int(rng.integers(100))):i + n + 2]
            q = np.asarray(pat, dtype=np.int64)
            full = ds.find(ds.encode_query(q))
            prefix = ds.find(ds.encode_query(q[:n]))
            assert ds.find(ds.encode_query(q), within=prefix) == full


def test_drafters_carry_match_state_and_reset_it():
    rng = np.random.default_rng(1)
    doc = rng.integers(0, 30, 2000).tolist()
    ds = Datastore.from_documents([doc], 30)
    rest = RestDrafter(ds, RetrievalOptions(budget=8))
    fc = FastCoderDrafter(ds, ds, None, options=FastCoderOptions(use_cache=False, use_strategy=False,
                                                                 use_context_copy=False))
    for drafter, states in ((rest, [rest.match_state]), (fc, [fc.repo_state, fc.common_state])):
        drafter.reset(np.asarray(doc[:10]))
        for end in range(10, 60):
            drafter.propose(np.asarray(doc[:end]))
        assert all(s.searches == 50 and s.incremental == 49 for s in states)
        drafter.reset(np.asarray(doc[:10]))
        assert all(s.key is None for s in states)


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer):
    return tiny_tokenizer


def test_repo_datastore_with_pending_edits(tmp_path, tokenizer):
    """D_r with an overlay and tombstones (live counts) and after a merge: incremental == fresh, and the
    state resets when the indexed content changes."""
    from engine.repo_datastore import RepoDatastore

    texts = {
        "a.py": "def run(path):\n    for item in path:\n        print(item)\n    return len(path)\n" * 3,
        "b.py": "class Runner:\n    def run(self, path):\n        return run(path)\n" * 2,
    }
    for rel, text in texts.items():
        (tmp_path / rel).write_text(text)
    repo = RepoDatastore.build(tmp_path, tokenizer)
    enc = lambda t: tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    walk = enc(texts["a.py"] + texts["b.py"] + "def run(path):\n    for item in path:\n        return item\n")
    state = MatchState()
    pr = random.Random(2)
    for phase in range(4):
        if phase == 1:
            repo.update("a.py", texts["a.py"].replace("print(item)", "yield item") + "x = run(path)\n")
        elif phase == 2:
            repo.update("c.py", "def run(path):\n    for item in path:\n        yield item\n")
        elif phase == 3:
            repo.merge_overlay_tokens = 0  # the next change merges into a new base
            repo.update("c.py", "def run(path):\n    return path\n")
        end, context = 1, []
        while end < len(walk):
            end = min(len(walk), end + pr.randint(1, 5))
            if pr.random() < 0.1:
                end = max(1, end - pr.randint(1, 10))
            context = walk[:end]
            got = repo.search(context, n_min=2, draft_len=6, max_matches=10_000, state=state)
            want = repo.search(context, n_min=2, draft_len=6, max_matches=10_000)
            assert summary(got) == summary(want), (phase, end)
    assert state.incremental > 0


# ------------------------------------------------------------------------------ draft trees
# build_draft_tree merges the retrieved rows with array operations; it must build the very trees the
# node-by-node builder built (tests/reference_draft_tree.py), ties and float sums included.


def tree_fields(t):
    return [None if a is None else (a.dtype.str, a.tolist())
            for a in (t.tokens, t.parents, t.depths, t.sources, t.weights, t.keys, t.probs)]


@st.composite
def candidate_sets(draw):
    from engine.draft_tree import SOURCE_CACHE, SOURCE_COMMON, SOURCE_CONTEXT, SOURCE_REPO, Candidates

    parts = []
    for source in draw(st.lists(st.sampled_from([SOURCE_REPO, SOURCE_COMMON, SOURCE_CONTEXT, SOURCE_CACHE]),
                                max_size=4)):
        width = draw(st.integers(0, 14))
        top = draw(st.integers(1, 4))  # few token ids and counts: many ties to break
        rows = draw(st.lists(st.lists(st.integers(-1, top), min_size=width, max_size=width), max_size=20))
        tokens = np.asarray(rows, dtype=draw(st.sampled_from([np.int32, np.int64]))).reshape(len(rows), width)
        counts = np.asarray(draw(st.lists(st.integers(1, draw(st.sampled_from([1, 2, 9]))), min_size=len(rows),
                                          max_size=len(rows))), float)
        parts.append(Candidates(tokens, counts, draw(st.sampled_from([1.0, 0.5, 3.0])), source,
                                draw(st.integers(0, 16))))
    return parts


@settings(max_examples=400, deadline=None)
@given(candidate_sets(), st.integers(0, 40), st.sampled_from([0.0, 0.2, 0.5]), st.booleans(), st.integers(0, 3))
def test_array_tree_builder_equals_node_by_node_builder(parts, budget, min_prob, sized, seed):
    from reference_draft_tree import reference_build_draft_tree

    from engine.acceptance import AcceptanceEstimator
    from engine.cost_model import VerifyCost
    from engine.tree_builder import build_draft_tree

    est = cost = None
    if sized:
        est = AcceptanceEstimator()
        rng = np.random.default_rng(seed)  # a trained estimator: counts in some buckets
        est.tried[:] = rng.integers(0, 5, est.tried.shape)
        est.accepted[:] = np.minimum(est.tried, rng.integers(0, 5, est.tried.shape))
        cost = VerifyCost([1, 2, 4, 8, 16, 32, 64], [1.05, 1.1, 1.2, 1.4, 1.8, 2.6, 4.0], 5.0, 256)
    got = build_draft_tree(parts, budget, min_prob, est, cost)
    want = reference_build_draft_tree(parts, budget, min_prob, est, cost)
    assert tree_fields(got) == tree_fields(want)
