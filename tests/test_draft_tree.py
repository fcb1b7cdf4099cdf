"""Draft tree construction (REST Alg. 2, FastCoder eq. 3) and the drafters' rules."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.draft_tree import SOURCE_COMMON, SOURCE_REPO, Candidates
from engine.tree_builder import build_draft_tree
from engine.drafters import ContextIndex, CopySpecDrafter, FastCoderCache, FastCoderDrafter, FastCoderOptions


def brute_weights(rows, weights):
    """Every prefix of every continuation with its summed weight."""
    out = {}
    for row, w in zip(rows, weights):
        seq = [t for t in row if t >= 0]
        for d in range(1, len(seq) + 1):
            out[tuple(seq[:d])] = out.get(tuple(seq[:d]), 0.0) + w
    return out


conts = st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=6), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(conts, conts, st.integers(1, 30))
def test_tree_is_prefix_closed_top_weight_and_within_budget(a, b, budget):
    def pack(lists):
        rows = np.full((len(lists), 6), -1)
        for i, l in enumerate(lists):
            rows[i, :len(l)] = l
        return rows
    ra, rb = pack(a), pack(b)
    tree = build_draft_tree([Candidates(ra, np.ones(len(a)), 2.0, SOURCE_REPO),
                             Candidates(rb, np.ones(len(b)), 1.0, SOURCE_COMMON)], budget)
    expected = brute_weights(list(ra) + list(rb), [2.0] * len(a) + [1.0] * len(b))
    assert len(tree) == min(budget, len(expected))
    paths = {}
    for i in range(len(tree)):
        p = int(tree.parents[i])
        assert p < i  # breadth-first: parents precede children (prefix-closed)
        paths[i] = (paths[p] if p >= 0 else ()) + (int(tree.tokens[i]),)
        assert tree.depths[i] == len(paths[i])
        assert np.isclose(tree.weights[i], expected[paths[i]])
    kept = set(paths.values())
    assert len(kept) == len(tree)
    if kept:  # nothing left out weighs more than the lightest kept node
        lightest = min(expected[p] for p in kept)
        assert all(w <= lightest + 1e-9 for p, w in expected.items() if p not in kept)


def test_sources_are_tagged_per_node():
    tree = build_draft_tree([Candidates(np.array([[1, 2, 3]]), np.ones(1), 1.0, SOURCE_REPO),
                             Candidates(np.array([[1, 2, 9]]), np.ones(1), 1.0, SOURCE_COMMON)], 64)
    bits = {tuple(tree.tokens[[i]].tolist()): int(tree.sources[i]) for i in range(len(tree)) if tree.depths[i] == 1}
    assert bits[(1,)] == SOURCE_REPO | SOURCE_COMMON
    assert tree.longest_match([1, 2, 9, 4]) == 3 and tree.longest_match([7]) == 0


def test_copyspec_copies_after_first_occurrence_of_last_gamma_tokens():
    d = CopySpecDrafter(gamma=3, copy_len=4)
    ctx = np.array([1, 2, 3, 10, 11, 12, 13, 14, 7, 1, 2, 3, 20, 21, 9, 1, 2, 3])
    d.reset(ctx[:5])
    tree = d.propose(ctx)
    assert tree.tokens.tolist() == [10, 11, 12, 13]
    assert d.propose(np.array([5, 6, 7, 8])).tokens.size == 0


def test_context_index_is_incremental():
    idx = ContextIndex(gamma=2)
    idx.reset(np.array([1, 2, 3]))
    idx.extend_to(np.array([1, 2, 3, 1, 2]))
    assert idx.continuations(2, first_only=False) == [[3, 1]]


class FakeStore:
    """Counts searches; returns a fixed continuation for contexts ending in 5."""

    version = 0

    def __init__(self):
        self.calls = 0

    def search(self, context, n_max=16, n_min=2, draft_len=16, max_matches=128):
        from types import SimpleNamespace

        self.calls += 1
        if context[-1] == 5:
            return SimpleNamespace(match_length=2, continuations=np.array([[6, 7]]), counts=np.array([3]))
        return SimpleNamespace(match_length=0, continuations=np.zeros((0, 2)), counts=np.zeros(0))


def test_missing_table_skips_repeated_misses_and_resets_when_repo_changes():
    repo = FakeStore()
    d = FastCoderDrafter(repo, None, None, options=FastCoderOptions(use_context_copy=False))
    d.reset(np.array([1]))
    assert len(d.propose(np.array([3, 4]))) == 0 and repo.calls == 1
    assert len(d.propose(np.array([3, 4]))) == 0 and repo.calls == 1  # in the missing table
    assert d.propose(np.array([4, 5])).tokens.tolist() == [6, 7]
    repo.version += 1
    d.propose(np.array([3, 4]))
    assert repo.calls == 3


def test_skip_token_retrieves_with_probability_p():
    class AtLineStart:
        def at_line_start(self, ctx):
            return True
    repo = FakeStore()
    d = FastCoderDrafter(repo, None, AtLineStart(), options=FastCoderOptions(use_context_copy=False, seed=7))
    d.reset(np.array([1]))
    for _ in range(2000):
        d.propose(np.array([4, 5]))
    assert 0.45 < repo.calls / 2000 < 0.55
    off = FastCoderDrafter(repo := FakeStore(), None, AtLineStart(),
                           options=FastCoderOptions(use_context_copy=False, use_strategy=False))
    for _ in range(100):
        off.propose(np.array([4, 5]))
    assert repo.calls == 100


def test_a_context_ending_in_a_special_token_is_not_searched(tiny_tokenizer):
    """A FIM prompt's first decode steps end in its sentinel, which no datastore continues: D_r and D_c are not
    searched for them (with or without the retrieval strategy), and the next step is."""
    from engine.model import TokenInfo

    info = TokenInfo.from_tokenizer(tiny_tokenizer, len(tiny_tokenizer))
    middle = tiny_tokenizer.convert_tokens_to_ids("<|fim_middle|>")
    assert middle in info.special and 40 not in info.special

    class Store(FakeStore):
        def search(self, context, *args, **kwargs):  # continues contexts ending in 500 (an ordinary token)
            return super().search(np.append(context, 5) if context[-1] == 500 else context, *args, **kwargs)

    for strategy in (True, False):
        repo = Store()
        d = FastCoderDrafter(repo, None, info, options=FastCoderOptions(use_context_copy=False, use_strategy=strategy))
        d.reset(np.array([40, middle]))
        assert len(d.propose(np.array([40, middle]))) == 0 and len(d.propose(np.array([40, middle, 500]))) == 0
        assert repo.calls == 0 and d.skipped == 2
        assert d.propose(np.array([40, middle, 41, 500])).tokens.tolist() == [6, 7] and repo.calls == 1


def test_cache_is_searched_first_only_once_it_holds_l_sequences():
    repo = FakeStore()
    cache = FastCoderCache()
    d = FastCoderDrafter(repo, None, None, cache=cache,
                         options=FastCoderOptions(use_context_copy=False, use_strategy=False, cache_min_sequences=3))
    d.reset(np.array([1]))
    cache.add([8, 9, 5, 6, 7, 42])
    cache.add([1, 1, 1])
    d.propose(np.array([9, 5]))
    assert repo.calls == 1 and cache.lookups == 0
    cache.add([2, 2, 2])
    tree = d.propose(np.array([8, 9, 5]))
    assert repo.calls == 1 and cache.hits == 1
    assert tree.tokens[:4].tolist() == [6, 7, 42] or tree.longest_match([6, 7, 42]) == 3


def test_datastores_are_searched_only_when_neither_cache_nor_context_copy_has_a_continuation():
    """Alg. 1 with the context copy as a per-document source beside the cache: a context that repeats itself
    gets its draft from the copy without a datastore search; one that does not is searched;
    ``retrieve_beside_copy`` restores the search beside a copy."""
    repeating = np.array([4, 5, 9, 9, 4, 5])  # "4 5" occurred before, followed by "9 9"
    fresh = np.array([1, 2, 3, 4, 5])
    for beside, want_calls in ((False, 1), (True, 2)):
        repo = FakeStore()
        d = FastCoderDrafter(repo, None, None,
                             options=FastCoderOptions(use_strategy=False, use_cache=False, use_history=False,
                                                      retrieve_beside_copy=beside))
        d.reset(repeating[:1])
        assert d.propose(repeating).longest_match([9, 9]) == 2  # the copy's draft either way
        d.reset(fresh[:1])
        assert d.propose(fresh).tokens.tolist() == [6, 7]  # no copy: D_r's continuation
        assert repo.calls == want_calls


def _reference_cache_add(buf: list, index: dict, tokens, n_min: int = 2) -> None:
    """FastCoderCache.add's layout, written out plainly (no eviction): the sequence, a -1, and every bigram
    but the last -> the position after it."""
    seq = [int(t) for t in tokens if int(t) >= 0]
    if len(seq) <= n_min:
        return
    start = len(buf)
    buf.extend(seq)
    buf.append(-1)
    for i in range(start + 1, start + len(seq) - 1):
        index.setdefault((buf[i - 1], buf[i]), []).append(i + 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(-1, 6), max_size=12), max_size=8), st.booleans())
def test_cache_add_builds_the_reference_buffer_and_bigram_index(seqs, as_arrays):
    """Lists or int arrays, negative ids, sequences too short to keep: the buffer and the bigram index are
    those of the plain reference, and a search finds what the reference's buffer holds."""
    cache = FastCoderCache()
    buf, index = [], {}
    for i, seq in enumerate(seqs):
        cache.add(np.asarray(seq, dtype=np.int64) if as_arrays else seq)
        _reference_cache_add(buf, index, seq)
        if i % 2:  # a search between adds indexes what is there; later adds are indexed by the next one
            cache._bigram_index()
    assert cache._buf == buf and cache._bigram_index() == index  # the index is built when searched
    assert cache.num_sequences == sum(1 for q in seqs if sum(t >= 0 for t in q) > 2)


def test_cache_records_model_output_every_chunk():
    cache = FastCoderCache()
    d = FastCoderDrafter(None, None, None, cache=cache, options=FastCoderOptions(output_chunk=20))
    prompt = np.arange(30)
    d.reset(prompt)
    ctx = prompt
    from engine.draft_tree import DraftTree
    for step in range(10):
        new = [100 + 3 * step, 101 + 3 * step, 102 + 3 * step]
        d.observe(ctx, DraftTree.empty(), [], new)
        ctx = np.concatenate([ctx, new])
    assert cache.num_sequences == 1  # 30 generated tokens -> one chunk of >= 20
    # the chunk holds the model's output so far (the first 21 tokens after the prompt), then a separator
    assert cache._buf == [100 + i for i in range(21)] + [-1]


def test_min_prob_prunes_unlikely_branches_per_source():
    # D_c: 8 of 10 continuations start 1,2 and 2 start 7; context copy: one continuation 9,9
    common = Candidates(np.array([[1, 2, 3]] * 6 + [[1, 2, 4]] * 2 + [[7, 8, 8]] * 2), np.ones(10), 1.0, SOURCE_COMMON)
    copy = Candidates(np.array([[9, 9, -1]]), np.ones(1), 1.0, 8)
    full = build_draft_tree([common, copy], 64)
    pruned = build_draft_tree([common, copy], 64, min_prob=0.25)
    assert full.longest_match([1, 2, 4]) == 3 and full.longest_match([7, 8, 8]) == 3
    assert pruned.longest_match([1, 2, 3]) == 3          # 0.6 of D_c's continuations
    assert pruned.longest_match([1, 2, 4]) == 2          # 0.2 < 0.25: leaf pruned
    assert pruned.longest_match([7]) == 0                # 0.2: branch pruned
    assert pruned.longest_match([9, 9]) == 2             # the only copy continuation: share 1.0
    assert len(pruned) == 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10 ** 6), min_size=0, max_size=90))
def test_ancestors_match_a_walk_up_the_parents(picks):
    """``DraftTree.ancestors`` (bitmask path up to 64 nodes, per-depth array path above) is, for any tree
    with parents first, node i itself and every node on its way up to the root."""
    from engine.draft_tree import DraftTree

    parents, depths = [], []
    for i, pick in enumerate(picks):
        parent = pick % (i + 1) - 1  # -1 (a root) or any earlier node
        parents.append(parent)
        depths.append(1 if parent < 0 else depths[parent] + 1)
    n = len(parents)
    tree = DraftTree(np.arange(n, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                     np.asarray(depths, dtype=np.int64), np.zeros(n, dtype=np.uint8), np.ones(n))
    want = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j >= 0:
            want[i, j] = True
            j = parents[j]
    got = tree.ancestors
    assert got.shape == (n, n) and got.dtype == np.bool_
    assert np.array_equal(got, want)


def _tree_from_picks(picks, first_token: int = 0):
    """A tree whose node i hangs below node ``picks[i] % (i + 1) - 1`` (-1: the pending token), tokens counting up
    from ``first_token``."""
    from engine.draft_tree import DraftTree  # noqa: PLC0415

    parents, depths = [], []
    for i, pick in enumerate(picks):
        parent = pick % (i + 1) - 1
        parents.append(parent)
        depths.append(1 if parent < 0 else depths[parent] + 1)
    n = len(parents)
    return DraftTree(np.arange(first_token, first_token + n, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                     np.asarray(depths, dtype=np.int64), np.zeros(n, dtype=np.uint8), np.ones(n))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10 ** 6), min_size=0, max_size=70), st.integers(0, 300))
def test_forward_inputs_equal_the_positions_and_mask_of_their_methods(picks, past):
    """``DraftTree.forward_inputs`` gives exactly ``position_ids`` and ``attention_mask``, for any tree with
    parents first; a tree whose parents do not precede their nodes is refused by the native code
    (``fc_tree_inputs``, which engine.verify's reused buffers use) and handled by those methods."""
    import torch  # noqa: PLC0415

    from engine import native  # noqa: PLC0415

    tree = _tree_from_picks(picks)
    parents, n = tree.parents.tolist(), len(tree)
    cpu = torch.device("cpu")
    positions, mask = tree.forward_inputs(past, torch.float32, cpu)
    assert torch.equal(positions, tree.position_ids(past, cpu))
    assert torch.equal(mask, tree.attention_mask(past, torch.float32, cpu))
    lib = native.library()
    if n >= 2 and lib is not None:  # a parent after its node: refused (forward_inputs then uses the methods)
        bad = np.asarray([*parents[:-2], n - 1, parents[-1]], dtype=np.int64)
        out, pos = np.empty((1 + n) * (past + 1 + n), dtype=np.float32), np.empty(1 + n, dtype=np.int64)
        assert lib.fc_tree_inputs(bad.ctypes.data, n, past, -1.0, out.ctypes.data, pos.ctypes.data) == -1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10 ** 6), min_size=0, max_size=70), min_size=1, max_size=4),
       st.integers(0, 3000))
def test_a_decode_steps_tree_inputs_in_reused_buffers_equal_the_trees_own(trees, past):
    """A decode step's tree inputs on a CPU come from this thread's reused buffers (engine.verify's
    ``_cpu_step_tree_inputs``: views, grown as trees and caches grow): the same ids, positions and mask as the
    tree's own methods, step after step."""
    import torch  # noqa: PLC0415

    from engine.verify import _cpu_step_tree_inputs  # noqa: PLC0415

    cpu = torch.device("cpu")
    for k, picks in enumerate(trees):
        tree = _tree_from_picks(picks, first_token=100)
        n = len(tree)
        got = _cpu_step_tree_inputs(7 + k, tree, past + 37 * k)
        if got is None:  # no native library here
            return
        ids, positions, mask = got
        assert ids.tolist() == [[7 + k, *range(100, 100 + n)]] and ids.dtype == torch.long
        if n == 0:
            assert positions is None and mask is None
            continue
        assert torch.equal(positions, tree.position_ids(past + 37 * k, cpu))
        assert torch.equal(mask, tree.attention_mask(past + 37 * k, torch.float32, cpu))
        assert mask.is_contiguous() and ids.is_contiguous() and positions.is_contiguous()
