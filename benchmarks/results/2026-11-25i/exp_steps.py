# Experiment script (2026-11-25 session i): run from the repository root as
# `python benchmarks/results/2026-11-25i/exp_steps.py bench ...` (the arguments of `fastcoder bench`).
# Timers around FastCoderDrafter.propose, split by steps that searched D_r/D_c (retrieval), other steps, and a
# generation's first step. EXP_NATIVE_RETRIEVE=0 turns off the native D_r/D_c search (fc_propose_retrieve).
import atexit, collections, os, runpy, sys, time
import engine.drafters as D
import engine.native.propose as P

acc = collections.defaultdict(list)
STEP = {"first": False}
SAVED = []  # the first steps' contexts that searched the datastores (EXP_PRESEARCH=1), saved to $EXP_SAVE
if os.environ.get("EXP_NATIVE_RETRIEVE", "1") == "0":
    real_args = P.ProposeArgs.__init__
    def no_retrieve(self, drafter):
        real_args(self, drafter)
        self.retrieves = False
    P.ProposeArgs.__init__ = no_retrieve
keyed = D.FastCoderDrafter._retrieval_key
def key(self, ctx):
    self._exp_retrieved = True
    return keyed(self, ctx)
D.FastCoderDrafter._retrieval_key = key
propose = D.FastCoderDrafter.propose
def timed(self, ctx):
    self._exp_retrieved = False
    first = STEP["first"] = not getattr(self, "_exp_seen", False)
    self._exp_seen = True
    STEP["ctx"] = ctx
    t = time.perf_counter(); out = propose(self, ctx); dt = time.perf_counter() - t
    acc["propose[first]" if first else ("propose[retrieval]" if self._exp_retrieved else "propose[other]")].append(dt)
    return out
D.FastCoderDrafter.propose = timed
reset = D.FastCoderDrafter.reset
def reset_seen(self, prompt):
    self._exp_seen = False
    return reset(self, prompt)
D.FastCoderDrafter.reset = reset_seen
def timer(name, f):
    def w(*a, **k):
        t = time.perf_counter(); out = f(*a, **k); acc[name].append(time.perf_counter() - t); return out
    return w
# the drafter's other timed work: observe (each step) and finish (the generation's end: the history's add)
D.FastCoderDrafter.observe = timer("observe", D.FastCoderDrafter.observe)
D.FastCoderDrafter.finish = timer("finish", D.FastCoderDrafter.finish)
# the native retrieval's parts: the whole of _retrieve_native, and the C call alone (fc_propose_retrieve)
real_retrieve = P._retrieve_native
def retrieve(*a):
    if STEP["first"] and os.environ.get("EXP_PRESEARCH") == "1":  # time each store's fresh search (throwaway state)
        from engine.datastore import MatchState
        d = a[1]
        SAVED.append(STEP["ctx"].copy())
        for name, store in (("D_r", d.repo), ("D_c", d.common)):
            if store is not None:
                t = time.perf_counter(); store.search(STEP["ctx"], 16, 2, d.ret.draft_len, d.ret.max_matches,
                                                      state=MatchState())
                acc[f"presearch {name} (first step)"].append(time.perf_counter() - t)
    t = time.perf_counter(); out = real_retrieve(*a)
    acc["_retrieve_native" + (" (first step)" if STEP["first"] else "")].append(time.perf_counter() - t); return out
P._retrieve_native = retrieve
real_call = P._call
def call(fn, *a):
    t = time.perf_counter(); out = real_call(fn, *a)
    acc["C " + getattr(fn, "__name__", "?") + (" (first step)" if STEP["first"] else "")].append(time.perf_counter() - t); return out
P._call = call

@atexit.register
def report():
    if SAVED and os.environ.get("EXP_SAVE"):
        import numpy as np
        np.savez(os.environ["EXP_SAVE"], *SAVED)
    for k in sorted(acc):
        v = sorted(acc[k])
        print(f"{k:30s} n {len(v):5d} total {sum(v)*1e3:8.2f} ms  mean {sum(v)/len(v)*1e6:7.1f} us  "
              f"median {v[len(v)//2]*1e6:7.1f} us")

sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
