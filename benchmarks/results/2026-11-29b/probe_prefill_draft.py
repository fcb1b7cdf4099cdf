"""How many tokens would a draft verified in a cold prefill's forward accept? The drafter sees the FIM prompt in
file order (suffix part first, then the prefix part: its tail is the text before the cursor)."""
import sys, collections
import numpy as np
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
from measure_drafting import replay_from_command_line, accepted_path
from engine.bench import runner
from engine.stops import one_line
from engine.fim import detect_fim_template

args, (loaded, tasks, refs, common, repos) = replay_from_command_line(sys.argv[1:])
tpl, (pre, suf, mid) = detect_fim_template(loaded.tokenizer)
for method in ("suffix", "fastcoder"):
    runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
    acc = collections.Counter(); sizes = []
    for task in tasks:
        ref = refs[task.task_id]
        ids = list(task.prompt_ids)
        i_suf, i_mid = ids.index(suf), len(ids) - 1
        view = ids[i_suf:i_mid] + ids[:i_suf]  # <suf> suffix <pre> prefix
        dec = runner.make_decoder(loaded, method, repos[task.task_id], common)
        cache = dec.new_cache() if runner.METHOD_SPECS[method][0] in runner._CACHED_METHODS else None
        drafter = dec._make_drafter(cache, True, one_line(task.stop))
        ctx = np.asarray(view, dtype=np.int64)
        drafter.reset(ctx)
        tree = drafter.propose(ctx)
        path = accepted_path(tree, ref)
        acc[len(path)] += 1; sizes.append(tree.n_draft)
    print(method, "accepted at prefill:", dict(sorted(acc.items())), "tree sizes", sizes)
