"""A decode step's time outside its forward and its drafting ("other"), part by part: the bench's own fastcoder
runs of one task kind with the decoder's per-step calls timed in place (round 1 warms up); per step, the median
and mean of each part, and the step's total "other" (decode time - forwards - drafting) for comparison.
Usage: python benchmarks/results/2026-11-26j/exp_step_other.py <repo> [kind] [rounds] [method]"""
import sys, time, collections
import numpy as np
from inplace import TIMES as T, setup, timed
from engine.bench import runner
from engine import decoder, acceptance
repo = sys.argv[1]
kind = sys.argv[2] if len(sys.argv) > 2 else "function"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
method = sys.argv[4] if len(sys.argv) > 4 else "fastcoder"
loaded, tasks, refs, common, repos = setup(repo, kind)
timed(decoder.SpeculativeDecoder, "_accept", "_accept")
timed(decoder, "compact_cache", "compact_cache")
timed(decoder.SpeculativeDecoder, "_learn", "_learn (estimator update + observe + hits)")
timed(acceptance.AcceptanceEstimator, "update", " estimator.update")
timed(decoder.SpeculativeDecoder, "_hit_stop", "_hit_stop")
timed(decoder.SpeculativeDecoder, "_verifiable", "_verifiable (in drafting)")
S = collections.defaultdict(float)
for rnd in range(rounds):
    for t in tasks:
        dec = runner.make_decoder(loaded, method, repos[t.task_id], common)
        r = runner.run_one(dec, method, t.prompt_ids, 128, stop=t.stop)
        st = r["stats"]
        S["steps"] += st["forward_passes"]
        S["other_ms"] += st["decode_ms"] - st["forward_ms"] - st["retrieval_ms"] + st["retrieval_prefill_ms"]
    if rnd == 0:
        T.clear(); S.clear()
steps = S["steps"]
print(f"steps {steps:.0f}, other per step {1e3 * S['other_ms'] / steps:.1f} us")
for k, v in sorted(T.items()):
    v = np.array(v)
    print(f"{k:44s} n={len(v):5d} median {np.median(v):7.1f} us  mean {v.mean():7.1f} us  p90 {np.percentile(v, 90):7.1f} us  per step {v.sum() / steps:7.1f} us")
