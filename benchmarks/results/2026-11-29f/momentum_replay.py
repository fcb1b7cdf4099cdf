"""Replay fastcoder with a 'momentum' bucket split (was the previous step's draft fully accepted)."""
import os, sys
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from engine import acceptance as A
from engine.bench import runner

MODE = os.environ.get("MOMENTUM", "off")  # off | control | on | on-reset


class MomentumEstimator(A.AcceptanceEstimator):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.accepted = np.concatenate([self.accepted, self.accepted])
        self.tried = np.concatenate([self.tried, self.tried])
        self.full = 0

    def _k2(self, keys):
        return keys + (self.full if MODE != "control" else 0) * A.NUM_BUCKETS

    def estimate(self, keys, shares):
        keys = np.asarray(keys, dtype=np.int64)
        prior = A.PRIOR_SCALE * np.clip(np.asarray(shares, dtype=np.float64), 0.0, 1.0)
        prior = np.where(keys >= A.ALTERNATIVE_STRIDE, prior * A.ALTERNATIVE_PRIOR, prior)
        pk = A.pooled_keys(keys)
        pooled = (self.pooled_accepted[pk] + self.pool_strength * prior) / (self.pooled_tried[pk] + self.pool_strength)
        k2 = self._k2(keys)
        return (self.accepted[k2] + self.prior_strength * pooled) / (self.tried[k2] + self.prior_strength)

    def update(self, keys, parents, path):
        keys = np.asarray(keys, dtype=np.int64)
        parents = np.asarray(parents, dtype=np.int64)
        if len(keys) == 0:
            if MODE == "on-reset":
                self.full = 0
            return
        k2 = self._k2(keys)
        tried = A.tried_nodes(parents, path)
        np.add.at(self.tried, k2[tried], 1.0)
        np.add.at(self.pooled_tried, A.pooled_keys(keys[tried]), 1.0)
        if path:
            p = np.asarray(path, dtype=np.int64)
            np.add.at(self.accepted, k2[p], 1.0)
            np.add.at(self.pooled_accepted, A.pooled_keys(keys[p]), 1.0)
        self.full = int(bool(path) and path[-1] not in set(parents.tolist()))


orig = runner._new_estimator


def patched(loaded=None):
    e = orig(loaded)
    if MODE == "off":
        return e
    m = MomentumEstimator(e.prior_strength, e.pool_strength, e.prior)
    m.depth_one, m.node_model = e.depth_one, e.node_model
    return m


runner._new_estimator = patched
import replay_methods
sys.exit(replay_methods.main(sys.argv[1:]))
