"""Where a fim-line generation's drafting time goes, healed or not: `fastcoder bench` in-process (fastcoder only),
Generation._draft_unconstrained, _verifiable and the DraftAhead calls timed. Usage: setup_pieces.py heal|plain REPO"""
import sys, time, json, collections, sysconfig, tempfile, os
sys.path.insert(0, ".")
import engine.generation as G
from engine import cli
acc = collections.defaultdict(float); cnt = collections.Counter()
def timed(cls, name):
    real = getattr(cls, name)
    def f(self, *a, **k):
        t = time.perf_counter(); r = real(self, *a, **k); acc[name] += time.perf_counter() - t; cnt[name] += 1; return r
    setattr(cls, name, f)
timed(G.Generation, "_draft_unconstrained")
from engine.native import draft_ahead as DA
for n in ("draft_first", "prime", "start"):
    if hasattr(DA.DraftAhead, n): timed(DA.DraftAhead, n)
timed(G.Generation, "_verifiable")
OUT = os.path.join(tempfile.mkdtemp(), "bench.json")
site = sysconfig.get_paths()["purelib"]
heal = sys.argv[1] == "heal"
args = ["bench", "--model", "../shared/models/tiny-py-coder", "--repo", f"{site}/{sys.argv[2]}", "--common", "stdlib",
        "--tasks", "10", "--max-new-tokens", "128", "--seed", "0", "--threads", "1", "--task-kind", "fim-line",
        "--methods", "fastcoder", "--no-headroom", "--repeats", "2", "--json", OUT] + (["--token-healing"] if heal else [])
cli.main(args)
m = json.load(open(OUT))["methods"]["fastcoder"]
print("HEAL" if heal else "PLAIN", {k: round(m[k], 4) for k in ("forward_passes", "retrieval_ms", "retrieval_prefill_ms", "step_retrieval_share", "decode_ms")})
print({k: (cnt[k], round(acc[k]*1000, 2)) for k in acc})
