"""Calibration of the engine's own estimates split by whether the node's token occurred in the last W context tokens:
token_feature_probe.py's SIZED=1 files ($DIR/sized_<kind>_<repo>.npz, DIR default /tmp/s15), tried nodes only (below
the pending token or an accepted node), by estimate band; then the offset-logistic fit of the shift (w_recent, w_0) on
logit(estimate) for W = 16, 32, 64. Usage: python recent_calibration.py [KIND] (default function)"""
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_select import fit_offset as fit, logit  # noqa: E402


kind = sys.argv[1] if len(sys.argv) > 1 else "function"
data = {}
for f in sorted(glob.glob(os.path.join(os.environ.get("DIR", "/tmp/s15"), f"sized_{kind}_*.npz"))):
    d = np.load(f)
    key = d["step"] * 1000 + d["index"]
    hit_keys = set(key[d["hit"] == 1].tolist())
    tried = (d["parent"] < 0) | np.isin(d["step"] * 1000 + d["parent"], list(hit_keys))
    data[f.split("_")[-1][:-4]] = (d["est"][tried], d["hit"][tried], d["distance"][tried])
for repo, (est, hit, dist) in data.items():
    rec = dist <= 32
    print(repo, "tried nodes", len(est))
    for lo, hi in ((0, .3), (.3, .5), (.5, .7), (.7, .9), (.9, 1.01)):
        s = (est >= lo) & (est < hi)
        a, b = s & rec, s & ~rec
        fmt = lambda m: f"n {m.sum():3d} hit {hit[m].mean():.2f} est {est[m].mean():.2f}" if m.any() else "n   0"
        print(f"  estimate {lo:.1f}-{min(hi, 1):.1f}: recent {fmt(a)} | other {fmt(b)}")
for window in (16, 32, 64):
    X = np.concatenate([np.stack([(d <= window).astype(float), np.ones(len(d))], 1) for _, _, d in data.values()])
    off = np.concatenate([logit(e) for e, _, _ in data.values()])
    y = np.concatenate([h for _, h, _ in data.values()])
    print(f"W={window}: (w_recent, w_0) = {np.round(fit(X, off, y), 2).tolist()}")
