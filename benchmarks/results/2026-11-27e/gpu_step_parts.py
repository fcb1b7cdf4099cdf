"""Where a decode step's time goes on a GPU (the torch path: no native step there): per-call wall time of the step's
parts inside a real bench run (propose, _verifiable, tree_forward, _accept, compact_cache, _learn, the draft head's
step), means and medians printed per method at exit. SYNC=1 adds torch.cuda.synchronize() before each part ends, so
a part's kernels are charged to it (the bench itself never synchronizes there: unsynchronised, a forward's kernels
are paid for at the first call that reads a result, the acceptance's .tolist()). PROFILE=1 also runs
torch.profiler over the second fastcoder generation and prints its top operators by self CPU time.
Usage: as `python -m engine bench ...` (e.g. --device cuda --methods ar,fastcoder)."""
import atexit
import collections
import os
import runpy
import sys
import time

import numpy as np
import torch

import engine.decoder as dec
import engine.drafters as drafters
from engine.bench import runner

SYNC = os.environ.get("SYNC") == "1"
acc = collections.defaultdict(list)
method = ["?"]


def sync():
    if SYNC and torch.cuda.is_available():
        torch.cuda.synchronize()


def wrap(obj, name, label):
    f = getattr(obj, name)

    def timed(*a, **k):
        t = time.perf_counter()
        got = f(*a, **k)
        sync()
        acc[(method[0], label)].append(time.perf_counter() - t)
        return got
    setattr(obj, name, timed)


wrap(drafters.FastCoderDrafter, "propose", "propose")
wrap(dec.SpeculativeDecoder, "_verifiable", "_verifiable")
wrap(dec, "tree_forward", "tree_forward")
wrap(dec, "decode_one_token", "decode_one_token")
wrap(dec.SpeculativeDecoder, "_accept", "_accept")
wrap(dec, "compact_cache", "compact_cache")
wrap(dec.SpeculativeDecoder, "_learn", "_learn")
wrap(dec.SpeculativeDecoder, "_feed_head", "_feed_head")
real_run_one = runner.run_one
seen = collections.Counter()


def run_one(decoder, name, *args, **kwargs):
    method[0] = name
    seen[name] += 1
    if os.environ.get("PROFILE") == "1" and name == "fastcoder" and seen[name] == 2:
        from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=acts) as prof:
            got = real_run_one(decoder, name, *args, **kwargs)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)
        return got
    t = time.perf_counter()
    got = real_run_one(decoder, name, *args, **kwargs)
    acc[(name, "generation")].append(time.perf_counter() - t)
    return got


runner.run_one = run_one


@atexit.register
def report():
    print(f"SYNC={int(SYNC)}", file=sys.stderr)
    for (name, label), v in sorted(acc.items()):
        v = np.array(v) * 1e6
        print(f"{name:12s} {label:18s} n={len(v):6d} mean {v.mean():9.1f} us  p50 {np.median(v):9.1f}  "
              f"sum {v.sum() / 1e3:9.1f} ms", file=sys.stderr)


sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
