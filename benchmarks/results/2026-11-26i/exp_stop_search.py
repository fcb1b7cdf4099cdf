"""The stop-string search only after a token that shares a byte with a stop string, against a search after every
step: the bench's tasks of one kind (line or block completions), ar and fastcoder, the two alternated per task in one
process, 3 rounds; decode ms per new token (median over tasks and rounds) and searches.
Usage: python benchmarks/results/2026-11-26i/exp_stop_search.py .venv/lib/python3.11/site-packages/pluggy fim-line"""
import sys, time, collections
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import numpy as np, torch
torch.set_num_threads(1)
from measure_drafting import replay_setup
from engine.bench import runner
from engine.decoder import SpeculativeDecoder
repo, kind = sys.argv[1], sys.argv[2]
loaded, tasks, refs, common, repos = replay_setup(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"), repo,
                                                  "stdlib", 10, 0, 128, kind)
real_touch, real_hit = SpeculativeDecoder._stop_touching, SpeculativeDecoder._hit_stop
count = collections.Counter()
def hit(self, out, stop, skip=0):
    count[mode] += 1
    return real_hit(self, out, stop, skip)
SpeculativeDecoder._hit_stop = hit
R = collections.defaultdict(list)
for rnd in range(3):
    for t in tasks:
        for method in ("ar", "fastcoder"):
            for mode in np.random.default_rng(rnd * 100 + t.task_id.__hash__() % 97).permutation(["filtered", "every step"]):
                SpeculativeDecoder._stop_touching = real_touch if mode == "filtered" else (lambda self, stop: None)
                dec = runner.make_decoder(loaded, method, repos[t.task_id], common)
                r = runner.run_one(dec, method, t.prompt_ids, 128, stop=t.stop)
                st = r["stats"]
                if st["generated_tokens"]:
                    R[(method, mode)].append(st["decode_ms"] / st["generated_tokens"])
for method in ("ar", "fastcoder"):
    a, b = np.array(R[(method, "every step")]), np.array(R[(method, "filtered")])
    print(f"{method}: decode ms/token every step {np.median(a):.3f}, filtered {np.median(b):.3f}, paired median {np.median(b / a):.3f}")
print("searches:", dict(count))
