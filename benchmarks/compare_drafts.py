"""Two drafters at the same contexts: where one's trees spend draft tokens the other does without.

An oracle replay (``benchmarks/measure_drafting.py``) moves each method along its own trajectory, so two
methods' steps start at different positions and cannot be compared one by one. Here the first method
(``--method``, default fastcoder) drives the trajectory and, at each of its steps, the second
(``--against``, default SuffixDecoding) drafts from the same context, learning from the same committed
tokens. Per step both drafts are scored against ``ar``'s output. Printed (plain JSON):

- per method: tokens committed per step (accepted draft tokens + 1), draft tokens per step and tokens per
  unit of verify cost (committed tokens / c(n), the device's measured curve);
- for the first method, its tree's *main chain* (from the root, each parent's most probable child) against
  the rest: expected (sum of estimated path probabilities) vs accepted draft tokens for each, and the
  tokens per unit of cost it would have had verifying its main chain alone;
- the steps where the second method accepted more, and whether the first's main chain was then exhausted
  (it stopped too early) or diverged (it held a wrong token).

This found, on 2026-11-24, that fastcoder's off-chain nodes were expected to give 2-3x the tokens they gave
and its main chain 15-27% more than expected (benchmarks/HISTORY.md, "acceptance estimates by node role").

Usage (from the repository root)::

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compare_drafts.py \\
        --repo .venv/lib/python3.11/site-packages/pygls --task-kind fim-line
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_drafting import accepted_path, add_replay_arguments, path_probabilities, replay_setup  # noqa: E402


def main_chain(tree) -> list[int]:
    """Node ids of the path from the root that takes, at each node, the child with the highest estimate
    (``tree.probs``; the weight where the tree has no estimates)."""
    score = tree.probs if tree.probs is not None else tree.weights
    children: dict[int, list[int]] = {}
    for i, up in enumerate(tree.parents[:tree.n_draft].tolist()):
        children.setdefault(up, []).append(i)
    chain, node = [], -1
    while node in children:
        node = max(children[node], key=lambda i: float(score[i]))
        chain.append(node)
    return chain


def compare(loaded, method: str, against: str, tasks, refs, repos, common, cost) -> dict:
    """Replay ``method`` along its trajectory with ``against`` drafting at the same contexts (module
    docstring); plain data."""
    from engine.bench import runner  # noqa: PLC0415

    runner._ESTIMATORS.clear()
    runner._SUFFIX_CACHES.clear()
    runner._HISTORIES.clear()
    steps = []
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        drafters = []
        for name in (method, against):
            dec = runner.make_decoder(loaded, name, repos[task.task_id], common)
            cache = dec.new_cache() if runner.METHOD_SPECS[name][0] in runner._CACHED_METHODS else None
            drafters.append((dec._make_drafter(cache), dec.estimator))
        context = np.empty(len(task.prompt_ids) + len(ref) + 1, dtype=np.int64)
        n = len(task.prompt_ids)
        context[:n] = task.prompt_ids
        for drafter, _ in drafters:
            drafter.reset(context[:n])
        context[n] = ref[0]  # the pending token after prefill
        n, out = n + 1, 1
        while out < len(ref):
            ctx, target = context[:n], ref[out:]
            trees = [drafter.propose(ctx) for drafter, _ in drafters]
            paths = [accepted_path(tree, target) for tree in trees]
            first, second = trees
            chain = main_chain(first)
            on_chain = 0
            for a, b in zip(paths[0], chain):
                if a != b:
                    break
                on_chain += 1
            probs = path_probabilities(first)
            steps.append({"n": [t.n_draft for t in trees], "accepted": [len(p) for p in paths],
                          "chain": len(chain), "accepted_on_chain": on_chain,
                          "expected": float(probs[:first.n_draft].sum()),
                          "expected_on_chain": float(probs[chain].sum())})
            committed = [int(x) for x in target[:len(paths[0]) + 1]]
            for (drafter, estimator), tree, path in zip(drafters, trees, paths):
                if estimator is not None and tree.keys is not None:
                    estimator.update(tree.keys, tree.parents[:tree.n_draft], path)
                drafter.observe(ctx, tree, path[:len(committed) - 1], committed)
            context[n:n + len(committed)] = committed
            n, out = n + len(committed), out + len(committed)
        for drafter, _ in drafters:
            finish = getattr(drafter, "finish", None)
            if finish is not None:
                finish(context[:len(task.prompt_ids) + len(ref) - (ref[-1] in loaded.eos_token_ids)])

    def c(k: int) -> float:
        return float(cost.c(k)) if k else 1.0

    def per_method(i: int) -> dict:
        tokens = sum(s["accepted"][i] + 1 for s in steps)
        return {"tokens_per_step": round(tokens / len(steps), 3),
                "draft_tokens_per_step": round(statistics.fmean(s["n"][i] for s in steps), 2),
                "tokens_per_cost": round(tokens / sum(c(s["n"][i]) for s in steps), 3)}

    behind = [s for s in steps if s["accepted"][1] > s["accepted"][0]]
    return {
        "steps": len(steps), method: per_method(0), against: per_method(1),
        "main_chain": {
            "length": round(statistics.fmean(s["chain"] for s in steps), 2),
            "expected": round(sum(s["expected_on_chain"] for s in steps), 1),
            "accepted": sum(s["accepted_on_chain"] for s in steps),
            "tokens_per_cost_alone": round(sum(s["accepted_on_chain"] + 1 for s in steps)
                                           / sum(c(s["chain"]) for s in steps), 3)},
        "off_chain": {"expected": round(sum(s["expected"] - s["expected_on_chain"] for s in steps), 1),
                      "accepted": sum(s["accepted"][0] - s["accepted_on_chain"] for s in steps)},
        f"steps_{against}_accepted_more": {
            "count": len(behind), "tokens": sum(s["accepted"][1] - s["accepted"][0] for s in behind),
            "main_chain_exhausted": sum(s["accepted_on_chain"] == s["chain"] for s in behind)},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_replay_arguments(ap)
    ap.add_argument("--method", default="fastcoder")
    ap.add_argument("--against", default="suffix")
    args = ap.parse_args(argv)

    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    from engine.cost_model import load_or_measure_verify_cost  # noqa: PLC0415

    loaded, tasks, refs, common, repos = replay_setup(args.model, args.repo, args.common, args.tasks, args.seed,
                                                      args.max_new_tokens, args.task_kind)
    result = compare(loaded, args.method, args.against, tasks, refs, repos, common, load_or_measure_verify_cost(loaded))
    print(json.dumps({"repo": args.repo, "task_kind": args.task_kind, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
