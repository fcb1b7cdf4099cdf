"""Where a fastcoder request's drafting time outside its decode steps goes: the drafter's reset (its parts timed
one by one) and the prefill's draft, for the bench's tasks of one kind, in the bench's own runs (caches as cold as
there). Usage: python benchmarks/results/2026-11-26j/exp_reset_parts.py <repo> fim-line [rounds]"""
import sys, time, collections
import numpy as np
from inplace import TIMES as T, setup, timed
from engine.bench import runner
from engine import context_match, drafters, history
from engine.native import propose as nprop
repo, kind = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
loaded, tasks, refs, common, repos = setup(repo, kind)
D, I, N, H = drafters.FastCoderDrafter, context_match.SuffixMatchIndex, nprop, history
for owner, name, label in [
        (D, "reset", "reset (all)"), (I, "reset", " context index reset"),
        (I, "_native_buffers", " context native buffers"), (H.TokenMirror, "sync", " mirror sync"),
        (N, "propose_args", " propose_args"), (D, "cost_at", " cost_at"), (N, "set_limits", " set_limits"),
        (N, "_call", "  p: _call (C)"), (D, "finish", "finish (all)"), (D, "observe", "observe (all)"),
        (H.CompletionHistory, "add", " history add"), (N, "_retrieve_native", "  p: _retrieve_native"),
        (D, "_retrieval_key", "  p: _retrieval_key"), (N, "_tree_from", "  p: _tree_from"),
        (N, "_retrieved_tree", "  p: _retrieved_tree"), (I, "extend_to", "  p: extend_to"),
        (N, "thread_scratch", "  p: thread_scratch")]:
    timed(owner, name, label)
first = {}
real_propose = drafters.FastCoderDrafter.propose
def propose(self, ctx):
    t = time.perf_counter()
    try:
        return real_propose(self, ctx)
    finally:
        dt = (time.perf_counter() - t) * 1e6
        T["propose first" if id(self) not in first else "propose later"].append(dt)
        first[id(self)] = 1
drafters.FastCoderDrafter.propose = propose
S = collections.defaultdict(list)
for rnd in range(rounds):
    for t in tasks:
        dec = runner.make_decoder(loaded, "fastcoder", repos[t.task_id], common)
        r = runner.run_one(dec, "fastcoder", t.prompt_ids, 128, stop=t.stop)
        st = r["stats"]
        S["retrieval_prefill_ms"].append(st["retrieval_prefill_ms"]); S["decode_ms"].append(st["decode_ms"])
        S["retrieval_ms"].append(st.get("retrieval_ms", float("nan"))); S["prefill_ms"].append(st["prefill_ms"])
        S["prompt"].append(len(t.prompt_ids))
    if rnd == 0:
        T.clear(); S.clear()  # the first round warms up
for k, v in sorted(T.items(), key=lambda kv: kv[0].strip()):
    v = np.array(v)
    print(f"{k:28s} n={len(v):4d} median {np.median(v):7.1f} us  mean {v.mean():7.1f} us")
for k, v in S.items():
    print(f"{k:22s} median {np.median(v):8.3f}  mean {np.mean(v):8.3f}")
