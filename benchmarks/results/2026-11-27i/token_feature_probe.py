"""Offline probe: does what a draft token *is* (its text class, whether it occurred in the recent context) tell the
acceptance estimate something it lacks?

Oracle replay (benchmarks/measure_drafting.py) of the widest fastcoder drafter (flat verify cost: every candidate
up to 64 nodes, the pool a sizing policy chooses from). For every node whose parent was accepted (or that hangs
below the pending token): the engine's estimate P(node | parent) (tree.probs), the features below, and whether
verification accepted it. Writes $DIR/tokfeat_<kind>_<repo>.npz; token_feature_fit.py fits them.

PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-27i/token_feature_probe.py \
    --repo .venv/lib/python3.11/site-packages/pluggy --task-kind function
"""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from measure_drafting import accepted_path, replay_from_command_line  # noqa: E402

CLASSES = ("newline", "space", "word", "space_word", "punct", "other")


def token_class(text: str) -> int:
    if "\n" in text:
        return 0
    if text.strip() == "":
        return 1
    if text.isidentifier():
        return 2
    if text[:1] == " " and text[1:].isidentifier():
        return 3
    if all(not ch.isalnum() and ch != "_" for ch in text.strip()):
        return 4
    return 5


def main():
    from engine.bench.runner import make_decoder
    args, (loaded, tasks, refs, common, repos) = replay_from_command_line()
    tok = loaded.tokenizer
    cls_cache = {}

    def cls(t):
        c = cls_cache.get(t)
        if c is None:
            c = cls_cache[t] = token_class(tok.decode([t]))
        return c

    rows = []  # est, depth, cls_node, cls_parent_token, in_recent, log_count, hit, task, step, index, parent, distance
    step = 0
    from engine.cost_model import load_or_measure_verify_cost
    cost = load_or_measure_verify_cost(loaded)
    ctable = np.asarray([cost.c(n) for n in range(65)])
    if os.environ.get("SIZED") != "1":  # SIZED=1: the engine's own cost-sized trees instead of the widest
        os.environ["FASTCODER_VERIFY_COST"] = "flat"
    for ti, task in enumerate(tasks):
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        drafter = dec._make_drafter(dec.new_cache())
        ctx = list(task.prompt_ids)
        drafter.reset(np.asarray(ctx, dtype=np.int64))
        ctx.append(ref[0])
        out = 1
        while out < len(ref):
            c = np.asarray(ctx, dtype=np.int64)
            W = drafter.propose(c)
            target = ref[out:]
            path = accepted_path(W, target)
            m = len(path)
            on_path = set(path)
            recent = set(ctx[-64:])
            counts, dist = {}, {}
            if W.probs is not None:
                for i in range(W.n_draft):
                    p = int(W.parents[i])
                    t = int(W.tokens[i])
                    prev = ctx[-1] if p < 0 else int(W.tokens[p])
                    if t not in counts:
                        where = np.flatnonzero(c == t)
                        counts[t] = len(where)
                        dist[t] = len(c) - int(where[-1]) if len(where) else 1 << 30
                    rows.append((float(W.probs[i]), int(W.depths[i]), cls(t), cls(prev), t in recent,
                                 np.log1p(counts[t]), i in on_path, ti, step, i, p, dist[t]))
            step += 1
            if dec.estimator is not None and W.keys is not None:
                dec.estimator.update(W.keys, W.parents[:W.n_draft], path)
            committed = [int(x) for x in target[:m + 1]]
            drafter.observe(c, W, path, committed)
            ctx += committed
            out += len(committed)
    a = np.asarray(rows, dtype=np.float64)
    out_dir = Path(os.environ.get("DIR", "/tmp/s15"))
    out_dir.mkdir(parents=True, exist_ok=True)
    f = out_dir / f"{'sized' if os.environ.get('SIZED') == '1' else 'tokfeat'}_{args.task_kind}_{Path(args.repo).name}.npz"
    np.savez(f, est=a[:, 0], depth=a[:, 1], cls=a[:, 2], cls_prev=a[:, 3], recent=a[:, 4], logcount=a[:, 5],
             hit=a[:, 6], task=a[:, 7], step=a[:, 8], index=a[:, 9], parent=a[:, 10], distance=a[:, 11],
             ctable=ctable)
    print(f, len(a), "nodes, hit rate", a[:, 6].mean(), flush=True)


if __name__ == "__main__":
    main()
