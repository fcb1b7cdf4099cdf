# Experiment script (2026-11-25 session i): run from the repository root as
# `python benchmarks/results/2026-11-25i/exp_propose_parts.py bench ...` (the arguments of `fastcoder bench`).
# Where the Python time of a native fastcoder step (engine.native.propose.propose_native) goes: a copy of it with a
# time stamp after each stage (steps answered by the first fc_propose call only: the usual step), medians in us.
import atexit, collections, runpy, sys, time
import numpy as np
import engine.drafters as D
import engine.native.propose as P

pc = time.perf_counter
acc = collections.defaultdict(list)


def propose_native(drafter, context, cost):
    t = [pc()]
    lib = P.library()
    args = drafter._native_args
    if args is None:
        args = drafter._native_args = P.propose_args(drafter)
    idx = drafter.context_index
    idx.extend_to(context)
    t.append(pc())  # 1 extend_to
    seq = idx._native if idx._native is not None else idx._native_buffers()
    sc = P.thread_scratch()
    if getattr(cost, "upto", None) is None or not sc.use_estimator(drafter.estimator):
        return None
    t.append(pc())  # 2 scratch + estimator
    pa = args.pa
    if seq is not args.seq:
        pa[0], args.seq = seq[1][0], seq
    if sc is not args.scratch:
        pa[12], pa[13] = sc.args
        pa[16], pa[17] = sc.fits[0], sc.fits[1]
        pa[19], pa[20] = sc.parts_args
        args.scratch = sc
    budget, min_prob = drafter.ret.budget, drafter.ret.min_prob
    P.set_limits(sc, cost, budget, min_prob)
    t.append(pc())  # 3 set_limits
    cache = drafter.cache
    cache_len = cache.mirror.sync(cache._buf)
    if cache.mirror.pointers is not args.cache_pointers:
        args.cache_pointers = got = cache.mirror.pointers
        pa[1], pa[21], pa[22], pa[23] = got
    n_ctx = len(idx._list)
    t.append(pc())  # 4 cache mirror
    hist = drafter.history
    with hist._lock:
        hist_len = hist.mirror.sync(hist._buf)
        if hist.mirror.pointers is not args.history_pointers:
            args.history_pointers = got = hist.mirror.pointers
            args.pa[2], args.pa[24], args.pa[25], args.pa[26] = got
        t.append(pc())  # 5 history lock + mirror
        found = lib.fc_propose(*args.addresses, n_ctx, cache_len, hist_len, -1)
        t.append(pc())  # 6 the C call
    if found < 0:
        return REAL(drafter, context, cost)  # (not reached for RETRIEVE in this experiment's stats)
    cache.lookups += 1
    if found >= P.CACHE_HIT:
        cache.hits += 1
        found -= P.CACHE_HIT
    tree = P._tree_from(sc, found)
    t.append(pc())  # 7 _tree_from
    names = ("extend_to", "scratch+estimator", "set_limits", "cache mirror", "history lock+mirror", "C fc_propose",
             "_tree_from")
    for i, n in enumerate(names):
        acc[n].append(t[i + 1] - t[i])
    acc["total"].append(t[-1] - t[0])
    return tree


REAL = P.propose_native


def dispatch(drafter, context, cost):
    if drafter.history is None:
        return REAL(drafter, context, cost)
    return propose_native(drafter, context, cost)


P.propose_native = dispatch
outer = D.FastCoderDrafter.propose


def timed(self, ctx):
    t0 = pc(); out = outer(self, ctx); acc["FastCoderDrafter.propose (all steps)"].append(pc() - t0); return out


D.FastCoderDrafter.propose = timed


@atexit.register
def report():
    for k, v in acc.items():
        print(f"{k:40s} n {len(v):5d} median {np.median(v) * 1e6:7.1f} us  mean {np.mean(v) * 1e6:7.1f} us")


sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
