"""The cost-sized draft-tree builder (engine.tree_builder._build_sized: plain Python, with array calls for
large trees, or the C builder of engine/native) builds the very trees of the node-by-node reference
(tests/reference_draft_tree.py), in both of its regimes and on inputs outside its shortcuts (negative
counts, NaN estimates), and the acceptance helpers it uses give the ids and floats of their array versions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_draft_tree import reference_build_draft_tree
from test_incremental_retrieval import candidate_sets, tree_fields

from engine import acceptance, native
from engine import tree_builder as dt
from engine.acceptance import AcceptanceEstimator
from engine.cost_model import VerifyCost
from engine.draft_tree import SOURCE_COMMON, SOURCE_REPO, Candidates
from engine.tree_builder import build_draft_tree

COST = VerifyCost([1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
                  [1.3435, 1.5717, 1.6664, 1.8026, 1.9834, 2.1364, 2.418, 2.6945, 3.3182, 3.882], 7.3, 512)


def _trained(seed: int) -> AcceptanceEstimator:
    est = AcceptanceEstimator()
    rng = np.random.default_rng(seed)
    est.tried[:] = rng.integers(0, 5, est.tried.shape)
    est.accepted[:] = np.minimum(est.tried, rng.integers(0, 5, est.tried.shape))
    return est


@pytest.fixture(params=["native", "python"])
def builder(request, monkeypatch):
    """Every test below runs with the C builder and with the Python one (the native library disabled)."""
    if request.param == "native":
        if native.library() is None:
            pytest.skip("no C compiler: the native builder is not built here")
    else:
        monkeypatch.setitem(native._state, "lib", None)
    return request.param


def test_native_library_is_built_where_a_compiler_exists():
    if native._compiler() is None:
        pytest.skip("no C compiler")
    assert native.library() is not None


def test_native_library_can_be_disabled(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTCODER_NATIVE", "0")
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "_state", {})
    assert native.library() is None
    assert not (tmp_path / "native").exists()


def test_a_failed_native_build_falls_back_to_python(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(native, "_compiler", lambda: "false")
    monkeypatch.setattr(native, "_state", {})
    assert native.library() is None
    assert "native code unavailable" in caplog.text
    parts = _parts([3, 2, 1], [1, 1])
    assert tree_fields(build_draft_tree(parts, 64, 0.0, _trained(0), COST)) == \
        tree_fields(reference_build_draft_tree(parts, 64, 0.0, _trained(0), COST))


class _ArrayOnly:
    """An estimator with only the array interface (no estimate_list)."""

    def __init__(self, est):
        self.est = est

    def estimate(self, keys, shares):
        return self.est.estimate(keys, shares)


@pytest.mark.parametrize("counts_dtype", [np.float64, np.int64, np.float32])
@pytest.mark.parametrize("python_nodes", [0, 10_000])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidate_sets(), st.integers(1, 40), st.sampled_from([0.0, 0.2, 0.5]), st.integers(0, 3))
def test_sized_builder_equals_reference_in_both_regimes(builder, python_nodes, counts_dtype, parts, budget, min_prob, seed):
    """Counts of every dtype a source gives (retrieval: int64 occurrence counts; others float)."""
    for part in parts:
        part.counts = part.counts.astype(counts_dtype)
    est = _trained(seed)
    saved = dt.SIZED_PYTHON_NODES
    dt.SIZED_PYTHON_NODES = python_nodes  # 0: every tree takes the array calls; 10_000: none does
    try:
        got = build_draft_tree(parts, budget, min_prob, est, COST)
        got_arrays = build_draft_tree(parts, budget, min_prob, _ArrayOnly(est), COST)
    finally:
        dt.SIZED_PYTHON_NODES = saved
    want = reference_build_draft_tree(parts, budget, min_prob, est, COST)
    assert tree_fields(got) == tree_fields(want)
    assert tree_fields(got_arrays) == tree_fields(want)


@st.composite
def raw_sources(draw):
    """Sources as the drafters give them and beyond: int32 or int64 token rows (2-D, 1-D, or a column
    slice with a row stride wider than the row), rows longer than the depth cut and more rows than the row
    cut, int64 counts or float64 ones (whole or fractional, a few or many: whose sum's order matters)."""
    from engine.draft_tree import SOURCE_CACHE, SOURCE_CONTEXT

    parts = []
    for source in draw(st.lists(st.sampled_from([SOURCE_REPO, SOURCE_COMMON, SOURCE_CONTEXT, SOURCE_CACHE]),
                                min_size=1, max_size=5)):
        width = draw(st.integers(1, 2 * dt.SIZED_MAX_DEPTH + 6))
        k = draw(st.integers(1, dt.SIZED_MAX_ROWS + 8))
        top = draw(st.integers(1, 3))
        rows = np.asarray(draw(st.lists(st.lists(st.integers(-1, top), min_size=width + 2, max_size=width + 2),
                                        min_size=k, max_size=k)), dtype=draw(st.sampled_from([np.int32, np.int64])))
        layout = draw(st.sampled_from(["2d", "1d", "strided"]))
        tokens = rows[0, :width] if layout == "1d" else (rows[:, :width] if layout == "strided"
                                                          else np.ascontiguousarray(rows[:, :width]))
        n_counts = max(1, k + draw(st.sampled_from([0, 0, -1, 2])))  # a count per row, or a few more or less
        whole = draw(st.lists(st.integers(0, 5), min_size=n_counts, max_size=n_counts))
        kind = draw(st.sampled_from(["int", "whole", "fraction"]))
        counts = (np.asarray(whole, np.int64) if kind == "int" else
                  np.asarray(whole, float) / (3.0 if kind == "fraction" else 1.0))
        parts.append(Candidates(tokens, counts, draw(st.sampled_from([1.0, 0.5, 3.0])), source,
                                draw(st.integers(0, 20))))
    return parts


@settings(max_examples=150, deadline=None)
@given(raw_sources(), st.integers(1, 64), st.sampled_from([0.0, 0.2]), st.integers(0, 3),
       st.sampled_from([dt.SIZED_MAX_DEPTH, 2 * dt.SIZED_MAX_DEPTH, 3]))
def test_sized_builder_from_raw_sources_equals_python_and_reference(parts, budget, min_prob, seed, max_depth):
    """The C preparation of the sources' own arrays (engine.native.tree.build_sized_parts) and its fallbacks
    build the Python builder's trees (the row and depth cuts, stable ties among the most frequent rows, the
    counts' sum, every token dtype and row layout), at the default depth bound and at others (48: where
    verification is cheap), and the reference's where it takes the input (2-D rows, a count per row, the
    default depth)."""
    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    parts = [p for p in parts if p.tokens.size and len(p.counts)]
    est = _trained(seed)
    got = tree_fields(build_draft_tree(parts, budget, min_prob, est, COST, max_depth))
    depths = got[2][1]
    assert not depths or max(depths) <= max_depth
    saved = native._state.get("lib")
    native._state["lib"] = None
    try:
        assert native.library() is None
        python = tree_fields(build_draft_tree(parts, budget, min_prob, est, COST, max_depth))
    finally:
        native._state["lib"] = saved
    assert got == python
    if max_depth == dt.SIZED_MAX_DEPTH and all(p.tokens.ndim == 2 and len(p.tokens) == len(p.counts) for p in parts):
        assert got == tree_fields(reference_build_draft_tree(parts, budget, min_prob, est, COST))


@settings(max_examples=60, deadline=None)
@given(raw_sources(), st.integers(1, 64), st.sampled_from([0.0, 0.2]), st.integers(0, 3))
def test_sized_builder_reading_the_sources_own_memory_equals_python(parts, budget, min_prob, seed):
    """Sources that do not fit the builder's copy scratch are read where they lie (their own strides and
    dtypes): the same trees as the Python builder."""
    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    from engine.native import tree as native_tree

    parts = [p for p in parts if p.tokens.size and len(p.counts)]
    est = _trained(seed)
    saved_scratch = getattr(native_tree._local, "scratch", None)
    tiny = native_tree._NativeScratch()
    tiny.src_tokens, tiny.src_int_counts = tiny.src_tokens[:3], tiny.src_int_counts[:1]  # room for almost nothing
    tiny.src_float_counts = tiny.src_float_counts[:1]
    native_tree._local.scratch = tiny
    try:
        got = tree_fields(build_draft_tree(parts, budget, min_prob, est, COST))
    finally:
        native_tree._local.scratch = saved_scratch
    saved = native._state.get("lib")
    native._state["lib"] = None
    try:
        python = tree_fields(build_draft_tree(parts, budget, min_prob, est, COST))
    finally:
        native._state["lib"] = saved
    assert got == python


def test_the_depth_bound_lets_a_long_copy_be_verified_whole_where_verification_is_cheap():
    """A 40-token continuation that every estimate trusts, on a flat c(n): cut at the default 24 tokens, kept whole
    with a bound of 48 (the cheap-verification setting), by the native builder and the Python one alike."""
    from engine.cost_model import VerifyCost
    from engine.draft_tree import SOURCE_CONTEXT

    est = AcceptanceEstimator()
    est.tried[:] = 1000
    est.accepted[:] = 999
    row = np.arange(100, 140, dtype=np.int64)[None]
    parts = [Candidates(row, np.array([9.0]), 1.0, SOURCE_CONTEXT, 12)]
    flat = VerifyCost.flat()
    for lib in (native.library(), None):  # the C builder (where built), then the Python one
        saved = native._state.get("lib")
        native._state["lib"] = lib
        try:
            default = build_draft_tree(parts, 64, 0.0, est, flat)
            deep = build_draft_tree(parts, 64, 0.0, est, flat, 48)
        finally:
            native._state["lib"] = saved
        assert default.tokens.tolist() == list(range(100, 124)) and int(default.depths.max()) == dt.SIZED_MAX_DEPTH
        assert deep.tokens.tolist() == list(range(100, 140)) and int(deep.depths.max()) == 40


def _parts(counts_a, counts_b):
    a = Candidates(np.array([[1, 2, 3, -1], [1, 2, 4, 5], [1, 6, -1, -1]]), np.array(counts_a, float), 2.0,
                   SOURCE_REPO, 4)
    b = Candidates(np.array([[1, 2, 3], [7, 8, 9]]), np.array(counts_b, float), 1.0, SOURCE_COMMON, 9)
    return [a, b]


@pytest.mark.parametrize("counts_a,counts_b", [([3, 2, 1], [1, 1]), ([3, -2, 1], [1, 1]), ([0, 0, 0], [1, 0]),
                                               ([np.nan, 1, 1], [1, 1]), ([1, 1, 1], [-5, 1])])
def test_sized_builder_outside_its_shortcuts_equals_reference(builder, counts_a, counts_b):
    est = _trained(0)
    parts = _parts(counts_a, counts_b)
    assert tree_fields(build_draft_tree(parts, 64, 0.0, est, COST)) == \
        tree_fields(reference_build_draft_tree(parts, 64, 0.0, est, COST))


def test_sized_builder_with_zero_prior_strength_equals_reference(builder):
    """Untried buckets and no prior: 0 / 0 estimates (NaN), which the Python loops leave to the arrays."""
    est = AcceptanceEstimator(prior_strength=0.0)
    est.tried[:5000] = 3
    est.accepted[:5000] = 1
    parts = _parts([3, 2, 1], [1, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        got = build_draft_tree(parts, 64, 0.0, est, COST)
        want = reference_build_draft_tree(parts, 64, 0.0, est, COST)
    assert tree_fields(got) == tree_fields(want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 63), st.integers(1, 20), st.floats(0, 1) | st.just(float("nan")),
                          st.integers(0, 20)), min_size=1, max_size=30), st.integers(0, 3))
def test_bucket_bases_and_estimate_list_equal_array_versions(nodes, seed):
    src, depth, share, match = (list(x) for x in zip(*nodes))
    want = acceptance.bucket_keys(np.array(src), np.array(depth), np.array(share), np.array(match))
    bases = [acceptance.bucket_bases(s, m, 20)[d] for s, d, m in zip(src, depth, match)]
    assert acceptance.keys_from_bases(bases, share) == want.tolist()
    assert acceptance.keys_from_bases_array(np.array(bases, dtype=np.int64), np.array(share)).tolist() == want.tolist()
    est = _trained(seed)
    got = est.estimate_list(want.tolist(), share)
    assert np.array_equal(np.array(got), est.estimate(want, np.array(share)), equal_nan=True)


def test_native_builder_from_several_threads_at_once_gives_each_its_own_tree():
    """ctypes releases the GIL in the C call: concurrent builders must not share buffers."""
    from concurrent.futures import ThreadPoolExecutor

    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    est = _trained(1)
    rng = np.random.default_rng(0)
    inputs = []
    for _ in range(40):
        rows = rng.integers(0, 6, (12, 8))
        rows[rng.random(rows.shape) < 0.1] = -1
        inputs.append([Candidates(rows, rng.integers(1, 9, 12), 1.0, SOURCE_REPO, int(rng.integers(0, 12))),
                       Candidates(rng.integers(0, 6, (3, 10)), rng.random(3) + 0.1, 1.0, SOURCE_COMMON, 3)])
    want = [tree_fields(reference_build_draft_tree(p, 32, 0.0, est, COST)) for p in inputs]

    def build_all(_):
        return [tree_fields(build_draft_tree(p, 32, 0.0, est, COST)) for p in inputs for _ in range(5)][::5]

    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(build_all, range(8)):
            assert got == want
