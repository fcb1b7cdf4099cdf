"""Are the nodes a sized tree adds at its margin estimated right? Oracle replay of the sized fastcoder drafter
(benchmarks/measure_drafting.py): every drafted node's estimated path probability (the product of the estimates from
the root) against whether verification accepted its whole path, binned; and the same for each tree's lowest-estimate
node (the last one the sizing kept).
PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python \
    benchmarks/results/2026-11-28b/path_calibration.py --repo .venv/lib/python3.11/site-packages/pluggy"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from measure_drafting import path_probabilities, replay, replay_from_command_line  # noqa: E402


def main():
    from engine.bench.runner import make_decoder
    args, (loaded, tasks, refs, common, repos) = replay_from_command_line()
    est, hit, margin_est, margin_hit = [], [], [], []

    def on_step(tree, path):
        if len(tree) and tree.probs is not None:
            p = path_probabilities(tree)
            ok = np.zeros(len(tree), dtype=bool)
            ok[path] = True
            est.extend(p.tolist())
            hit.extend(ok.tolist())
            i = int(np.argmin(p))
            margin_est.append(p[i])
            margin_hit.append(ok[i])

    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        replay(dec._make_drafter(dec.new_cache()), dec.estimator, task.prompt_ids, ref, [0], loaded.eos_token_ids,
               on_step=on_step)
    for name, e, h in (("every node", est, hit), ("each tree's lowest node", margin_est, margin_hit)):
        e, h = np.asarray(e), np.asarray(h, dtype=float)
        print(f"{args.repo.rstrip('/').split('/')[-1]} {args.task_kind}, {name}: {len(e)} nodes, estimated "
              f"{e.sum():.1f} accepted {h.sum():.0f}")
        for lo, hi in ((0, .2), (.2, .4), (.4, .6), (.6, .8), (.8, 1.01)):
            m = (e >= lo) & (e < hi)
            if m.any():
                print(f"  path estimate {lo:.1f}-{min(hi, 1):.1f}: {m.sum():4d} nodes, mean estimate {e[m].mean():.3f}, "
                      f"accepted {h[m].mean():.3f}")


if __name__ == "__main__":
    main()
