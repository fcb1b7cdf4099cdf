"""The completion history (engine.history): earlier completions' output as a draft source, across documents.

The reference is the rule written the slow way: over every stored sequence (prompt tail + output), the
longest suffix of the context (up to n_max tokens) that occurs followed by at least one token; the
distinct continuations of its occurrences (at most ``max(1, factor * m)`` tokens, never past the end of
a sequence) with their counts.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import SpeculativeDecoder
from engine.draft_tree import SOURCE_HISTORY
from engine.history import CompletionHistory


def reference_search(seqs: list[list[int]], ctx: list[int], n_max: int, draft_len: int, factor: float):
    """(match length, Counter of continuation tuples) by brute force; (0, empty) when nothing matches."""
    for m in range(min(n_max, len(ctx)), 0, -1):
        conts = Counter()
        for seq in seqs:
            for s in range(m, len(seq)):  # the last m tokens end at s - 1, the continuation starts at s
                if seq[s - m:s] == ctx[-m:]:
                    conts[tuple(seq[s:s + min(draft_len, max(1, int(factor * m)))])] += 1
        if conts:
            return m, conts
    return 0, Counter()


def found(cand) -> tuple[int, Counter]:
    if cand is None:
        return 0, Counter()
    rows = [tuple(int(t) for t in row if t >= 0) for row in cand.tokens]
    return cand.match_length, Counter(dict(zip(rows, cand.counts.astype(int).tolist())))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 5), max_size=6), st.lists(st.integers(0, 5), max_size=12)),
                min_size=0, max_size=8),
       st.lists(st.integers(0, 5), min_size=1, max_size=10), st.sampled_from([0.5, 1.0, 3.0]))
def test_search_returns_the_longest_match_and_its_continuations(completions, ctx, factor):
    hist = CompletionHistory(context_tokens=4, n_max=6, max_candidates=10**6, factor=factor, min_match=1)
    stored = []
    for prompt, output in completions:
        hist.add(prompt, output)
        if output:
            stored.append(prompt[-4:] + output)
        # a search between adds indexes what is there (the index is built by searches, not by adds)
        between = hist.search(np.asarray(ctx, dtype=np.int64), draft_len=5)
        assert found(between) == reference_search(stored, ctx, 6, 5, factor)
    cand = hist.search(np.asarray(ctx, dtype=np.int64), draft_len=5)
    assert found(cand) == reference_search(stored, ctx, 6, 5, factor)
    # the drafter's shared list of the context's last tokens (longer than n_max, or the whole context)
    assert found(hist.search(np.asarray(ctx, dtype=np.int64), draft_len=5, tail=ctx[-8:])) == found(cand)
    if cand is not None:
        assert cand.source == SOURCE_HISTORY and cand.tokens.dtype == np.int64


def test_a_short_match_drafts_a_short_continuation_and_min_match_gates_it():
    hist = CompletionHistory(context_tokens=2, min_match=1)
    hist.add([7, 8], [1, 2, 3, 4, 5])
    assert found(hist.search(np.array([9, 1]), 8)) == (1, Counter({(2,): 1}))       # 1 token matched: 1 drafted
    assert found(hist.search(np.array([8, 1]), 8)) == (2, Counter({(2, 3): 1}))     # 2 matched (prompt tail too)
    assert found(hist.search(np.array([9, 5]), 8)) == (0, Counter())                # the output's end: nothing after
    strict = CompletionHistory(context_tokens=2)  # the default: 2 tokens at least
    strict.add([7, 8], [1, 2, 3])
    assert strict.search(np.array([9, 1]), 8) is None and strict.search(np.array([8, 1]), 8) is not None


def test_the_buffer_stays_bounded_and_keeps_the_newest_completions():
    hist = CompletionHistory(max_tokens=64, context_tokens=0, min_match=1)
    for i in range(100):
        hist.add([], [1000 + i, 1, 2, 3])
    assert hist.num_tokens <= 64
    assert found(hist.search(np.array([1099]), 4))[1] == Counter({(1,): 1})  # the newest is there
    assert hist.search(np.array([1000]), 4) is None                          # the oldest was dropped
    with pytest.raises(ValueError):
        CompletionHistory(max_tokens=0)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 40), st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=30), min_size=1, max_size=20))
def test_any_bound_and_completion_sizes_stay_within_the_buffer(max_tokens, outputs):
    hist = CompletionHistory(max_tokens=max_tokens, context_tokens=3, min_match=1)
    for out in outputs:
        hist.add([7, 8, 9], out)
        assert hist.num_tokens <= max_tokens
    last = (([7, 8, 9] + outputs[-1])[-(max_tokens // 2):])
    if len(last) >= 2:  # the newest completion is always kept: its first token's continuation is found
        assert hist.search(np.asarray(last[:1]), 4) is not None


def test_a_second_completion_drafts_from_the_first_and_stays_lossless(tiny_coder, real_code_prompts):
    """The decoder adds each generation's output to the history; a later request (another document: no
    shared cache, a different prompt start) drafts from it, and the output is still the model's own."""
    ids = list(real_code_prompts[0][1][-300:])
    ar = SpeculativeDecoder(tiny_coder, method="ar").generate(ids, max_new_tokens=48)
    history = CompletionHistory()
    dec = SpeculativeDecoder(tiny_coder, method="fastcoder", completion_history=history)
    first = dec.generate(ids, max_new_tokens=48, cache=dec.new_cache())
    assert first.token_ids == ar.token_ids and history.num_completions == 1
    other_start = ids[:20] + ids[-200:]  # same cursor, different prompt: a new document's
    ref = SpeculativeDecoder(tiny_coder, method="ar").generate(other_start, max_new_tokens=48)
    second = dec.generate(other_start, max_new_tokens=48, cache=dec.new_cache())
    assert second.token_ids == ref.token_ids
    assert second.stats["hits"]["history"] > 0
    off = SpeculativeDecoder(tiny_coder, method="fastcoder", completion_history=CompletionHistory(),
                             use_history=False)
    off.generate(ids, max_new_tokens=48, cache=off.new_cache())
    assert off.generate(other_start, max_new_tokens=48, cache=off.new_cache()).stats["hits"]["history"] == 0
