"""The previous step's accepted length as a feature of every draft node's estimate
(engine.acceptance.AcceptanceEstimator.set_previous): it shifts each estimate's odds (the C builder and both Python
regimes alike: tests/test_draft_tree_sized.py builds with it), its weights learn online that a step after a long
accepted copy accepts more, and the decoder feeds it while staying lossless."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.acceptance import AcceptanceEstimator, bucket_keys
from engine.draft_tree import SOURCE_CONTEXT


def _keys(depths):
    n = len(depths)
    return bucket_keys(np.full(n, SOURCE_CONTEXT), np.asarray(depths), np.full(n, 0.6), np.full(n, 4))


def test_no_previous_leaves_estimates_unchanged_and_a_previous_shifts_their_log_odds():
    est = AcceptanceEstimator()
    keys, shares = _keys([1, 2, 3]), np.full(3, 0.6)
    base = est.estimate(keys, shares)
    est.set_previous(None)
    assert est.odds == 1.0 and est.estimate(keys, shares).tolist() == base.tolist()
    for previous in (-1, 0, 3, 12):
        est.set_previous(previous)
        w = est.previous_weights
        shift = w[0] * math.log1p(max(previous, 0)) + w[1] * (previous < 0) + w[2]
        got = est.estimate(keys, shares)
        want = [1 / (1 + math.exp(-(math.log(q / (1 - q)) + shift))) for q in base]
        assert np.allclose(got, want, rtol=1e-12, atol=0)
        assert est.estimate_list(keys.tolist(), shares.tolist()) == got.tolist()  # bit for bit
    est.set_previous(12)
    long_copy = est.estimate(keys, shares)
    est.set_previous(0)
    assert (long_copy > est.estimate(keys, shares)).all()  # the starting weights favour continuing a copy


def test_weights_learn_online_that_steps_after_long_copies_accept_more():
    """A synthetic drafter whose chains are accepted at 0.85 per node after a step that accepted 4+ tokens and at
    0.25 otherwise (one bucket per depth, so the buckets alone cannot tell the two apart): from zero weights, the
    length weight grows and a depth-1 estimate after a long copy ends well above one after a miss."""
    rng = np.random.default_rng(0)
    est = AcceptanceEstimator()
    est.previous_weights = [0.0, 0.0, 0.0]
    est.previous_learning_rate = 0.02
    keys, shares = _keys([1, 2, 3, 4, 5, 6]), np.full(6, 0.6)
    parents = np.arange(-1, 5)
    previous = -1
    for _ in range(3000):
        est.set_previous(previous)
        probs = est.estimate(keys, shares)
        rate = 0.85 if previous >= 4 else 0.25
        path = []
        for node in range(6):
            if rng.random() >= rate:
                break
            path.append(node)
        est.update(keys, parents, path, probs)
        previous = len(path)
    assert est.previous_weights[0] > 0.4
    assert est.previous_learned > 3000
    est.set_previous(6)
    after_copy = est.estimate(keys, shares)[0]
    est.set_previous(0)
    after_miss = est.estimate(keys, shares)[0]
    assert after_copy > after_miss + 0.2 and after_miss < 0.3


def test_the_decoder_feeds_the_previous_length_and_stays_lossless(tiny_coder):
    from engine.decoder import SpeculativeDecoder

    prompt = "def parse_header(line):\n    key, value = line.split(':', 1)\n    return key.strip(), value.strip()\n\n\n" \
             "def parse_headers(lines):\n    headers = {}\n    for line in lines:\n"
    want = SpeculativeDecoder(tiny_coder, method="ar").generate(prompt, max_new_tokens=48).token_ids
    est = AcceptanceEstimator()
    fast = SpeculativeDecoder(tiny_coder, method="fastcoder", acceptance_estimator=est)
    got = fast.generate(prompt, max_new_tokens=48)
    assert got.token_ids == want
    assert est.previous_learned > 0 and est.summary()["previous_length"]["learned"] == est.previous_learned
    last = got.stats["accepted_lengths"][-1]
    assert est.odds != 1.0 and est._previous_x[0] == pytest.approx(math.log1p(last - 1))
    off_est = AcceptanceEstimator()
    off = SpeculativeDecoder(tiny_coder, method="fastcoder", acceptance_estimator=off_est, previous_length=False)
    assert off.generate(prompt, max_new_tokens=48).token_ids == want
    assert off_est.odds == 1.0 and off_est.previous_learned == 0
