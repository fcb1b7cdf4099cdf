"""Which memory makes a fastcoder step's drafting slow after a verify forward: one real decode step's drafter and
context (fim-line task, after a warm-up run), its ``propose`` timed after the caches are flushed (a 64 MB array
streamed), with one group of the drafting's buffers read back in first (or none, or all). The drop against
"none" is what that group's cold misses cost.
Usage: python benchmarks/results/2026-11-26j/exp_cold_parts.py <repo> [kind] [rounds]"""
import sys, time, collections
import numpy as np
from inplace import setup
from engine.bench import runner
from engine import drafters
from engine.native.tree import thread_scratch
repo = sys.argv[1]
kind = sys.argv[2] if len(sys.argv) > 2 else "fim-line"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 200
loaded, tasks, refs, common, repos = setup(repo, kind)
captured = []
real = drafters.FastCoderDrafter.propose
def propose(self, ctx):
    captured.append((self, ctx.copy()))
    return real(self, ctx)
drafters.FastCoderDrafter.propose = propose
for t in tasks:
    dec = runner.make_decoder(loaded, "fastcoder", repos[t.task_id], common)
    runner.run_one(dec, "fastcoder", t.prompt_ids, 128, stop=t.stop)
drafters.FastCoderDrafter.propose = real
drafter, ctx = captured[-2]  # a later step of the last task
flush = np.ones(16 * 1024 * 1024, dtype=np.float32)
def touch(arrs):
    for a in arrs:
        if a is not None and getattr(a, "size", 0):
            a.view(np.uint8)[::64].sum()
sc = thread_scratch()
est = drafter.estimator
groups = {
    "none": [],
    "estimator": [est.accepted, est.tried, est.pooled_accepted, est.pooled_tried],
    "scratch": [v for v in vars(sc).values() if isinstance(v, np.ndarray)],
    "history mirror": [drafter.history.mirror.array, drafter.history.mirror.prev, drafter.history.mirror.head] if drafter.history else [],
    "cache mirror": [drafter.cache.mirror.array, drafter.cache.mirror.prev, drafter.cache.mirror.head],
    "context": [drafter.context_index._seq, ctx],
    "propose args": [v for v in vars(drafter._native_args).values() if isinstance(v, np.ndarray)],
}
groups["all arrays"] = [a for g in groups.values() for a in g]
for name, g in groups.items():
    print(name, sum(a.nbytes for a in g if a is not None) // 1024, "KiB")
T = collections.defaultdict(list)
names = list(groups)
rng = np.random.default_rng(0)
for r in range(rounds):
    for name in rng.permutation(names):
        flush.sum()
        touch(groups[name])
        t = time.perf_counter()
        drafter.propose(ctx)
        T[name].append((time.perf_counter() - t) * 1e6)
    t = time.perf_counter(); drafter.propose(ctx); T["warm"].append((time.perf_counter() - t) * 1e6)
for name, v in T.items():
    print(f"{name:16s} median {np.median(v):7.1f} us  p25 {np.percentile(v, 25):7.1f}  p75 {np.percentile(v, 75):7.1f}")
