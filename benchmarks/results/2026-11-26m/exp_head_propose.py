"""Offline: how often would the head's own top-1 (not proposed by retrieval) be the model's next token?"""
import math, os, sys
from pathlib import Path
import numpy as np, torch
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from compare_drafts import accepted_path
from measure_drafting import replay_setup
from engine.bench import runner
from engine.cost_model import load_or_measure_verify_cost
torch.set_num_threads(1)
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
CELLS = os.environ.get("CELLS", "function:pluggy function:jinja2 function:pygls fim-block:pluggy").split()
for cell in CELLS:
    kind, repo = cell.split(":")
    loaded, tasks, refs, common, repos = replay_setup(MODEL, str(SITE / repo), "stdlib", 10, 0, 128, kind)
    cost = load_or_measure_verify_cost(loaded)
    runner._ESTIMATORS.clear(); runner._HISTORIES.clear()
    S = dict(steps=0, tokens=0, spent=0.0, in_tree=0, head_ok=0, head_only=0, head_only_p=[], head_in=0, empty=0, extra_cost=0.0, acc1=0)
    rows = []
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2: continue
        dec = runner.make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        drafter, est, head = dec._make_drafter(dec.new_cache()), dec.estimator, dec.depth_one
        E = head.embedding
        prompt = list(task.prompt_ids)
        with torch.inference_mode():
            hidden = loaded.model.base_model(input_ids=torch.tensor([prompt + ref])).last_hidden_state[0].float()
        context = np.empty(len(prompt) + len(ref) + 1, dtype=np.int64)
        n = len(prompt); context[:n] = prompt; drafter.reset(context[:n]); context[n] = ref[0]; n, out = n + 1, 1
        while out < len(ref):
            ctx, target = context[:n], ref[out:]
            head.set_hidden(hidden[n - 2])
            logits = E @ head.hidden
            top = int(np.argmax(logits)); lse = float(np.log(np.exp(logits - logits.max()).sum()) + logits.max())
            ptop = math.exp(float(logits[top]) - lse)
            tree = drafter.propose(ctx)
            path = accepted_path(tree, target)
            committed = [int(x) for x in target[:len(path) + 1]]
            if est is not None and tree.keys is not None:
                est.update(tree.keys, tree.parents[:tree.n_draft], path)
            head.learn(committed[0])
            drafter.observe(ctx, tree, path, committed)
            d1 = set(int(t) for t, p in zip(tree.tokens[:tree.n_draft], tree.parents[:tree.n_draft]) if p < 0)
            first = int(target[0]) if len(target) else -1
            S['steps'] += 1; S['tokens'] += len(committed)
            c0 = float(cost.c(tree.n_draft)) if tree.n_draft else 1.0
            c1 = float(cost.c(tree.n_draft + 1))
            S['spent'] += c0
            S['empty'] += tree.n_draft == 0
            S['acc1'] += len(committed) == 1
            S['in_tree'] += first in d1
            S['head_ok'] += top == first
            S['head_in'] += top in d1
            rows.append((ptop, top == first, top in d1, first in d1, c1 - c0, tree.n_draft))
            context[n:n + len(committed)] = committed; n, out = n + len(committed), out + len(committed)
        fin = getattr(drafter, "finish", None)
        if fin is not None: fin(context[:len(prompt) + len(ref) - (ref[-1] in loaded.eos_token_ids)])
    R = np.array(rows, dtype=np.float64)
    base = S['tokens'] / S['spent']
    msg = f"{cell}: steps {S['steps']} tok/step {S['tokens']/S['steps']:.2f} tok/cost {base:.3f} empty {S['empty']/S['steps']:.2f} acc1 {S['acc1']/S['steps']:.2f} first-in-tree {S['in_tree']/S['steps']:.2f} head-top1-right {S['head_ok']/S['steps']:.2f} head-top1-in-tree {S['head_in']/S['steps']:.2f}"
    print(msg)
    # add head top1 when not in tree and ptop >= thr: +1 token if right (no continuation), cost c(n+1)-c(n)
    for thr in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        sel = (R[:, 0] >= thr) & (R[:, 2] == 0)
        gain = float(((R[:, 1] == 1) & sel & (R[:, 3] == 0)).sum())
        extra = float(R[sel, 4].sum())
        print(f"   thr {thr:.1f}: added {int(sel.sum())} right {int(gain)} tok/cost {(S['tokens'] + gain) / (S['spent'] + extra):.3f} ({(S['tokens'] + gain) / (S['spent'] + extra) / base - 1:+.1%})", flush=True)
