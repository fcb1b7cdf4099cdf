"""engine.datastore: search equals brute force, sampling, persistence and load validation."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine.datastore import SEPARATOR, Datastore, DatastoreError, Retrieval


def brute_force(docs, context, n_max, n_min, draft_len):
    """Reference REST Alg. 1 over plain Python lists: (match_length, [(row, count)], total)."""
    docs = [list(map(int, d)) for d in docs]
    context = list(map(int, context))
    for n in range(min(n_max, len(context)), max(n_min, 1) - 1, -1):
        pat = context[-n:]
        rows, total = [], 0
        for doc in docs:
            for i in range(len(doc) - n + 1):
                if doc[i:i + n] == pat:
                    total += 1
                    cont = doc[i + n:i + n + draft_len]
                    if cont:
                        rows.append(tuple(cont + [SEPARATOR] * (draft_len - len(cont))))
        if total:
            counted = sorted(Counter(rows).items(), key=lambda kv: (-kv[1], kv[0]))
            return n, counted, total
    return 0, [], 0


def as_pairs(r: Retrieval):
    return [(tuple(row), int(c)) for row, c in zip(r.continuations.tolist(), r.counts.tolist())]


# Small alphabets make long repeated matches likely; offsets put ids above 65,535 (4-byte encoding).
@st.composite
def corpus_and_context(draw):
    alphabet = draw(st.integers(1, 4))
    offset = draw(st.sampled_from([0, 300, 65_534, 151_930]))
    vocab = offset + alphabet + draw(st.integers(0, 3))
    tok = st.integers(offset, offset + alphabet - 1)
    docs = draw(st.lists(st.lists(tok, max_size=25), max_size=8))
    context = draw(st.lists(tok, max_size=10))
    return docs, context, vocab


@settings(max_examples=300, deadline=None)
@given(corpus_and_context(), st.integers(1, 6), st.integers(1, 3), st.integers(1, 5))
def test_search_equals_brute_force(case, n_max, n_min, draft_len):
    docs, context, vocab = case
    ds = Datastore.from_documents(docs, vocab)
    got = ds.search(context, n_max=n_max, n_min=n_min, draft_len=draft_len, max_matches=10**6)
    n, rows, total = brute_force(docs, context, n_max, n_min, draft_len)
    assert got.match_length == n
    assert as_pairs(got) == rows
    assert got.total_matches == total
    assert got.continuations.dtype == np.int32 and got.counts.dtype == np.int64
    assert got.continuations.shape == (len(rows), draft_len)


def test_large_vocab_ids_are_exact():
    vocab = 151_936
    docs = [[151_935, 70_000, 65_535, 65_536, 1], [70_000, 65_535, 65_537]]
    ds = Datastore.from_documents(docs, vocab)
    assert ds.token_width == 4
    r = ds.search([70_000, 65_535], n_min=1, draft_len=3)
    assert r.match_length == 2
    assert as_pairs(r) == [((65_536, 1, SEPARATOR), 1), ((65_537, SEPARATOR, SEPARATOR), 1)]


def test_continuations_never_cross_a_separator():
    ds = Datastore.from_documents([[1, 2, 3], [4, 5, 6]], vocab_size=10)
    r = ds.search([2, 3], n_min=1, draft_len=4)
    assert r.match_length == 2 and r.total_matches == 1
    assert len(r.counts) == 0  # the match ends its document: nothing follows it
    r = ds.search([1, 2], draft_len=4)
    assert r.continuations.tolist() == [[3, -1, -1, -1]]
    # a pattern spanning two documents does not occur
    assert ds.search([3, 4], n_min=2).match_length == 0


def test_order_is_count_then_lexicographic():
    ds = Datastore.from_documents([[7, 2], [7, 1], [7, 3], [7, 3], [7, 1]], vocab_size=10)
    r = ds.search([7], n_min=1, draft_len=1)
    assert r.continuations[:, 0].tolist() == [1, 3, 2]
    assert r.counts.tolist() == [2, 2, 1]


def test_max_matches_sampling_is_deterministic_and_representative():
    rng = np.random.default_rng(1)
    docs = [np.concatenate([[5, 6], rng.integers(0, 3, 4)]) for _ in range(1000)]
    ds = Datastore.from_documents(docs, vocab_size=10)
    a = ds.search([5, 6], draft_len=2, max_matches=64)
    b = ds.search(np.array([5, 6]), draft_len=2, max_matches=64)
    assert a.total_matches == 1000
    assert int(a.counts.sum()) == 64
    assert as_pairs(a) == as_pairs(b)
    # 9 equally likely rows: a sample of 64 spread over the sorted range sees most of them
    assert len(a.counts) >= 8
    full = ds.search([5, 6], draft_len=2, max_matches=10_000)
    assert int(full.counts.sum()) == 1000


@pytest.mark.parametrize("context", [[], [1], [1, 2, -5], [1, 2, 10**12], [1.5, "x"]])
def test_bad_or_short_context_gives_empty(context):
    ds = Datastore.from_documents([[1, 2, 3]], vocab_size=10)
    r = ds.search(context, n_min=2)
    assert r.match_length == 0 and r.continuations.shape == (0, 16) and not r


def test_out_of_vocab_prefix_is_cut_not_fatal():
    ds = Datastore.from_documents([[1, 2, 3]], vocab_size=10)
    r = ds.search([10**6, 1, 2], n_min=2, draft_len=1)
    assert r.match_length == 2 and r.continuations.tolist() == [[3]]


def test_empty_datastore():
    for docs in ([], [[]], [[], []]):
        ds = Datastore.from_documents(docs, vocab_size=10)
        assert ds.search([1, 2, 3]).match_length == 0
    assert Retrieval.empty(4).continuations.shape == (0, 4)


def test_from_documents_rejects_out_of_range_ids():
    with pytest.raises(DatastoreError, match="outside"):
        Datastore.from_documents([[1, 10]], vocab_size=10)
    with pytest.raises(DatastoreError):
        Datastore.from_documents([[-1]], vocab_size=10)


def test_properties():
    ds = Datastore.from_documents([[1, 2], [3]], vocab_size=70_000, tokenizer_fingerprint="fp")
    assert ds.num_tokens == 5 and ds.num_documents == 2 and ds.vocab_size == 70_000
    assert ds.nbytes == 5 * 4 + 5 * 4
    assert [d.tolist() for d in ds.document_tokens()] == [[1, 2], [3]]


# ------------------------------------------------------------------------------- persistence


@pytest.fixture()
def saved(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50, rng.integers(1, 200)) for _ in range(40)]
    ds = Datastore.from_documents(docs, vocab_size=50, tokenizer_fingerprint="abc123")
    return ds, ds.save(tmp_path / "store"), docs


def test_save_load_round_trip(saved):
    ds, path, docs = saved
    for mmap in (True, False):
        loaded = Datastore.load(path, tokenizer_fingerprint="abc123", mmap=mmap)
        assert loaded.num_tokens == ds.num_tokens and loaded.num_documents == 40
        for doc in docs[:10]:
            ctx = list(doc[:20])
            assert as_pairs(loaded.search(ctx)) == as_pairs(ds.search(ctx))
    assert Datastore.load(path).tokenizer_fingerprint == "abc123"
    meta = json.loads((path / "meta.json").read_text())
    assert {"format_version", "vocab_size", "num_tokens", "num_documents", "tokenizer_fingerprint",
            "crc32", "token_width"} <= set(meta)


def test_save_overwrites_existing(saved, tmp_path):
    _, path, _ = saved
    Datastore.from_documents([[1]], vocab_size=5).save(path)
    assert Datastore.load(path).num_tokens == 2


def test_load_wrong_fingerprint(saved):
    _, path, _ = saved
    with pytest.raises(DatastoreError, match="expected fingerprint 'other'.*found 'abc123'"):
        Datastore.load(path, tokenizer_fingerprint="other")


def test_load_truncated_array(saved):
    _, path, _ = saved
    data = (path / "sa.npy").read_bytes()
    (path / "sa.npy").write_bytes(data[:len(data) - 17])
    with pytest.raises(DatastoreError, match="sa.npy"):
        Datastore.load(path)


@pytest.mark.parametrize("name", ["tokens.npy", "sa.npy"])
def test_load_flipped_bytes(saved, name):
    _, path, _ = saved
    data = bytearray((path / name).read_bytes())
    data[-3] ^= 0x5A
    (path / name).write_bytes(bytes(data))
    with pytest.raises(DatastoreError, match="corrupt"):
        Datastore.load(path)


def test_load_ids_out_of_range(saved):
    _, path, _ = saved
    meta = json.loads((path / "meta.json").read_text())
    meta["vocab_size"] = 20  # stored ids go up to 49
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatastoreError, match="out of range"):
        Datastore.load(path)


def test_load_missing_meta_and_files(saved, tmp_path):
    _, path, _ = saved
    (path / "tokens.npy").unlink()
    with pytest.raises(DatastoreError, match="tokens.npy is missing"):
        Datastore.load(path)
    (path / "meta.json").unlink()
    with pytest.raises(DatastoreError, match="no meta.json"):
        Datastore.load(path)
    with pytest.raises(DatastoreError, match="does not exist"):
        Datastore.load(tmp_path / "nowhere")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "meta.json").write_text("{not json")
    with pytest.raises(DatastoreError, match="unreadable"):
        Datastore.load(tmp_path / "junk")


def test_datastore_error_is_value_error():
    assert issubclass(DatastoreError, ValueError)
