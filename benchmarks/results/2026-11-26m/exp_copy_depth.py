"""Oracle replay of fastcoder with the context copy's bound on match + draft (``copy_max_depth``, SuffixDecoding's
max_tree_depth: 24, so a copy after a 6-token match holds at most 18 tokens) at 24 and at COPY_DEPTH (48), each along
its own trajectory; adapted from exp_prev_replay.py. Result (CELLS="function:jinja2"): +0.0% tokens per unit of verify
cost.

Usage: CELLS="function:jinja2" COPY_DEPTH=48 PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-26m/exp_copy_depth.py
"""
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
DEPTH = int(os.environ.get('COPY_DEPTH', '48'))
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
                est.update(tree.keys, tree.parents[:tree.n_draft], path)
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
    out["calibration"] = None
    return out


ratios = []
for cell in CELLS:
    kind, repo = cell.split(":")
    loaded, tasks, refs, common, repos = replay_setup(MODEL, str(SITE / repo), "stdlib", 10, 0, 128, kind)
    cost = load_or_measure_verify_cost(loaded)
    res = {}
    runner.METHOD_SPECS["fastcoder-deep"] = ("fastcoder", {"copy_max_depth": DEPTH})
    for method in ("fastcoder", "fastcoder-deep"):
        runner._ESTIMATORS.clear(); runner._HISTORIES.clear()
        res[method] = replay(loaded, method, tasks, refs, repos, common, cost)
    r = res["fastcoder-deep"]["tokens_per_cost"] / res["fastcoder"]["tokens_per_cost"]
    ratios.append(r)
    print(f"{kind} {repo}: depth 24 {res['fastcoder']['tokens_per_step']:.3f} tok/step "
          f"{res['fastcoder']['tokens_per_cost']:.3f} tok/cost; deep {res['fastcoder-deep']['tokens_per_step']:.3f} "
          f"tok/step {res['fastcoder-deep']['tokens_per_cost']:.3f} tok/cost ({r - 1:+.1%}); calibration "
          f"{res['fastcoder'].get('calibration')}; steps without a draft {res['fastcoder']['empty_share']:.1%} / "
          f"{res['fastcoder-deep']['empty_share']:.1%}", flush=True)
print(f"geometric mean deep / 24: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f} "
      f"({min(ratios):.3f}-{max(ratios):.3f})")
