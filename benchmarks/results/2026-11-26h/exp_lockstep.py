from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import sys, numpy as np, torch
torch.set_num_threads(1)
from measure_drafting import replay_setup
from engine.bench import runner
kind = sys.argv[1]
for r in sys.argv[2].split(","):
    loaded, tasks, refs, common, repos = replay_setup(MODEL, f".venv/lib/python3.11/site-packages/{r}", "stdlib", 10, 0, 128, kind)
    for t in (runner._ESTIMATORS, runner._SUFFIX_CACHES, runner._HISTORIES): t.clear()
    rows = []
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2: continue
        dec = runner.make_decoder(loaded, "fastcoder", repos[task.task_id], common)
        sdec = runner.make_decoder(loaded, "suffix", None, None)
        drafter = dec._make_drafter(dec.new_cache()); sx = sdec._make_drafter(None)
        est = dec.estimator
        prompt = task.prompt_ids
        ctxa = np.empty(len(prompt) + len(ref) + 128, dtype=np.int64); ctxa[:len(prompt)] = prompt; n = len(prompt)
        drafter.reset(ctxa[:n]); sx.reset(ctxa[:n])
        ctxa[n] = ref[0]; n += 1; out = 1
        while out < len(ref):
            ctx = ctxa[:n]
            tree = drafter.propose(ctx); stree = sx.propose(ctx)
            target = ref[out:]
            a = tree.longest_match(target); b = stree.longest_match(target)
            rows.append((a, b, len(tree), len(stree)))
            path, node = [], -1
            for tok in target[:a]:
                node = tree.children[(node, int(tok))]; path.append(node)
            if est is not None and tree.keys is not None: est.update(tree.keys, tree.parents[:tree.n_draft], path)
            committed = [int(x) for x in target[:a + 1]]
            drafter.observe(ctx, tree, path, committed)
            for tok in committed: ctxa[n] = tok; n += 1; out += 1
        fin = getattr(drafter, "finish", None)
        if fin: fin(ctxa[:n])
    A = np.array(rows)
    a, b = A[:, 0], A[:, 1]
    print(r, kind, "steps", len(A), "fc acc %.2f sfx acc %.2f union %.2f | sfx>fc %d steps (+%.2f avg when so), fc>sfx %d | sizes %.2f %.2f"
          % (a.mean(), b.mean(), np.maximum(a, b).mean(), (b > a).sum(), (b - a)[b > a].mean() if (b > a).any() else 0, (a > b).sum(), A[:, 2].mean(), A[:, 3].mean()), flush=True)
