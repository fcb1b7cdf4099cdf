"""The fitted prior of the acceptance estimates (engine/acceptance_prior.py, issue #9)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_CODER, loaded_random
from engine.acceptance import (ALTERNATIVE_STRIDE, NUM_BUCKETS, PRIOR_STRENGTH, AcceptanceEstimator, bucket_keys,
                               pooled_keys)
from engine.acceptance_prior import (NUM_FEATURES, PACKAGED_DIR, PRIOR_ENV, AcceptancePrior, bucket_features,
                                     find_prior, fit_prior, model_identity, prior_file_name)


def _random_keys(rng, n):
    return bucket_keys(rng.integers(1, 128, n), rng.integers(1, 12, n), rng.random(n), rng.integers(0, 20, n),
                       rng.random(n) < 0.3)


def test_rates_are_the_logistic_model_of_every_buckets_features():
    rng = np.random.default_rng(0)
    prior = AcceptancePrior(rng.normal(size=NUM_FEATURES), -0.4)
    z = bucket_features(np.arange(NUM_BUCKETS)) @ prior.weights + prior.bias
    np.testing.assert_allclose(prior.rates(), 1 / (1 + np.exp(-z)), rtol=1e-12, atol=1e-15)
    keys = _random_keys(rng, 50)
    feats = bucket_features(keys)
    assert feats.shape == (50, NUM_FEATURES)
    assert np.all(feats[:, -6:].sum(1) == (keys >= ALTERNATIVE_STRIDE))  # share one-hot again for alternatives only


def test_fit_recovers_the_acceptance_rates_of_a_drafter_with_known_rates():
    rng = np.random.default_rng(1)
    truth = AcceptancePrior(rng.normal(scale=0.8, size=NUM_FEATURES), 0.2)
    keys = _random_keys(rng, 40_000)
    accepted = rng.random(len(keys)) < truth.rates()[keys]
    fitted = fit_prior(keys, accepted, l2=1e-6)
    seen = np.unique(keys)
    assert np.abs(fitted.rates()[seen] - truth.rates()[seen]).mean() < 0.02
    with pytest.raises(ValueError):
        fit_prior(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))


def test_an_estimator_starts_at_the_prior_and_learns_away_from_it():
    rng = np.random.default_rng(2)
    prior = AcceptancePrior(rng.normal(size=NUM_FEATURES), 0.0, strength=8.0)
    est = AcceptanceEstimator(prior=prior)
    keys = _random_keys(rng, 6)
    shares = np.full(6, 0.5)
    plain = AcceptanceEstimator().estimate(keys, shares)  # the hand-set prior, pooled
    got = est.estimate(keys, shares)
    want = (8.0 * prior.rates()[keys] + PRIOR_STRENGTH * plain) / (8.0 + PRIOR_STRENGTH)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert est.estimate_list(keys.tolist(), shares.tolist()) == pytest.approx(got.tolist(), rel=1e-12)
    assert est.summary()["tried"] == 0 and est.summary()["accepted"] == 0 and est.summary()["prior"] is not None
    chain = np.array([keys[0], keys[1]])
    for _ in range(200):  # every tree of these two nodes is accepted whole
        est.update(chain, np.array([-1, 0]), [0, 1])
    assert est.estimate(chain[:1], shares[:1])[0] > 0.95
    s = est.summary()
    assert (s["tried"], s["accepted"], s["rate"]) == (400, 400, 1.0)
    assert pooled_keys(chain).shape == (2,)


def test_save_load_and_malformed_files(tmp_path):
    prior = AcceptancePrior(np.linspace(-1, 1, NUM_FEATURES), 0.5, 4.0, {"params": 3, "head_sha256": "ab"},
                            {"nodes": 7})
    back = AcceptancePrior.load(prior.save(tmp_path / "p.json"))
    np.testing.assert_array_equal(back.weights, prior.weights)
    assert (back.bias, back.strength, back.model, back.info) == (0.5, 4.0, prior.model, prior.info)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "short.json").write_text(json.dumps({"format": 1, "weights": [0.0], "bias": 0}))
    (tmp_path / "other.json").write_text(json.dumps({"format": 99}))
    for name in ("bad.json", "short.json", "other.json"):
        with pytest.raises(ValueError):
            AcceptancePrior.load(tmp_path / name)


def test_a_prior_serves_only_the_model_it_was_fitted_for(tmp_path, monkeypatch):
    monkeypatch.delenv(PRIOR_ENV, raising=False)
    model = loaded_random("llama").model
    identity = model_identity(model)
    assert identity["params"] == sum(p.numel() for p in model.parameters()) and len(identity["head_sha256"]) == 16
    (tmp_path / "garbage.json").write_text("[]")  # skipped, never raised
    other = AcceptancePrior(np.zeros(NUM_FEATURES), 1.0, model={**identity, "head_sha256": "0" * 16})
    other.save(tmp_path / "other.json")
    assert find_prior(model, [tmp_path]) is None
    mine = AcceptancePrior(np.zeros(NUM_FEATURES), -1.0, model=identity)
    mine.save(tmp_path / prior_file_name(identity))
    found = find_prior(model, [tmp_path])
    assert found is not None and found.bias == -1.0
    monkeypatch.setenv(PRIOR_ENV, "off")
    assert find_prior(model, [tmp_path]) is None
    monkeypatch.setenv(PRIOR_ENV, str(tmp_path / "other.json"))  # a named file serves whatever the model
    assert find_prior(model, [tmp_path]).bias == 1.0


def test_the_shipped_prior_is_the_dev_models(tiny_coder, monkeypatch):
    """engine/data/acceptance_prior holds tiny-py-coder's prior, and a decoder of that model starts from it."""
    monkeypatch.delenv(PRIOR_ENV, raising=False)
    prior = find_prior(tiny_coder.model, [PACKAGED_DIR])
    assert prior is not None and prior.model == model_identity(tiny_coder.model)
    assert set(prior.info["fitted_on"][0]) >= {"repo", "kind", "nodes"}
    assert not {s["repo"] for s in prior.info["fitted_on"]} & {"pluggy", "jinja2", "pygls"}  # never a benchmark repo
    from engine import SpeculativeDecoder  # noqa: PLC0415

    dec = SpeculativeDecoder(tiny_coder, method="fastcoder")
    assert dec.estimator.prior is not None and dec.estimator.summary()["prior"]["model"] == prior.model
    # with the learned per-node estimate fitted on the same repositories (engine.node_model), unless asked not to
    assert prior.node_model is not None and dec.estimator.node_model is None  # opt-in
    opted = SpeculativeDecoder(tiny_coder, method="fastcoder", node_model=True).estimator.node_model
    assert np.array_equal(opted.packed, prior.node_model.packed)
    assert dec.estimator.summary()["prior"]["node_model"]["hidden"] == prior.node_model.hidden
    assert len(prior.node_model.codes) == len(tiny_coder.tokenizer)
    fitted_on = {s["repo"] for s in prior.info["node_model_info"]["fitted_on"]}
    assert fitted_on and not fitted_on & {"pluggy", "jinja2", "pygls"}


@pytest.mark.skipif(not TINY_CODER.exists(), reason="dev model not found")
def test_fit_command_writes_a_prior_the_model_then_uses(tmp_path, handlers_repo, engine_cli):
    repo = handlers_repo
    out = tmp_path / "prior.json"
    status, stdout, stderr = engine_cli(["fit-acceptance-prior", "--model", TINY_CODER, "--repo", repo, "--kinds",
                                         "function", "--tasks", "3", "--max-new-tokens", "24", "--common", "none",
                                         "--threads", "1", "--out", out])
    assert status == 0, stderr[-2000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["path"] == str(out) and report["nodes"] > 0
    prior = AcceptancePrior.load(out)
    assert prior.info["fitted_on"] == [{"repo": "repo", "kind": "function", "nodes": report["nodes"]}]
    assert 0.0 < prior.rates().mean() < 1.0
    status, _, stderr = engine_cli(["fit-acceptance-prior", "--node-model", "--hidden", "4", "--model", TINY_CODER,
                                    "--repo", repo, "--kinds", "function", "--tasks", "3", "--max-new-tokens", "24",
                                    "--common", "none", "--threads", "1", "--out", out])
    assert status == 0, stderr[-2000:]
    with_nodes = AcceptancePrior.load(out)  # the model's prior (the shipped one) with a node model fitted here
    assert with_nodes.node_model is not None and with_nodes.node_model.hidden == 4
    assert with_nodes.info["node_model_info"]["fitted_on"][0]["repo"] == "repo"
    assert with_nodes.info["node_model_info"]["nodes"] > 0
    status, _, stderr = engine_cli(["fit-acceptance-prior", "--repo", tmp_path / "nope"])
    assert status == 2 and "not a folder" in stderr
