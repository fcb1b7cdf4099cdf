"""Offline probe: after verification rejects a draft at some depth, does the rest of the rejected branch
(realigned after the model's own token) predict what comes next better than the next tree does?

Oracle replay (benchmarks/measure_drafting.py): the sized fastcoder drafter decides the steps; a second, widest
drafter (flat verify cost) on the same contexts supplies rejected branches. At each step, below the end of the
accepted path, every child whose token is not the model's (the bonus token b) gives a chain (its best-weight
descendants). Realignments checked against the reference after b:
  sub: the chain after the rejected child (b replaced one token)
  ins: the rejected child and its chain (b was inserted)
  del: the chain after the first occurrence of b in it, within 3 tokens (b skipped some)
The next step's sized tree accepts m'; a realignment "wins" where it spells more. Prints per cell: steps, tokens,
steps where some realignment of the top rejected child spells >= 1 / its extra tokens over m', and the same with
the best child and hypothesis (oracle choice).

PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-27i/realign_probe.py \
    --repo .venv/lib/python3.11/site-packages/pluggy --task-kind function
"""
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from measure_drafting import accepted_path, replay_from_command_line  # noqa: E402
from measure_drafting import common_prefix_len as match  # noqa: E402

CHAIN = 16


def best_chain(tree, node):
    kids = {}
    for i, p in enumerate(tree.parents.tolist()):
        kids.setdefault(p, []).append(i)
    out = []
    while node in kids and len(out) < CHAIN:
        node = max(kids[node], key=lambda i: tree.weights[i])
        out.append(int(tree.tokens[node]))
    return out


def hypotheses(tree, end, b):
    """[(weight, {name: chain})] per rejected child of `end`, heaviest first."""
    out = []
    for i, (p, t) in enumerate(zip(tree.parents.tolist(), tree.tokens.tolist())):
        if p != end or t == b:
            continue
        chain = best_chain(tree, i)
        h = {"sub": chain, "ins": [t] + chain}
        full = [t] + chain
        for j in range(1, min(4, len(full))):
            if full[j] == b:
                h["del"] = full[j + 1:]
                break
        out.append((float(tree.weights[i]), h))
    out.sort(key=lambda x: -x[0])
    return out


def main():
    from engine.bench.runner import make_decoder
    args, (loaded, tasks, refs, common, repos) = replay_from_command_line()
    stats = dict(steps=0, tokens=0, top_any=0, top_extra=0, best_any=0, best_extra=0, rejected_steps=0,
                 by_hyp={"sub": 0, "ins": 0, "del": 0}, top_len=[], next_acc_when_top=[])
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        os.environ["FASTCODER_VERIFY_COST"] = "flat"
        wdec = make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        del os.environ["FASTCODER_VERIFY_COST"]
        sized, wide = dec._make_drafter(dec.new_cache()), wdec._make_drafter(wdec.new_cache())
        ctx = list(task.prompt_ids)
        for d in (sized, wide):
            d.reset(np.asarray(ctx, dtype=np.int64))
        ctx.append(ref[0])
        out = 1
        pending = None  # realignments proposed for this step: (top: {h: chain}, all: [{h: chain}])
        while out < len(ref):
            c = np.asarray(ctx, dtype=np.int64)
            T = sized.propose(c)
            W = wide.propose(c)
            target = ref[out:]
            m = T.longest_match(target)
            if pending is not None:
                top, alls = pending
                nxt = [int(x) for x in target]
                lt = max((match(ch, nxt) for ch in top.values()), default=0)
                lb = max((match(ch, nxt) for h in alls for ch in h.values()), default=0)
                if lt > m:
                    stats["top_any"] += 1
                    stats["top_extra"] += lt - m
                    stats["top_len"].append(lt)
                    stats["next_acc_when_top"].append(m)
                    for name, ch in top.items():
                        if match(ch, nxt) == lt:
                            stats["by_hyp"][name] += 1
                            break
                if lb > m:
                    stats["best_any"] += 1
                    stats["best_extra"] += lb - m
            committed = [int(x) for x in target[:m + 1]]
            path = accepted_path(T, target)
            if dec.estimator is not None and T.keys is not None:
                dec.estimator.update(T.keys, T.parents[:T.n_draft], path)
            sized.observe(c, T, path, committed)
            wpath = accepted_path(W, target[:m])
            wide.observe(c, W, wpath, committed)
            b = committed[-1]
            end = (wpath[-1] if wpath else -1) if len(wpath) == m else None  # W spells the accepted path too
            pending = None
            if end is not None or m == 0:
                hs = hypotheses(W, -1 if m == 0 else end, b)
                if hs:
                    stats["rejected_steps"] += 1
                    pending = (hs[0][1], [h for _, h in hs])
            stats["steps"] += 1
            stats["tokens"] += len(committed)
            ctx += committed
            out += len(committed)
    tl = stats.pop("top_len")
    na = stats.pop("next_acc_when_top")
    stats["top_mean_len"] = float(np.mean(tl)) if tl else 0
    stats["next_acc_mean_when_top"] = float(np.mean(na)) if na else 0
    stats["cell"] = f"{args.task_kind} {Path(args.repo).name}"
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
