import sys, pickle
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import numpy as np, torch
torch.set_num_threads(1)
from measure_drafting import replay_setup, replay
from engine.bench import runner
repo, kind = sys.argv[1], sys.argv[2]
loaded, tasks, refs, common, repos = replay_setup(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"), repo, "stdlib", 10, 0, 128, kind)
runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
steps = []
for t in tasks:
    ref = refs[t.task_id]
    if len(ref) < 2: continue
    dec = runner.make_decoder(loaded, "fastcoder", repos[t.task_id], common)
    drafter = dec._make_drafter(dec.new_cache())
    prop = drafter.propose
    def rec(ctx, prop=prop):
        tree = prop(ctx); steps.append([t.task_id, tree, len(ctx)]); return tree
    drafter.propose = rec
    obs = drafter.observe
    def robs(ctx, tree, path, committed, obs=obs):
        steps[-1].append(list(path)); return obs(ctx, tree, path, committed)
    drafter.observe = robs
    replay(drafter, dec.estimator, t.prompt_ids, ref, [0], loaded.eos_token_ids)
pickle.dump([(a, b.tokens, b.parents, b.depths, b.sources, b.probs, c, d) for a, b, c, d in steps], open(sys.argv[3], "wb"))
n = len(steps); leaf = [s for s in steps if s[3] and not (s[1].parents == s[3][-1]).any()]
acc = sum(len(s[3]) for s in steps)
print(repo.split("/")[-1], kind, n, "steps; full-chain accepted steps", len(leaf), "tokens", sum(len(s[3]) for s in leaf), "of", acc,
      "| zero-accept drafted", sum(1 for s in steps if len(s[1]) and not s[3]), "| no draft", sum(1 for s in steps if not len(s[1])))
# runs: consecutive full-chain steps
full = [bool(s[3]) and not (s[1].parents == s[3][-1]).any() for s in steps]
nxt = [full[i + 1] for i in range(len(full) - 1) if full[i] and steps[i][0] == steps[i + 1][0]]
print("P(next full | full) = %.2f over %d" % (np.mean(nxt), len(nxt)), "mean depth of full chains %.2f" % np.mean([len(s[3]) for s in leaf]))
