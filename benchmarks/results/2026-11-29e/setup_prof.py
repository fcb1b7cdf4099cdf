"""Where fastcoder's set-up drafting (before the prefill) goes on fim-line: bench in-process, pieces timed."""
import sys, time, collections, sysconfig, tempfile, os, cProfile, pstats
sys.path.insert(0, ".")
from engine import cli
import engine.generation as G
acc = collections.defaultdict(float); cnt = collections.Counter()
def timed(cls, name, label=None):
    real = getattr(cls, name); label = label or cls.__name__ + "." + name
    def f(*a, **k):
        t = time.perf_counter(); r = real(*a, **k); acc[label] += time.perf_counter() - t; cnt[label] += 1; return r
    setattr(cls, name, f)
from engine import drafters as D
timed(D.FastCoderDrafter, "reset"); timed(D.FastCoderDrafter, "draft_ahead"); timed(D.FastCoderDrafter, "set_stop_tokens")
timed(G.Generation, "_draft_unconstrained"); timed(G.Generation, "_set_up")
prof = cProfile.Profile() if os.environ.get("PROF") else None
real_setup = G.Generation._set_up
def su(self):
    if prof is not None and self.drafter is not None and type(self.drafter).__name__ == "FastCoderDrafter":
        prof.enable(); r = real_setup(self); prof.disable(); return r
    return real_setup(self)
G.Generation._set_up = su
kind, repo = sys.argv[1], sys.argv[2]
site = sysconfig.get_paths()["purelib"]
out = tempfile.mktemp(suffix=".json")
cli.main(["bench", "--model", "../shared/models/tiny-py-coder", "--repo", f"{site}/{repo}", "--common", "stdlib",
          "--tasks", "10", "--max-new-tokens", "128", "--seed", "0", "--threads", "1", "--task-kind", kind,
          "--methods", "fastcoder", "--no-headroom", "--repeats", "3", "--json", out])
for k in sorted(acc): print(f"{k:45s} {acc[k]*1e3/cnt[k]:8.3f} ms x {cnt[k]}")
if prof is not None:
    pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
