"""Python after a forward: a function's first call (caches cold) against an immediate second call (warm)."""
import sys, time, json, collections, sysconfig, tempfile, os
sys.path.insert(0, ".")
from engine import cli
from engine.native import step as S
acc = collections.defaultdict(float); cnt = collections.Counter()
def twice(cls, name):
    real = getattr(cls, name)
    def f(*a, **k):
        t0 = time.perf_counter(); r = real(*a, **k); t1 = time.perf_counter(); real(*a, **k) if name != "_verified" else None
        t2 = time.perf_counter()
        acc[name + " first"] += t1 - t0; acc[name + " second"] += t2 - t1; cnt[name] += 1
        return r
    setattr(cls, name, f)
twice(S.BoundVerify, "_stale")
_st = S.sync_threads
def _sync(lib):
    t0 = time.perf_counter(); _st(lib); t1 = time.perf_counter(); _st(lib); t2 = time.perf_counter()
    acc["sync first"] += t1 - t0; acc["sync second"] += t2 - t1; cnt["sync"] += 1
S.sync_threads = _sync
site = sysconfig.get_paths()["purelib"]
cli.main(["bench", "--model", "../shared/models/tiny-py-coder", "--repo", f"{site}/pluggy", "--common", "stdlib",
          "--tasks", "10", "--max-new-tokens", "128", "--seed", "0", "--threads", "1", "--task-kind", "function",
          "--methods", "fastcoder", "--no-headroom", "--repeats", "1", "--json", os.path.join(tempfile.mkdtemp(), "b.json")])
for k in sorted(acc):
    print(k, round(acc[k] / cnt[k.split()[0]] * 1e6, 2), "us")
