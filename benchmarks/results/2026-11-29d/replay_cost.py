"""The decoder's replay of the steps a native loop ran (Generation._replay and its parts), us a call. Usage: replay_cost.py KIND REPO"""
import sys, time, collections, sysconfig, tempfile, os
sys.path.insert(0, ".")
from engine import cli
import engine.generation as G
from engine.native import draft_ahead as DA
from engine import drafters as D
acc = collections.Counter(); cnt = collections.Counter()
def timed(cls, name):
    real = getattr(cls, name)
    def f(*a, **k):
        t = time.perf_counter(); r = real(*a, **k); acc[name] += time.perf_counter() - t; cnt[name] += 1; return r
    setattr(cls, name, f)
timed(G.Generation, "_replay"); timed(D.FastCoderDrafter, "observe_path"); timed(DA.DraftAhead, "looped"); timed(DA.DraftAhead, "looped_tree")
site = sysconfig.get_paths()["purelib"]
cli.main(["bench", "--model", "../shared/models/tiny-py-coder", "--repo", f"{site}/{sys.argv[2]}", "--common", "stdlib",
          "--tasks", "10", "--max-new-tokens", "128", "--seed", "0", "--threads", "1", "--task-kind", sys.argv[1],
          "--methods", "fastcoder", "--no-headroom", "--repeats", "2", "--json", os.path.join(tempfile.mkdtemp(), "b.json")])
print({k: (cnt[k], round(acc[k] * 1e6 / max(cnt[k], 1), 1)) for k in acc})
