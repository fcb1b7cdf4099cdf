"""Where fastcoder's replayed verify cost exceeds the oracle-pruned cost: drafted steps that accepted nothing vs
trees longer than what they accepted (function and fim-block cells, this machine's curve)."""
from exp_paths import MODEL, ROOT  # noqa: F401 (also sets sys.path)
import sys, json, numpy as np
import replay_methods as RM
from measure_drafting import replay_setup
from engine.cost_model import load_or_measure_verify_cost
import torch; torch.set_num_threads(1)
CAP = {}
orig = RM.replay_method
for kind in ["function", "fim-block"]:
  for r in ["pluggy", "jinja2", "pygls"]:
    loaded, tasks, refs, common, repos = replay_setup(MODEL, f".venv/lib/python3.11/site-packages/{r}", "stdlib", 10, 0, 128, kind)
    cost = load_or_measure_verify_cost(loaded)
    # capture sizes/lengths/accepted via a patched replay
    import measure_drafting as MD
    rec = []
    orig_replay = RM.replay
    def replay(drafter, est, prompt, ref, counter, eos=()):
        sizes = []
        p = drafter.propose
        def prop(ctx):
            t = p(ctx); sizes.append((t.n_draft, len(ctx))); return t
        drafter.propose = prop
        out = orig_replay(drafter, est, prompt, ref, counter, eos)
        rec.extend((s, l, a - 1) for (s, l), a in zip(sizes, out["accepted"]))
        return out
    RM.replay = replay
    RM.replay_method(loaded, "fastcoder", tasks, refs, repos, common, cost)
    RM.replay = orig_replay
    c = lambda n, l: float(RM.CURVE_AT(cost, l).c(n)) if n else 1.0
    tot = sum(c(s, l) for s, l, a in rec); orc = sum(c(a, l) for s, l, a in rec)
    miss = sum(c(s, l) - 1.0 for s, l, a in rec if a == 0)
    part = sum(c(s, l) - c(a, l) for s, l, a in rec if a > 0)
    nmiss = sum(1 for s, l, a in rec if a == 0 and s > 0)
    print(f"{kind} {r}: steps {len(rec)} cost {tot:.1f} oracle {orc:.1f} excess {tot-orc:.1f} = misses {miss:.1f} ({nmiss} drafted steps accepting 0) + partial {part:.1f}", flush=True)
