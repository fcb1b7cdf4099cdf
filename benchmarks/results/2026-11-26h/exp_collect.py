"""Collect wide (flat-cost) fastcoder trees with their accepted paths, for offline selection studies; with SIZED=1
the trees the engine sizes on this machine's measured curve (../2026-11-26i/exp_sized_analysis.py)."""
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import os, sys, pickle, time
if os.environ.get("SIZED") != "1":
    os.environ.setdefault("FASTCODER_VERIFY_COST", "flat")
import numpy as np, torch
torch.set_num_threads(1)
from measure_drafting import replay_setup
from engine.bench import runner
repo, kind, out = sys.argv[1], sys.argv[2], sys.argv[3]
ntasks = int(sys.argv[4]) if len(sys.argv) > 4 else 10
loaded, tasks, refs, common, repos = replay_setup(MODEL, repo, "stdlib", ntasks, 0, 128, kind)
runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
steps = []
for task in tasks:
    ref = refs[task.task_id]
    if len(ref) < 2: continue
    dec = runner.make_decoder(loaded, "fastcoder", repos[task.task_id], common)
    cache = dec.new_cache()
    drafter = dec._make_drafter(cache)
    est = dec.estimator
    prompt = task.prompt_ids
    context = np.empty(len(prompt) + len(ref) + 128, dtype=np.int64)
    context[:len(prompt)] = prompt; n = len(prompt)
    drafter.reset(context[:n])
    context[n] = ref[0]; n += 1; out_n = 1
    while out_n < len(ref):
        ctx = context[:n]
        tree = drafter.propose(ctx)
        target = ref[out_n:]
        matched = tree.longest_match(target)
        path, node = [], -1
        for tok in target[:matched]:
            node = tree.children[(node, int(tok))]; path.append(node)
        steps.append(dict(task=task.task_id, ctx_len=int(n), last=ctx[-8:].copy(), tokens=tree.tokens.copy(),
                          parents=tree.parents.copy(), depths=tree.depths.copy(), sources=tree.sources.copy(),
                          weights=tree.weights.copy(), keys=None if tree.keys is None else tree.keys.copy(),
                          probs=None if tree.probs is None else tree.probs.copy(), path=list(path)))
        if est is not None and tree.keys is not None:
            est.update(tree.keys, tree.parents[:tree.n_draft], path)
        committed = [int(x) for x in target[:matched + 1]]
        drafter.observe(ctx, tree, path, committed)
        for tok in committed:
            context[n] = tok; n += 1; out_n += 1
    fin = getattr(drafter, "finish", None)
    if fin is not None:
        m = n
        while m > len(prompt) and int(context[m - 1]) in loaded.eos_token_ids: m -= 1
        fin(context[:m])
pickle.dump(steps, open(out, "wb"))
print(repo, kind, len(steps), "steps", np.mean([len(s["tokens"]) for s in steps]), "mean tree",
      np.mean([len(s["path"]) + 1 for s in steps]), "AL")
