"""How many tokens would a draft verified in a cold prefill's forward accept on *healed* tasks? (The 2026-11-29b probe
found 0 of 30 on unhealed `fim-line` tasks.) Each task is healed as the server heals it (engine.bench.heal_task); the
reference is `ar`'s constrained greedy output; the drafter sees the FIM prompt in file order (the suffix part, then
the kept prefix: its tail is the text before the removed bytes), and its tree is pruned to the constraint
(engine.healing.consistent_subtree), as a constrained prefill's draft would be."""
import sys, collections
import numpy as np
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
from measure_drafting import replay_from_command_line, accepted_path
from engine import SpeculativeDecoder
from engine.bench import runner
from engine.bench.tasks import heal_task
from engine.fim import detect_fim_template
from engine.healing import consistent_subtree
from engine.stops import one_line

args, (loaded, tasks, refs, common, repos) = replay_from_command_line(sys.argv[1:])
tpl, (pre, suf, mid) = detect_fim_template(loaded.tokenizer)
table = loaded.token_bytes
ar = SpeculativeDecoder(loaded, method="ar")
healed = []
for task in tasks:
    h = heal_task(task, table)
    if not h.healed:
        continue
    r = ar.generate(list(h.prompt_ids), max_new_tokens=args.max_new_tokens, stop=h.stop, constraint=h.healed)
    ref = list(r.token_ids) + ([min(loaded.eos_token_ids)] if r.finish_reason == "eos" else [])
    healed.append((h, ref))
print(f"{len(healed)} of {len(tasks)} tasks healed; removed:", [h.healed for h, _ in healed])
for method in ("suffix", "fastcoder"):
    runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
    acc = collections.Counter(); sizes = []
    for h, ref in healed:
        ids = list(h.prompt_ids)
        i_suf, i_mid = ids.index(suf), len(ids) - 1
        view = ids[i_suf:i_mid] + ids[:i_suf]  # <suf> suffix <pre> kept prefix
        dec = runner.make_decoder(loaded, method, repos[h.task_id], common)
        cache = dec.new_cache() if runner.METHOD_SPECS[method][0] in runner._CACHED_METHODS else None
        drafter = dec._make_drafter(cache, True, one_line(h.stop))
        ctx = np.asarray(view, dtype=np.int64)
        drafter.reset(ctx)
        tree = consistent_subtree(drafter.propose(ctx), h.healed, table)
        path = accepted_path(tree, ref)
        acc[len(path)] += 1; sizes.append(tree.n_draft)
    print(method, "draft tokens accepted in the prefill:", dict(sorted(acc.items())), "tree sizes", sizes)
print("answers:", [loaded.tokenizer.decode(ref) for _, ref in healed])
