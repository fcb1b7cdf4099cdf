"""Offline probe: would a copy from the context *with one token substituted* (a renamed identifier: the earlier
occurrence of the last W context tokens matches in all but one position, tokens a there and b here; its
continuation drafted with every a replaced by b) spell more of the next reference tokens than the sized tree does?

Oracle replay (benchmarks/measure_drafting.py): the sized fastcoder drafter decides the steps. At each step the
most recent window of W (8, else 6) context tokens ending before the last that matches the last W with exactly one
mismatch gives a 16-token chain. Prints per cell: steps, tokens, the sized trees' accepted tokens, steps with such a
window, steps where the chain spells more than the tree accepts and those extra tokens (perfect foresight: a real
drafter would have to choose, and pay a node a token, in every step with a window); then, for the chain merged into
every tree where a window exists, cut at 1 / 2 / 4 / 8 tokens past the prefix the tree already spells: the tokens
gained, the nodes added, and the decode-speed ratio this predicts on the engine's c(n) at 1,000 tokens (the steps as
replayed); and past that prefix, how often the chain's next token is right given the ones before it were.

PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python \
    benchmarks/results/2026-11-28a/substitution_probe.py --repo .venv/lib/python3.11/site-packages/pluggy \
    --task-kind function
"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from measure_drafting import accepted_path, replay_from_command_line  # noqa: E402
from measure_drafting import common_prefix_len as match  # noqa: E402

CHAIN = 16
CAPS = (1, 2, 4, 8)


def substituted_chain(ctx: np.ndarray):
    """The chain of the most recent one-mismatch window (W = 8, else 6), or None."""
    T = len(ctx)
    for W in (8, 6):
        if T < 2 * W + 1:
            continue
        key = ctx[T - W:]
        # windows ending at e = W-1 .. T-2 (strictly before the current one)
        ends = np.arange(W - 1, T - 1)
        starts = ends - W + 1
        mism = np.zeros(len(ends), dtype=np.int64)
        for k in range(W):
            mism += ctx[starts + k] != key[k]
        hits = np.flatnonzero(mism == 1)
        if not len(hits):
            continue
        e = int(ends[hits[-1]])
        s = e - W + 1
        p = int(np.flatnonzero(ctx[s:e + 1] != key)[0])
        a, b = int(ctx[s + p]), int(key[p])
        cont = ctx[e + 1:e + 1 + CHAIN].tolist()
        return [b if t == a else t for t in cont]
    return None


def main():
    from engine.bench.runner import make_decoder
    args, (loaded, tasks, refs, common, repos) = replay_from_command_line()
    st = dict(steps=0, tokens=0, accepted=0, with_window=0, wins=0, extra=0, chain_accepts=0, tree_in_window_steps=0,
              first_right=0, alive_steps=0, alive_extra_first_right=0, alive_beyond=0,
              **{f"{k}_cap{c}": 0 for c in CAPS for k in ("gain", "nodes", "alive_gain", "alive_nodes")})
    sizes, gains = {c: [] for c in (0, *CAPS)}, {c: [] for c in (0, *CAPS)}
    asizes, agains = {c: [] for c in CAPS}, {c: [] for c in CAPS}
    rows = []  # per window step: (tree spells the chain's first `shared` tokens, chain accepted, tree accepted)
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        sized = dec._make_drafter(dec.new_cache())
        ctx = list(task.prompt_ids)
        sized.reset(np.asarray(ctx, dtype=np.int64))
        ctx.append(ref[0])
        out = 1
        alive = alive_prev = False
        while out < len(ref):
            c = np.asarray(ctx, dtype=np.int64)
            T = sized.propose(c)
            target = ref[out:]
            m = T.longest_match(target)
            chain = substituted_chain(c)
            if chain is not None:
                st["with_window"] += 1
                lc = match(chain, target)
                st["chain_accepts"] += lc
                st["tree_in_window_steps"] += m
                st["first_right"] += lc > 0
                shared = T.longest_match(chain)  # the chain's prefix the tree already spells
                if alive_prev:
                    st["alive_steps"] += 1
                    st["alive_extra_first_right"] += int(lc > shared and len(chain) > shared)
                    st["alive_beyond"] += int(len(chain) > shared and lc >= shared)
                    for cap in CAPS:
                        got = max(m, min(lc, shared + cap))
                        st[f"alive_gain_cap{cap}"] += got - m
                        st[f"alive_nodes_cap{cap}"] += min(len(chain) - shared, cap)
                for cap in CAPS:  # the chain merged into the tree, `cap` tokens past the prefix the tree spells
                    got = max(m, min(lc, shared + cap))
                    st[f"gain_cap{cap}"] += got - m
                    st[f"nodes_cap{cap}"] += min(len(chain) - shared, cap)
                    sizes[cap].append(len(T) + min(len(chain) - shared, cap))
                rows.append((shared, lc, m, len(chain)))
                if lc > m:
                    st["wins"] += 1
                    st["extra"] += lc - m
            else:
                for cap in CAPS:
                    sizes[cap].append(len(T))
            sizes[0].append(len(T))
            gains[0].append(m + 1)
            for cap in CAPS:
                gains[cap].append((max(m, min(lc, shared + cap)) if chain is not None else m) + 1)
            committed = [int(x) for x in target[:m + 1]]
            alive = chain is not None and match(chain, committed) == len(committed)
            for cap in CAPS:  # merged only where the previous step's chain spelled everything committed since
                if alive_prev and chain is not None:
                    asizes[cap].append(len(T) + min(len(chain) - shared, cap))
                    agains[cap].append(max(m, min(lc, shared + cap)) + 1)
                else:
                    asizes[cap].append(len(T))
                    agains[cap].append(m + 1)
            alive_prev = alive
            path = accepted_path(T, target)
            if dec.estimator is not None and T.keys is not None:
                dec.estimator.update(T.keys, T.parents[:T.n_draft], path)
            sized.observe(c, T, path, committed)
            st["steps"] += 1
            st["tokens"] += len(committed)
            st["accepted"] += m
            ctx += committed
            out += len(committed)
    # predicted decode-speed ratio (committed tokens per c(n), steps as replayed; the merged chain's gains do not
    # shorten later steps here), on the engine's measured curve at this context
    cost = sized.cost_at(1000)
    base = sum(gains[0]) / sum(float(cost.c(n)) for n in sizes[0])
    for cap in CAPS:
        st[f"pred_cap{cap}"] = round(sum(gains[cap]) / sum(float(cost.c(n)) for n in sizes[cap]) / base, 4)
    for cap in CAPS:
        st[f"alive_pred_cap{cap}"] = round(sum(agains[cap]) / sum(float(cost.c(n)) for n in asizes[cap]) / base, 4)
    st["cell"] = f"{args.task_kind} {Path(args.repo).name}"
    # beyond the prefix the tree spells: how often the chain's next token is right, given the ones before it were
    beyond = {}
    for shared, lc, m, n in rows:
        if lc < shared:  # the tree's own path was wrong before the chain left it
            continue
        for k in range(shared, min(n, shared + 8)):
            tried, right = beyond.get(k - shared, (0, 0))
            beyond[k - shared] = (tried + 1, right + (lc > k))
            if lc <= k:
                break
    st["beyond_shared"] = {k: f"{r}/{t}" for k, (t, r) in sorted(beyond.items())}
    st["shared0_steps"] = sum(1 for r in rows if r[0] == 0)
    print(json.dumps(st), flush=True)


if __name__ == "__main__":
    main()
