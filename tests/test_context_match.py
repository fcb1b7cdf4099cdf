"""FastCoder's context copy (engine.context_match): SuffixDecoding's draft choice, from a hash map.

The reference below is SuffixDecoding's rule written the slow way (arctic-inference's
``SuffixTree::speculate``: for every match length m, count every earlier occurrence of the last m
tokens, follow the most frequent next token while the frequency product stays >= min_prob, at most
min(factor * m, max_depth - m) tokens; keep the draft with the highest summed probability, the longest
match on ties). The index must give the same draft on random sequences with many repeats, as tokens
are appended one by one and in chunks, and after a rollback. Without the suffix tree's depth bound
(``depth_bound=False``, FastCoder's setting) the cap is min(factor * m, max_tokens).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import native
from engine.context_match import SuffixMatchIndex
from engine.draft_tree import SOURCE_CONTEXT
from engine.drafters import FastCoderDrafter, FastCoderOptions


def reference_draft(seq: list[int], max_depth: int = 24, factor: float = 1.0, min_prob: float = 0.1,
                    max_tokens: int = 16, max_candidates: int = 10**9, depth_bound: bool = True):
    """SuffixDecoding's draft by brute force over ``seq`` (see the module docstring)."""
    n = len(seq)
    # earlier occurrences of the last token (continuation start s: seq[s-1] == seq[-1], s < n), most recent first
    starts = [s for s in range(n - 1, 0, -1) if seq[s - 1] == seq[n - 1]][:max_candidates]
    best, best_score = ([], [], 0), 0.0
    for m in range(max_depth, 0, -1):
        occ = [s for s in starts if s >= m and seq[s - m:s] == seq[n - m:]]
        if not occ:
            continue
        window = max_depth - m if depth_bound else max_depth  # tokens read after an occurrence
        cap = min(int(factor * m + 1e-6), window, max_tokens)
        rows = [seq[s:s + window] for s in sorted(occ, key=lambda s: -agree(seq, s, max_depth))]
        toks, probs = [], []
        for d in range(cap):  # the most frequent extension of the chosen prefix, over all rows
            below = [r for r in rows if r[:d] == toks]
            nxt = Counter(r[d] for r in below if len(r) > d)
            if not nxt:
                break
            tok, count = nxt.most_common(1)[0]
            p = (probs[-1] if probs else 1.0) * count / len(below)
            if p < min_prob:
                break
            toks.append(tok)
            probs.append(p)
        score = sum(probs)
        if toks and score > best_score + 1e-12:
            best, best_score = (toks, probs, m), score
    return best


def agree(seq: list[int], s: int, max_depth: int) -> int:
    """How many tokens before continuation start ``s`` agree with the end of ``seq`` (<= max_depth)."""
    n, m = len(seq), 1
    while m < max_depth and m < s and seq[s - 1 - m] == seq[n - 1 - m]:
        m += 1
    return m


def canonical(draft):
    toks, probs, m = draft
    return list(toks), [round(p, 9) for p in probs], m


sequences = st.lists(st.integers(0, 5), min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(sequences, st.sampled_from([(24, 1.0, 0.1), (8, 2.0, 0.0), (12, 0.5, 0.3), (6, 3.0, 0.1)]), st.booleans())
def test_draft_equals_suffix_decoding_rule_by_brute_force(seq, setting, depth_bound):
    max_depth, factor, min_prob = setting
    idx = SuffixMatchIndex(max_depth, max_candidates=10**6, factor=factor, min_prob=min_prob, depth_bound=depth_bound)
    idx.reset(np.asarray(seq))
    got = idx.draft()
    assert canonical(got) == canonical(reference_draft(seq, max_depth, factor, min_prob, depth_bound=depth_bound))
    if got[0]:
        assert seq_continues(seq, got)


def seq_continues(seq, draft) -> bool:
    """The draft's tokens follow some earlier occurrence of the last m tokens."""
    toks, _, m = draft
    n = len(seq)
    return any(seq[s - m:s] == seq[n - m:] and seq[s:s + 1] == toks[:1] for s in range(m, n))


@settings(max_examples=100, deadline=None)
@given(sequences, st.lists(st.integers(1, 7), min_size=1, max_size=20), st.integers(0, 30))
def test_incremental_appends_and_rollback_equal_a_fresh_index(seq, chunks, rollback):
    idx = SuffixMatchIndex()
    end = 0
    for size in chunks:
        end = min(len(seq), end + size)
        idx.extend_to(np.asarray(seq[:end]))
        fresh = SuffixMatchIndex()
        fresh.reset(np.asarray(seq[:end]))
        assert idx.draft() == fresh.draft()
    back = max(0, end - rollback)  # a rollback (another document, a shorter context) re-indexes
    other = seq[:back] + [99]
    idx.extend_to(np.asarray(other))
    fresh = SuffixMatchIndex()
    fresh.reset(np.asarray(other))
    assert idx.draft() == fresh.draft() and idx.tokens.tolist() == other


def test_longest_agreeing_repeat_is_copied_and_bounded_by_match_length():
    idx = SuffixMatchIndex()
    # "1 2 3" occurred before, followed by "4 5 9"; a shorter match "2 3" was also followed by 4
    idx.reset(np.array([1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 1, 2, 3]))
    toks, probs, m = idx.draft()
    assert (toks, m) == ([4, 5, 9], 3) and probs == [1.0, 1.0, 1.0]
    cand = idx.candidates()
    assert cand.source == SOURCE_CONTEXT and cand.match_length == 3 and cand.tokens.tolist() == [[4, 5, 9]]


def test_a_long_match_keeps_its_length_without_the_suffix_tree_bound(monkeypatch):
    """A 20-token agreement followed by 16 tokens: under SuffixDecoding's bound (match + draft <= 24) the 16-token
    copy is drafted as an 8-token match, the longest whose copy fits; without it as the 20-token match it is
    (the match length the acceptance estimates are bucketed by). Both drafts, C and Python."""
    period = list(range(1, 31))
    seq = np.array(period + period[:20])  # the last 20 tokens occurred once before, followed by 21..30, 1, 2, ...
    for depth_bound, match in ((True, 8), (False, 20)):
        idx = SuffixMatchIndex(24, factor=3.0, max_tokens=16, depth_bound=depth_bound)
        idx.reset(seq)
        for toks, probs, m in (idx.draft(), _python_draft(idx, monkeypatch)):
            assert (toks, m) == (period[20:30] + period[:6], match) and probs == [1.0] * 16
    idx = SuffixMatchIndex(24, factor=0.5, max_tokens=16, depth_bound=False)  # the cap still follows the match
    idx.reset(seq)
    assert idx.draft()[0] == period[20:30]


def test_frequencies_split_the_probability_and_min_prob_stops_the_draft():
    # after "7" came 8 three times and 9 once: p(8) = 3/4; then each 8 was followed by a different token
    seq = [7, 8, 1, 7, 8, 2, 7, 8, 3, 7, 9, 4, 7]
    idx = SuffixMatchIndex(factor=4.0, min_prob=0.3)  # the cap (4 tokens) does not end the draft: min_prob does
    idx.reset(np.asarray(seq))
    toks, probs, m = idx.draft()
    assert m == 1 and toks == [8] and probs == [0.75]


def test_no_earlier_occurrence_gives_no_draft_and_bad_settings_raise():
    idx = SuffixMatchIndex()
    idx.reset(np.array([1, 2, 3]))
    assert idx.draft() == ([], [], 0) and idx.candidates() is None
    idx.reset(np.array([], dtype=np.int64))
    assert idx.draft() == ([], [], 0)
    for bad in ({"max_depth": 1}, {"max_candidates": 0}, {"factor": -1.0}, {"min_prob": 1.5}):
        with pytest.raises(ValueError):
            SuffixMatchIndex(**bad)


def test_fastcoder_drafts_the_context_copy_when_nothing_is_retrieved():
    d = FastCoderDrafter(None, None, None, options=FastCoderOptions(use_cache=False))
    prompt = np.array([5, 6, 7, 8, 9, 1, 5, 6, 7])
    d.reset(prompt)
    tree = d.propose(prompt)
    assert tree.longest_match([8, 9, 1]) == 3
    assert all(int(s) & SOURCE_CONTEXT for s in tree.sources)


def _python_draft(idx: SuffixMatchIndex, monkeypatch):
    with monkeypatch.context() as m:
        m.setitem(native._state, "lib", None)
        return idx.draft()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequences, st.lists(st.integers(1, 9), min_size=1, max_size=30),
       st.sampled_from([(24, 1.0, 0.1, 16, 16), (8, 2.0, 0.0, 4, 8), (12, 0.5, 0.3, 256, 64), (40, 3.0, 0.05, 32, 64)]),
       st.booleans())
def test_native_draft_equals_the_python_draft_bit_for_bit(monkeypatch, seq, chunks, setting, depth_bound):
    """engine/native's fc_suffix_draft: the same tokens, the same floats and the same match length, as
    tokens are appended in chunks (its token buffer follows the index)."""
    if native.library() is None:
        pytest.skip("no C compiler: the native draft is not built here")
    max_depth, factor, min_prob, candidates, max_tokens = setting
    idx = SuffixMatchIndex(max_depth, max_candidates=candidates, factor=factor, min_prob=min_prob,
                           max_tokens=max_tokens, depth_bound=depth_bound)
    end = 0
    for size in chunks:
        end = min(len(seq), end + size)
        idx.extend_to(np.asarray(seq[:end]))
        toks, _, m = idx.draft()
        assert (toks, _, m) == _python_draft(idx, monkeypatch)
        cand = idx.candidates()  # read straight from the C draft's buffer: the same draft
        assert (cand is None) == (not toks)
        if cand is not None:
            assert cand.tokens.tolist() == [toks] and cand.counts.tolist() == [1.0] and cand.match_length == m


def test_native_draft_follows_a_sequence_past_its_first_buffer(monkeypatch):
    if native.library() is None:
        pytest.skip("no C compiler: the native draft is not built here")
    rng = np.random.default_rng(0)
    seq = np.tile(rng.integers(0, 50, 700), 10)  # 7,000 tokens: the 4,096-token buffer grows
    idx = SuffixMatchIndex()
    for end in range(100, len(seq), 333):
        idx.extend_to(seq[:end])
        got = idx.draft()
        assert got == _python_draft(idx, monkeypatch)
        assert got[0] or end <= 700  # past the first period every suffix has occurred before
    idx.extend_to(seq[:50])  # a rollback re-indexes
    assert idx.draft() == _python_draft(idx, monkeypatch)


def test_reset_and_rollback_keep_the_python_and_native_drafts_equal(monkeypatch):
    """The sequence lives in one int64 buffer that a reset or an append copies into (the C draft reads it; the
    Python draft's list follows it lazily): after appends, a rollback and a reset to another prompt both drafts
    are a fresh index's."""
    rng = np.random.default_rng(1)
    seq = np.tile(rng.integers(0, 20, 60), 5)
    idx = SuffixMatchIndex()
    idx.reset(seq[:100])
    for end in (130, 170, 171, 40, 300):  # appends, then a rollback to 40 tokens, then past it again
        idx.extend_to(seq[:end])
        fresh = SuffixMatchIndex()
        fresh.reset(seq[:end])
        assert _python_draft(idx, monkeypatch) == _python_draft(fresh, monkeypatch) == fresh.draft() == idx.draft()
        assert len(idx) == end and idx.tokens.tolist() == seq[:end].tolist()
    other = rng.integers(0, 20, 250)
    idx.reset(other)
    assert idx.draft() == _python_draft(idx, monkeypatch) and idx.tokens.tolist() == other.tolist()
