"""Offline probe: could the first k layers' logit lens prune a draft tree before the last layers run (ProPD-style)?

Replays fastcoder's drafter against ``ar``'s output (measure_drafting.replay), and for every step runs the plain HF
model over context + tree with the tree's attention mask, keeping every layer's hidden state. For each tree node the
parent row's lens at layer k (final norm + tied LM head on the layer-k hidden state) scores the node's token; the
label is the full model's argmax at the parent row == the node's token (acceptance given the parent is reached).

Pruning policy simulated: drop every node whose lens log-probability at layer k is below ``thr`` (and its subtree);
layers 1..k run over all rows, layers k+1..L over the kept rows only. Cost of a step, in plain decode steps:
f c(n) + (1 - f) c(m) (+ an optional per-row cost of the lens), f = k / (L + head), c the measured curve.

Usage: PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python \
    benchmarks/results/2026-11-28i/exp_lens.py --repo .venv/lib/python3.11/site-packages/pluggy --task-kind function
"""
from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from measure_drafting import replay, replay_from_command_line  # noqa: E402


@torch.no_grad()
def main():
    out = sys.argv.pop() if sys.argv[-1].endswith(".pkl") else None
    args, (loaded, tasks, refs, common, repos) = replay_from_command_line()
    from transformers import AutoModelForCausalLM

    from engine.bench import runner
    runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
    hf = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="eager", dtype=torch.float32).eval()
    norm, head = hf.model.norm, hf.lm_head
    L = hf.config.num_hidden_layers
    steps = []
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = runner.make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        drafter = dec._make_drafter(dec.new_cache())
        propose = drafter.propose
        got = []

        def rec(ctx, propose=propose):
            tree = propose(ctx)
            got.append((ctx.copy(), tree))
            return tree
        drafter.propose = rec
        replay(drafter, dec.estimator, task.prompt_ids, ref, [0], loaded.eos_token_ids)
        for ctx, tree in got:
            n = tree.n_draft
            rec_ = {"n": n, "ctx": len(ctx)}
            if n:
                ids = torch.tensor([[*ctx.tolist(), *tree.tokens[:n].tolist()]])
                sub = tree if len(tree) == n else None
                assert sub is not None, "adaptive branch"
                pos, mask = tree.forward_inputs(len(ctx) - 1, torch.float32, torch.device("cpu"), len(ctx) - 1)
                with torch.no_grad():
                    o = hf(input_ids=ids, position_ids=pos, attention_mask=mask, output_hidden_states=True)
                base = len(ctx) - 1
                prow = np.array([base + (0 if p < 0 else 1 + p) for p in tree.parents[:n].tolist()])
                tok = torch.from_numpy(tree.tokens[:n].astype(np.int64))
                final = o.logits[0, prow]
                rec_["label"] = (final.argmax(-1) == tok).numpy()
                lens = {}
                for k in range(1, L):
                    lg = head(norm(o.hidden_states[k][0, prow])).log_softmax(-1)
                    lp = lg.gather(1, tok[:, None])[:, 0]
                    lens[k] = np.stack([lp.numpy(), (lg.max(-1).values - lp).numpy(),
                                        (lg > lp[:, None]).sum(-1).numpy().astype(np.float32)])
                rec_["lens"] = lens
                rec_["hidden"] = np.stack([o.hidden_states[k][0, prow].numpy().astype(np.float16)
                                           for k in range(1, L + 1)])  # (L, n, hidden): layer k's, the last normed
                rec_["parents"] = tree.parents[:n].copy()
                rec_["tok"] = tree.tokens[:n].astype(np.int64)
                rec_["probs"] = None if tree.probs is None else tree.probs[:n].copy()
            steps.append(rec_)
    print(f"{len(steps)} steps, {sum(s['n'] for s in steps)} nodes", flush=True)
    if out:
        with open(out, "wb") as fh:
            pickle.dump({"steps": steps, "L": L, "repo": args.repo, "kind": args.task_kind}, fh)


if __name__ == "__main__":
    main()
