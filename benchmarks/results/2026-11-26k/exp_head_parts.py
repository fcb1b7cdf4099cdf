"""The draft head's cost inside real decode steps: the bench's own fastcoder runs of one task kind with the head's
per-step calls timed in place (round 1 warms up): feeding it the hidden state (DepthOneFeature.step through
the decoder's _feed_head: one C call learns and computes h'), and a step's "other" time against
fastcoder-no-head's.
Usage: python benchmarks/results/2026-11-26k/exp_head_parts.py <repo> [kind] [rounds]"""
import collections
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "2026-11-26j")]
from inplace import TIMES as T, setup, timed  # noqa: E402

from engine import decoder, draft_head  # noqa: E402
from engine.bench import runner  # noqa: E402

repo = sys.argv[1]
kind = sys.argv[2] if len(sys.argv) > 2 else "function"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
loaded, tasks, refs, common, repos = setup(repo, kind)
timed(decoder.SpeculativeDecoder, "_feed_head", "_feed_head")
timed(draft_head.DepthOneFeature, "step", " step (fc_head_step: learn + h')")
for method in ("fastcoder", "fastcoder-no-head", "fastcoder", "fastcoder-no-head"):
    S = collections.defaultdict(float)
    T.clear()
    for rnd in range(rounds):
        for t in tasks:
            dec = runner.make_decoder(loaded, method, repos[t.task_id], common)
            r = runner.run_one(dec, method, t.prompt_ids, 128, stop=t.stop)
            st = r["stats"]
            S["steps"] += st["forward_passes"]
            S["other_ms"] += st["decode_ms"] - st["forward_ms"] - st["retrieval_ms"] + st["retrieval_prefill_ms"]
            S["retrieval_ms"] += st["retrieval_ms"] - st["retrieval_prefill_ms"]
        if rnd == 0:
            T.clear(); S.clear()
    steps = S["steps"]
    print(f"{method}: steps {steps:.0f}, other per step {1e3 * S['other_ms'] / steps:.1f} us, drafting per step "
          f"{1e3 * S['retrieval_ms'] / steps:.1f} us")
    for k, v in sorted(T.items()):
        v = np.array(v)
        print(f"  {k:40s} n={len(v):5d} median {np.median(v):7.1f} us  mean {v.mean():7.1f} us  "
              f"p90 {np.percentile(v, 90):7.1f} us  per step {v.sum() / steps:7.1f} us")
