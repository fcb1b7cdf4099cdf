"""The learned per-node acceptance estimate (engine.node_model): the C builder and both Python regimes build the same
tree with it (probabilities included, with and without the draft head after it), it decides the tree's size through
its estimates, it survives its file format, and fitting it recovers a known acceptance rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_draft_head import _feature, _seen
from test_draft_tree_sized import _trained, raw_sources
from test_incremental_retrieval import candidate_sets, tree_fields

from engine import native
from engine import tree_builder as dt
from engine.acceptance_prior import AcceptancePrior, NUM_FEATURES as PRIOR_FEATURES
from engine.cost_model import VerifyCost
from engine.draft_tree import SOURCE_CONTEXT, SOURCE_REPO, Candidates
from engine.node_model import (CLASS_NAMES, CONTINUOUS, NUM_FEATURES, NodeModel, TrieRecorder, fit_node_model,
                               token_classes)
from engine.tree_builder import build_draft_tree

COST = VerifyCost([1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
                  [1.3435, 1.5717, 1.6664, 1.8026, 1.9834, 2.1364, 2.418, 2.6945, 3.3182, 3.882], 7.3, 512)


def _model(seed: int, vocab: int = 6, hidden: int = 5) -> NodeModel:
    rng = np.random.default_rng(seed)
    return NodeModel(rng.normal(0, 0.5, NUM_FEATURES), rng.uniform(0.5, 2.0, NUM_FEATURES),
                     rng.normal(0, 0.7, (hidden, NUM_FEATURES)), rng.normal(0, 0.3, hidden), rng.normal(0, 0.7, hidden),
                     float(rng.normal(0, 0.5)), rng.integers(0, 2, (vocab, len(CLASS_NAMES))))


def _constant(p: float, vocab: int = 6) -> NodeModel:
    """A model that gives every node ``p``."""
    return NodeModel(np.zeros(NUM_FEATURES), np.ones(NUM_FEATURES), np.zeros((1, NUM_FEATURES)), [0.0], [0.0],
                     math.log(p / (1 - p)), np.zeros((vocab, len(CLASS_NAMES))))


def _without_native(fn):
    saved = native._state.get("lib")
    native._state["lib"] = None
    try:
        assert native.library() is None
        return fn()
    finally:
        native._state["lib"] = saved


def _builds(parts, budget, min_prob, est, max_depth=dt.SIZED_MAX_DEPTH):
    """The tree of the C builder, of the plain-Python regime and of the array regime."""
    got_c = build_draft_tree(parts, budget, min_prob, est, COST, max_depth)
    got_py = _without_native(lambda: build_draft_tree(parts, budget, min_prob, est, COST, max_depth))
    saved = dt.SIZED_PYTHON_NODES
    dt.SIZED_PYTHON_NODES = 0
    try:
        got_arrays = _without_native(lambda: build_draft_tree(parts, budget, min_prob, est, COST, max_depth))
    finally:
        dt.SIZED_PYTHON_NODES = saved
    return got_c, got_py, got_arrays


def _fields(tree):
    return tree_fields(tree), None if tree.probs is None else tree.probs.tolist()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidate_sets(), st.integers(1, 40), st.sampled_from([0.0, 0.2]), st.integers(0, 3), st.integers(2, 8))
def test_every_builder_applies_the_node_model_identically(parts, budget, min_prob, seed, vocab):
    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    est = _trained(seed)
    est.node_model = _model(seed, vocab)
    got_c, got_py, got_arrays = _builds(parts, budget, min_prob, est)
    assert _fields(got_c) == _fields(got_py) == _fields(got_arrays)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidate_sets(), st.integers(1, 40), st.sampled_from([0.0, 0.2]), st.integers(0, 3), st.integers(2, 6))
def test_the_draft_head_adjusts_the_node_models_estimates_identically(parts, budget, min_prob, seed, vocab):
    """The node model first, then the draft head on its depth-1 estimates (which it records for learning)."""
    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    est = _trained(seed)
    est.node_model = _model(seed, vocab)
    est.depth_one = feature = _feature(vocab, 8, seed)
    got_c = build_draft_tree(parts, budget, min_prob, est, COST)
    seen_c = _seen(feature)
    got_py = _without_native(lambda: build_draft_tree(parts, budget, min_prob, est, COST))
    assert _fields(got_c) == _fields(got_py)
    assert seen_c == _seen(feature)


@settings(max_examples=60, deadline=None)
@given(raw_sources(), st.integers(1, 64), st.sampled_from([0.0, 0.2]), st.integers(0, 3))
def test_the_c_preparation_of_raw_sources_applies_the_node_model_as_python_does(parts, budget, min_prob, seed):
    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    parts = [p for p in parts if p.tokens.size and len(p.counts)]
    est = _trained(seed)
    est.node_model = _model(seed, 4)
    got = build_draft_tree(parts, budget, min_prob, est, COST)
    assert _fields(got) == _fields(_without_native(lambda: build_draft_tree(parts, budget, min_prob, est, COST)))


def _copy_parts():
    rows = np.array([[1, 2, 3, 4, 5, 0, 1, 2], [1, 2, 3, 5, 4, 0, 2, 1]], dtype=np.int64)
    return [Candidates(rows, np.array([3, 1]), 1.0, SOURCE_REPO, 4),
            Candidates(np.array([[1, 2, 3, 4, 5, 0]], dtype=np.int64), np.array([1.0]), 1.0, SOURCE_CONTEXT, 6)]


@pytest.mark.parametrize("with_native", [True, False])
def test_the_node_models_estimates_size_the_tree(with_native):
    """A model sure of every node gives the deepest tree the cost allows, a doubtful one no draft at all, whatever
    the bucket estimates; the tree carries the model's estimates."""
    if with_native and native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")

    def build(p):
        est = _trained(0)
        est.node_model = _constant(p)
        run = lambda: build_draft_tree(_copy_parts(), 64, 0.0, est, COST)  # noqa: E731
        return run() if with_native else _without_native(run)

    sure, doubtful = build(0.99), build(0.02)
    assert sure.n_draft >= 8 and np.allclose(sure.probs, 0.99)
    assert doubtful.n_draft == 0


def test_a_node_below_min_prob_stays_out_whatever_the_model_says():
    est = _trained(0)
    est.node_model = _constant(0.99)
    parts = [Candidates(np.array([[1, 2], [3, 4]], dtype=np.int64), np.array([9, 1]), 1.0, SOURCE_REPO, 3)]
    tree = build_draft_tree(parts, 64, 0.5, est, COST)
    assert tree.tokens.tolist() == [1, 2]


def test_features_describe_the_trie():
    """Siblings, children, descendants, alternative and the token classes of a small trie, by hand."""
    classes = np.zeros((5, len(CLASS_NAMES)), dtype=np.uint8)
    classes[2, 0] = 1  # token 2 holds a newline
    model = NodeModel(np.zeros(NUM_FEATURES), np.ones(NUM_FEATURES), np.zeros((1, NUM_FEATURES)), [0.0], [0.0], 0.0,
                      classes)
    # trie: 0 (tok 1) -> 1 (tok 2) -> 3 (tok 4); 0 -> 2 (tok 3)
    rows = model.features([1, 2, 3, 4], [-1, 0, 0, 1], [1, 2, 2, 3], [2, 2, 10, 2], [1.0, 0.75, 0.25, 0.75],
                          [3, 3, 3, 3], [4.0, 3.0, 1.0, 3.0], [0.5, 0.5, 0.5, 0.5])
    names = dict(zip(("siblings", "children", "descendants", "alternative", "sources"), (7, 8, 9, 4, 10)))
    assert [rows[i][names["siblings"]] for i in range(4)] == [math.log1p(1), math.log1p(2), math.log1p(2),
                                                              math.log1p(1)]
    assert [rows[i][names["children"]] for i in range(4)] == [math.log1p(2), math.log1p(1), 0.0, 0.0]
    assert rows[0][names["descendants"]] == math.log1p(3) / 3
    assert [rows[i][names["alternative"]] for i in range(4)] == [0.0, 0.0, 1.0, 0.0]
    assert rows[2][names["sources"]] == 2.0  # repo and context
    assert rows[1][17] == 1.0 and rows[3][23] == 1.0  # node 1's token holds a newline, and node 3's parent's
    assert rows[0][0] == 0.0 and len(rows[0]) == NUM_FEATURES


def test_the_file_format_round_trips_and_rejects_malformed_models(tmp_path):
    model = _model(3, vocab=70)
    again = NodeModel.from_dict(model.to_dict())
    assert np.array_equal(again.packed, model.packed) and np.array_equal(again.classes, model.classes)
    prior = AcceptancePrior(np.zeros(PRIOR_FEATURES), 0.0, node_model=model)
    loaded = AcceptancePrior.load(prior.save(tmp_path / "prior.json"))
    assert np.array_equal(loaded.node_model.packed, model.packed)
    assert loaded.describe()["node_model"]["hidden"] == model.hidden
    from engine.acceptance import AcceptanceEstimator

    assert AcceptanceEstimator(prior=loaded).node_model is None  # a decoder's node_model option sets it
    bad = model.to_dict()
    bad["features"] = bad["features"][:-1]
    with pytest.raises(ValueError):
        NodeModel.from_dict(bad)
    bad = model.to_dict()
    bad["w1"] = [[float("nan")] * NUM_FEATURES] * model.hidden
    with pytest.raises(ValueError):
        NodeModel.from_dict(bad)
    with pytest.raises(ValueError):
        NodeModel.from_dict({"features": "x"})


def test_fitting_recovers_a_known_acceptance_rule():
    """A synthetic drafter whose depth-1 nodes are right 90% of the time and deeper ones 30%: the fitted model's
    estimates converge on those rates."""
    rng = np.random.default_rng(0)
    n = 4000
    x = np.zeros((n, NUM_FEATURES))
    x[:, list(CONTINUOUS)] = rng.normal(0, 1, (n, len(CONTINUOUS)))
    depth = rng.integers(1, 4, n)
    x[:, 1], x[:, 2], x[:, 3] = depth / 12, depth == 1, depth == 2
    y = rng.random(n) < np.where(depth == 1, 0.9, 0.3)
    model = fit_node_model(x, y, np.zeros((3, len(CLASS_NAMES)), dtype=np.uint8), hidden=4, epochs=300)
    p = np.array([model.predict(row) for row in x.tolist()])
    assert abs(p[depth == 1].mean() - 0.9) < 0.03
    assert abs(p[depth > 1].mean() - 0.3) < 0.03


def test_the_recorder_labels_the_nodes_a_reference_reaches():
    """Every node whose parent is right is one row, labelled by whether its own token is the reference's."""
    recorder = TrieRecorder(np.zeros((8, len(CLASS_NAMES)), dtype=np.uint8))
    recorder.set_target([1, 2, 3])
    probs = [0.5] * 5
    # 0 (1) -> 1 (2) -> 2 (5); 0 -> 3 (4); root 4 (7)
    out = recorder.adjust([1, 2, 5, 4, 7], [-1, 0, 1, 0, -1], [1, 2, 3, 2, 1], [2] * 5, [1.0] * 5, [1] * 5,
                          [1.0] * 5, probs)
    assert out == probs
    assert recorder.labels == [True, True, False, False, False]
    assert len(recorder.rows) == 5 and len(recorder.rows[0]) == NUM_FEATURES


def test_token_classes_of_a_tokenizer():
    class Tok:
        texts = ["\n", "    ", "self", "):", " x", "42"]

        def __len__(self):
            return len(self.texts)

        def decode(self, ids):
            return "".join(self.texts[i] for i in ids)

    got = token_classes(Tok())
    assert got.tolist() == [[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0],
                            [0, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 1]]
