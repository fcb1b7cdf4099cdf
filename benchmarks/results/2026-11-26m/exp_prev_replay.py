"""Oracle replay of fastcoder with and without the previous step's accepted length in its estimates
(engine.acceptance.AcceptanceEstimator.set_previous), each along its own trajectory; adapted from
../2026-11-26k/exp_head_replay.py (the draft head on in both).

For each cell (task kind x repository, the bench's 10 tasks x 128 tokens, D_c the standard library) both methods
draft at every step of ``ar``'s output as the decoder would: trees sized on this machine's measured c(n), the
acceptance estimator learning online across the tasks (one per method, as the bench keeps one). With the head, the
step first gets the final hidden state of the position whose choice was the pending token (one forward over the
whole prompt + reference, as the decode loop would have it) and the calibration learns from each verified tree.
Printed per cell: tokens per step and tokens per unit of verify cost (committed tokens / c(draft tokens)) of each,
and their ratio; last, the geometric mean of the ratios. The load of the machine cannot move these numbers.

Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-26m/exp_prev_replay.py
(CELLS="function:pluggy ..." picks cells, LR the previous-length weights' online learning rate; about 1 minute per
cell on one core). Printed "calibration": those weights at the end of the cell.
"""
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
USE = {'fastcoder-no-prev': False, 'fastcoder': True}
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from compare_drafts import accepted_path  # noqa: E402
from measure_drafting import replay_setup  # noqa: E402

from engine.bench import runner  # noqa: E402
from engine.cost_model import load_or_measure_verify_cost  # noqa: E402

torch.set_num_threads(1)
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
CELLS = os.environ.get("CELLS", " ".join(f"{k}:{r}" for k in ("function", "fim-line", "fim-block")
                                         for r in ("pluggy", "jinja2", "pygls"))).split()


def replay(loaded, method, tasks, refs, repos, common, cost) -> dict:
    steps = tokens = empty = 0
    spent = 0.0
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = runner.make_decoder(loaded, method, repos[task.task_id], common)
        drafter, est, head = dec._make_drafter(dec.new_cache()), dec.estimator, dec.depth_one
        if "LR" in os.environ:  # the previous-length weights' online step (engine default)
            est.previous_learning_rate = float(os.environ["LR"])
        est.set_previous(-1 if USE[method] else None)
        prompt = list(task.prompt_ids)
        if head is not None:
            with torch.inference_mode():
                hidden = loaded.model.base_model(input_ids=torch.tensor([prompt + ref])).last_hidden_state[0].float()
        context = np.empty(len(prompt) + len(ref) + 1, dtype=np.int64)
        n = len(prompt)
        context[:n] = prompt
        drafter.reset(context[:n])
        context[n] = ref[0]
        n, out = n + 1, 1
        while out < len(ref):
            ctx, target = context[:n], ref[out:]
            if head is not None:
                head.set_hidden(hidden[n - 2])  # the row whose choice was the pending token ctx[n - 1]
            tree = drafter.propose(ctx)
            path = accepted_path(tree, target)
            committed = [int(x) for x in target[:len(path) + 1]]
            if est is not None and tree.keys is not None:
                est.update(tree.keys, tree.parents[:tree.n_draft], path, tree.probs)
                if USE[method]:
                    est.set_previous(len(path))
            if head is not None:
                head.learn(committed[0])  # as the decode loop's step: the token the model committed
            drafter.observe(ctx, tree, path, committed)
            context[n:n + len(committed)] = committed
            n, out = n + len(committed), out + len(committed)
            steps += 1
            empty += tree.n_draft == 0
            tokens += len(committed)
            spent += float(cost.c(tree.n_draft)) if tree.n_draft else 1.0
        finish = getattr(drafter, "finish", None)
        if finish is not None:
            finish(context[:len(prompt) + len(ref) - (ref[-1] in loaded.eos_token_ids)])
    out = {"tokens_per_step": tokens / steps, "tokens_per_cost": tokens / spent, "empty_share": empty / steps}
    out["calibration"] = [round(float(x), 3) for x in est.previous_weights]
    return out


ratios = []
for cell in CELLS:
    kind, repo = cell.split(":")
    loaded, tasks, refs, common, repos = replay_setup(MODEL, str(SITE / repo), "stdlib", 10, 0, 128, kind)
    cost = load_or_measure_verify_cost(loaded)
    res = {}
    for method in ("fastcoder-no-prev", "fastcoder"):
        runner._ESTIMATORS.clear(); runner._HISTORIES.clear()
        res[method] = replay(loaded, method, tasks, refs, repos, common, cost)
    r = res["fastcoder"]["tokens_per_cost"] / res["fastcoder-no-prev"]["tokens_per_cost"]
    ratios.append(r)
    print(f"{kind} {repo}: no prev {res['fastcoder-no-prev']['tokens_per_step']:.3f} tok/step "
          f"{res['fastcoder-no-prev']['tokens_per_cost']:.3f} tok/cost; prev {res['fastcoder']['tokens_per_step']:.3f} "
          f"tok/step {res['fastcoder']['tokens_per_cost']:.3f} tok/cost ({r - 1:+.1%}); calibration "
          f"{res['fastcoder'].get('calibration')}; steps without a draft {res['fastcoder-no-prev']['empty_share']:.1%} / "
          f"{res['fastcoder']['empty_share']:.1%}", flush=True)
print(f"geometric mean prev / no prev: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f} "
      f"({min(ratios):.3f}-{max(ratios):.3f})")
