"""The native datastore search (engine/native/datastore.c) gives what the Python search gives.

Every field of every :class:`~engine.datastore.Retrieval` is compared: over random stores with 2- and 4-byte
tokens and int32 and int64 suffix arrays, fresh searches and searches carried across steps by a
:class:`~engine.datastore.MatchState` (the ``hi``/``within`` probes), every cap, draft length 0 included.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine import native
from engine.datastore import Datastore, MatchState
from test_incremental_retrieval import apply_op, streams

pytestmark = pytest.mark.skipif(native.library() is None, reason="no native library on this machine")


def both(ds: Datastore, context, state_native=None, state_python=None, **kw):
    """(native, Python) results of one search of ``ds`` (its rows cache cleared, so both read)."""
    ds._native, ds._native_match, ds._rows_cache = None, None, {}
    assert ds._native_search() is not None and ds._native_match_search() is not None, "the native search is not used"
    a = ds.search(context, state=state_native, **kw)
    ds._native, ds._native_match, ds._rows_cache = False, False, {}
    b = ds.search(context, state=state_python, **kw)
    return a, b


def same(a, b) -> bool:
    return (a.match_length == b.match_length and a.total_matches == b.total_matches
            and a.continuations.dtype == b.continuations.dtype and a.continuations.shape == b.continuations.shape
            and np.array_equal(a.continuations, b.continuations) and a.counts.dtype == b.counts.dtype
            and np.array_equal(a.counts, b.counts))


def store(docs, vocab: int, sa64: bool) -> Datastore:
    ds = Datastore.from_documents(docs, vocab)
    if sa64:  # what a store past 2 GiB uses (sa_search64)
        ds = Datastore(ds._tokens, ds._sa.astype(np.int64), vocab, ds.num_documents)
    return ds


@settings(max_examples=150, deadline=None)
@given(streams(), st.booleans(), st.data())
def test_a_fresh_native_search_equals_the_python_search(stream, sa64, data):
    docs, vocab, offset, alphabet, _ = stream
    docs = [np.asarray(d, dtype=np.int64) for d in docs]
    ds = store(docs, vocab, sa64)
    for _ in range(8):
        context = data.draw(st.lists(st.integers(offset, vocab), max_size=24))  # vocab itself: unknown id
        if docs[0].size and data.draw(st.booleans()):  # end on a stretch of a document: long matches
            a = data.draw(st.integers(0, docs[0].size - 1))
            context += docs[0][a:a + data.draw(st.integers(1, 12))].tolist()
        kw = dict(n_max=data.draw(st.integers(1, 16)), n_min=data.draw(st.integers(0, 4)),
                  draft_len=data.draw(st.integers(0, 9)), max_matches=data.draw(st.integers(1, 12)))
        native_result, python_result = both(ds, np.asarray(context, dtype=np.int64), **kw)
        assert same(native_result, python_result), (kw, native_result, python_result)


@settings(max_examples=80, deadline=None)
@given(streams(), st.booleans())
def test_a_native_search_carried_across_steps_equals_the_python_one(stream, sa64):
    """The streams of tests/test_incremental_retrieval.py (appends, copies, rollbacks, unknown ids, new
    prompts), each search carried by a MatchState per path: the same results and the same state."""
    docs, vocab, offset, alphabet, ops = stream
    ds = store([np.asarray(d, dtype=np.int64) for d in docs], vocab, sa64)
    context: list[int] = []
    s_native, s_python = MatchState(), MatchState()
    for i, (op, seed) in enumerate(ops):
        context = apply_op(op, seed, context, docs, vocab, offset, alphabet)
        native_result, python_result = both(ds, np.asarray(context, dtype=np.int64), s_native, s_python,
                                            n_max=8, n_min=1 + i % 2, draft_len=1 + seed % 5, max_matches=5)
        assert same(native_result, python_result)
        assert s_native.match == s_python.match and s_native.bound == s_python.bound
        assert s_native.length == s_python.length and np.array_equal(s_native.tail, s_python.tail)
        assert (s_native.searches, s_native.incremental) == (s_python.searches, s_python.incremental)


def test_native_rows_are_counted_and_ordered_like_count_rows():
    """A match followed by repeated continuations: counts descending, ties in suffix-array order, a
    continuation cut at its document's end, an occurrence at a document's end not listed."""
    docs = [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 5], [1, 2], [9, 1, 2, 3, 4, 7]]
    ds = Datastore.from_documents(docs, 10)
    native_result, python_result = both(ds, np.asarray([0, 1, 2]), n_max=4, n_min=1, draft_len=3, max_matches=100)
    assert same(native_result, python_result)
    assert native_result.match_length == 2 and native_result.total_matches == 5
    assert native_result.continuations.tolist() == [[3, 4, -1], [3, 4, 7], [5, -1, -1]]
    assert native_result.counts.tolist() == [2, 1, 1]


def test_a_carried_search_after_a_long_gap_or_a_python_search_gives_the_fresh_answer():
    """More tokens appended than the native search is handed (NATIVE_CONTEXT_MAX), and a state last written by
    the Python path (a list context): the native search starts afresh and still finds the fresh match."""
    from engine.datastore.matching import NATIVE_CONTEXT_MAX

    rng = np.random.default_rng(0)
    doc = rng.integers(0, 50, 3000)
    ds = Datastore.from_documents([doc], 50)
    state = MatchState()
    for ctx in (doc[:40], doc[:40 + NATIVE_CONTEXT_MAX + 100], doc[:2000].tolist(), doc[:2010], doc[:2011]):
        got = ds.search(np.asarray(ctx, dtype=np.int64) if not isinstance(ctx, list) else ctx, n_max=16,
                        draft_len=4, state=state)
        want = ds.search(np.asarray(ctx, dtype=np.int64), n_max=16, draft_len=4)
        assert same(got, want) and got.match_length == 16
    assert state.searches == 5 and state.incremental == 2  # the last two extend the one before


def test_the_native_match_search_refuses_settings_outside_its_buffers():
    ds = Datastore.from_documents([[1, 2, 3, 4]], 10)
    fn, args, _ = ds._native_match_search()
    state = MatchState()
    context = np.asarray([1, 2, 3], dtype=np.int64)
    for n_min, n_max in ((0, 4), (1, 65)):
        with pytest.raises(ValueError):
            state.search_native(fn, args, (ds, 0, n_min, n_max), context, n_min, n_max)
    assert state.key is None and state.searches == 0
    # Datastore.search sends a long n_max to the Python path: the same answer as without a state
    got = ds.search(context, n_max=65, n_min=1, draft_len=1, state=state)
    assert got.match_length == 3 and got.continuations.tolist() == [[4]]
