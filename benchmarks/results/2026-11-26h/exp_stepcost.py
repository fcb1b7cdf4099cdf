"""Per-step forward time by draft size, per method (a bench run with tree_forward and decode_one_token timed)."""
import os as _os
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import sys, time, json, collections
import engine.decoder as D
import engine.bench.runner as R
REC = []
cur = {"m": None}
orig_tf, orig_d1 = D.tree_forward, D.decode_one_token
def tf(model, cache, pending, tree, past_len, prefix=None):
    t = time.perf_counter()
    out = orig_tf(model, cache, pending, tree, past_len, prefix=prefix) if prefix is not None else orig_tf(model, cache, pending, tree, past_len)
    REC.append((cur["m"], len(tree), past_len, (time.perf_counter() - t) * 1e3, prefix is not None))
    return out
def d1(model, cache, pending):
    t = time.perf_counter()
    out = orig_d1(model, cache, pending)
    REC.append((cur["m"], -1, cache.get_seq_length(), (time.perf_counter() - t) * 1e3, False))
    return out
D.tree_forward, D.decode_one_token = tf, d1
orig_run = R.run_one
def run_one(decoder, method, *a, **k):
    cur["m"] = method
    return orig_run(decoder, method, *a, **k)
R.run_one = run_one
from engine.bench.cli import main
rc = main(sys.argv[1:])
json.dump(REC, open(_os.path.join(DATA, "steps.json"), "w"))
import statistics as st
g = collections.defaultdict(list)
for m, n, pl, ms, pre in REC:
    if not pre: g[(m, n)].append(ms)
for key in sorted(g, key=lambda x: (x[0], x[1])):
    v = g[key]
    print(key, len(v), "median %.3f mean %.3f" % (st.median(v), st.mean(v)))
