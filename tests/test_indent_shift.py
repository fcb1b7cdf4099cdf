"""The context copy re-indented to the context's line (engine.indent_shift): the table, the shift, and the C draft
equal to the Python one with it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_draft_tree_sized import COST, _trained

from engine import native
from engine.context_match import SuffixMatchIndex
from engine.drafters import FastCoderDrafter, FastCoderOptions, RetrievalOptions
from engine.history import CompletionHistory
from engine.indent_shift import MAX_WIDTH, IndentTable, shifted_row
from engine.model import TokenInfo

# a toy vocabulary: 0-9 words, 10-16 "\n" + 0 / 4 / ... / 24 spaces, 17 "\n\n" + 4 spaces, 18 spaces alone
WIDTHS = (0, 4, 8, 12, 16, 20, 24)
TEXTS = [f"w{i}" for i in range(10)] + ["\n" + " " * w for w in WIDTHS] + ["\n\n    ", "    "]
NL = {w: 10 + w // 4 for w in WIDTHS}
BLANK4 = 17


def test_the_table_codes_newline_and_spaces_tokens_only():
    table = IndentTable(TEXTS)
    assert table.count == 8  # the seven single newlines and "\n\n    "; spaces alone are no line break
    assert table.shifted(NL[4], 4) == NL[8] and table.shifted(NL[12], -8) == NL[4]
    assert table.shifted(NL[24], 4) == -1  # no "\n" + 28 spaces in this vocabulary: the copy ends there
    assert table.shifted(NL[4], -4) == -1 and table.shifted(NL[0], 4) == -1  # to or from a bare "\n": never
    assert table.shifted(BLANK4, -4) == -1 and table.shifted(BLANK4, 0) == BLANK4
    assert table.shifted(3, 8) == 3 and table.shifted(18, 4) == 18  # words and bare spaces stay
    assert table.line_width([1, NL[8], 2, 3], 4) == 8 and table.line_width([1, 2], 2) == -1
    assert table.line_width([1, NL[0], 2], 3) == -1  # "\n" alone: column 0 or 1, not known


def test_a_copy_from_a_shallower_line_is_indented_to_the_context_line():
    table = IndentTable(TEXTS)
    # "w1 w2 : NL4 w3 NL0 | w5 NL8 w1 w2 :" -> the copy after "w1 w2 :" continues at the context's width 8 + 4
    toks = [NL[4], 1, 2, 9, NL[8], 3, NL[4], 5, NL[12], 1, 2, 9]
    idx = SuffixMatchIndex(8, factor=3.0, min_prob=0.0, max_tokens=8, depth_bound=False, indent=table)
    idx.reset(np.array(toks))
    draft, _, m = idx.draft()
    assert m == 3 and draft == [NL[16], 3, NL[12], 5, NL[20], 1, 2, 9]
    plain = SuffixMatchIndex(8, factor=3.0, min_prob=0.0, max_tokens=8, depth_bound=False)
    plain.reset(np.array(toks))
    assert plain.draft()[0] == [NL[8], 3, NL[4], 5, NL[12], 1, 2, 9]  # as it was written, two levels out
    # a width the vocabulary cannot spell, or a bare "\n", ends the copy before it; an unknown width: as it is
    assert shifted_row(table, toks, len(toks), 20, 4, 8) == [NL[24], 3, NL[20], 5]
    assert shifted_row(table, [NL[4], 1, NL[0], 2, NL[4], 6], 6, 8, 2, 4) == []
    assert shifted_row(table, toks[1:], len(toks) - 1, 8, 3, 8) == toks[4:12]


def test_a_match_that_reaches_back_over_the_line_break_copies_as_it_is():
    table = IndentTable(TEXTS)
    toks = [NL[4], 1, 2, NL[4], 3, 7, NL[4], 1, 2]  # both lines 4 wide: no shift
    idx = SuffixMatchIndex(8, factor=3.0, min_prob=0.0, max_tokens=8, depth_bound=False, indent=table)
    idx.reset(np.array(toks))
    assert idx.draft()[0] == [NL[4], 3, 7, NL[4], 1, 2]


word = st.integers(0, 9)
newline = st.sampled_from([*NL.values(), BLANK4, 18])
sequences = st.lists(st.one_of(word, word, word, newline), min_size=2, max_size=160)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequences, st.sampled_from([(24, 1.0, 0.1, 16, 16), (8, 3.0, 0.0, 4, 8), (40, 3.0, 0.05, 64, 32)]),
       st.booleans())
def test_the_native_shifted_draft_equals_the_python_one_bit_for_bit(monkeypatch, seq, setting, depth_bound):
    """fc_suffix_draft with the table: the same tokens, floats and match length as the Python draft."""
    if native.library() is None:
        pytest.skip("no C compiler: the native draft is not built here")
    max_depth, factor, min_prob, candidates, max_tokens = setting
    idx = SuffixMatchIndex(max_depth, max_candidates=candidates, factor=factor, min_prob=min_prob,
                           max_tokens=max_tokens, depth_bound=depth_bound, indent=IndentTable(TEXTS))
    idx.reset(np.asarray(seq))
    got = idx.draft()
    with monkeypatch.context() as m:
        m.setitem(native._state, "lib", None)
        assert idx.draft() == got


def test_the_real_tokenizer_gets_a_table_and_the_drafter_uses_it_unless_asked_not_to(tiny_tokenizer):
    info = TokenInfo.from_tokenizer(tiny_tokenizer, len(tiny_tokenizer))
    table = info.indent
    assert table is not None and table.count > 10
    eight = tiny_tokenizer("x\n        y")["input_ids"]
    nl8 = next(t for t in eight if tiny_tokenizer.decode([t]) == "\n       ")  # the newline and 7 spaces; " y" has one
    assert table.shifted(nl8, 4) == next(t for t in tiny_tokenizer("x\n            y")["input_ids"]
                                          if tiny_tokenizer.decode([t]) == "\n           ")
    on = FastCoderDrafter(None, None, info, options=FastCoderOptions(use_cache=False))
    off = FastCoderDrafter(None, None, info, options=FastCoderOptions(use_cache=False, indent_shift=False))
    assert on.context_index.indent is table and off.context_index.indent is None
    # a method body copied into a nested block comes out at the nested block's width
    src = ("def f(x):\n    if x is None:\n        return g(x)\n    return None\n\n"
           "class A:\n    def f(self, x):\n        if x is None:")
    ids = np.array(tiny_tokenizer(src)["input_ids"])
    nested = tiny_tokenizer("\n            return g(x)")["input_ids"]
    assert tiny_tokenizer.decode(nested[:1]) == "\n           "
    for drafter, want in ((on, len(nested)), (off, 0)):
        drafter.reset(ids)
        assert drafter.propose(ids).longest_match(nested) == want
    if on._native_args is not None:  # one thread's native arguments are per settings: the table is one of them
        assert on._native_args.pa[35] == table.table.ctypes.data and off._native_args.pa[35] == 0
    assert MAX_WIDTH >= 16


class _Info:
    """Token facts for the toy vocabulary: its indentation table, no special tokens, no line-start rule."""

    special = frozenset()
    indent = IndentTable(TEXTS)

    def at_line_start(self, context) -> bool:
        return False


def _history_drafter(native_on: bool, gens, seed: int, shift: bool) -> FastCoderDrafter:
    history = CompletionHistory(max_tokens=400, context_tokens=3)
    for prompt, out in gens:
        history.add(prompt, out)
    d = FastCoderDrafter(None, None, _Info(), options=FastCoderOptions(seed=seed, use_cache=False, indent_shift=shift),
                         retrieval=RetrievalOptions(draft_len=8, budget=64, max_matches=32), estimator=_trained(seed),
                         cost=COST, history=history)
    if not native_on:
        d._native = False
    return d


lines = st.lists(st.one_of(word, word, newline), min_size=0, max_size=24)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(lines, lines), max_size=8), st.lists(st.one_of(word, word, newline), min_size=2, max_size=60),
       st.integers(0, 3))
def test_the_native_step_shifts_the_history_as_the_python_path_does(gens, stream, seed):
    """The completion history's continuations, re-indented to the context's line, in the native step (propose.c,
    count_continuations) and in Python (engine.history.count_continuations): the same trees."""
    if native.library() is None:
        pytest.skip("no C compiler: the native step is not built here")
    fast, slow = _history_drafter(True, gens, seed, True), _history_drafter(False, gens, seed, True)
    prompt = np.asarray(stream[:max(1, len(stream) // 3)], dtype=np.int64)
    fast.reset(prompt)
    slow.reset(prompt)
    context = np.asarray(stream, dtype=np.int64)
    for n in range(len(prompt), len(context) + 1):
        a, b = fast.propose(context[:n]), slow.propose(context[:n])
        assert (a is None) == (b is None)
        if a is not None:
            for f in ("tokens", "parents", "sources", "weights", "probs"):
                assert np.array_equal(getattr(a, f), getattr(b, f)), (n, f)


def test_the_history_drafts_an_earlier_completion_at_the_context_line_width():
    history = CompletionHistory(max_tokens=400, context_tokens=3)
    history.add([NL[4], 1], [2, 9, NL[8], 3, NL[4], 5])  # an earlier completion: a block at 4, its body at 8
    context = np.array([NL[12], 1, 2, 9])  # the same line at 12
    plain = history.search(context, 8)
    moved = history.search(context, 8, indent=IndentTable(TEXTS))
    assert plain.match_length == moved.match_length == 3  # continuations of at most factor (1) x 3 tokens
    assert plain.tokens.tolist() == [[NL[8], 3, NL[4]]] and moved.tokens.tolist() == [[NL[16], 3, NL[12]]]
