"""A fastcoder step's drafting in one native call (engine.native.propose, propose.c) gives the tree of the Python
path bit for bit, with the same side effects, on random caches, histories, contexts and datastore answers."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_draft_tree_sized import _trained

from engine import native
from engine.acceptance import AcceptanceEstimator
from engine.cost_model import VerifyCost
from engine.drafters import FastCoderCache, FastCoderDrafter, FastCoderOptions, RetrievalOptions
from engine.history import CompletionHistory, TokenMirror
from engine.native import propose as native_propose

COST = VerifyCost([1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
                  [1.10, 1.21, 1.35, 1.62, 1.90, 2.10, 2.40, 2.70, 3.30, 3.90], 3.1, 512)

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler: the native step is not built here")


class Store:
    """A datastore answering from a fixed table of (last two tokens) -> continuations; counts its searches."""

    version = 0

    def __init__(self, table: dict, source_len: int = 2):
        self.table, self.calls, self.source_len = table, 0, source_len

    def search(self, context, n_max=16, n_min=2, draft_len=16, max_matches=128):
        self.calls += 1
        rows = self.table.get(tuple(int(t) for t in context[-2:]))
        if not rows:
            return SimpleNamespace(match_length=0, continuations=np.zeros((0, 2), np.int64), counts=np.zeros(0))
        width = max(len(r) for r in rows)
        cont = np.full((len(rows), width), -1, dtype=np.int64)
        for i, r in enumerate(rows):
            cont[i, :len(r)] = r
        return SimpleNamespace(match_length=self.source_len, continuations=cont,
                               counts=np.arange(1, len(rows) + 1, dtype=np.int64))


class LineStarts:
    """Token 0 starts a line (the skip token's rule applies after it); token 5 is special (no retrieval for a
    context whose last two tokens hold it: FastCoderDrafter._retrieval_key, in C in the native step)."""

    special = frozenset({5})

    def at_line_start(self, context) -> bool:
        return len(context) > 0 and int(context[-1]) == 0


def _drafter(native_on: bool, cache_seqs, history_gens, table, seed: int, cache_tokens: int, history_tokens: int,
             beside: bool = False, depth: int = 24):
    cache = FastCoderCache(max_tokens=cache_tokens)
    for seq in cache_seqs:
        cache.add(seq)
    history = CompletionHistory(max_tokens=history_tokens, context_tokens=3)
    for prompt, out in history_gens:
        history.add(prompt, out)
    d = FastCoderDrafter(Store(table), Store({k: [r[::-1] for r in v] for k, v in table.items()}, 3), LineStarts(),
                         cache=cache, options=FastCoderOptions(seed=seed, retrieve_beside_copy=beside,
                                                               tree_max_depth=depth, copy_max_depth=depth),
                         retrieval=RetrievalOptions(draft_len=8 if depth == 24 else depth, budget=64, max_matches=32),
                         estimator=_trained(seed), cost=COST, history=history)
    if not native_on:
        d._native = False
    return d


def _same(a, b) -> bool:
    fields = ("tokens", "parents", "depths", "sources", "weights", "keys", "probs")
    return all((getattr(a, f) is None) == (getattr(b, f) is None)
               and (getattr(a, f) is None or np.array_equal(getattr(a, f), getattr(b, f))) for f in fields)


tok = st.integers(0, 5)
seqs = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=30), max_size=20)  # bigrams recurring > 32 times
gens = st.lists(st.tuples(st.lists(tok, max_size=5), st.lists(st.integers(0, 3), max_size=24)), max_size=10)
tables = st.dictionaries(st.tuples(tok, tok), st.lists(st.lists(tok, min_size=1, max_size=5), min_size=1, max_size=3),
                         max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seqs, gens, tables, st.lists(tok, min_size=1, max_size=80), st.integers(0, 3), st.integers(16, 400),
       st.integers(8, 200), st.booleans(), st.sampled_from([24, 48]), st.sets(st.integers(0, 3), max_size=2))
def test_native_step_gives_the_python_tree_and_side_effects(cache_seqs, history_gens, table, stream, seed,
                                                            cache_tokens, history_tokens, beside, depth, stop_ids):
    """Both retrieval policies: D_r and D_c only where neither the cache nor the copy continues the context, or at
    every cache miss beside the copy (``retrieve_beside_copy``, chosen where verification is cheap); trees,
    copies and continuations at most 24 tokens deep, or 48 (also chosen where verification is cheap); with and
    without stop tokens (every source's continuations cut after one)."""
    fast = _drafter(True, cache_seqs, history_gens, table, seed, cache_tokens, history_tokens, beside, depth)
    slow = _drafter(False, cache_seqs, history_gens, table, seed, cache_tokens, history_tokens, beside, depth)
    assert fast._native, "the default configuration must take the native step"
    if stop_ids:
        stop = np.zeros(6, dtype=np.uint8)
        stop[sorted(stop_ids)] = 1
        fast.set_stop_tokens(stop)
        slow.set_stop_tokens(stop)
    prompt = np.asarray(stream[:max(1, len(stream) // 3)], dtype=np.int64)
    fast.reset(prompt)
    slow.reset(prompt)
    context = np.asarray(stream, dtype=np.int64)
    for n in range(len(prompt), len(context) + 1):  # a growing context, as the decoder's steps give it
        a, b = fast.propose(context[:n]), slow.propose(context[:n])
        assert _same(a, b), (n, a, b)
        if stop_ids:  # nothing below a stop token
            assert not set(a.tokens[a.parents[a.parents >= 0]].tolist()) & stop_ids
        assert (fast.cache.lookups, fast.cache.hits, fast.skipped, fast.missing) == \
               (slow.cache.lookups, slow.cache.hits, slow.skipped, slow.missing)
        assert (fast.repo.calls, fast.common.calls) == (slow.repo.calls, slow.common.calls)
        if n % 4 == 0:  # the model's output joins the cache as the decoder's observe() adds it
            chunk = context[max(0, n - 6):n].tolist()
            fast.cache.add(chunk)
            slow.cache.add(chunk)
    assert fast._native_args is not None  # the native step ran


def test_interleaved_drafters_on_one_thread_each_get_their_own_tree():
    """A step's arguments are bound once and only re-checked (engine.native.propose._bind): two drafters with
    other estimators, budgets and stop tables, alternating step by step on the thread's one scratch (as two
    documents' completions do in the server), each still give their own Python path's tree."""
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 4, 120)
    seqs = [rng.integers(0, 4, 12).tolist() for _ in range(8)]
    table = {(1, 2): [[3, 1, 0]], (0, 3): [[2, 2]]}
    pairs = []
    for seed, budget, stop_id in ((0, 64, None), (2, 5, 1)):
        pair = [_drafter(on, seqs, [([1], [2, 3, 0, 1])], table, seed, 400, 200) for on in (True, False)]
        for d in pair:
            d.ret.budget = budget
            if stop_id is not None:
                stop = np.zeros(6, dtype=np.uint8)
                stop[stop_id] = 1
                d.set_stop_tokens(stop)
            d.reset(stream[:10])
        pairs.append(pair)
    assert pairs[0][0]._native and pairs[1][0]._native
    for n in range(10, len(stream)):
        for fast, slow in pairs:
            a, b = fast.propose(stream[:n]), slow.propose(stream[:n])
            assert _same(a, b), (n, a, b)
    assert max(len(p[0].propose(stream)) for p in pairs) > 0


def test_native_step_is_used_for_the_default_configuration_and_can_be_switched_off(monkeypatch):
    d = _drafter(True, [[1, 2, 3, 4]], [([1], [2, 3])], {}, 0, 1024, 1024)
    assert d._native
    calls = []
    lib = native.library()
    real = lib.fc_propose
    monkeypatch.setattr(lib, "fc_propose", lambda *a: calls.append(a) or real(*a))
    d.reset(np.array([7, 1, 2]))
    tree = d.propose(np.array([7, 1, 2]))
    assert calls and tree.tokens.tolist()[:2] == [3, 4]
    monkeypatch.setenv(native_propose.NATIVE_PROPOSE_ENV, "0")
    assert not _drafter(True, [], [], {}, 0, 1024, 1024)._native
    monkeypatch.delenv(native_propose.NATIVE_PROPOSE_ENV)
    off = FastCoderDrafter(None, None, None, options=FastCoderOptions(use_context_copy=False),
                           estimator=AcceptanceEstimator(), cost=COST)
    assert not off._native  # a configuration the C code does not reproduce: the Python path
    assert not FastCoderDrafter(None, None, None)._native  # trees not sized by cost


def test_reset_chains_the_last_generations_output_before_the_first_step(monkeypatch):
    """The previous generation's output (added by ``finish``) is chained by ``reset``, before the prefill, not by the
    first step, where it cost ~50-70 us with the caches cold; the first step still drafts from it."""
    d = _drafter(True, [], [([1], [2, 3])], {}, 0, 1024, 1024)
    d.history.add([7, 1], [5, 6, 8])  # the last generation's output
    d.reset(np.array([9, 7, 1]))
    assert d.history.mirror.length == d.history.num_tokens and _chains_hold(d.history.mirror, d.history._buf)
    syncs = []
    real = TokenMirror.sync
    monkeypatch.setattr(TokenMirror, "sync", lambda self, buf: syncs.append(self.length != len(buf)) or real(self, buf))
    tree = d.propose(np.array([9, 7, 1]))
    assert not any(syncs)  # nothing left to chain in the step
    assert tree.tokens.tolist()[:2] == [5, 6]  # the added output (a 2-token match drafts 2 tokens)


def _chains_hold(mirror: TokenMirror, buf: list[int]) -> bool:
    """Whether ``mirror``'s chains give, for each position, the last earlier position of the same token."""
    last: dict[int, int] = {}
    for i, t in enumerate(buf):
        if mirror.prev[i] != (last.get(t, -1) if t >= 0 else -1):
            return False
        if t >= 0:
            last[t] = i
    return all(mirror.head[t] == i for t, i in last.items()) and (mirror.head >= -1).all()


def test_token_mirror_follows_appends_and_replaced_buffers():
    mirror, buf = TokenMirror(), [1, 2, -1]
    assert mirror.sync(buf) == 3 and mirror.array[:3].tolist() == [1, 2, -1] and _chains_hold(mirror, buf)
    pointers = mirror.pointers
    buf += [4, 1, -1]
    assert mirror.sync(buf) == 6 and mirror.array[:6].tolist() == [1, 2, -1, 4, 1, -1] and _chains_hold(mirror, buf)
    assert mirror.pointers is pointers  # nothing moved
    buf += [5000, 7, 1, -1]  # a token id past the head table: it grows
    assert mirror.sync(buf) == 10 and _chains_hold(mirror, buf) and mirror.pointers[3] > 5000
    buf += [i % 50 for i in range(3000)]  # past the capacity: new arrays, the chains so far kept
    assert mirror.sync(buf) == len(buf) and mirror.array[:len(buf)].tolist() == buf and _chains_hold(mirror, buf)
    assert mirror.nbytes == mirror.array.nbytes + mirror.prev.nbytes + mirror.head.nbytes > 8 * len(buf)
    replaced = [9, 1, -1]  # an eviction rebuilds the list
    assert mirror.sync(replaced) == 3 and mirror.array[:3].tolist() == replaced and _chains_hold(mirror, replaced)


def test_native_step_reads_the_history_safely_while_another_thread_adds_to_it():
    history = CompletionHistory(max_tokens=64, context_tokens=2)
    d = FastCoderDrafter(None, None, None, options=FastCoderOptions(), retrieval=RetrievalOptions(draft_len=8),
                         estimator=AcceptanceEstimator(), cost=COST, history=history)
    assert d._native
    rng = np.random.default_rng(0)
    stop = threading.Event()

    def add():
        while not stop.is_set():  # evicts every few adds: the buffer is replaced under the reader
            history.add([1, 2], rng.integers(0, 4, 9).tolist())

    writer = threading.Thread(target=add)
    writer.start()
    try:
        context = rng.integers(0, 4, 400).astype(np.int64)
        d.reset(context[:10])
        for n in range(10, 400):
            tree = d.propose(context[:n])
            assert len(tree) == 0 or int(tree.tokens.max()) < 4
    finally:
        stop.set()
        writer.join()


def test_native_step_compares_the_most_recent_occurrences_only():
    """The cache compares its 32 most recent occurrences of the context's last two tokens and the history its 32
    most recent of the last token (the Python indexes' [-limit:]): an older continuation does not count."""
    flat = VerifyCost([1, 64], [1.001, 1.01], 3.1, 512)  # every node is worth verifying

    def build(native_on):
        history = CompletionHistory(context_tokens=1)
        d = FastCoderDrafter(None, None, None, options=FastCoderOptions(), retrieval=RetrievalOptions(draft_len=8),
                             estimator=AcceptanceEstimator(), cost=flat, history=history)
        d._native = d._native and native_on
        for i in range(40):
            d.cache.add([1, 2, 3 if i < 8 else 4])
            d.history.add([0], [5, 3 if i < 8 else 4])
        return d

    fast, slow = build(True), build(False)
    for d in (fast, slow):
        d.reset(np.array([0, 1]))
    for context in (np.array([0, 1, 2]), np.array([0, 1, 2, 0, 5])):
        a, b = fast.propose(context), slow.propose(context)
        assert _same(a, b)
        assert 3 not in a.tokens.tolist() and 4 in a.tokens.tolist()


# ---------------------------------------------------------------------------------------------------------------
# D_r and D_c searched in the same native step (fc_propose_retrieve) on real suffix-array datastores


def _store_drafter(native_on: bool, repo, common, seed: int, max_matches: int, history_gens=(), beside=False):
    history = CompletionHistory(max_tokens=256, context_tokens=3)
    for prompt, out in history_gens:
        history.add(prompt, out)
    d = FastCoderDrafter(repo, common, LineStarts(), options=FastCoderOptions(seed=seed, retrieve_beside_copy=beside),
                         retrieval=RetrievalOptions(draft_len=8, budget=64, max_matches=max_matches),
                         estimator=_trained(seed), cost=COST, history=history)
    d._native = d._native and native_on
    return d


def _store_state(d) -> tuple:
    return (d.cache.lookups, d.cache.hits, d.skipped, d.missing, d.repo_state.match, d.common_state.match,
            d.repo_state.searches, d.common_state.searches)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(st.integers(1, 60), min_size=4, max_size=60), st.lists(st.integers(1, 6), min_size=4,
                                                                                   max_size=60)),
       st.lists(st.tuples(st.integers(0, 59), st.integers(1, 12), st.lists(st.integers(0, 63), max_size=4)),
                min_size=1, max_size=12),
       st.integers(0, 3), st.sampled_from([2, 5, 128]), gens, st.booleans(), st.sets(st.integers(1, 6), max_size=2))
def test_native_datastore_step_gives_the_python_tree_and_side_effects(stream, pieces, seed, max_matches,
                                                                      history_gens, beside, stop_ids):
    """Documents made of pieces of the stream (so the stores continue it) and noise; the context copy rarely has
    a continuation in a stream of ~60 distinct tokens, so most steps search D_r and D_c, and often one in a stream
    of 6, where ``beside`` searches them beside it."""
    from engine.datastore import Datastore

    docs = [stream[a:a + n] + noise for a, n, noise in pieces]
    repo = Datastore.from_documents(docs[::2], vocab_size=64)
    common = Datastore.from_documents(docs[1::2] or [[0]], vocab_size=64)
    fast = _store_drafter(True, repo, common, seed, max_matches, history_gens, beside)
    slow = _store_drafter(False, repo, common, seed, max_matches, history_gens, beside)
    assert fast._native
    if stop_ids:  # every source's continuations cut after a stop token, the datastores' too
        stop = np.zeros(64, dtype=np.uint8)
        stop[sorted(stop_ids)] = 1
        fast.set_stop_tokens(stop)
        slow.set_stop_tokens(stop)
    context = np.asarray(stream, dtype=np.int64)
    prompt = context[:2]
    fast.reset(prompt)
    slow.reset(prompt)
    for n in range(2, len(context) + 1):
        a, b = fast.propose(context[:n]), slow.propose(context[:n])
        assert _same(a, b), (n, a, b)
        if stop_ids:  # nothing below a stop token
            assert not set(a.tokens[a.parents[a.parents >= 0]].tolist()) & stop_ids
        assert _store_state(fast) == _store_state(slow), n
    if len(context) > 8:  # a rollback (the decoder's rejected drafts): the states start afresh, the same answers
        for n in (len(context) - 5, len(context)):
            a, b = fast.propose(context[:n]), slow.propose(context[:n])
            assert _same(a, b) and _store_state(fast) == _store_state(slow)


def test_native_datastore_step_runs_and_counts_misses(monkeypatch):
    from engine.datastore import Datastore

    repo = Datastore.from_documents([[20, 21, 22, 23, 24, 25]], vocab_size=64)
    common = Datastore.from_documents([[30, 31, 32]], vocab_size=64)
    d = _store_drafter(True, repo, common, 0, 128)
    lib = native.library()
    calls = []
    real = lib.fc_propose_retrieve
    monkeypatch.setattr(lib, "fc_propose_retrieve", lambda *a: calls.append(a) or real(*a))
    d.reset(np.array([1, 20, 21], dtype=np.int64))
    tree = d.propose(np.array([1, 20, 21], dtype=np.int64))
    assert len(calls) == 1 and tree.tokens.tolist()[:3] == [22, 23, 24]
    assert d.repo_state.match[0] == 2 and d.common_state.match == (0, 0, 0) and repo.probes > 0
    d.propose(np.array([1, 20, 21, 7, 9], dtype=np.int64))  # neither store continues (9,): the missing table
    assert len(calls) == 2 and (7, 9) in d.missing
    d.propose(np.array([1, 20, 21, 7, 9], dtype=np.int64))  # ... so the next step does not search
    assert len(calls) == 2 and d.skipped == 1


def test_repo_datastore_with_a_pending_edit_is_searched_in_python(tmp_path, tiny_tokenizer):
    """A D_r with an edit pending merges base and overlay in its search: the step searches it in Python."""
    from engine.repo_datastore import RepoDatastore

    (tmp_path / "a.py").write_text("def alpha(x):\n    return x + 1\n")
    repo = RepoDatastore.build(tmp_path, tiny_tokenizer)
    assert repo.searched_store() is not None
    repo.update(tmp_path / "b.py", "def beta(y):\n    return y * 2\n")
    assert repo.searched_store() is None
    context = np.asarray(tiny_tokenizer("def beta(y):\n    return", add_special_tokens=False)["input_ids"],
                         dtype=np.int64)
    fast = _store_drafter(True, repo, None, 0, 128)
    slow = _store_drafter(False, repo, None, 0, 128)
    for d in (fast, slow):
        d.reset(context[:3])
    for n in range(3, len(context) + 1):
        assert _same(fast.propose(context[:n]), slow.propose(context[:n]))
        assert _store_state(fast) == _store_state(slow)
    assert fast.repo_state.searches > 0
