"""The draft head (engine.draft_head): its depth-1 adjustment is the same in the C builder and both Python regimes,
it moves the tree toward the token the model's hidden state predicts, its calibration learns known weights online,
its files load or fail clearly, and the decoder feeds it the hidden state of the row that chose the pending token
while staying lossless."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_draft_tree_sized import _trained
from test_incremental_retrieval import candidate_sets, tree_fields

from engine import draft_head as dh
from engine import tree_builder as dt
from engine import native
from engine.acceptance import AcceptanceEstimator
from engine.cost_model import VerifyCost
from engine.draft_tree import SOURCE_CONTEXT, SOURCE_REPO, Candidates
from engine.tree_builder import build_draft_tree

COST = VerifyCost([1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
                  [1.3435, 1.5717, 1.6664, 1.8026, 1.9834, 2.1364, 2.418, 2.6945, 3.3182, 3.882], 7.3, 512)
MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "tiny-py-coder"


def _head(dim: int, seed: int, calibration=(0.8, 0.4, 1.7), pending: bool = False) -> dh.DraftHead:
    rng = np.random.default_rng(seed)
    return dh.DraftHead(rng.normal(0, 0.3, (dim, dim)), rng.normal(0, 0.1, dim), rng.normal(0, 0.3, (dim, dim)),
                        rng.normal(0, 0.1, dim), rng.normal(0, 0.2, dim), 1.5, np.array(calibration),
                        rng.normal(0, 0.3, (dim, dim)) if pending else None)


def _feature(vocab: int, dim: int, seed: int, calibration=(0.8, 0.4, 1.7), pending: bool = False) -> dh.DepthOneFeature:
    rng = np.random.default_rng(seed + 100)
    feature = dh.DepthOneFeature(_head(dim, seed, calibration, pending),
                                 rng.normal(0, 1, (vocab, dim)).astype(np.float32))
    feature.set_hidden(rng.normal(0, 1, dim).astype(np.float32))
    return feature


def _seen(feature):
    n = int(feature.seen_tokens[0])
    return feature.seen_tokens[1:1 + n].tolist(), feature.seen_values[:2 * n].tolist()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidate_sets(), st.integers(1, 40), st.sampled_from([0.0, 0.2]), st.integers(0, 3), st.integers(2, 6))
def test_every_builder_applies_the_head_identically(monkeypatch, parts, budget, min_prob, seed, vocab):
    """C builder, plain-Python regime and array regime: the same tree (probabilities included) and the same
    recorded depth-1 nodes; every recorded depth-1 node's estimate is the calibrated one (tokens >= vocab: none)."""
    if native.library() is None:
        pytest.skip("no C compiler: the native builder is not built here")
    est = _trained(seed)
    est.depth_one = feature = _feature(vocab, 8, seed)
    got_c = build_draft_tree(parts, budget, min_prob, est, COST)
    seen_c = _seen(feature)
    results = []
    with monkeypatch.context() as m:
        m.setitem(native._state, "lib", None)
        for python_nodes in (10_000, 0):
            m.setattr(dt, "SIZED_PYTHON_NODES", python_nodes)
            results.append((build_draft_tree(parts, budget, min_prob, est, COST), _seen(feature)))
    for tree, seen in results:
        assert tree_fields(tree) == tree_fields(got_c)
        assert seen == seen_c
    tokens, values = seen_c
    assert all(0 <= t < vocab for t in tokens)
    for i in np.flatnonzero(got_c.parents < 0).tolist():
        tok = int(got_c.tokens[i])
        if tok in tokens:
            j = tokens.index(tok)
            assert values[2 * j + 1] == feature.feature(tok)
            assert got_c.probs[i] == feature.calibrated(values[2 * j], values[2 * j + 1])


@pytest.mark.parametrize("use_native", [True, False])
def test_the_head_chooses_between_equally_likely_first_tokens(monkeypatch, use_native):
    """Two sources propose different first tokens with the same share; the retrieval estimates tie. With the hidden
    state pointing at token 5, the tree keeps token 5's branch and drops token 7's; pointing at 7, the other way."""
    if use_native and native.library() is None:
        pytest.skip("no C compiler")
    if not use_native:
        monkeypatch.setitem(native._state, "lib", None)
    dim, vocab = 16, 12
    emb = np.zeros((vocab, dim), dtype=np.float32)
    emb[5, 0] = emb[7, 1] = 1.0
    lse_w = np.zeros(dim)
    lse_w[:2] = 1.0  # lse_hat = h[0] + h[1]
    identity = dh.DraftHead(np.zeros((dim, dim)), np.zeros(dim), np.zeros((dim, dim)), np.zeros(dim), lse_w,
                            0.0, np.array([1.0, 1.0, 0.0]))
    parts = [Candidates(np.array([[5, 1, 2, 3]]), np.array([1.0]), 1.0, SOURCE_REPO, 4),
             Candidates(np.array([[7, 1, 2, 3]]), np.array([1.0]), 1.0, SOURCE_CONTEXT, 4)]
    steep = VerifyCost([1, 2, 4, 8, 16], [1.2, 1.9, 3.0, 5.0, 9.0], 5.0, 512)
    est = AcceptanceEstimator()
    plain = build_draft_tree(parts, 64, 0.0, est, steep)
    est.depth_one = feature = dh.DepthOneFeature(identity, emb)
    for favoured, other in ((5, 7), (7, 5)):
        h = np.zeros(dim, dtype=np.float32)
        h[0 if favoured == 5 else 1] = 8.0  # log-probability ~0 for the favoured token, -8 for the other
        feature.set_hidden(h)
        tree = build_draft_tree(parts, 64, 0.0, est, steep)
        first = tree.tokens[tree.parents < 0].tolist()
        assert favoured in first and other not in first
    feature.disable()
    assert tree_fields(build_draft_tree(parts, 64, 0.0, est, steep)) == tree_fields(plain)


def test_calibration_learns_known_weights_online():
    """Depth-1 outcomes drawn from sigmoid(1.2 logit(q) + 0.5 f + 1.0): SGD from the identity comes close to those
    weights and predicts the outcomes better than the identity did."""
    rng = np.random.default_rng(0)
    feature = dh.DepthOneFeature(_head(4, 0, calibration=dh.IDENTITY_CALIBRATION),
                                 np.zeros((3, 4), dtype=np.float32), learning_rate=0.02)
    true_w = np.array([1.2, 0.5, 1.0])
    data = []
    for _ in range(40000):
        q, f = float(rng.uniform(0.02, 0.98)), float(rng.uniform(-10, 0))
        p = 1 / (1 + math.exp(-(true_w @ [math.log(q / (1 - q)), f, 1.0])))
        data.append((q, f, rng.random() < p))

    def log_loss(sample):
        return -np.mean([math.log(feature.calibrated(q, f) if y else 1 - feature.calibrated(q, f)) for q, f, y in sample])

    before = log_loss(data[:2000])
    for q, f, y in data:
        feature.seen_tokens[:2] = (1, 2)  # one recorded depth-1 node, token 2
        feature.seen_values[:2] = (q, f)
        feature.learn(2 if y else 7)  # the token the model committed
        assert feature.seen_tokens[0] == 0
    assert feature.learned == len(data)
    assert np.allclose(feature.params[2:5], true_w, atol=0.25), feature.params[2:5]
    assert log_loss(data[:2000]) < before - 0.05


@pytest.mark.parametrize("pending_term", [False, True])
def test_native_step_equals_python_learning_and_feeding(pending_term):
    """fc_head_step learns bit for bit as the Python loop does and reads the row and the pending token set_hidden
    is given (Hydra's term for a token in the vocabulary, none for -1 or one past it)."""
    import torch

    a, b = _feature(6, 8, 3, pending=pending_term), _feature(6, 8, 3, pending=pending_term)
    if a._native is None:
        pytest.skip("no native library with AVX2")
    rng = np.random.default_rng(1)
    rows = torch.randn(1, 5, 8)
    for _ in range(300):
        k = int(rng.integers(1, 4))
        toks = rng.choice(6, size=k, replace=False)
        values = np.stack([rng.uniform(0, 1, k), rng.uniform(-12, 0, k)], 1).reshape(-1)
        for f in (a, b):
            f.seen_tokens[0] = k
            f.seen_tokens[1:1 + k] = toks
            f.seen_values[:2 * k] = values
        first = int(rng.integers(-1, 6))
        row, pending = int(rng.integers(0, 5)), int(rng.integers(-1, 7))
        a.step([rows], row, first, pending)
        b.learn(first)
        b.set_hidden(rows[0, row].numpy(), pending)
        assert a.seen_tokens[0] == b.seen_tokens[0] == 0
        assert np.allclose(a.hidden, b.hidden, atol=1e-5) and abs(a.params[1] - b.params[1]) < 1e-4
    assert a.params[2:5].tolist() == b.params[2:5].tolist() != [0.8, 0.4, 1.7]
    assert a.learned == b.learned > 0
    a.step([rows], 5, -1)
    assert not a.enabled
    a.step([rows], 2, -1)
    assert a.enabled
    a.step([None], 0, -1)
    assert not a.enabled


def test_the_pending_token_moves_the_head_as_its_table_row_says():
    """A head with ``w1e``: h' reads the pending token's row of E @ w1e.T (the same as w1e @ E[pending]); another
    token gives another h', -1 or a token outside the vocabulary leaves the term out (as a head without w1e)."""
    feature = _feature(6, 8, 2, pending=True)
    head, emb = feature.head, feature.embedding
    h = np.random.default_rng(5).normal(0, 1, 8).astype(np.float32)
    assert feature.pending_table.shape == (6, 8)
    for pending in range(6):
        feature.set_hidden(h, pending)
        a = head.w1 @ h + head.w1e @ emb[pending] + head.b1
        want = h + head.w2 @ (a / (1 + np.exp(-a))) + head.b2
        assert np.allclose(feature.hidden, want, atol=1e-4)
    feature.set_hidden(h, 3)
    three = feature.hidden.copy()
    feature.set_hidden(h, 4)
    assert not np.allclose(feature.hidden, three, atol=1e-3)
    plain = dh.DepthOneFeature(dh.DraftHead(head.w1, head.b1, head.w2, head.b2, head.lse_w, head.lse_b), emb)
    plain.set_hidden(h, 3)
    for outside in (-1, 6):
        feature.set_hidden(h, outside)
        assert np.allclose(feature.hidden, plain.hidden, atol=1e-5)


@pytest.mark.parametrize("pending_term", [False, True])
def test_files_round_trip_and_bad_files_fail_clearly(tmp_path, monkeypatch, pending_term):
    head = _head(8, 1, pending=pending_term)
    head.model, head.info = {"params": 3, "head_sha256": "ab"}, {"top1": 0.3}
    path = head.save(tmp_path / "h.npz")
    back = dh.DraftHead.load(path)
    for name in ("w1", "b1", "w2", "b2", "lse_w", "calibration", "w1e"):
        assert np.array_equal(getattr(back, name), getattr(head, name))
    assert (back.lse_b, back.model, back.info) == (head.lse_b, head.model, head.info)
    assert back.describe()["pending_token"] is pending_term
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError):
        dh.DraftHead.load(tmp_path / "bad.npz")
    with pytest.raises(OSError):
        dh.DraftHead.load(tmp_path / "missing.npz")
    with pytest.raises(ValueError):
        dh.DraftHead(np.zeros((4, 4)), np.zeros(3), np.zeros((4, 4)), np.zeros(4), np.zeros(4), 0.0)
    with pytest.raises(ValueError):  # w1e of another shape than w1
        dh.DraftHead(np.zeros((4, 4)), np.zeros(4), np.zeros((4, 4)), np.zeros(4), np.zeros(4), 0.0, w1e=np.zeros(3))
    with pytest.raises(ValueError):
        dh.DepthOneFeature(head, np.zeros((5, 7), dtype=np.float32))

    class Fake:
        pass

    monkeypatch.setenv(dh.HEAD_ENV, "off")
    assert dh.find_draft_head(Fake()) is None
    monkeypatch.setenv(dh.HEAD_ENV, str(path))
    assert dh.find_draft_head(Fake()).model == head.model


def test_a_hidden_state_of_another_width_disables_the_head():
    feature = _feature(4, 8, 0)
    assert feature.enabled
    feature.set_hidden(np.zeros(5, dtype=np.float32))
    assert not feature.enabled
    assert feature.adjust([1], [-1], [0.5]) == [0.5]


@pytest.fixture(scope="module")
def tiny():
    if not MODEL.is_dir():
        pytest.skip("tiny-py-coder not found")
    from engine import load_model

    return load_model(str(MODEL))


def test_the_decoder_feeds_the_head_the_pending_tokens_row_and_stays_lossless(tiny):
    """The packaged head serves tiny-py-coder; generation with it equals plain decoding, the head learned from the
    verified depth-1 nodes, and after the prefill its h' is the head of the prompt's last hidden state."""
    import torch

    from engine.decoder import SpeculativeDecoder

    head = dh.find_draft_head(tiny.model)
    assert head is not None, "no packaged draft head for tiny-py-coder"
    prompt = "def parse_header(line):\n    key, value = line.split(':', 1)\n    return key.strip(), value.strip()\n\n\n" \
             "def parse_headers(lines):\n    headers = {}\n    for line in lines:\n"
    est = AcceptanceEstimator()
    fast = SpeculativeDecoder(tiny, method="fastcoder", acceptance_estimator=est)
    assert fast.depth_one is not None and est.depth_one is fast.depth_one
    want = SpeculativeDecoder(tiny, method="ar").generate(prompt, max_new_tokens=48).token_ids
    got = fast.generate(prompt, max_new_tokens=48)
    assert got.token_ids == want
    assert fast.depth_one.learned > 0
    learned = fast.depth_one.learned  # a one-line completion (stop at the newline) drafts without the head
    one_line = fast.generate(prompt, max_new_tokens=48, stop=["\n"])
    assert fast.depth_one.learned == learned and not fast.depth_one.enabled
    plain = SpeculativeDecoder(tiny, method="ar").generate(prompt, max_new_tokens=48, stop=["\n"]).token_ids
    assert one_line.token_ids[:len(plain)] == plain  # a step may commit past the stop (checked once a forward)
    ids = tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        h = tiny.model.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].float()
        pending = int((h @ tiny.model.get_output_embeddings().weight.T).argmax())
    fast.depth_one.set_hidden(h.numpy(), pending)
    expected = fast.depth_one.hidden.copy()
    from engine.steps import prefill
    from engine.kv_cache import new_kv_cache

    with torch.inference_mode():
        prefill(tiny.model, new_kv_cache(tiny.model), torch.tensor([ids]))
    fast._feed_head([], -1, pending)
    assert np.allclose(fast.depth_one.hidden, expected, atol=1e-4)
    off = SpeculativeDecoder(tiny, method="fastcoder", draft_head=False)
    assert off.depth_one is None


def test_fit_command_writes_a_head_the_decoder_then_uses(tmp_path, handlers_repo, tiny, monkeypatch, engine_cli):
    """``fastcoder fit-draft-head`` (tiny settings) trains, calibrates and writes a head of the model's identity that
    find_draft_head then serves; a missing repository is a clear error."""
    import json

    out = tmp_path / "head.npz"
    status, stdout, stderr = engine_cli(["fit-draft-head", "--model", MODEL, "--repo", handlers_repo, "--kinds",
                                         "function", "--tasks", "6", "--max-new-tokens", "24", "--train-files", "2",
                                         "--epochs", "1", "--rank", "16", "--common", "none", "--threads", "1",
                                         "--out", out])
    assert status == 0, stderr[-2000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    head = dh.DraftHead.load(out)
    assert report["path"] == str(out) and head.rank == 16 and head.info["calibrated_on"][0]["nodes"] > 0
    from engine.acceptance_prior import model_identity

    assert head.model == model_identity(tiny.model)
    monkeypatch.delenv(dh.HEAD_ENV, raising=False)
    assert dh.find_draft_head(tiny.model, folders=[tmp_path]).rank == 16
    status, _, stderr = engine_cli(["fit-draft-head", "--repo", tmp_path / "nope"])
    assert status == 2 and "not a folder" in stderr
